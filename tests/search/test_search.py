"""`vision-attn search`: a real search end to end (run folders, the front), one-line refusals of bad input
that create no study, and the study machinery under several worker processes: disjoint trials on one
journal file, a worker killed mid-trial whose trial comes back once, and a PostgreSQL server (started here)
giving what SQLite gives."""
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from glob import glob
from pathlib import Path

import optuna
import pytest

from tests._configs import tiny_detection
from vision_attn.cli import main
from vision_attn.data import DigitBoxesConfig, write_digit_boxes
from vision_attn.search.study import is_surplus

WORKER = Path(__file__).with_name("cheap_worker.py")
ROOT = Path(__file__).resolve().parents[2]


def _error(capsys) -> str:
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("error: ") and "Traceback" not in err, err
    return err


def _worker(storage: str, trials: int, log: Path, *extra: str) -> subprocess.Popen:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"}
    return subprocess.Popen([sys.executable, str(WORKER), storage, str(trials), str(log), *extra], env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


def _events(log: Path, event: str) -> list[dict]:
    return [r for r in map(json.loads, log.read_text().splitlines()) if r["event"] == event]


@pytest.fixture(scope="module")
def tiny(tmp_path_factory) -> Path:
    """A training config of YOLOv8 at scale n only (the edits build that scale alone) on 8 + 4 generated images."""
    folder = tmp_path_factory.mktemp("tiny")
    root = write_digit_boxes(folder / "data", DigitBoxesConfig(n_train=8, n_val=4, seed=1))
    yolo = (ROOT / "configs" / "models" / "yolov8.yaml").read_text()
    (folder / "yolov8.yaml").write_text("\n".join(line for line in yolo.splitlines()
                                                  if not line.startswith(("  s:", "  m:", "  l:", "  x:"))))
    (folder / "tiny.yaml").write_text(tiny_detection(folder / "yolov8.yaml", root, {
        "model.plot_images": 0, "model.ema_decay": None, "data.img_size": 32, "trainer.max_epochs": 1,
        "trainer.enable_progress_bar": False}))
    return folder / "tiny.yaml"


def test_a_real_search_trains_run_folders_and_writes_the_front(tmp_path, capsys, monkeypatch, tiny):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "space.yaml").write_text("blocks: [SE, ECA]\nsites: [backbone]\n")
    assert main(["search", str(tiny), "--space", "space.yaml", "--trials", "2", "-o", "s",
                 "--sampler", "grid"]) == 0
    out = capsys.readouterr().out
    assert "this worker ran 2 trial(s)" in out and "front: " in out
    study = optuna.load_study(study_name="search_tiny", storage=f"sqlite:///{tmp_path / 's' / 'study.db'}")
    trials = study.get_trials(states=(optuna.trial.TrialState.COMPLETE,))
    assert sorted(t.params["block"] for t in trials) == ["ECA", "SE"]  # the grid: each block once
    front = json.loads((tmp_path / "s" / "front.json").read_text())
    assert front["metric"] == {"key": "val_map", "label": "mAP@.5:.95"}  # the task's primary metric
    for t in trials:  # each trial an ordinary run folder; its objectives are the run's own numbers
        run = Path(t.user_attrs["run"])
        metrics = json.loads((run / "metrics.json").read_text())
        assert (run / "best.ckpt").is_file() and (run / "config.yaml").is_file()
        assert t.values[0] == metrics["val_map"] and t.values[1] == pytest.approx(metrics["gflops"], abs=1e-6)
        assert t.user_attrs["params"] == metrics["params"]
    gflops = {t.params["block"]: t.values[1] for t in trials}
    assert len(set(gflops.values())) == 2  # different blocks: different costs
    best = {t.number for t in study.best_trials}
    assert [r["trial"] for r in front["front"]] == sorted(best, key=lambda n: study.trials[n].values[1])
    assert all(r["latency_ms"] > 0 and r["params"] > 1e6 for r in front["front"])
    assert (tmp_path / "s" / "front.png").stat().st_size > 0
    assert (tmp_path / "s" / "front.csv").read_text().startswith("trial,block,site,scale,lr,mAP@.5:.95 %,GFLOPs")


@pytest.mark.parametrize("space,storage,message", [
    ("blocks: [SE, CBMA]\nsites: [backbone]\n", None, "key blocks: 'CBMA': not an attention block; did you mean CBAM?"),
    ("blocks: [SE]\nsites: [C3]\n", None, "key sites: 'C3' is not a site of tiny.yaml's model"),
    ("blocks: [SE]\nsites: [backbone]\nscales: [q]\n", None, "key scales: 'q' is not a scale of tiny.yaml's model; its scales are n"),
    ("blocks: [SE]\nsites: [backbone]\n", "postgresql://nobody:secret@127.0.0.1:9/none", "cannot reach the database"),
])
def test_bad_input_is_one_line_exit_2_and_creates_no_study(tmp_path, capsys, tiny, space, storage, message):
    (tmp_path / "space.yaml").write_text(space)
    args = ["search", str(tiny), "--space", str(tmp_path / "space.yaml"), "--trials", "4",
            "-o", str(tmp_path / "s")]
    assert main(args + (["--storage", storage] if storage else [])) == 2
    err = _error(capsys)
    assert message in err and "secret" not in err
    assert not (tmp_path / "s").exists()


def test_two_workers_on_one_journal_file_run_disjoint_trials(tmp_path):
    log = tmp_path / "log.jsonl"
    workers = [_worker(str(tmp_path / "journal.log"), 6, log) for _ in range(2)]
    for w in workers:
        assert w.wait(120) == 0, w.stdout.read()
    done = _events(log, "done")
    assert sorted(r["number"] for r in done) == list(range(6))  # every trial once, none twice
    assert len({r["pid"] for r in done}) == 2  # both workers took trials
    study = optuna.load_study(study_name="cheap", storage=optuna.storages.JournalStorage(
        optuna.storages.journal.JournalFileBackend(str(tmp_path / "journal.log"))))
    kept = [t for t in study.trials if not is_surplus(t)]  # a trial asked past the quota ends untrained
    assert [t.state.name for t in kept] == ["COMPLETE"] * 6


