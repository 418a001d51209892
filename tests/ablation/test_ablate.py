"""`vision-attn ablate`: variants x seeds as run folders, the report against the runs' own metrics, resume
after a kill, and one-line refusals of bad input that leave everything in place."""
import json
import math
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from tests.analysis.written_runs import pose_metrics, write_run
from vision_attn.ablation import make_plan, read_plan
from vision_attn.ablation.execute import print_commands
from vision_attn.ablation.report import build_report
from vision_attn.ablation.stats import paired_difference, summarise
from vision_attn.cli import main
from vision_attn.models.yolo import build_detector

TINY = ["--trainer.limit_train_batches", "2", "--trainer.limit_val_batches", "1", "--data.batch_size", "16",
        "--data.num_workers", "0", "--data.persistent_workers", "false"]


def _ablate(*args: str, **kwargs) -> subprocess.Popen:
    cmd = [sys.executable, "-m", "vision_attn", "ablate", *args]
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    return subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env,
                            start_new_session=True, **kwargs)


def test_paired_difference_against_a_hand_computation():
    none = {0: 0.90, 1: 0.92, 2: 0.91}
    se = {0: 0.93, 1: 0.92, 2: 0.95}
    d = paired_difference(se, none)
    diffs = [0.03, 0.0, 0.04]
    mean = sum(diffs) / 3
    sd = math.sqrt(sum((x - mean) ** 2 for x in diffs) / 2)
    half = 4.302652729911275 * sd / math.sqrt(3)  # Student t, 97.5% quantile, 2 degrees of freedom
    assert (d.n, d.mean, d.std) == (3, pytest.approx(mean), pytest.approx(sd))
    assert (d.low, d.high) == (pytest.approx(mean - half), pytest.approx(mean + half))
    assert d.includes_zero is True
    assert paired_difference({0: 0.5}, {0: 0.4}).low is None  # one seed: no interval
    assert paired_difference({1: 0.5}, {0: 0.4}) is None  # no seed in common: nothing paired
    assert summarise([1.0]).std is None


def test_tiny_classifier_ablation_through_the_cli_report_and_resume_after_a_kill(tmp_path, capsys):
    common = ["--config", "cnn_cbam_digits", "--blocks", "none,SE", "--seeds", "2", "--epochs", "1",
              "--runs_dir", str(tmp_path), "--name", "abl", "--no-latency", "--", *TINY]
    folder = tmp_path / "abl"
    # the first ablate process is killed (with the training it runs) once the first run has finished
    first = _ablate(*common)
    deadline = time.monotonic() + 300
    while not (folder / "none-s0" / "metrics.json").is_file():
        assert first.poll() is None, first.stdout.read()
        assert time.monotonic() < deadline, "the first run did not finish"
        time.sleep(0.2)
    os.killpg(first.pid, signal.SIGKILL)
    first.wait()
    kept = (folder / "none-s0" / "metrics.json").stat().st_mtime_ns
    assert not (folder / "se-s1" / "metrics.json").exists()

    # the same command again (in this process: its trainings are processes all the same)
    capsys.readouterr()
    assert main(["ablate", *common[:-len(TINY) - 1], "--jobs", "2", "--", *TINY]) == 0
    out = capsys.readouterr().out
    assert "continuing" in out and "1 of 4 runs already finished" in out
    assert (folder / "none-s0" / "metrics.json").stat().st_mtime_ns == kept  # the finished run was kept

    runs = {f"{v}-s{s}": json.loads((folder / f"{v}-s{s}" / "metrics.json").read_text())
            for v in ("none", "se") for s in (0, 1)}
    report = json.loads((folder / "ablation.json").read_text())
    assert report["task"] == "cls" and report["seeds"] == [0, 1] and report["missing"] == []
    by = {v["variant"]: v for v in report["variants"]}
    assert list(by) == ["none", "se"]
    for variant in ("none", "se"):
        values = [runs[f"{variant}-s{s}"]["val_top1"] for s in (0, 1)]
        assert by[variant]["values"]["val_top1"] == {"0": values[0], "1": values[1]}
        assert by[variant]["summary"]["val_top1"]["mean"] == pytest.approx(sum(values) / 2)
        assert by[variant]["params"] == runs[f"{variant}-s0"]["params"]
    assert by["se"]["params"] > by["none"]["params"]
    d = [runs[f"se-s{s}"]["val_top1"] - runs[f"none-s{s}"]["val_top1"] for s in (0, 1)]
    mean, sd = sum(d) / 2, abs(d[0] - d[1]) / math.sqrt(2)
    half = 12.706204736174698 * sd / math.sqrt(2)  # t(0.975, 1 degree of freedom)
    diff = by["se"]["difference_vs_none"]["val_top1"]
    assert (diff["mean"], diff["low"], diff["high"]) == (pytest.approx(mean), pytest.approx(mean - half),
                                                          pytest.approx(mean + half))
    md = (folder / "ablation.md").read_text()
    assert "| se | 2 |" in md and "se - none, top-1" in md
    assert (folder / "ablation.csv").read_text().splitlines()[0].startswith("variant,seeds,params,GMACs")
    assert (folder / "ablation.png").stat().st_size > 0
    # the report again from the folders alone
    assert main(["ablate", "--collect", str(folder), "--no-latency"]) == 0


