"""Dynamic INT8: onnxruntime's quantizer (the kept path) and PyTorch's (deprecated, compared), and the
`export quantize` command on a run checkpoint with the accuracy on demo:digits' val folder."""
from __future__ import annotations

import re
import sys

import copy

import pytest
import torch
from torch import nn

pytest.importorskip("onnxruntime")

import vision_attn  # noqa: E402
from vision_attn.cli import main  # noqa: E402
from vision_attn.export import export_onnx  # noqa: E402
from vision_attn.export.quantize import onnx_predictor, quantize_onnx, quantize_torch  # noqa: E402
from vision_attn.kernels import FusedLinear, accelerate  # noqa: E402
from vision_attn.layers.window_attention import WindowAttention  # noqa: E402
from tests.checkpoints import classifier_checkpoint, yolo_checkpoint  # noqa: E402

KW = {"img_size": 16, "patch_size": 4, "embed_dim": 64, "depth": 2, "num_heads": 2, "num_classes": 10}


def test_onnx_int8_is_smaller_and_close(tmp_path):
    model = vision_attn.create_model("vit_tiny_patch16_224", **KW).eval()
    fp32 = export_onnx(model, tmp_path / "m.onnx", (16, 16), dynamic_batch=True, exporter="torchscript").path
    int8 = quantize_onnx(fp32, tmp_path / "m.int8.onnx")
    assert int8.stat().st_size < 0.6 * fp32.stat().st_size
    x = torch.randn(4, 3, 16, 16)
    with torch.no_grad():
        ref = model(x)
    out = onnx_predictor(int8)(x)
    assert out.shape == (4, 10)
    assert 0 < (out - ref).abs().max() < 0.1 * ref.abs().max()  # quantized: changed, but a little
    assert sorted(p.name for p in tmp_path.iterdir()) == ["m.int8.onnx", "m.onnx"]


@pytest.mark.parametrize("name,kw", [("vit_tiny_patch16_224", KW),
                                     ("swin_tiny_patch4_window7_224", {"img_size": 64, "window_size": 4,
                                                                       "embed_dim": 32, "depths": (1, 1, 1, 1),
                                                                       "num_heads": (1, 2, 2, 4), "num_classes": 10})])
def test_torch_dynamic_quantization_runs_our_layers(name, kw):
    """PyTorch's quantized Linear (its weight is a method) replaces every linear layer called as a module,
    of the plain model and of an accelerated one (each FusedLinear a plain nn.Linear first, which
    quantize_dynamic swaps; Mlp's linear_act calls it as a module), heads included. Swin's window qkv,
    whose weight is read directly, stays FP32."""
    plain = vision_attn.create_model(name, **kw).eval()
    for model, linear in ((plain, nn.Linear), (accelerate(copy.deepcopy(plain)), FusedLinear)):
        check_dynamic_quantization(model, linear, kw["img_size"])


def check_dynamic_quantization(model: nn.Module, linear: type[nn.Module], size: int) -> None:
    q = quantize_torch(model)
    assert any(type(m).__name__ == "Linear" and "quantized" in type(m).__module__ for m in q.modules())
    direct = {f"{n}.qkv" for n, m in q.named_modules() if isinstance(m, WindowAttention)}
    left = {n for n, m in q.named_modules() if type(m) in (nn.Linear, FusedLinear)}
    assert left == direct and all(type(q.get_submodule(n)) is linear for n in direct)
    assert sum(type(m) is linear for m in model.modules()) > len(direct)  # the original is unchanged
    x = torch.randn(2, 3, size, size)
    with torch.no_grad():
        ref, out = model(x), q(x)
    assert out.shape == ref.shape == (2, 10)
    assert (out - ref).abs().max() < 0.1 * ref.abs().max() + 1e-3


