"""Attention maps of ViTs with registers (DINOv3, DINOv2 ``*_reg4``, any ``reg_tokens``): the class token's
attention on the patch grid is the map, and its shares on the class token, each register and the patch
grid are kept apart; every row of shares sums to 1 and equals softmax(q k^T / sqrt(d)) recomputed from each
attention module's input (queries and keys projected and rotated here, not by the model); `attn-map`
draws the shares beside the maps and writes them in its JSON."""
from __future__ import annotations

import json

import pytest
import torch
import torch.nn.functional as F
from matplotlib.backends.backend_agg import FigureCanvasAgg

import vision_attn
from tests.models.peer_weights import randomise
from vision_attn.analysis.attention_maps import SHARES_TITLE, attention_rollout, maps_figure, vit_maps
from vision_attn.cli import main
from vision_attn.models import VisionTransformer

REGISTERS = [f"register {i}" for i in range(4)]


def _rotate(t: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """DINOv3's rotary embedding written out: the last len(cos) tokens rotated by halves of the channels."""
    n = cos.shape[0]
    x = t[..., -n:, :]
    x1, x2 = x[..., : x.shape[-1] // 2], x[..., x.shape[-1] // 2:]
    return torch.cat([t[..., :-n, :], x * cos + torch.cat([-x2, x1], dim=-1) * sin], dim=-2)


def _recomputed(model: torch.nn.Module, x: torch.Tensor) -> list[torch.Tensor]:
    """Each block's softmax(q k^T / sqrt(d)) (heads, N, N), from the input its attention module receives."""
    calls = []
    hooks = [blk.attn.register_forward_pre_hook(lambda m, a, kw: calls.append((m, a[0], kw.get("rope"))), with_kwargs=True)
             for blk in model.blocks]
    with torch.no_grad():
        model(x)
        for h in hooks:
            h.remove()
        out = []
        for attn, tokens, rope in calls:
            if hasattr(attn, "q_bias"):  # EVA/DINOv3 layout: the keys have no bias
                zeros = torch.zeros(tokens.shape[-1])
                bias = torch.cat([attn.q_bias if attn.q_bias is not None else zeros, zeros,
                                  attn.v_bias if attn.v_bias is not None else zeros])
            else:
                bias = attn.qkv.bias
            B, N, D = tokens.shape
            q, k, _ = F.linear(tokens, attn.qkv.weight, bias).view(B, N, 3, attn.num_heads, -1).permute(2, 0, 3, 1, 4)
            if rope is not None:
                q, k = _rotate(q, *rope), _rotate(k, *rope)
            out.append((q @ k.transpose(-1, -2) / q.shape[-1] ** 0.5).softmax(-1)[0])
    return out


CASES = {  # name: the model, the image size (a 4x3 grid of patches)
    "dinov3": (lambda: vision_attn.create_model("vit_small_patch16_dinov3_qkvb", depth=2, embed_dim=48, num_heads=3,
                                                img_size=64), (64, 48)),
    "dinov2_reg4": (lambda: vision_attn.create_model("vit_small_patch14_reg4_dinov2", depth=2, embed_dim=48,
                                                     num_heads=3, img_size=56), (56, 42)),
    "no_class_token": (lambda: VisionTransformer(img_size=32, patch_size=8, embed_dim=32, depth=2, num_heads=2,
                                                 reg_tokens=2, class_token=False, global_pool="avg"), (32, 24)),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_shares_of_each_register_and_the_grid_are_the_models_softmax(case):
    build, (h, w) = CASES[case]
    model = randomise(build())  # random weights of 0.2 N(0, 1): attention far from uniform
    x = torch.randn(1, 3, h, w, generator=torch.Generator().manual_seed(0))
    maps = vit_maps(model, x)
    shares = maps.shares
    has_class = case != "no_class_token"
    assert shares.tokens == (["class"] + REGISTERS if has_class else REGISTERS[:2])
    assert shares.columns == shares.tokens + ["patches"]
    assert list(shares.rows) == ["rollout", "last layer, head 0", "last layer, head 1"] + \
        (["last layer, head 2"] if has_class else []) + ["layer 0", "layer 1"]
    assert all(m.shape == (4, 3) for m in maps.maps.values()) and list(maps.maps) == list(shares.rows)[:-2]

    weights = _recomputed(model, x)
    prefix = len(shares.tokens)

    def query(a):  # the class token's row, else the mean of the patch tokens' rows
        return a[..., 0, :] if has_class else a[..., prefix:, :].mean(-2)

    def split(row):
        return torch.cat([row[:prefix], row[prefix:].sum(0, keepdim=True)])

    for name, row in shares.rows.items():
        torch.testing.assert_close(row.sum(), torch.tensor(1.0), atol=1e-5, rtol=0)
    for hd in range(weights[-1].shape[0]):
        expected = query(weights[-1][hd])
        torch.testing.assert_close(shares.rows[f"last layer, head {hd}"], split(expected), atol=1e-5, rtol=0)
        torch.testing.assert_close(maps.maps[f"last layer, head {hd}"], expected[prefix:].reshape(4, 3), atol=1e-5, rtol=0)
    for i, a in enumerate(weights):
        torch.testing.assert_close(shares.rows[f"layer {i}"], split(query(a.mean(0))), atol=1e-5, rtol=0)
    rollout = query(attention_rollout([a[None] for a in weights])[0])
    torch.testing.assert_close(shares.rows["rollout"], split(rollout), atol=1e-5, rtol=0)
    torch.testing.assert_close(maps.maps["rollout"], rollout[prefix:].reshape(4, 3), atol=1e-5, rtol=0)
    # the registers take part of the attention: a map of the patches alone would not sum to 1
    register_share = torch.stack([row[int(has_class):-1].sum() for row in shares.rows.values()])
    assert register_share.max() > 0.01


def test_figure_draws_the_shares_apart():
    model = vision_attn.create_model("vit_small_patch14_reg4_dinov2", depth=2, embed_dim=48, num_heads=3, img_size=56)
    maps = vit_maps(model, torch.randn(1, 3, 56, 56))
    fig = maps_figure(torch.zeros(56, 56, 3, dtype=torch.uint8).numpy(), maps, max_panels=2)
    FigureCanvasAgg(fig).draw()
    panel = [ax for ax in fig.axes if ax.get_title() == SHARES_TITLE.format(query="class token")]
    assert len(panel) == 1 and len(fig.axes) == 1 + 2 + 1  # the input, two maps, the shares
    assert [t.get_text() for t in panel[0].get_legend().get_texts()] == ["class"] + REGISTERS + ["patches"]
    # a bar for each map drawn (evenly spaced: the first and the last) and for each layer
    assert [t.get_text() for t in panel[0].get_yticklabels()] == ["rollout", "last layer, head 2", "layer 0", "layer 1"]
    assert [round(p.get_width(), 6) for p in panel[0].patches[:4]] == [
        round(float(maps.shares.rows[n][0]), 6) for n in ("rollout", "last layer, head 2", "layer 0", "layer 1")]


def test_cli_writes_register_shares_in_its_json(tmp_path, capsys):
    """The CLI builds the name at its full size (12 blocks of 192 channels, 3 heads), here at 64 px: a 4x4 grid."""
    out, numbers = tmp_path / "maps.png", tmp_path / "maps.json"
    assert main(["attn-map", "--model", "vit_tiny_patch16_dinov3_qkvb", "--img-size", "64", "--image", "sklearn:china.jpg",
                 "--max-panels", "1", "-o", str(out), "--json", str(numbers)]) == 0
    printed = capsys.readouterr().out
    assert "class token's attention, rollout: class 0." in printed and "register 3 0." in printed
    data = json.loads(numbers.read_text())
    assert data["kind"] == "vit" and data["input_size"] == [64, 64] and out.exists()
    assert data["maps"]["rollout"]["shape"] == [4, 4] and len(data["maps"]) == 1 + 3  # rollout, three heads
    shares = data["shares"]
    assert shares["query"] == "class token" and shares["columns"] == ["class"] + REGISTERS + ["patches"]
    assert len(shares["rows"]) == 1 + 3 + 12
    for row in shares["rows"].values():
        assert len(row) == 6 and abs(sum(row) - 1) < 1e-5
    patches = sum(sum(r) for r in data["maps"]["rollout"]["values"])
    assert abs(patches - shares["rows"]["rollout"][-1]) < 1e-5  # the map is the patch share, spread on the grid

    missing = tmp_path / "nowhere" / "maps.json"
    assert main(["attn-map", "--model", "vit_tiny_patch16_dinov3_qkvb", "--img-size", "64", "--image", "sklearn:china.jpg",
                 "-o", str(tmp_path / "other.png"), "--json", str(missing)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and f"--json {missing}" in err and not (tmp_path / "other.png").exists()
