"""Attention maps: rollout rows sum to 1 and match a hand computation, the maps of ViT, Swin (window
by window) and CBAM, and `vision-attn attn-map` with a checkpoint and with a file that is no image."""
import numpy as np
import pytest
import torch
from PIL import Image

import vision_attn
from tests.folders import make_folder
from vision_attn.analysis.attention_maps import (AttentionMaps, attention_maps, attention_rollout, cbam_maps,
                                                 maps_figure, prepare_image, swin_window_maps, vit_maps)
from vision_attn.analysis.explain import rollout_map
from vision_attn.cli import main
from vision_attn.errors import ConfigError, DataError
from vision_attn.models import VisionTransformer


def _weights(layers=3, b=2, heads=4, n=6, seed=0):
    g = torch.Generator().manual_seed(seed)
    return [torch.randn(b, heads, n, n, generator=g).softmax(-1) for _ in range(layers)]


def test_rollout_rows_sum_to_one_and_match_hand_computation():
    w = _weights()
    r = attention_rollout(w)
    assert r.shape == (2, 6, 6)
    torch.testing.assert_close(r.sum(-1), torch.ones(2, 6))
    eye = torch.eye(6)
    a = [0.5 * x.mean(1) + 0.5 * eye for x in w]  # rows of a softmax + I/2 already sum to 1
    torch.testing.assert_close(r, a[2] @ a[1] @ a[0])
    plain = attention_rollout(w, residual=False)
    torch.testing.assert_close(plain, w[2].mean(1) @ w[1].mean(1) @ w[0].mean(1))
    torch.testing.assert_close(plain.sum(-1), torch.ones(2, 6))
    with pytest.raises(DataError, match="no attention weights"):
        attention_rollout([])
    with pytest.raises(DataError, match="batch, heads, N, N"):
        attention_rollout([torch.rand(2, 6, 6)])


def test_rollout_head_fusion_and_discard():
    """vit-explain's options: the heads' max or min instead of their mean; the lowest share of each layer's
    fused weights zeroed before the identity is added."""
    w = _weights(layers=2)
    eye = torch.eye(6)

    def step(a):
        a = 0.5 * a + 0.5 * eye
        return a / a.sum(-1, keepdim=True)

    for fusion, fuse in (("max", lambda x: x.amax(1)), ("min", lambda x: x.amin(1))):
        r = attention_rollout(w, head_fusion=fusion)
        torch.testing.assert_close(r, step(fuse(w[1])) @ step(fuse(w[0])))
        torch.testing.assert_close(r.sum(-1), torch.ones(2, 6))
    kept = []
    for x in w:
        a = x.mean(1).reshape(2, 36)
        a = torch.where(a >= a.sort(-1).values[:, 18:19], a, torch.zeros(()))  # the 18 lowest of 36 zeroed
        kept.append(step(a.reshape(2, 6, 6)))
    torch.testing.assert_close(attention_rollout(w, discard=0.5), kept[1] @ kept[0])
    with pytest.raises(ConfigError, match="head_fusion='median': choose one of mean, max, min"):
        attention_rollout(w, head_fusion="median")
    with pytest.raises(ConfigError, match=r"discard=1.0: .* in \[0, 1\)"):
        attention_rollout(w, discard=1.0)