def test_a_worker_killed_mid_trial_leaves_a_study_a_new_worker_finishes_without_loss_or_repeat(tmp_path):
    storage, log = f"sqlite:///{tmp_path / 'study.db'}", tmp_path / "log.jsonl"
    first = _worker(storage, 3, log, "--hang-at", "1")
    deadline = time.monotonic() + 120
    while not (log.is_file() and any(r["number"] == 1 for r in _events(log, "start"))):
        assert first.poll() is None and time.monotonic() < deadline, first.stdout.read()
        time.sleep(0.1)
    os.kill(first.pid, signal.SIGKILL)
    first.wait()
    second = _worker(storage, 3, log)
    assert second.wait(120) == 0, second.stdout.read()
    study = optuna.load_study(study_name="cheap", storage=storage)
    states = {t.number: t.state.name for t in study.trials}
    assert states == {0: "COMPLETE", 1: "FAIL", 2: "COMPLETE", 3: "COMPLETE"}
    # the retry is trial 2 or 3, as the dead worker's trial went stale before or after the new one started
    (retry,) = [t for t in study.trials if "failed_trial" in t.system_attrs]
    assert retry.system_attrs["failed_trial"] == 1 and retry.params == study.trials[1].params  # the same trial
    done = _events(log, "done")
    fresh = [t.number for t in study.trials if t.state.name == "COMPLETE" and t.number != retry.number]
    assert len(fresh) == 2 and sorted(r["original"] for r in done) == sorted(fresh + [1])  # none lost or run twice
    assert {r["pid"] for r in done if r["number"] in (2, 3)} == {second.pid}


def test_a_worker_stopped_by_sigterm_queues_its_trial_again_even_on_a_journal_file(tmp_path):
    storage, log = str(tmp_path / "journal.log"), tmp_path / "log.jsonl"
    first = _worker(storage, 2, log, "--stop-at", "1")
    assert first.wait(120) == 75, first.stdout.read()  # stopped after trial 0 finished and trial 1 stopped
    second = _worker(storage, 2, log)
    assert second.wait(120) == 0, second.stdout.read()
    study = optuna.load_study(study_name="cheap", storage=optuna.storages.JournalStorage(
        optuna.storages.journal.JournalFileBackend(storage)))
    assert [t.state.name for t in study.trials] == ["COMPLETE", "FAIL", "COMPLETE"]
    assert study.trials[2].system_attrs["failed_trial"] == 1 and study.trials[2].params == study.trials[1].params
    assert sorted(r["original"] for r in _events(log, "done")) == [0, 1]


def _initdb() -> Path:
    found = sorted(glob("/usr/lib/postgresql/*/bin/initdb")) or [shutil.which("initdb")]
    assert found[-1], "PostgreSQL's server binaries are missing: `apt-get install -y postgresql` (make test does)"
    return Path(found[-1]).parent


def _as_server_user(cmd: list[str]) -> list[str]:
    """The server refuses to run as root: as root, run it as the postgres user the Debian package made."""
    return ["runuser", "-u", "postgres", "--", *cmd] if os.geteuid() == 0 else cmd


@pytest.fixture
def postgres():
    """A PostgreSQL server of its own in a temporary folder, on a Unix socket there and a free port."""
    bin_ = _initdb()
    folder = Path(tempfile.mkdtemp(prefix="vision_attn-pg-"))
    if os.geteuid() == 0:
        shutil.chown(folder, "postgres")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    data = folder / "data"
    subprocess.run(_as_server_user([str(bin_ / "initdb"), "-D", str(data), "-U", "postgres", "--auth", "trust",
                                    "-E", "UTF8", "--no-sync"]), check=True, capture_output=True)
    subprocess.run(_as_server_user([str(bin_ / "pg_ctl"), "-D", str(data), "-w", "-l", str(folder / "log"), "-o",
                                    f"-k {folder} -p {port} -c listen_addresses='' -c fsync=off", "start"]),
                   check=True, capture_output=True)
    try:
        yield f"postgresql+psycopg2://postgres@/postgres?host={folder}&port={port}"
    finally:
        subprocess.run(_as_server_user([str(bin_ / "pg_ctl"), "-D", str(data), "-m", "immediate", "stop"]),
                       capture_output=True)
        shutil.rmtree(folder, ignore_errors=True)


def test_two_workers_on_a_postgresql_server_give_what_sqlite_gives(tmp_path, postgres):
    results = {}
    for name, storage in (("postgresql", postgres), ("sqlite", f"sqlite:///{tmp_path / 'study.db'}")):
        log = tmp_path / f"{name}.jsonl"
        workers = [_worker(storage, 4, log, "--sampler", "grid") for _ in range(2)]
        for w in workers:
            assert w.wait(120) == 0, w.stdout.read()
        assert sorted(r["number"] for r in _events(log, "done")) == [0, 1, 2, 3]
        study = optuna.load_study(study_name="cheap", storage=storage)
        results[name] = sorted((t.params["block"], t.params["site"], tuple(t.values)) for t in study.trials
                               if not is_surplus(t))
        assert sorted((t.params["block"], t.params["site"]) for t in study.best_trials) == [("CBAM", "backbone"),
                                                                                         ("CBAM", "neck")]
    assert results["postgresql"] == results["sqlite"] and len(results["sqlite"]) == 4  # the whole 2 x 2 grid
