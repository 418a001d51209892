"""`eval --runtime`: a run's network exported to onnxruntime or OpenVINO (FP32 and INT8) and evaluated
there, with the same accuracy as PyTorch in FP32 and NNCF's INT8 calibrated on the data's own images."""
from __future__ import annotations

import json

import pytest

from tests.checkpoints import classifier_checkpoint, yolo_checkpoint
from vision_attn.cli import main
from vision_attn.data import DigitBoxesConfig, write_digit_boxes


def _eval(capsys, *args: str) -> dict:
    assert main(["eval", *args, "--json"]) == 0
    return json.loads(capsys.readouterr().out)


def test_the_commands_offer_the_runtimes_export_has():
    """commands/_runtime.py repeats the names (so that --help imports no torch): they must stay the same."""
    from vision_attn.commands import _runtime
    from vision_attn.export import runtimes

    assert _runtime.CHOICES == runtimes.RUNTIMES and _runtime.CALIBRATED == runtimes.CALIBRATED


def test_eval_cls_in_every_runtime(tmp_path, capsys):
    ckpt = str(classifier_checkpoint(tmp_path / "best.ckpt"))
    reports = {rt: _eval(capsys, "cls", "--checkpoint", ckpt, "--data", "demo:digits", "--runtime", rt)
               for rt in ("torch", "torch-frozen", "onnxruntime", "openvino", "onnxruntime-qdq", "openvino-int8")}
    assert reports["torch"]["images"] == 359 and reports["torch"]["top1"] > 0  # an untrained ViT: about 1 in 10
    for rt in ("torch-frozen", "onnxruntime", "openvino"):  # FP32 elsewhere: the same predictions
        assert reports[rt]["confusion"] == reports["torch"]["confusion"] and reports[rt]["runtime"] == rt
    for rt in ("onnxruntime-qdq", "openvino-int8"):  # static INT8, calibrated on the digits' training images
        assert abs(reports[rt]["top1"] - reports["torch"]["top1"]) < 0.05 and reports[rt]["images"] == 359


def test_eval_det_in_openvino_gives_pytorchs_map(tmp_path, capsys):
    data = write_digit_boxes(tmp_path / "data", DigitBoxesConfig(n_train=16, n_val=8, seed=3))
    ckpt = str(yolo_checkpoint(tmp_path / "best.ckpt", img_size=64, names=[str(i) for i in range(10)]))
    torch_report, ov, ov8, qdq = (_eval(capsys, "det", "--checkpoint", ckpt, "--data", str(data), "--runtime", rt)
                                  for rt in ("torch", "openvino", "openvino-int8", "onnxruntime-qdq"))
    assert ov["runtime"] == "openvino" and torch_report["detections"] > 0  # random weights: boxes, no hits
    assert ov["detections"] == pytest.approx(torch_report["detections"], rel=0.01)  # scores near --conf may flip
    assert ov["map50"] == pytest.approx(torch_report["map50"], abs=1e-3)
    for int8 in (ov8, qdq):
        assert 0 <= int8["map50"] <= 1 and int8["images"] == torch_report["images"] == 8 and int8["detections"] > 0


def test_torch_frozen_runs_the_plan_judged_on_its_inference_step_in_float32(monkeypatch):
    import torch

    import vision_attn
    from vision_attn.export import runtimes
    from vision_attn.kernels import current_plan, kernel_plan, resolve_plan

    seen = []

    def judged(model, inputs, *, train, autocast=None):
        seen.append((tuple(inputs.shape), train, autocast))
        return resolve_plan("aten")  # the judge's verdict: PyTorch's kernels

    monkeypatch.setattr(runtimes, "judged_plan", judged)
    frozen_under = []
    freeze = runtimes.freeze
    monkeypatch.setattr(runtimes, "freeze", lambda m, dtype: (frozen_under.append(current_plan().choice(dtype)), freeze(m, dtype))[1])
    model = vision_attn.create_model("vit_tiny_patch16_224", depth=1, img_size=32, num_classes=3).eval()
    x = torch.randn(2, 3, 32, 32)
    with kernel_plan("onednn"):  # the process's plan would put oneDNN's products in
        frozen = runtimes.RuntimeModel(model, "torch-frozen", (32, 32), batch=4)
        assert seen == [((4, 3, 32, 32), False, None)]
        assert frozen_under == [resolve_plan("aten").choice(torch.float32)]  # frozen under the verdict
        with torch.no_grad():
            torch.testing.assert_close(frozen(x), model(x), atol=1e-5, rtol=1e-5)
        runtimes.RuntimeModel(model, "torch-frozen", (32, 32), precision="bf16", batch=4)
        assert len(seen) == 1  # bfloat16: the process's plan, not judged on an autocast step
        assert frozen_under[1] == resolve_plan("onednn").choice(torch.bfloat16) != frozen_under[0]