def _processes_mentioning(text: str) -> list[int]:
    pids = []
    for entry in Path("/proc").iterdir():
        try:
            if entry.name.isdigit() and text in (entry / "cmdline").read_bytes().decode(errors="replace"):
                pids.append(int(entry.name))
        except OSError:  # a process that ended meanwhile
            pass
    return pids


@pytest.mark.skipif(not Path("/proc/self/cmdline").exists(), reason="lists processes through /proc")
def test_sigterm_to_the_ablation_alone_stops_its_trainings_with_checkpoints_and_exits_75(tmp_path):
    # one epoch of 20 steps with a checkpoint every 4: both trainings are inside their training loop once
    # each wrote one, and the first has 16 steps to go while the second catches up
    common = ["--config", "cnn_cbam_digits", "--blocks", "none,SE", "--seeds", "1", "--epochs", "1", "--jobs", "2",
              "--runs_dir", str(tmp_path), "--name", "abl", "--no-latency", "--",
              *TINY[:1], "20", *TINY[2:], "--checkpoint.every_n_steps", "4"]
    folder = tmp_path / "abl"
    first = _ablate(*common)
    deadline = time.monotonic() + 300
    while not all((folder / run / "last.ckpt").is_file() for run in ("none-s0", "se-s0")):
        assert first.poll() is None, first.stdout.read()
        assert time.monotonic() < deadline, "the runs wrote no checkpoint"
        time.sleep(0.1)
    os.kill(first.pid, signal.SIGTERM)  # to the ablation's process only, as `kill PID` or a scheduler sends it
    out, _ = first.communicate(timeout=300)
    assert first.returncode == 75, out
    assert "stopped by SIGTERM" in out and "run the same command again" in out
    assert _processes_mentioning(str(tmp_path)) == []  # no training left running on its own
    for run in ("none-s0", "se-s0"):
        assert not (folder / run / "metrics.json").exists()
        assert "stopped by SIGTERM at step" in (folder / "logs" / f"{run}.log").read_text()
    assert main(["ablate", *common]) == 0  # the same command again, in this process
    assert all((folder / run / "metrics.json").is_file() for run in ("none-s0", "se-s0"))
    assert "--resume true" in (folder / "logs" / "none-s0.log").read_text()