def test_the_head_query_of_an_average_pooling_vit_is_its_patch_tokens():
    """A head that averages the patches never reads the class token: the rollout that explains the head
    (``head_query``, explain's) is the patch tokens' mean row; attn-map's stays the class token's."""
    from vision_attn.layers import record_attention

    model = VisionTransformer(img_size=32, patch_size=8, embed_dim=32, depth=2, num_heads=4, num_classes=3,
                              global_pool="avg").eval()
    x = torch.randn(1, 3, 32, 32)
    with torch.no_grad(), record_attention(model) as weights:
        model(x)
    rollout = attention_rollout(weights, head_fusion="max")[0]
    maps = vit_maps(model, x, head_fusion="max", head_query=True)
    torch.testing.assert_close(maps.maps["rollout"], rollout[1:].mean(0)[1:].reshape(4, 4))  # the 16 patches' rows
    assert maps.shares.query == "mean of the patch tokens"
    torch.testing.assert_close(vit_maps(model, x, head_fusion="max").maps["rollout"], rollout[0, 1:].reshape(4, 4))
    heat = rollout_map(model, x, "max")
    assert heat.shape == (32, 32) and heat.min() == 0 and heat.max() == pytest.approx(1, abs=1e-3)
    peak = np.unravel_index(int(heat.argmax()), heat.shape)  # in the 8-px patch of the rollout's largest value
    assert tuple(int(i) // 8 for i in peak) == np.unravel_index(int(maps.maps["rollout"].argmax()), (4, 4))


def test_vit_maps():
    model = VisionTransformer(img_size=32, patch_size=8, embed_dim=32, depth=2, num_heads=4, num_classes=3,
                              distilled=True)
    maps = vit_maps(model, torch.randn(1, 3, 32, 48))
    assert maps.kind == "vit"
    assert list(maps.maps) == ["rollout"] + [f"last layer, head {h}" for h in range(4)]
    assert all(m.shape == (4, 6) for m in maps.maps.values())  # the 32x48 grid of 8-px patches
    # rollout row of the class token: over all N tokens it sums to 1, so over the patches to at most 1
    assert 0 < maps.maps["rollout"].sum() <= 1 + 1e-6
    assert attention_maps(model, torch.randn(1, 3, 32, 32)).kind == "vit"


def test_swin_window_maps_put_every_window_back_in_place():
    model = vision_attn.create_model("swin_tiny_patch4_window7_224", embed_dim=32, depths=(2, 2), num_heads=(1, 2),
                                     img_size=56, num_classes=5)
    maps = swin_window_maps(model, torch.randn(1, 3, 56, 56))
    assert maps.kind == "swin"
    first, second = maps.maps.values()
    assert first.shape == (14, 14) and second.shape == (7, 7)
    # attention received within a window, averaged over queries: each 7x7 window sums to exactly 1
    torch.testing.assert_close(first.reshape(2, 7, 2, 7).sum((1, 3)), torch.ones(2, 2))
    torch.testing.assert_close(second.sum(), torch.tensor(1.0))


def test_panel_titles_never_overlap():
    """Swin's titles (``layers.0.blocks.0 (56x56, window 7x7)``) ran into each other: wrapped, they do not."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    names = [f"layers.{i}.blocks.0 ({56 >> i}x{56 >> i}, window 7x7)" for i in range(4)]
    names += ["model.22.cv3.0.attention.spatial_gate", "x" * 60]
    maps = AttentionMaps("swin", {n: torch.rand(7, 7) for n in names})
    fig = maps_figure(np.zeros((56, 56, 3), np.uint8), maps, title="swin_tiny_patch4_window7_224 (trained)")
    FigureCanvasAgg(fig).draw()
    renderer = fig.canvas.get_renderer()
    boxes = [ax.title.get_window_extent(renderer) for ax in fig.axes]
    assert len(boxes) == 1 + len(names)
    for i, a in enumerate(boxes):
        for b in boxes[i + 1:]:
            assert not a.overlaps(b), (a, b)
    images = [ax.get_window_extent(renderer) for ax in fig.axes]
    for title, ax_box in zip(boxes, images):  # each title sits above its own image, inside the figure
        assert title.y0 >= ax_box.y1 - 1 and title.x0 >= 0 and title.x1 <= fig.bbox.x1


def test_cbam_maps_are_gates():
    model = vision_attn.create_model("resnet18", attention="cbam", num_classes=4)
    maps = cbam_maps(model, torch.randn(1, 3, 64, 64))
    assert len(maps.maps) == 8 and maps.kind == "cbam"
    first = next(iter(maps.maps.values()))
    assert first.shape == (16, 16) and 0 < first.min() and first.max() < 1
    with pytest.raises(ConfigError, match="no attention to show"):
        attention_maps(vision_attn.create_model("resnet18"), torch.randn(1, 3, 64, 64))


def test_prepare_image_covers_and_crops():
    image = np.zeros((40, 100, 3), dtype=np.uint8)
    shown, x = prepare_image(image, (32, 48))
    assert shown.shape == (32, 48, 3) and shown.dtype == np.uint8
    assert x.shape == (1, 3, 32, 48) and x.dtype == torch.float32


def test_cli_with_a_checkpoint_and_bad_images(tmp_path, monkeypatch, capsys):
    from vision_attn.tasks import train_classifier

    monkeypatch.chdir(tmp_path)
    root = make_folder(tmp_path / "data")
    cfg = {"name": "tiny", "model": {"name": "vit_tiny_patch16_224",
                                     "model_kwargs": {"patch_size": 8, "depth": 1, "embed_dim": 32, "num_heads": 2}},
           "data": {"root": str(root), "img_size": 16, "batch_size": 8, "num_workers": 0},
           "trainer": {"accelerator": "cpu", "max_epochs": 1}}
    run = train_classifier(cfg).run_dir
    capsys.readouterr()
    photo = tmp_path / "photo.png"
    Image.fromarray(np.random.default_rng(0).integers(0, 255, (50, 70, 3), dtype=np.uint8)).save(photo)
    out = tmp_path / "maps.png"
    assert main(["attn-map", "--checkpoint", str(run), "--image", str(photo), "-o", str(out)]) == 0
    assert "rollout" in capsys.readouterr().out
    with Image.open(out) as img:
        assert img.format == "PNG" and img.width > 200

    (tmp_path / "broken.jpg").write_bytes(b"\xff\xd8\xff\xe0 not really a jpeg")
    for image, message in ((tmp_path / "broken.jpg", "cannot decode the image"),
                           (tmp_path / "missing.png", "no such image file"),
                           ("sklearn:nope.jpg", "no sample image")):
        assert main(["attn-map", "--model", "deit_tiny_patch16_224", "--image", str(image), "-o", str(out)]) == 2
        err = capsys.readouterr().err
        assert err.startswith("error: --image") and message in err and err.count("\n") == 1
    assert main(["attn-map", "--image", str(photo), "-o", str(out)]) == 2
    assert "exactly one of --model" in capsys.readouterr().err
