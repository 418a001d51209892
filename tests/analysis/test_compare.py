"""`vision-attn compare` on two tiny trained runs: the table, the CSV/Markdown, the PNG, the Pareto
front, and a run folder without metrics.json."""
import csv
import io
import json

import pytest
from PIL import Image

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
    (row,) = compare([run], latency=False)
    assert (row.metric, row.metric_name, row.params, row.img_size) == (0.25, "mAP", 3_157_200, 640)
    (run / "metrics.json").write_text(json.dumps({"params": 1, "gmacs": 0.1, "metrics": {"map50": 0.5}}))
    (row,) = compare([run], latency=False)
    assert (row.metric, row.metric_name, row.name) == (0.5, "mAP50", "det")


def test_plot_needs_a_metric(tmp_path, capsys):
    assert main(["compare", "resnet18", "--no-latency", "--plot", str(tmp_path / "x.png")]) == 2
    assert "none of the targets has an accuracy" in capsys.readouterr().err
    assert not (tmp_path / "x.png").exists()


def test_json_output(capsys):
    assert main(["compare", "resnet18", "--no-latency", "--json"]) == 0
    (row,) = json.loads(capsys.readouterr().out)
    assert row["params"] == 11_689_512 and row["metric"] is None and row["pareto"] is False
