"""tools/suites/deploy_table.py: the rows one run's accuracy-and-speed table gets (per CPU, QAT folder and
network), the table's cells, and a bf16 and a token-merging row evaluated through the task's own `eval`
path. No timing is asserted."""
from types import SimpleNamespace

import pytest
import torch

from tools.suites.deploy_table import Variant, _builder, table, variants
from tools.suites.harness import Record
from vision_attn.tasks import get_task, load_run
from vision_attn.tasks.task import Options
from tests.checkpoints import classifier_checkpoint

FP32 = ["torch fp32", "torch-frozen fp32", "onnxruntime fp32", "openvino fp32"]
PTQ = ["onnxruntime-qdq int8 post-training", "openvino-int8 int8 post-training"]


def test_rows_follow_the_cpu_the_qat_folder_and_the_network():
    assert [v.name for v in variants(bf16=False, qat=False, merges=[])] == FP32 + PTQ
    rows = variants(bf16=True, qat=True, merges=[2, 4])
    assert [v.name for v in rows] == FP32 + ["torch bf16", "torch-frozen bf16", "openvino bf16"] + PTQ + [
        "onnxruntime-qdq int8 QAT", "openvino-int8 int8 QAT", "torch fp32 ToMe r=2", "torch-frozen fp32 ToMe r=2",
        "torch fp32 ToMe r=4", "torch-frozen fp32 ToMe r=4"]  # onnxruntime has no bf16 kernels: no such row
    bases = {v.name: v.base.name for v in rows}
    assert bases["openvino-int8 int8 QAT"] == "openvino fp32" and bases["onnxruntime-qdq int8 post-training"] == \
        "onnxruntime fp32"
    assert bases["torch-frozen bf16"] == "torch-frozen fp32" and bases["torch fp32 ToMe r=4"] == "torch fp32"


def test_table_gives_each_metric_and_the_change_in_points():
    rows = [{"variant": "torch fp32", "map": 0.88, "map50": 0.982, "ms_per_image": 10.0, "speedup": 1.0,
             "speedup_runtime": 1.0},
            {"variant": "openvino-int8 int8 QAT", "map": 0.8731, "map50": 0.98, "ms_per_image": 4.0, "speedup": 2.5,
             "speedup_runtime": 1.8}]
    headers, cells = table("detector", rows)
    assert headers == ["runtime, precision", "mAP@.5:.95", "mAP@.5", "change (pts)", "ms per image",
                       "speed-up over torch fp32", "over the runtime's fp32"]
    assert cells[1] == ["openvino-int8 int8 QAT", "87.31", "98.00", "-0.69", "4.000", "2.50x", "1.80x"]
    assert table("segmenter", rows[:0])[0][1:3] == ["mask mAP@.5:.95", "box mAP@.5:.95"]
    rows[1]["speedup_runtime"] = float("nan")  # its runtime's fp32 row not measured (--only)
    assert table("detector", rows)[1][1][-1] == "n/a"


def test_bf16_rows_need_the_instructions(monkeypatch, capsys):
    from vision_attn.kernels import hardware
    from tools.suites.deploy_table import _bf16

    monkeypatch.setattr(hardware, "cpu_has_bf16", lambda: False)
    assert _bf16(Record("deploy_table", {}, "")) is False
    lines = capsys.readouterr().out.strip().splitlines()
    assert len(lines) == 1 and "no bfloat16 instructions" in lines[0] and "running fp32" in lines[0]


def test_suite_skips_a_missing_run(tmp_path, capsys):
    from tools.suites.deploy_table import SUITE

    p = SimpleNamespace(**{q.name: q.default for q in SUITE.params})
    p.run = str(tmp_path / "none")
    record = Record("deploy_table", {}, "")
    SUITE.run(p, record)
    assert "skipped: no run" in capsys.readouterr().out and record.results == {}


@pytest.mark.parametrize("variant", [Variant("torch", "bf16"), Variant("torch-frozen", merge=2)])
def test_a_row_is_the_task_evaluation_with_its_runtime(tmp_path, variant):
    ckpt = classifier_checkpoint(tmp_path / "best.ckpt")
    task = get_task("cls")
    plain = task.evaluate(ckpt, "demo:digits", Options(), None)
    built = {}
    report = task.evaluate(ckpt, "demo:digits", Options(), _builder(variant, "", built))
    net, hw = built[variant.name]
    assert hw == (16, 16) and report["images"] == plain["images"] == 359
    # random weights: near-chance top-1, which bf16 or merging 2 of 16 tokens a block moves by a few images
    assert abs(report["top1"] - plain["top1"]) < 0.05
    x = torch.randn(2, 3, 16, 16, generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        ref = load_run(ckpt).model(x)
    diff = float((net(x) - ref).abs().max())
    assert 0 < diff < 0.2 * float(ref.abs().max())  # the row runs bf16 / merged tokens, near the fp32 network
