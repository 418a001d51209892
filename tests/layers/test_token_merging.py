"""Token merging (ToMe): the matching, the size-weighted merge, the block at r=0, a ViT with
``token_merging=r`` (token counts, FLOPs against the analytic count, training, ONNX export)."""
from __future__ import annotations

import pytest
import torch

import vision_attn
from vision_attn.analysis.flops import count_flops, count_model_flops
from vision_attn.errors import ConfigError
from vision_attn.layers import Block
from vision_attn.layers.token_merging import MergingBlock, TokenSizes, bipartite_matching


def test_matching_merges_the_most_similar_pairs():
    torch.manual_seed(0)
    metric = torch.randn(3, 9, 5)
    r = 2
    dest = bipartite_matching(metric, r)
    unit = torch.nn.functional.normalize(metric, dim=-1)
    for img in range(3):  # brute force: A = even positions, B = odd
        a, b = list(range(0, 9, 2)), list(range(1, 9, 2))
        sim = unit[img, a] @ unit[img, b].T
        best, partner = sim.max(dim=1)
        merged = sorted(best.argsort(descending=True)[:r].tolist())
        kept = [i for i in range(len(a)) if i not in merged]
        expected = {}
        for slot, i in enumerate(kept):
            expected[a[i]] = slot
        for j, tok in enumerate(b):
            expected[tok] = len(kept) + j
        for i in merged:
            expected[a[i]] = len(kept) + partner[i].item()
        assert dest[img].tolist() == [expected[t] for t in range(9)]


def test_a_merging_block_at_r0_is_the_block():
    torch.manual_seed(0)
    plain = Block(32, 4).eval()
    merging = MergingBlock(32, 4, r=0, protected=1, sizes=TokenSizes()).eval()
    merging.load_state_dict(plain.state_dict())
    x = torch.randn(2, 17, 32)
    torch.testing.assert_close(merging(x), plain(x), atol=1e-6, rtol=1e-6)


def test_merged_tokens_are_size_weighted_means_and_sizes_add_up():
    torch.manual_seed(0)
    sizes = TokenSizes()
    blocks = [MergingBlock(16, 2, r=3, protected=2, sizes=sizes).eval() for _ in range(3)]
    x = torch.randn(2, 2 + 16, 16)
    prefix = x[:, :2]
    for blk in blocks:
        x = blk(x)
    assert x.shape == (2, 2 + 16 - 9, 16)
    assert sizes.size.shape == (2, 9, 1)
    torch.testing.assert_close(sizes.size[:, :2, 0], torch.ones(2, 2))  # the prefix is never merged
    torch.testing.assert_close(sizes.size[:, 2:].sum(dim=1), torch.full((2, 1), 16.0))  # every patch counted once
    assert not torch.equal(x[:, :2], prefix)  # the prefix still attends and is updated in place
    # two tokens merged weigh by their sizes: identical keys of sizes 1 and 3 give (t1 + 3 t2) / 4
    blk = MergingBlock(4, 1, r=1, protected=0, sizes=TokenSizes())
    tokens = torch.tensor([[[1.0, 0, 0, 0], [0, 1.0, 0, 0]]])
    keys = torch.ones(1, 2, 4)
    merged, size = blk._merge(tokens, keys, torch.tensor([[[1.0], [3.0]]]), 1)
    torch.testing.assert_close(merged, torch.tensor([[[0.25, 0.75, 0, 0]]]))
    torch.testing.assert_close(size, torch.tensor([[[4.0]]]))


def test_vit_with_token_merging_counts_tokens_and_flops():
    kwargs = dict(img_size=64, depth=4, embed_dim=64, num_heads=2, num_classes=10)
    plain = vision_attn.create_model("vit_tiny_patch16_224", **kwargs).eval()
    model = vision_attn.create_model("vit_tiny_patch16_224", token_merging=4, **kwargs).eval()
    model.load_state_dict(plain.state_dict())  # the same parameters
    x = torch.randn(2, 3, 64, 64)
    tokens = model.forward_features(x)
    assert tokens.shape == (2, 3, 64)  # 17 -> 13 -> 9 -> 5 -> 3: at most half the patch tokens merge per block and model(x).shape == (2, 10)
    with pytest.raises(ConfigError, match="token_merging changes the number of tokens"):
        model.forward_intermediates(x)
    with pytest.raises(ConfigError, match="token_merging=4"):
        vision_attn.create_model("vit_tiny_patch16_224", token_merging=4, pos_embed="rope", **kwargs)
    eager = count_flops(model, 64)
    on_meta = count_model_flops("vit_tiny_patch16_224", 64, model_kwargs={"token_merging": 4, **kwargs})
    assert eager.macs == on_meta.macs
    head_dim = 32
    n, expected = 17, 16 * 3 * 16 * 16 * 64 + 64 * 10
    for _ in range(4):
        expected += n * 64 * 3 * 64 + 2 * n * n * 64 + n * 64 * 64  # qkv, q k^T and attn v, proj
        a, b = n // 2, (n - 1) // 2  # the patch tokens at even and odd positions
        expected += a * b * head_dim  # matching: cosine similarity of the head-averaged keys
        n -= min(4, (n - 1) // 2)
        expected += 2 * n * 64 * 256  # mlp
    assert abs(eager.macs - expected) / expected < 0.01


def test_token_merging_trains_and_exports(tmp_path):
    pytest.importorskip("onnxruntime")
    from vision_attn.export.onnx import export_onnx, onnx_session, run_onnx

    torch.manual_seed(0)
    model = vision_attn.create_model("deit_tiny_distilled_patch16_224", img_size=64, depth=2, embed_dim=32,
                                     num_heads=2, num_classes=5, token_merging=3)
    cls, dist = model.train()(torch.randn(2, 3, 64, 64))
    (cls.sum() + dist.sum()).backward()
    assert all(p.grad is not None for p in model.parameters())
    model.eval()
    path = tmp_path / "tome.onnx"
    export_onnx(model, path, (64, 64), dynamic_batch=True, exporter="torchscript")
    x = torch.randn(3, 3, 64, 64)
    with torch.no_grad():
        torch.testing.assert_close(run_onnx(onnx_session(path), x)[0], model(x), atol=1e-4, rtol=1e-4)


def test_merging_is_switched_on_and_off_in_place():
    torch.manual_seed(0)
    kwargs = dict(img_size=32, depth=2, embed_dim=32, num_heads=2, num_classes=3)
    model = vision_attn.create_model("vit_tiny_patch16_224", **kwargs).eval()
    built = vision_attn.create_model("vit_tiny_patch16_224", token_merging=1, **kwargs).eval()
    built.load_state_dict(model.state_dict())
    x = torch.randn(2, 3, 32, 32)
    plain = model(x)
    model.set_token_merging(1)  # a trained plain model, merging from now on
    torch.testing.assert_close(model(x), built(x))
    model.set_token_merging(0)
    torch.testing.assert_close(model(x), plain)
    with pytest.raises(ConfigError, match="token_merging=-1"):
        model.set_token_merging(-1)