def test_cli_quantize_reports_accuracy_and_latency(tmp_path, capsys):
    ckpt = classifier_checkpoint(tmp_path / "best.ckpt")
    out = tmp_path / "m.int8.onnx"
    assert main(["export", "quantize", "--checkpoint", str(ckpt), "--data", "demo:digits", "--exporter", "torchscript",
                 "--rounds", "2", "-o", str(out)]) == 0
    text = capsys.readouterr().out
    assert out.is_file() and "top-1 on 359 images" in text and "latency ms, batch 8" in text and "pts" in text
    assert sorted(p.name for p in tmp_path.iterdir()) == ["best.ckpt", "m.int8.onnx"]  # the FP32 file was temporary


def test_cli_quantize_data_needs_a_run(tmp_path, capsys):
    assert main(["export", "quantize", "--model", "vit_tiny_patch16_224", "--data", "demo:digits",
                 "-o", str(tmp_path / "q.onnx")]) == 2
    assert "--data needs a trained run" in capsys.readouterr().err


def test_static_int8_is_calibrated_on_the_runs_data_and_keeps_its_predictions(tmp_path, capsys):
    from vision_attn.export import graph_ops, onnx_session, run_onnx

    ckpt = classifier_checkpoint(tmp_path / "best.ckpt")
    out, fp32 = tmp_path / "m.int8.onnx", tmp_path / "m.onnx"
    assert main(["export", "quantize", "--checkpoint", str(ckpt), "--data", "demo:digits", "--static",
                 "--calibration-images", "64", "--exporter", "torchscript", "--rounds", "2", "-o", str(out),
                 "--fp32-output", str(fp32)]) == 0
    text = " ".join(capsys.readouterr().out.split())  # the table's title wraps
    assert "static INT8, calibrated on 64 images" in text and "top-1 on 359 images" in text
    ops = graph_ops(out)[1]
    assert "QuantizeLinear" in ops and "DequantizeLinear" in ops
    x = torch.randn(8, 3, 16, 16)
    a, b = (run_onnx(onnx_session(p), x)[0] for p in (fp32, out))
    # an untrained tiny ViT: its logits are small and close together, so INT8 rounding shows (0.95-1.0)
    assert torch.nn.functional.cosine_similarity(a, b, dim=1).min() > 0.9
    assert main(["export", "quantize", "--checkpoint", str(ckpt), "--static", "-o", str(tmp_path / "q.onnx")]) == 2
    assert "--static calibrates on the run's own images: give --data" in capsys.readouterr().err


def test_static_int8_of_a_detector_is_calibrated_on_its_detection_set(tmp_path, capsys):
    """A detection run: the calibration images are the detection set's training images, letterboxed to
    the run's square; every trainable convolution is quantized (the box decoding stays in float); its
    boxes stay those of FP32 (cosine over the raw head output); the mAP of each precision is `eval det
    --runtime`'s, which the command says."""
    from vision_attn.data import DigitBoxesConfig, write_digit_boxes
    from vision_attn.export import graph_ops, onnx_session, run_onnx

    data = write_digit_boxes(tmp_path / "data", DigitBoxesConfig(n_train=16, n_val=4, seed=3))
    ckpt = yolo_checkpoint(tmp_path / "best.ckpt", img_size=64, names=[str(i) for i in range(10)])
    out, fp32 = tmp_path / "det.qdq.onnx", tmp_path / "det.onnx"
    assert main(["export", "quantize", "--checkpoint", str(ckpt), "--data", str(data), "--static",
                 "--calibration-images", "16", "--exporter", "torchscript", "--rounds", "2", "-o", str(out),
                 "--fp32-output", str(fp32)]) == 0
    text = " ".join(capsys.readouterr().out.split())
    assert "static INT8, calibrated on 16 images" in text and "top-1" not in text
    assert f"eval det --checkpoint {ckpt} --data {data} --runtime onnxruntime-qdq" in text
    import onnx

    def count(path, op):
        return sum(n.op_type == op for n in onnx.load(str(path)).graph.node)

    assert "QuantizeLinear" in graph_ops(out)[1]
    assert count(out, "DequantizeLinear") >= 2 * count(fp32, "Conv")  # each convolution's weight and input
    x = torch.rand(2, 3, 64, 64)
    a, b = (run_onnx(onnx_session(p), x)[0] for p in (fp32, out))
    assert torch.nn.functional.cosine_similarity(a.flatten(1), b.flatten(1), dim=1).min() > 0.99
    assert main(["export", "quantize", "--checkpoint", str(ckpt), "--data", str(data), "--static", "--max-drop", "1",
                 "--runtime", "openvino", "-o", str(tmp_path / "q.xml")]) == 2
    assert "--max-drop bounds the drop of a classifier's top-1" in capsys.readouterr().err


