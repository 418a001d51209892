"""transformers' SigLIP 2 towers (vision_attn/models/hf/siglip2.py) and NaFlex inputs
(vision_attn/data/naflex.py), through ``create_model(pretrained=FOLDER)``, against transformers itself
(random weights, tiny sizes): fixed-size images at the table's size and another, and a NaFlex batch of
images of different aspect ratios made by transformers' own ``Siglip2ImageProcessor``; timm's
``naflexvit_*_siglip`` files and parameter counts."""
from __future__ import annotations

import pytest
import timm
import torch
import transformers

import vision_attn
from tests.models.peer_weights import randomise
from vision_attn.data.naflex import NaFlexBatch, collate_patches, naflex_size, patchify, to_patches
from vision_attn.errors import CheckpointError
from vision_attn.models.hf import read_transformers_folder

TINY = dict(hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4, patch_size=8,
            num_patches=16)  # a 4x4 table: 32 px at the table's size
ATOL = 1e-4


def _close(ours: torch.Tensor, theirs: torch.Tensor) -> None:
    assert ours.shape == theirs.shape, (ours.shape, theirs.shape)
    diff = (ours - theirs).abs().max().item()
    assert diff <= ATOL, f"max abs diff {diff:.3g} > {ATOL}"


def _folder(tmp_path, dual: bool = False, **vision):
    config = transformers.Siglip2VisionConfig(**{**TINY, **vision})
    if dual:
        text = transformers.Siglip2TextConfig(hidden_size=32, intermediate_size=64, num_hidden_layers=1,
                                              num_attention_heads=4, vocab_size=99, max_position_embeddings=16)
        peer = transformers.Siglip2Model(transformers.Siglip2Config(text_config=text.to_dict(),
                                                                    vision_config=config.to_dict()))
    else:
        peer = transformers.Siglip2VisionModel(config)
    randomise(peer)
    folder = tmp_path / "hf"
    peer.save_pretrained(folder)
    return (peer.vision_model if dual else peer), folder


def _images(sizes) -> list[torch.Tensor]:
    g = torch.Generator().manual_seed(1)
    return [torch.rand(3, h, w, generator=g) for h, w in sizes]