def test_detector_variants_are_edited_yamls_and_commands_for_a_queue(tmp_path, capsys):
    assert main(["ablate", "--config", "demo_digit_boxes", "--blocks", "none,SE,CBAM,ECA", "--seeds", "3",
                 "--runs_dir", str(tmp_path), "--name", "det", "--print-commands"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) == 4 * 3 and all(line.startswith("vision-attn train det --config ") for line in lines)
    assert "--name cbam-s2 --seed 2" in lines[-2]
    plan = read_plan(tmp_path / "det")
    assert plan.where == "C2f" and list(plan.variants) == ["none", "se", "cbam", "eca"]
    base = build_detector("yolov8.yaml", scale="n", num_classes=10)
    for block in ("SE", "CBAM", "ECA"):
        path = tmp_path / "det" / "variants" / f"{block.lower()}.yaml"
        rows = yaml.safe_load(path.read_text())["backbone"]
        after = [rows[i - 1][2] for i, r in enumerate(rows) if r[2] == block]
        assert after == ["C2f"] * 4  # after each of the backbone's four C2f rows, nowhere else
        model = build_detector(str(path), scale="n", num_classes=10)
        assert sum(p.numel() for p in model.parameters()) > sum(p.numel() for p in base.parameters())
    # the same command again: the same plan, nothing rewritten
    before = (tmp_path / "det" / "ablation_plan.json").read_bytes()
    again = make_plan("demo_digit_boxes", ["none", "SE", "CBAM", "ECA"], seeds=3, name="det", runs_dir=tmp_path)
    assert again.variants == plan.variants and (tmp_path / "det" / "ablation_plan.json").read_bytes() == before
    assert print_commands(again) == lines
    # a YAML that already has attention rows: they are not where the blocks go by default
    with_cbam = make_plan("demo_digit_boxes_cbam", ["SE"], seeds=1, name="cbam", runs_dir=tmp_path)
    assert with_cbam.where == "C2f"


def test_rtdetr_variants_follow_the_hgblock_rows_of_its_backbone(tmp_path):
    """RT-DETR's HGNet backbone: attention goes after its HGBlock stages (not the stem or the
    downsampling DWConvs) and the decoder's inputs follow the inserted rows."""
    plan = make_plan("demo_digit_boxes_rtdetr", ["CBAM"], seeds=3, name="rt", runs_dir=tmp_path)
    assert plan.where == "HGBlock" and list(plan.variants) == ["none", "cbam"]
    cbam = yaml.safe_load((tmp_path / "rt" / "variants" / "cbam.yaml").read_text())
    rows = cbam["backbone"]
    assert [rows[i - 1][2] for i, r in enumerate(rows) if r[2] == "CBAM"] == ["HGBlock"] * 4
    assert cbam["head"][-1][0] == [23, 26, 29] and cbam["head"][-1][2] == "RTDETRDecoder"
    model = build_detector(str(tmp_path / "rt" / "variants" / "cbam.yaml"), scale="s", num_classes=10)
    assert model.task == "rtdetr" and sum(type(m).__name__.endswith("CBAM") for m in model.model) == 4


@pytest.mark.parametrize("args,message", [
    (["--blocks", "none,CBMA"], "not an attention block; did you mean CBAM?"),
    (["--blocks", "SE", "--sites", "C3"], "no row of that module"),
    (["--blocks", "SE", "--seeds", "0"], "--seeds 0: give at least 1"),
])
def test_bad_input_is_one_line_and_writes_nothing(tmp_path, capsys, args, message):
    assert main(["ablate", "--config", "demo_digit_boxes", "--seeds", "2", "--runs_dir", str(tmp_path),
                 "--name", "x", *args]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("error: ") and message in err and "\n" not in err
    assert not (tmp_path / "x").exists()


def test_a_folder_of_another_ablation_is_refused_and_kept(tmp_path, capsys):
    common = ["ablate", "--config", "demo_digit_boxes", "--runs_dir", str(tmp_path), "--name", "x", "--print-commands"]
    assert main([*common, "--blocks", "SE", "--seeds", "2"]) == 0
    before = {p: p.read_bytes() for p in (tmp_path / "x").rglob("*") if p.is_file()}
    capsys.readouterr()
    assert main([*common, "--blocks", "SE,CBAM", "--seeds", "2"]) == 2
    err = capsys.readouterr().err.strip()
    assert "holds a different ablation (blocks differ" in err and "\n" not in err
    assert {p: p.read_bytes() for p in (tmp_path / "x").rglob("*") if p.is_file()} == before
    (tmp_path / "y").mkdir()
    (tmp_path / "y" / "keep.txt").write_text("mine")
    assert main(["ablate", "--config", "demo_digit_boxes", "--runs_dir", str(tmp_path), "--name", "y",
                 "--blocks", "SE", "--seeds", "1", "--print-commands"]) == 2
    assert "is not an ablation folder" in capsys.readouterr().err
    assert (tmp_path / "y" / "keep.txt").read_text() == "mine"


def test_classifier_sites_are_checked_before_anything_trains(tmp_path, capsys):
    assert main(["ablate", "--config", "cnn_cbam_digits", "--blocks", "SE", "--sites", "layer9.*",
                 "--runs_dir", str(tmp_path), "--name", "c"]) == 2
    assert "--sites layer9.*" in capsys.readouterr().err
    assert main(["ablate", "--config", "cnn_cbam_digits", "--blocks", "SE", "--sites", "neck",
                 "--runs_dir", str(tmp_path), "--name", "c"]) == 2
    assert "a classifier has no neck" in capsys.readouterr().err
    assert not (tmp_path / "c").exists()


def test_a_pose_ablation_leads_with_the_keypoint_map(tmp_path):
    """The paired intervals of a pose ablation lead with the keypoint mAP (the task's primary metric): here
    CBAM is better than none by it and worse by the box mAP (runs as the trainer leaves them, not trained)."""
    plan = make_plan("demo_digit_keypoints", ["CBAM"], seeds=3, name="pose", runs_dir=tmp_path)
    assert plan.task == "pose" and list(plan.variants) == ["none", "cbam"]
    for spec in plan.runs():
        up = 0.1 * (spec.variant == "cbam")
        write_run(spec.folder, pose_metrics(spec.name, box=0.6 - up + 0.01 * spec.seed,
                                            keypoint=0.3 + up + 0.02 * spec.seed))
    report = build_report(plan, latency=False)
    assert list(report.to_dict()["metrics"])[:2] == ["val_pose_map", "val_pose_map50"]
    assert "val_map" in report.to_dict()["metrics"]  # the box mAP is still reported, after it
    first = report.sentences()[0]
    assert first.startswith("cbam - none, keypoint mAP@.5:.95: +10.00 points") and "cbam is better" in first
    box = next(s for s in report.sentences() if s.startswith("cbam - none, box mAP@.5:.95"))
    assert "-10.00 points" in box and "cbam is worse" in box
    assert list(report.rows()[0])[5] == "keypoint mAP@.5:.95 mean %"
