"""`vision-attn compare` on two tiny trained runs: the table, the CSV/Markdown, the PNG, the Pareto
front, and a run folder without metrics.json."""
import csv
import io
import json

import pytest
from PIL import Image

from tests.analysis.written_runs import pose_metrics, write_run
from tests.folders import make_folder
from vision_attn.analysis.compare import compare, pareto_front, read_run_metrics
from vision_attn.cli import main
from vision_attn.errors import DataError


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """Two one-epoch runs on a generated folder: a 1-block and a 2-block tiny ViT at 16 px."""
    from vision_attn.tasks import train_classifier

    tmp = tmp_path_factory.mktemp("compare")
    root = make_folder(tmp / "data")
    out = []
    for name, depth in (("small", 1), ("large", 2)):
        cfg = {"name": name, "runs_dir": str(tmp / "runs"),
               "model": {"name": "vit_tiny_patch16_224",
                         "model_kwargs": {"patch_size": 8, "depth": depth, "embed_dim": 32, "num_heads": 2}},
               "data": {"root": str(root), "img_size": 16, "batch_size": 8, "num_workers": 0},
               "trainer": {"accelerator": "cpu", "max_epochs": 1}}
        out.append(train_classifier(cfg).run_dir)
    return out


def test_compare_table_csv_and_plot(runs, tmp_path, capsys):
    rows = compare(runs)
    assert [r.name for r in rows] == ["small", "large"]
    metrics = [read_run_metrics(r) for r in runs]
    for row, m in zip(rows, metrics):
        assert row.kind == "run" and row.metric_name == "top-1"
        assert row.metric == pytest.approx(m["val_top1"])
        assert row.params == m["params"] and row.gmacs == pytest.approx(m["gmacs"])
        assert row.latency_ms > 0 and row.img_size == 16
    assert rows[1].params > rows[0].params and rows[1].gmacs > rows[0].gmacs

    png = tmp_path / "pareto.png"
    assert main(["compare", *map(str, runs), "--csv", "--plot", str(png)]) == 0
    out = capsys.readouterr().out
    table = list(csv.DictReader(io.StringIO(out.split("plot:")[0])))
    assert [r["name"] for r in table] == ["small", "large"]
    assert float(table[0]["params (M)"]) == pytest.approx(rows[0].params / 1e6, abs=1e-3)
    assert table[0]["Pareto"] == "yes"  # the cheaper run is never beaten on cost
    with Image.open(png) as img:
        assert img.format == "PNG" and img.width > 400 and img.height > 300

    assert main(["compare", str(runs[0]), "deit_tiny_patch16_224", "--markdown", "--no-latency"]) == 0
    md = capsys.readouterr().out.splitlines()
    assert md[0].startswith("| name | model | params (M) | GMACs")
    assert "| deit_tiny_patch16_224 | deit_tiny_patch16_224 | 5.717 | 1.2537 | 224 |" in md[3]


def test_pareto_front():
    #            cheap+bad   mid+good    dear+bad  dear+best  mid+good duplicate cost, worse
    points = [(1.0, 50.0), (2.0, 70.0), (3.0, 60.0), (4.0, 80.0), (2.0, 65.0)]
    assert pareto_front(points) == [0, 1, 3]