@pytest.mark.parametrize("dual", [False, True])
def test_fixed_size_images_match_transformers_at_two_sizes(tmp_path, dual):
    peer, folder = _folder(tmp_path, dual)
    ours = vision_attn.create_model(pretrained=folder)
    assert read_transformers_folder(folder).model_args()[0] == "naflexvit_base_patch16_siglip"
    assert ours.pos_embed_grid == (4, 4)
    peer_params = sum(p.numel() for p in peer.parameters())
    assert sum(p.numel() for p in ours.parameters()) == peer_params
    for h, w in ((32, 32), (24, 48)):  # the table's size, and another at another aspect ratio
        x = torch.randn(2, 3, h, w, generator=torch.Generator().manual_seed(2))
        patches = torch.stack([patchify(im, 8) for im in x])
        mask = torch.ones(patches.shape[:2], dtype=torch.long)
        shapes = torch.tensor([[h // 8, w // 8]] * 2)
        with torch.no_grad():
            out = peer(pixel_values=patches, pixel_attention_mask=mask, spatial_shapes=shapes)
            _close(ours.forward_features(x), out.last_hidden_state)
            _close(ours(x), out.pooler_output)


def test_naflex_batch_matches_transformers(tmp_path):
    peer, folder = _folder(tmp_path)
    ours = vision_attn.create_model(pretrained=folder)
    images = _images([(40, 90), (64, 30), (33, 33)])  # three aspect ratios
    processor = transformers.Siglip2ImageProcessor(patch_size=8, max_num_patches=24)
    inputs = processor(images=images, return_tensors="pt", do_rescale=False)
    batch = NaFlexBatch(inputs["pixel_values"], inputs["pixel_attention_mask"].bool(), inputs["spatial_shapes"])
    assert len({tuple(s) for s in batch.shapes.tolist()}) == 3 and not batch.mask.all()
    # our own patchifying picks the processor's grids
    for im, shape in zip(images, batch.shapes.tolist()):
        assert naflex_size(im.shape[1], im.shape[2], 8, 24) == (shape[0] * 8, shape[1] * 8)
    with torch.no_grad():
        out = peer(pixel_values=inputs["pixel_values"], pixel_attention_mask=inputs["pixel_attention_mask"],
                   spatial_shapes=inputs["spatial_shapes"])
        tokens = ours.forward_features(batch)
        _close(tokens[batch.mask], out.last_hidden_state[batch.mask])  # the real patches' tokens
        _close(ours(batch), out.pooler_output)
        # the same batch made by data/naflex.py, padded to the batch's longest sequence: the same features
        mine = collate_patches([to_patches(2 * im - 1, 8, 24) for im in images])  # the processor's 0.5/0.5 norm
        assert mine.shapes.tolist() == batch.shapes.tolist() and mine.patches.shape[1] == 21  # 3x7, padded to 21
        assert torch.allclose(ours(mine), ours(batch), atol=0.1)  # resized by another resampler: near, not equal


def test_timm_naflex_file_loads_and_matches_on_images_and_patches(tmp_path):
    peer = randomise(timm.create_model("naflexvit_base_patch16_siglip", embed_dim=32, depth=2, num_heads=4,
                                       mlp_ratio=2.0, patch_size=8))
    path = tmp_path / "timm.pth"
    torch.save(peer.state_dict(), path)
    ours = vision_attn.create_model("naflexvit_base_patch16_siglip", pretrained=str(path), embed_dim=32, depth=2,
                                    num_heads=4, mlp_ratio=2.0, patch_size=8, pos_embed_grid=16)
    g = torch.Generator().manual_seed(3)
    with torch.no_grad():
        for size in ((128, 128), (64, 96)):
            x = torch.randn(2, 3, *size, generator=g)
            _close(ours(x), peer(x))
        # a NaFlex batch, as timm's NaFlex loader gives it: patches, each patch's (row, column), validity
        batch = collate_patches([to_patches(im, 8, 24) for im in _images([(40, 90), (64, 30), (33, 33)])])
        coords = []
        for h, w in batch.shapes.tolist():
            rows, cols = torch.meshgrid(torch.arange(h), torch.arange(w), indexing="ij")
            grid = torch.stack([rows.flatten(), cols.flatten()], dim=-1)
            coords.append(torch.cat([grid, grid.new_zeros(batch.patches.shape[1] - h * w, 2)]))
        theirs = peer({"patches": batch.patches, "patch_coord": torch.stack(coords), "patch_valid": batch.mask})
        _close(ours(batch), theirs)


def test_classifier_folder_is_refused_by_key(tmp_path):
    config = transformers.Siglip2Config(vision_config=TINY, text_config=dict(
        hidden_size=32, intermediate_size=64, num_hidden_layers=1, num_attention_heads=4, vocab_size=99,
        max_position_embeddings=16), num_labels=3)
    folder = tmp_path / "hf"
    transformers.Siglip2ForImageClassification(config).save_pretrained(folder)
    with pytest.raises(CheckpointError, match="classifier"):
        vision_attn.create_model(pretrained=folder)


@pytest.mark.parametrize("name", ["naflexvit_base_patch16_siglip", "naflexvit_so400m_patch16_siglip"])
def test_timm_names_have_timms_parameter_count(name):
    with torch.device("meta"):
        ours, peer = vision_attn.create_model(name), timm.create_model(name)
    assert sum(p.numel() for p in ours.parameters()) == sum(p.numel() for p in peer.parameters()) > 0


def test_a_naflex_batch_for_feature_maps_is_refused_in_one_line():
    model = vision_attn.create_model("naflexvit_base_patch16_siglip", embed_dim=32, depth=1, num_heads=4, patch_size=8)
    batch = collate_patches([to_patches(torch.rand(3, 16, 24), 8, 6)])
    assert model(batch).shape == (1, 32)
    with pytest.raises(vision_attn.ConfigError, match="feature maps and intermediates need images"):
        model.forward_intermediates(batch)
    with pytest.raises(vision_attn.DataError, match="expected"):
        model(batch._replace(patches=batch.patches[..., :10]))