def test_openvino_int8_is_nncf_calibrated_on_the_runs_data_with_an_accuracy_aware_option(tmp_path, capsys):
    """``--runtime openvino``: NNCF's static INT8 of the IR (FakeQuantize nodes in the graph), top-1 of
    both models on the val folder, and with ``--max-drop`` NNCF's accuracy-aware mode."""
    from vision_attn.export.openvino import openvino_model, run_openvino
    from vision_attn.data.calibration import folder_calibration
    from vision_attn.tasks import load_classifier

    ckpt = classifier_checkpoint(tmp_path / "best.ckpt")
    out, fp32 = tmp_path / "m.int8.xml", tmp_path / "m.xml"
    assert main(["export", "quantize", "--checkpoint", str(ckpt), "--data", "demo:digits", "--runtime", "openvino",
                 "--calibration-images", "64", "--exporter", "torchscript", "--rounds", "2", "-o", str(out),
                 "--fp32-output", str(fp32)]) == 0
    text = " ".join(capsys.readouterr().out.split())
    assert "NNCF static INT8, calibrated on 64 images (openvino) vs FP32" in text and "top-1 on 359 images" in text
    assert "FakeQuantize" in out.read_text() and "FakeQuantize" not in fp32.read_text()
    x = torch.cat(folder_calibration("demo:digits", load_classifier(ckpt).transform, [str(i) for i in range(10)],
                                      images=64))  # images of the calibration's kind (random inputs are not)
    a, b = (run_openvino(openvino_model(p, threads=1), x) for p in (fp32, out))
    assert (a.argmax(dim=1) == b.argmax(dim=1)).float().mean() > 0.8
    assert sorted(p.name for p in tmp_path.iterdir()) == ["best.ckpt", "m.bin", "m.int8.bin", "m.int8.xml", "m.xml"]

    aware = tmp_path / "aware.xml"
    assert main(["export", "quantize", "--checkpoint", str(ckpt), "--data", "demo:digits", "--runtime", "openvino",
                 "--calibration-images", "64", "--exporter", "torchscript", "--rounds", "1", "--max-drop", "0.5",
                 "-o", str(aware)]) == 0
    text = " ".join(capsys.readouterr().out.split())
    assert "accuracy-aware (top-1 drop at most 0.5 pts)" in text and aware.is_file()
    fp32_top1, int8_top1 = (float(v) for v in re.findall(r"top-1 on 359 images\W+([\d.]+)%\W+([\d.]+)%", text)[0])
    assert int8_top1 >= fp32_top1 - 0.5 - 1e-6


def test_openvino_int8_refusals_are_one_line(tmp_path, capsys, monkeypatch):
    ckpt = classifier_checkpoint(tmp_path / "best.ckpt")
    assert main(["export", "quantize", "--checkpoint", str(ckpt), "--runtime", "openvino", "-o", str(tmp_path / "q.xml")]) == 2
    assert "give --data" in capsys.readouterr().err
    assert main(["export", "quantize", "--checkpoint", str(ckpt), "--max-drop", "1", "--data", "demo:digits",
                 "-o", str(tmp_path / "q.onnx")]) == 2
    assert "add --runtime openvino" in capsys.readouterr().err
    monkeypatch.setitem(sys.modules, "nncf", None)  # as if it were not installed
    assert main(["export", "quantize", "--checkpoint", str(ckpt), "--runtime", "openvino", "--data", "demo:digits",
                 "-o", str(tmp_path / "q.xml")]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("error: NNCF is not installed") and "pip install nncf" in err and len(err.splitlines()) == 1
    assert sorted(p.name for p in tmp_path.iterdir()) == ["best.ckpt"]
