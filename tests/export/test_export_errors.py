"""Bad input to `vision-attn export`: a missing output folder, an opset too old for an operator (with the
opset it needs), a checkpoint that does not fit --model (naming keys); none of them leaves a file."""
from __future__ import annotations

import pytest
import torch

pytest.importorskip("onnxruntime")

import vision_attn  # noqa: E402
from vision_attn.cli import main  # noqa: E402
from vision_attn.errors import ConfigError  # noqa: E402
from vision_attn.export import export_onnx  # noqa: E402


def tiny_vit():
    return vision_attn.create_model("vit_tiny_patch16_224", img_size=32, patch_size=8, depth=1).eval()


def test_missing_output_folder(tmp_path, capsys):
    out = tmp_path / "no" / "such" / "model.onnx"
    assert main(["export", "onnx", "--model", "vit_tiny_patch16_224", "-o", str(out)]) == 2
    err = capsys.readouterr().err
    assert "does not exist" in err and str(tmp_path / "no" / "such") in err
    assert not (tmp_path / "no").exists()


@pytest.mark.parametrize("exporter,needed,op", [("torchscript", 14, "scaled_dot_product_attention"),
                                                ("dynamo", 17, "LayerNormalization")])
def test_opset_too_old_names_the_opset_and_leaves_nothing(tmp_path, exporter, needed, op):
    """TorchScript fails on SDPA below 14; dynamo writes opset 18 when it cannot convert down (it
    would silently ignore the request): both are refused and the folder stays empty."""
    with pytest.raises(ConfigError) as e:
        export_onnx(tiny_vit(), tmp_path / "m.onnx", (32, 32), opset=13, exporter=exporter)
    msg = str(e.value)
    assert "--opset 13" in msg and op in msg and f"--opset {needed} or higher" in msg
    assert list(tmp_path.iterdir()) == []  # no partial file, no temporary file


def test_failed_export_leaves_no_partial_file(tmp_path):
    """The exporter fails half-way (here: a model whose forward cannot be traced): nothing is left."""

    class Bad(torch.nn.Module):
        def forward(self, x):
            return torch.from_numpy(x.numpy() * 2)  # leaves torch: no graph can hold it

    (tmp_path / "keep.txt").write_text("x")
    with pytest.raises(ConfigError, match="ONNX export .* failed"):
        export_onnx(Bad(), tmp_path / "bad.onnx", (8, 8), exporter="torchscript")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["keep.txt"]


def test_checkpoint_of_another_model_names_the_keys(tmp_path, capsys):
    ckpt = tmp_path / "deit.pth"
    torch.save(vision_attn.create_model("deit_tiny_distilled_patch16_224").state_dict(), ckpt)
    out = tmp_path / "m.onnx"
    assert main(["export", "onnx", "--model", "vit_small_patch16_224", "--checkpoint", str(ckpt), "-o", str(out)]) == 2
    err = capsys.readouterr().err
    assert str(ckpt) in err and "cls_token" in err and "dist_token" in err
    assert not out.exists()


def test_detector_checkpoint_of_another_scale(tmp_path, capsys):
    ckpt = tmp_path / "s.pt"
    torch.save(vision_attn.build_detector("configs/models/yolov8.yaml", scale="s").state_dict(), ckpt)
    assert main(["export", "onnx", "--yaml", "configs/models/yolov8.yaml", "--scale", "n", "--checkpoint", str(ckpt),
                 "-o", str(tmp_path / "d.onnx")]) == 2
    err = capsys.readouterr().err
    assert "shape mismatch" in err and "model.0.conv.weight" in err and "--scale" in err


def test_cli_export_verify(tmp_path, capsys):
    out = tmp_path / "vit.onnx"
    assert main(["export", "onnx", "--model", "vit_tiny_patch16_224", "--img-size", "32", "--exporter", "torchscript",
                 "--dynamic-batch", "--verify", "-o", str(out)]) == 0
    text = capsys.readouterr().out
    assert out.is_file() and "random batch 3" in text and "china.jpg" in text and "parity: ok" in text


def test_nms_needs_one_image_and_a_detector(tmp_path, capsys):
    args = ["export", "onnx", "--yaml", "configs/models/yolov8.yaml", "--img-size", "64", "--nms", "--dynamic-batch",
            "-o", str(tmp_path / "d.onnx")]
    assert main(args) == 2
    assert "--nms exports one image per call" in capsys.readouterr().err
    assert main(["export", "onnx", "--model", "vit_tiny_patch16_224", "--nms", "-o", str(tmp_path / "v.onnx")]) == 2
    assert "--nms applies to detectors" in capsys.readouterr().err
    assert list(tmp_path.iterdir()) == []


def test_verify_fails_when_the_graph_disagrees(tmp_path):
    """--verify's failure path: a graph of other weights is refused with the difference and the input."""
    from vision_attn.errors import ExportError
    from vision_attn.export import load_deployable
    from vision_attn.export.verify import verify_onnx

    dep = load_deployable(model="vit_tiny_patch16_224", img_size=32)
    export_onnx(dep.model, tmp_path / "m.onnx", (32, 32), exporter="torchscript")
    with torch.no_grad():
        dep.model.head.bias.add_(1e-3)  # PyTorch's model moves on; the file does not
    with pytest.raises(ExportError, match=r"disagrees with PyTorch on random batch 1 \(logits 0.001 > 0.0001\)"):
        verify_onnx(tmp_path / "m.onnx", dep)
