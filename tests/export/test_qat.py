"""Quantization-aware training (`export quantize --qat`): NNCF's fake-quantized fine-tune of a run, its
OpenVINO INT8 and onnxruntime QDQ exports against the fake-quantized PyTorch network, `eval --int8-model`,
and a run with a layer the INT8 export cannot write."""
from __future__ import annotations

import json
import re

import onnx
import pytest
import torch

from vision_attn.cli import main
from vision_attn.export.onnx import onnx_session, run_onnx
from vision_attn.export.openvino import openvino_model, run_openvino
from vision_attn.export.qat import fake_quantize, float_tail, quantize_aware
from vision_attn.export.source import load_deployable
from vision_attn.layers.mlp import Mlp
from vision_attn.tasks import load_run
from tests.checkpoints import classifier_checkpoint, yolo_checkpoint


@pytest.fixture(scope="module")
def qat(tmp_path_factory):
    root = tmp_path_factory.mktemp("qat")
    ckpt = classifier_checkpoint(root / "best.ckpt")
    report = quantize_aware(ckpt, root / "int8", data="demo:digits", steps=2, calibration_images=16, batch_size=8)
    return ckpt, report


def test_int8_models_match_the_fake_quantized_network(qat):
    ckpt, r = qat
    assert sorted(p.name for p in r.folder.iterdir()) == ["model.int8.bin", "model.int8.xml", "model.qdq.onnx",
                                                           "qat.json"]
    assert r.steps == 2 and json.loads((r.folder / "qat.json").read_text())["steps"] == 2
    # attention's products are quantized too: the inputs of scaled_dot_product_attention have quantizers
    sdpa = {m.group(0) for n, _ in r.network.named_modules()
            if (m := re.search(r"scaled_dot_product_attention/\d+__\d", n))}
    assert len(sdpa) == 4 and r.quantizers == 24  # query and key of each block's attention product
    ops = {n.op_type for n in onnx.load(r.files["onnxruntime"]).graph.node}
    assert {"QuantizeLinear", "DequantizeLinear"} <= ops and "FakeQuantize" not in ops
    xml = r.files["openvino"].read_text()  # OpenVINO stores the 10 weights as int8 constants, 14 activations' FQs
    assert xml.count('type="FakeQuantize"') == 14 and xml.count('element_type="i8"') == 10
    # the fine-tune changed the weights (the run's are the EMA weights load_run gives)
    before = load_run(ckpt).model.state_dict()["head.weight"]
    after = dict(r.network.named_parameters())["head.weight"]
    assert not torch.equal(before, after)
    x = torch.randn(3, 3, 16, 16, generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        ref = r.network(x)
    ov = run_openvino(openvino_model(r.files["openvino"]), x)
    ort = run_onnx(onnx_session(r.files["onnxruntime"]), x)[0]
    scale = float(ref.abs().max())
    for out in (ov, ort):
        assert out.shape == (3, 10)
        assert float((out - ref).abs().max()) < 0.02 * scale  # int8 kernels: within a few quantization steps
    assert set(r.top1) == {"fp32", "openvino", "onnxruntime"} and r.images == 359


def test_eval_runs_the_qat_model(qat, capsys):
    ckpt, r = qat
    assert main(["eval", "cls", "--checkpoint", str(ckpt), "--data", "demo:digits", "--runtime", "openvino-int8",
                 "--int8-model", str(r.files["openvino"])]) == 0
    text = capsys.readouterr().out
    assert f"{100 * r.top1['openvino']:.2f}" in text
    assert main(["eval", "cls", "--checkpoint", str(ckpt), "--data", "demo:digits", "--runtime", "openvino-int8",
                 "--int8-model", str(r.files["onnxruntime"])]) == 2
    assert "--int8-model" in capsys.readouterr().err


def test_qat_refuses_a_layer_it_cannot_export(tmp_path, capsys, monkeypatch):
    ckpt = classifier_checkpoint(tmp_path / "best.ckpt")
    forward = Mlp.forward
    monkeypatch.setattr(Mlp, "forward", lambda self, x: torch.special.bessel_j0(forward(self, x)))
    assert main(["export", "quantize", "--checkpoint", str(ckpt), "--qat", "--data", "demo:digits",
                 "--calibration-images", "8", "--steps", "1", "-o", str(tmp_path / "int8")]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1
    assert re.search(r"layer blocks\.0\.mlp \(Mlp\) calls aten::special_bessel_j0", err)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["best.ckpt"]  # nothing written


def test_a_detectors_box_decoding_stays_in_float(tmp_path):
    """The DFL, the distance-to-box arithmetic and the scores' sigmoid (after the head's last trainable
    convolutions) get no quantizer: 8-bit box sides cost mAP@.5:.95 that fine-tuning cannot recover."""
    from nncf.torch.quantization.layers import BaseQuantizer

    dep = load_deployable(checkpoint=str(yolo_checkpoint(tmp_path / "best.ckpt", img_size=32)))
    x = torch.rand(2, 3, 32, 32, generator=torch.Generator().manual_seed(0))
    tail = set(float_tail(dep.model.eval(), x[:1]))
    assert {"dfl/softmax/0", "dfl/conv/conv2d/0", "/sub/0", "/div/0", "/mul/0", "/sigmoid/0"} <= tail
    assert not any("conv2d" in op and not op.startswith("dfl/") for op in tail)  # the trainable layers are quantized
    net = fake_quantize(dep.model, [x])
    ops = [re.fullmatch(r"__nncf_hooks\.(?:pre|post)_hooks\.(.+)__\d+\.\d+", n).group(1)
           for n, m in net.named_modules() if isinstance(m, BaseQuantizer)]
    assert len(ops) == 115 and not tail & set(ops)  # 122 with the decoding quantized


def test_a_segmenter_calibrates_on_its_letterboxed_training_images():
    from vision_attn.export.quantize import _calibration
    from vision_attn.export.source import Deployable

    dep = Deployable(torch.nn.Identity(), "segmenter", (32, 32), "seg")
    batches = _calibration(dep, "demo:digit-masks", None, 4)  # a classifier's class folders it has none
    assert sum(len(b) for b in batches) == 4 and batches[0].shape[1:] == (3, 32, 32)
    assert 0 <= float(batches[0].min()) and float(batches[0].max()) <= 1  # pixels in [0, 1], as the network takes


def test_the_fine_tune_rebuilds_a_segmentation_module_with_the_runs_arguments():
    from vision_attn.export.qat import _arguments
    from vision_attn.tasks import get_task

    seg, det = _arguments(get_task("seg").module), _arguments(get_task("det").module)
    assert {"mask_gain", "lr"} <= seg and det < seg  # its own, and the detection module's it passes on


def test_the_fine_tune_builds_a_detector_from_its_recorded_yaml_not_a_moved_path(tmp_path):
    from vision_attn.export.qat import _module_arguments
    from vision_attn.io.state_dict import read_checkpoint
    from vision_attn.tasks import get_task

    ckpt = read_checkpoint(yolo_checkpoint(tmp_path / "best.ckpt", img_size=32))
    ckpt["hyper_parameters"].update(yaml=str(tmp_path / "moved" / "yolov8.yaml"), lr=0.002)  # trained elsewhere
    module = get_task("det").module
    hp = _module_arguments(ckpt, module, 0.1)
    assert hp["lr"] == pytest.approx(2e-4) and hp["warmup_epochs"] == 0 and hp["ema_decay"] is None
    built = module(**hp).model
    assert sum(p.numel() for p in built.parameters()) == sum(
        v.numel() for k, v in ckpt["state_dict"].items() if k.startswith("model.") and v.is_floating_point()
        and "running" not in k and "num_batches" not in k)