def test_run_folder_without_metrics(tmp_path, capsys):
    (tmp_path / "unfinished").mkdir()
    with pytest.raises(DataError, match="no metrics.json"):
        compare([tmp_path / "unfinished"])
    assert main(["compare", str(tmp_path / "unfinished")]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and "unfinished: no metrics.json" in err and err.count("\n") == 1
    (tmp_path / "broken").mkdir()
    (tmp_path / "broken" / "metrics.json").write_text("{not json")
    with pytest.raises(DataError, match="not valid JSON"):
        compare([tmp_path / "broken"])


def test_detection_metrics_are_read(tmp_path):
    run = tmp_path / "det"
    run.mkdir()
    (run / "metrics.json").write_text(json.dumps({"name": "det", "model": "yolov8n", "params": 3_157_200,
                                                  "gmacs": 4.372, "img_size": 640, "val_map": 0.25, "val_map50": 0.4}))
    (row,) = compare([run], latency=False)  # no task named, no checkpoint: the task whose metrics these are
    assert (row.metric, row.metric_name, row.params, row.img_size) == (0.25, "mAP@.5:.95", 3_157_200, 640)
    (run / "metrics.json").write_text(json.dumps({"params": 1, "gflops": 0.2, "metrics": {"map50": 0.5}}))
    (row,) = compare([run], latency=False)  # detection's metrics.json records GFLOPs (2 per MAC)
    assert (row.metric, row.metric_name, row.name, row.gmacs) == (0.5, "mAP@.5", "det", 0.1)


def test_pose_runs_are_ranked_by_keypoint_map_not_box_map(tmp_path, capsys):
    # the same cost; the box mAP prefers a, the keypoint mAP (the pose task's primary metric) prefers b
    a = write_run(tmp_path / "a", pose_metrics("a", box=0.80, keypoint=0.30))
    b = write_run(tmp_path / "b", pose_metrics("b", box=0.50, keypoint=0.60))
    assert main(["compare", str(a), str(b), "--no-latency", "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)
    assert [(r["name"], r["metric"], r["metric_name"], r["pareto"]) for r in rows] == [
        ("a", 0.30, "keypoint mAP@.5:.95", False), ("b", 0.60, "keypoint mAP@.5:.95", True)]
    assert rows[0]["gmacs"] == 4.6
    # a run folder from before metrics.json named its task (and without a checkpoint): the same reading
    for run in (a, b):
        metrics = json.loads((run / "metrics.json").read_text())
        del metrics["task"]
        (run / "metrics.json").write_text(json.dumps(metrics))
    assert [(r.metric, r.metric_name) for r in compare([a, b], latency=False)] == [
        (0.30, "keypoint mAP@.5:.95"), (0.60, "keypoint mAP@.5:.95")]


@pytest.mark.parametrize("task, primary, other, label", [
    ("seg", "val_mask_map", "val_map", "mask mAP@.5:.95"),
    ("obb", "val_map", "val_map50", "rotated-box mAP@.5:.95"),
    ("cls", "val_top1", "val_top5", "top-1"),
])
def test_each_task_ranks_by_its_own_primary_metric(tmp_path, task, primary, other, label):
    runs = [write_run(tmp_path / n, {"name": n, "task": task, "params": 10, "gmacs": 1.0, "img_size": 64,
                                     primary: p, other: o}) for n, p, o in (("a", 0.3, 0.9), ("b", 0.6, 0.7))]
    rows = compare(runs, latency=False)
    assert [(r.metric, r.metric_name) for r in rows] == [(0.3, label), (0.6, label)]
    assert pareto_front([(r.gmacs, r.metric) for r in rows]) == [1]


def test_a_run_of_a_task_not_registered_is_one_line(tmp_path, capsys):
    run = write_run(tmp_path / "r", {"name": "r", "task": "depth", "params": 1, "gmacs": 1.0, "val_delta1": 0.5})
    assert main(["compare", str(run), "--no-latency"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "a run of the task 'depth', which is not registered here" in err


def test_plot_needs_a_metric(tmp_path, capsys):
    assert main(["compare", "resnet18", "--no-latency", "--plot", str(tmp_path / "x.png")]) == 2
    assert "none of the targets has an accuracy" in capsys.readouterr().err
    assert not (tmp_path / "x.png").exists()


def test_json_output(capsys):
    assert main(["compare", "resnet18", "--no-latency", "--json"]) == 0
    (row,) = json.loads(capsys.readouterr().out)
    assert row["params"] == 11_689_512 and row["metric"] is None and row["pareto"] is False
