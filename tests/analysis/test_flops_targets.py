"""FLOPs against counts worked out by hand (Linear, Conv2d, one attention layer, one Swin window
attention), published model figures (resnet50, yolov8n), and the TARGET resolution of `flops`."""
import pytest
import torch
from torch import nn

from vision_attn.analysis import count_flops
from vision_attn.analysis.flops import module_tree
from vision_attn.analysis.targets import load_target
from vision_attn.errors import CheckpointError, ConfigError
from vision_attn.layers.attention import Attention
from vision_attn.layers.window_attention import WindowAttention


class _Tokens(nn.Module):
    """Runs ``inner`` on (B, 1, N, D) inputs viewed as tokens (B, N, D): count_flops takes (C, H, W)."""

    def __init__(self, inner: nn.Module):
        super().__init__()
        self.inner = inner

    def forward(self, x):
        return self.inner(x.squeeze(1))


def test_linear_hand_count():
    # (2, 1, 5, 16) tokens through Linear(16, 24): 2 * 5 rows x 16 x 24 MACs; the bias adds no MAC
    report = count_flops(_Tokens(nn.Linear(16, 24)), (1, 5, 16), batch=2)
    assert report.macs == 2 * 5 * 16 * 24
    assert report.flops == 2 * report.macs
    assert report.params == 16 * 24 + 24


def test_conv2d_hand_count():
    # out 8 x 16 x 16 positions, each k*k*Cin = 3*3*3 MACs: stride 2, padding 1 on 32 x 32
    conv = nn.Conv2d(3, 8, 3, stride=2, padding=1)
    report = count_flops(conv, (3, 32, 32), batch=3)
    assert report.macs == 3 * 8 * 16 * 16 * 3 * 3 * 3
    assert report.params == 8 * 3 * 3 * 3 + 8


def test_one_attention_layer_counts_both_matmuls():
    b, n, d, heads = 2, 10, 32, 4
    report = count_flops(_Tokens(Attention(d, heads)), (1, n, d), batch=b)
    projections = b * n * d * 3 * d + b * n * d * d  # qkv and output projection
    qk = b * heads * n * n * (d // heads)  # q k^T
    av = b * heads * n * n * (d // heads)  # attn v
    assert report.macs == projections + qk + av
    assert report.fused_attention_macs == qk + av  # the part a plain counter misses on the CPU


def test_swin_window_attention_hand_count():
    # 4 windows of 7 x 7 = 49 tokens, dim 32, 2 heads, batch 2 -> windows as rows (8, 49, 32)
    windows, n, d, heads = 8, 49, 32, 2
    report = count_flops(_Tokens(WindowAttention(d, heads, window_size=7)), (1, n, d), batch=windows)
    projections = windows * n * (3 * d * d + d * d)
    attention = 2 * windows * heads * n * n * (d // heads)  # q k^T and attn v within each window
    assert report.macs == projections + attention


def test_resnet50_and_yolov8n_figures(tmp_path):
    report = count_flops(load_target("resnet50").model, 224)
    assert report.params == 25_557_032
    assert report.gmacs == pytest.approx(4.1, abs=0.02)
    target = load_target("configs/models/yolov8.yaml", scale="n")
    assert (target.kind, target.img_size) == ("yaml", 640)
    report = count_flops(target.model, target.img_size)
    assert report.params == 3_157_200
    assert 8.7 <= report.gflops <= 8.9


def test_checkpoint_target_uses_the_runs_hyper_parameters(tmp_path):
    run = tmp_path / "run"
    run.mkdir()
    hp = {"name": "resnet18", "num_classes": 10, "img_size": 64, "attention": "cbam", "model_kwargs": {}}
    torch.save({"hyper_parameters": hp, "state_dict": {}}, run / "best.ckpt")
    target = load_target(run)
    assert target.kind == "checkpoint" and target.img_size == 64
    assert target.model.fc.out_features == 10
    assert any(type(m).__name__ == "CBAM" for m in target.model.modules())
    torch.save({"state_dict": {}}, tmp_path / "plain.pt")
    with pytest.raises(CheckpointError, match="without a model name"):
        load_target(tmp_path / "plain.pt")
    (tmp_path / "junk.ckpt").write_bytes(b"not a checkpoint")
    with pytest.raises(CheckpointError, match="not a readable checkpoint"):
        load_target(tmp_path / "junk.ckpt")


def test_unknown_target_says_what_was_tried():
    with pytest.raises(ConfigError) as e:
        load_target("vit_smal_patch16_224")
    msg = str(e.value)
    assert "did you mean vit_small_patch16_224" in msg
    assert msg.startswith("unknown model") and "a detector YAML" in msg and "a checkpoint or run folder" in msg
    with pytest.raises(ConfigError, match="no such YAML file"):
        load_target("missing.yaml")


def test_module_tree_sums_and_nests():
    report = count_flops(load_target("swin_tiny_patch4_window7_224").model, 224, depth=3)
    rows = module_tree(report.by_module)
    assert sum(m for _, level, m in rows if level == 0) == report.macs
    assert [n for n, level, _ in rows if level == 0] == ["patch_embed", "layers", "head"]
    names = [n for n, _, _ in rows]
    assert names.index("layers") < names.index("layers.0") < names.index("layers.0.blocks") < names.index("layers.1")
    layers = dict((n, m) for n, _, m in rows)
    assert layers["layers"] == sum(layers[f"layers.{i}"] for i in range(4))


def test_detection_checkpoint_names_its_yaml(tmp_path):
    hp = {"yaml": "configs/models/yolov8.yaml", "scale": "n", "num_classes": 3}
    torch.save({"hyper_parameters": hp, "datamodule_hyper_parameters": {"img_size": 160}, "state_dict": {}},
               tmp_path / "best.ckpt")
    target = load_target(tmp_path)
    assert target.kind == "checkpoint" and target.img_size == 160
    assert target.model.model[-1].nc == 3  # the Detect head built for the run's classes
    hp["yaml"] = "gone/missing.yaml"
    torch.save({"hyper_parameters": hp, "state_dict": {}}, tmp_path / "best.ckpt")
    with pytest.raises(CheckpointError, match="missing.yaml is not there any more"):
        load_target(tmp_path)
