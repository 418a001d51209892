"""Running `vision-attn train` as a separate process, stopping it at a step (SIGKILL, SIGTERM) by
watching its run folder's progress.json, and comparing two run folders (weights, metrics, logs)."""
from __future__ import annotations

import json
import os
import signal
import struct
import subprocess
import sys
import time
from pathlib import Path

import torch

ENV_DROP = ("RANK", "LOCAL_RANK", "WORLD_SIZE", "NODE_RANK", "MASTER_ADDR", "MASTER_PORT")


def env() -> dict[str, str]:
    out = {**os.environ, "OMP_NUM_THREADS": "1", "PL_DISABLE_FORK": "1"}
    for key in ENV_DROP:
        out.pop(key, None)
    return out


def command(args: list[str]) -> list[str]:
    return [sys.executable, "-m", "vision_attn.cli", *args]


def train_here(args: list[str], capsys) -> str:  # noqa: ANN001 - pytest's capsys fixture
    """The command run to its end in this process (no interpreter start-up to pay); its stdout."""
    from vision_attn.cli import main

    capsys.readouterr()
    status = main(args)
    out, err = capsys.readouterr()
    assert status == 0, err[-3000:]
    return out


def run_to_end(args: list[str], cwd: Path) -> subprocess.CompletedProcess:
    proc = subprocess.run(command(args), env=env(), cwd=cwd, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return proc


def progress_step(run: Path) -> int:
    try:
        return int(json.loads((run / "progress.json").read_text())["step"])
    except (OSError, ValueError, KeyError):
        return -1


def stop_at(args: list[str], cwd: Path, run: Path, step: int, sig: int) -> subprocess.CompletedProcess:
    """Start the command, send ``sig`` to its process group (all processes of a DDP run, as a cluster
    does) once its run folder's last checkpoint reached ``step``."""
    before = progress_step(run)
    proc = subprocess.Popen(command(args), env=env(), cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            start_new_session=True)
    try:
        deadline = time.monotonic() + 240
        while True:
            now = progress_step(run)
            if now >= step and now != before:
                break
            assert proc.poll() is None, f"the run ended before step {step}: {proc.stderr.read()[-3000:]}"
            assert time.monotonic() < deadline, f"no checkpoint of step {step} within 240 s"
            time.sleep(0.002)
        os.killpg(proc.pid, sig)
        out, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.communicate()
    return subprocess.CompletedProcess(proc.args, proc.returncode, out, err)


def weights(run: Path) -> dict[str, torch.Tensor]:
    return torch.load(run / "last.ckpt", map_location="cpu", weights_only=True)["state_dict"]


def max_weight_difference(a: Path, b: Path) -> float:
    wa, wb = weights(a), weights(b)
    assert wa.keys() == wb.keys()
    assert all(wa[k] == wb[k] for k in wa if not isinstance(wa[k], torch.Tensor))  # modules' extra state
    return max((wa[k].double() - wb[k].double()).abs().max().item() for k in wa
               if isinstance(wa[k], torch.Tensor) and wa[k].numel())


def tensorboard_scalars(folder: Path) -> dict[str, dict[int, list[float]]]:
    """Every scalar of a run's event files as TensorBoard reads it, the values logged at each step: a
    writer started with ``purge_step`` S (a SessionLog START at step S) drops the earlier files' events
    from step S on."""
    from tensorboardX.proto import event_pb2

    scalars: dict[str, dict[int, list[float]]] = {}
    for path in sorted(folder.glob("events.out.tfevents.*")):
        data = path.read_bytes()
        i = 0
        while i + 12 <= len(data):
            (length,) = struct.unpack("<Q", data[i:i + 8])
            event = event_pb2.Event.FromString(data[i + 12:i + 12 + length])
            i += 12 + length + 4
            if event.HasField("session_log") and event.session_log.status == event_pb2.SessionLog.START:
                for steps in scalars.values():
                    for s in [s for s in steps if s >= event.step]:
                        del steps[s]
            for value in event.summary.value:
                scalars.setdefault(value.tag, {}).setdefault(event.step, []).append(value.simple_value)
    return scalars


def assert_same_run(reference: Path, resumed: Path, metric_keys: tuple[str, ...]) -> None:
    """Weights (max difference 0.0), final metrics, the CSV log and the TensorBoard scalars are equal."""
    assert max_weight_difference(reference, resumed) == 0.0
    ma = json.loads((reference / "metrics.json").read_text())
    mb = json.loads((resumed / "metrics.json").read_text())
    for key in metric_keys + ("global_step", "epochs"):
        assert ma[key] == mb[key], key
    assert (reference / "csv" / "metrics.csv").read_text() == (resumed / "csv" / "metrics.csv").read_text()
    assert tensorboard_scalars(reference / "tensorboard") == tensorboard_scalars(resumed / "tensorboard")
