"""A task defined in tests/ (tests/tasks/toy_task: regress the mean colour of generated images) registers
itself through the public registry and trains, evaluates, predicts and exports through the CLI, with no
edit outside its own package."""
from __future__ import annotations

import json

import numpy as np
import pytest

from tests.analysis.written_runs import write_run
from vision_attn.cli import main


@pytest.fixture
def toy(monkeypatch):
    """The toy task registered for one test (the registry as it was afterwards)."""
    import vision_attn.tasks.registry as registry

    monkeypatch.setattr(registry, "TASKS", dict(registry.TASKS))
    monkeypatch.delitem(registry.TASKS, "toy", raising=False)
    from tests.tasks.toy_task import TOY

    return registry.register_task(TOY, replace=True)


def _write_png(path, colour) -> None:
    from PIL import Image

    Image.fromarray(np.full((20, 24, 3), colour, np.uint8)).save(path)


def test_a_task_from_tests_trains_evaluates_predicts_and_exports_through_the_cli(toy, tmp_path, capsys):
    runs = tmp_path / "runs"
    assert main(["train", "toy", "--name", "toy", "--runs_dir", str(runs), "--trainer.max_epochs", "2",
                 "--data.data", "toy:32", "--model.lr", "0.05", "--kernels", "aten"]) == 0
    run = runs / "toy"
    metrics = json.loads((run / "metrics.json").read_text())
    assert metrics["epochs"] == 2 and metrics["model"] == "toy" and 0 < metrics["val_score"] <= 1
    assert (run / "best.ckpt").is_file() and (run / "loss.png").is_file()
    capsys.readouterr()

    # compare ranks its runs by the task record's primary metric (val_score), a key nothing else knows
    worse = write_run(tmp_path / "worse", dict(metrics, name="worse", val_score=metrics["val_score"] / 2))
    assert main(["compare", str(run), str(worse), "--no-latency", "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)
    assert [(r["metric"], r["metric_name"], r["pareto"]) for r in rows] == [
        (metrics["val_score"], "1 - MAE", True), (metrics["val_score"] / 2, "1 - MAE", False)]

    assert main(["eval", "toy", "--checkpoint", str(run), "--data", "toy:16", "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["images"] == 16 and set(report["per_channel"]) == {"r", "g", "b"}
    assert main(["eval", "toy", "--checkpoint", str(run), "--data", "toy:16"]) == 0
    assert f"MAE {report['mae']:.4f}" in capsys.readouterr().out

    red, grey = tmp_path / "red.png", tmp_path / "grey.png"
    _write_png(red, (200, 40, 40))
    _write_png(grey, (128, 128, 128))
    assert main(["predict", "toy", str(red), str(grey), "--checkpoint", str(run), "--json"]) == 0
    found = json.loads(capsys.readouterr().out)
    assert [f["image"] for f in found] == [str(red), str(grey)]
    assert all(len(f["colour"]) == 3 and all(0 <= v <= 1 for v in f["colour"]) for f in found)
    assert main(["predict", "toy", str(red), "--checkpoint", str(run)]) == 0
    assert "mean colour (r, g, b)" in capsys.readouterr().out

    onnx = tmp_path / "toy.onnx"
    assert main(["export", "onnx", "--checkpoint", str(run), "-o", str(onnx), "--verify"]) == 0
    assert onnx.is_file()
    import onnxruntime as ort

    x = np.random.default_rng(0).random((1, 3, 16, 16), dtype=np.float32)
    session = ort.InferenceSession(str(onnx), providers=["CPUExecutionProvider"])
    (out,) = session.run(None, {session.get_inputs()[0].name: x})
    from vision_attn.tasks import load_run
    import torch

    with torch.no_grad():
        expected = load_run(run).model(torch.from_numpy(x)).numpy()
    np.testing.assert_allclose(out, expected, atol=1e-5)


def test_an_unregistered_task_is_named_with_the_registered_ones(capsys):
    assert main(["train", "nope"]) == 2
    err = capsys.readouterr().err
    assert "unknown task 'nope'" in err and "cls" in err
