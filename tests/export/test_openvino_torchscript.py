"""OpenVINO IR and TorchScript exports compute what PyTorch computes (issue 33): OpenVINO FP32 (its
f32 hint) within 1e-4 of the eager model (1e-3 px for decoded boxes, and the same boxes after NMS),
TorchScript within 1e-5, on random batches of 1 and 3 and on a photo, for vit_small, swin_tiny at a
non-square size, and YOLOv8n with CBAM; the IR is two files and nothing else is left beside them."""
from __future__ import annotations

import pytest
import torch

from tests.export.test_onnx_parity import calibrate_batchnorm
from vision_attn.cli import main
from vision_attn.export import load_deployable
from vision_attn.export.openvino import export_openvino, openvino_model, run_openvino
from vision_attn.export.torchscript import export_torchscript, load_torchscript
from vision_attn.export.verify import verify_outputs
from vision_attn.models.yolo.postprocess import postprocess

pytest.importorskip("openvino")

CASES = [({"model": "vit_small_patch16_224"}, 224),
         ({"model": "swin_tiny_patch4_window7_224"}, (192, 256)),
         ({"yaml": "configs/models/yolov8-cbam.yaml", "scale": "n"}, 128)]
IDS = ["vit_small", "swin_tiny-192x256", "yolov8n-cbam"]


def _deployable(source, img_size):
    torch.manual_seed(0)
    dep = load_deployable(**source, img_size=img_size)
    if dep.kind == "detector":
        calibrate_batchnorm(dep.model, dep.input_size)
    return dep


@pytest.mark.parametrize("source,img_size", CASES, ids=IDS)
def test_openvino_fp32_equals_pytorch(tmp_path, source, img_size):
    dep = _deployable(source, img_size)
    out = tmp_path / "model.xml"
    export_openvino(dep.model, out, dep.input_size, dynamic_batch=True, exporter="torchscript")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["model.bin", "model.xml"]
    compiled = openvino_model(out, hint="f32")
    report = verify_outputs(lambda x: run_openvino(compiled, x), out, "OpenVINO", dep, batches=(1, 3), factor=8.0)
    if dep.kind == "classifier":
        assert max(report.max_diffs.values()) < 1e-4
    assert report.ok and [c.input for c in report.checks] == ["random batch 1", "random batch 3", "china.jpg"]
    if dep.kind == "detector":  # the same detections after NMS: count, order, classes; boxes to 0.05 px
        x = torch.rand(2, 3, *dep.input_size, generator=torch.Generator().manual_seed(1))
        with torch.no_grad():
            ours, ref = postprocess(run_openvino(compiled, x), conf=0.01), postprocess(dep.model(x), conf=0.01)
        for a, b in zip(ours, ref):  # boxes: PyTorch float32 is itself ~0.013 px from float64 (verify.py)
            assert len(b.boxes) > 0 and torch.equal(a.labels, b.labels)
            torch.testing.assert_close(a.boxes, b.boxes, atol=0.05, rtol=0)
            torch.testing.assert_close(a.scores, b.scores, atol=1e-4, rtol=0)


@pytest.mark.parametrize("source,img_size", CASES, ids=IDS)
def test_torchscript_equals_pytorch(tmp_path, source, img_size):
    dep = _deployable(source, img_size)
    out = tmp_path / "model.pt"
    export_torchscript(dep.model, out, dep.input_size)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["model.pt"]
    traced = load_torchscript(out)
    with torch.no_grad():
        report = verify_outputs(lambda x: traced(x), out, "TorchScript", dep, batches=(1, 3), scale=0.1)
    assert report.ok and set(report.tolerances.values()) <= {1e-5, 1e-4}


def test_export_commands_verify_and_name_what_they_wrote(tmp_path, capsys):
    xml = tmp_path / "vit.xml"
    assert main(["export", "openvino", "--model", "vit_tiny_patch16_224", "--img-size", "32", "-o", str(xml),
                 "--exporter", "torchscript", "--precision", "fp16", "--verify"]) == 0
    out = capsys.readouterr().out
    assert "fp16 weights" in out and "parity: ok" in out and xml.with_suffix(".bin").is_file()
    pt = tmp_path / "vit.pt"
    assert main(["export", "torchscript", "--model", "vit_tiny_patch16_224", "--img-size", "32", "-o", str(pt),
                 "--verify"]) == 0
    assert "TorchScript vs PyTorch" in capsys.readouterr().out
    assert main(["export", "openvino", "--model", "vit_tiny_patch16_224", "-o", str(tmp_path / "vit.onnx")]) == 2
    assert "an OpenVINO model is an .xml file" in capsys.readouterr().err


def test_a_missing_openvino_is_a_one_line_error_with_the_pip_command(tmp_path, capsys, monkeypatch):
    import builtins

    real_import = builtins.__import__

    def no_openvino(name, *args, **kwargs):
        if name == "openvino" or name.startswith("openvino."):
            raise ImportError("No module named 'openvino'")
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", no_openvino)
    assert main(["export", "openvino", "--model", "vit_tiny_patch16_224", "-o", str(tmp_path / "m.xml")]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: OpenVINO is not installed: pip install openvino") and len(err.splitlines()) == 1
    assert list(tmp_path.iterdir()) == []


def test_benchmark_times_every_runtime_of_one_model_side_by_side(capsys):
    import json

    runtimes = ["onnxruntime", "openvino", "onnxruntime-int8", "onnxruntime-qdq", "openvino-int8"]
    args = ["benchmark", "vit_tiny_patch16_224", "--runtime", ",".join(["torch", *runtimes]),
            "--rounds", "1", "--iters", "1", "--warmup", "1", "--json"]
    assert main(args) == 0
    results = json.loads(capsys.readouterr().out)["results"]
    assert [r["model"] for r in results] == ["vit_tiny_patch16_224", *(f"vit_tiny_patch16_224 [{r}]" for r in runtimes)]
    flops = {r["flops_per_call"] for r in results}  # counted on the PyTorch model for every runtime
    assert len(flops) == 1 and flops.pop() > 0
    assert [r["ratio_to"] for r in results] == [None, *["vit_tiny_patch16_224"] * 5]
    assert all(r["throughput"] > 0 for r in results)
    assert main(["benchmark", "vit_tiny_patch16_224", "--runtime", "onnxruntime", "--precision", "bf16"]) == 2
    assert "onnxruntime runs fp32 only here" in capsys.readouterr().err
    assert main(["benchmark", "vit_tiny_patch16_224", "--runtime", "tensorrt"]) == 2
    assert ("choose from torch, torch-frozen, onnxruntime, openvino, onnxruntime-int8, onnxruntime-qdq, openvino-int8"
            in capsys.readouterr().err)
    assert main(["benchmark", "vit_tiny_patch16_224", "--runtime", "openvino-int8", "--precision", "bf16"]) == 2
    assert "use --precision fp32" in capsys.readouterr().err

