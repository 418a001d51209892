"""Time and memory of reading ultralytics .pt files with vision_attn's restricted reader.

Writes trainer-format files with ultralytics (test-only peer: its ``BaseTrainer.save_model`` and
``strip_optimizer``, random weights), then in a fresh process each (ultralytics blocked there for our
reader) measures: the reader's wall time (median of rounds), and resident memory (VmRSS, and its anonymous
and file-backed parts from /proc/self/status) after imports, at the peak (VmHWM) and after the read;
for contrast the same for ultralytics' own loader (``torch.load(weights_only=False)``, then ``.float()``).

    python tools/bench.py ultralytics-pt --models yolov8n.yaml --rounds 3
    python tools/bench.py ultralytics-pt --models yolo11x.yaml --rounds 3
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

from tools.suites.harness import ROOT, Param, Suite

CHILD = r"""
import json, sys, time, statistics
def status():
    out = {}
    for line in open("/proc/self/status"):
        k, _, v = line.partition(":")
        if k in ("VmRSS", "VmHWM", "RssAnon", "RssFile"):
            out[k] = int(v.split()[0]) / 1024  # MiB
    return out
which, path, rounds = sys.argv[1], sys.argv[2], int(sys.argv[3])
if which == "ours":
    class NoUltralytics:
        def find_spec(self, name, path=None, target=None):
            if name.split(".")[0] == "ultralytics":
                raise ImportError("blocked")
    sys.meta_path.insert(0, NoUltralytics())
    import torch
    from vision_attn.io.ultralytics_pt import read_ultralytics_checkpoint
    read = lambda: read_ultralytics_checkpoint(path).state_dict
else:
    import os
    os.environ["YOLO_OFFLINE"] = "1"
    import torch
    import ultralytics.nn.tasks  # noqa: F401
    def read():
        ckpt = torch.load(path, map_location="cpu", weights_only=False)
        return (ckpt.get("ema") or ckpt["model"]).float().state_dict()
before = status()
t = time.perf_counter(); state = read(); first = time.perf_counter() - t
after = status()
times = [first]
for _ in range(rounds - 1):
    del state
    t = time.perf_counter(); state = read(); times.append(time.perf_counter() - t)
tensor_mib = sum(v.numel() * v.element_size() for v in state.values()) / 2**20
print(json.dumps({"first_s": first, "median_s": statistics.median(times), "tensors_mib": tensor_mib,
                  "before": before, "after": after}))
"""


def make_files(folder: Path, models: list[str]) -> list[Path]:
    from tests.io.ultralytics_files import save_like_trainer

    return [save_like_trainer(m, folder / m.removesuffix(".yaml"), nc=80)[1] for m in models]


def run(p, record) -> None:
    from tools.ultralytics_env import quiet_ultralytics_environment

    quiet_ultralytics_environment()
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for path in make_files(Path(tmp), p.models):
            mib = path.stat().st_size / 2**20
            for which in ("ours", "ultralytics"):
                done = subprocess.run([sys.executable, "-c", CHILD, which, str(path), str(p.rounds)], env=env,
                                      capture_output=True, text=True)
                if done.returncode:
                    raise RuntimeError(f"{which} on {path}: {done.stderr[-2000:]}")
                r = json.loads(done.stdout.strip().splitlines()[-1])
                b, a = r["before"], r["after"]
                rows.append(record.add("rows", {
                    "file": f"{path.parent.name}/{path.name}", "file_mib": round(mib, 1), "reader": which,
                    "first_s": round(r["first_s"], 3), "median_s": round(r["median_s"], 3),
                    "state_dict_mib": round(r["tensors_mib"], 1),
                    "peak_rss_growth_mib": round(a["VmHWM"] - b["VmRSS"], 1),
                    "rss_anon_growth_mib": round(a["RssAnon"] - b["RssAnon"], 1),
                    "rss_file_growth_mib": round(a["RssFile"] - b["RssFile"], 1)}))
    record.table(["file", "file MiB", "reader", "first s", "median s", "state dict MiB", "peak RSS growth MiB",
                  "anonymous growth MiB", "file-backed growth MiB"], [list(r.values()) for r in rows])


SUITE = Suite("ultralytics-pt", "reading ultralytics .pt files: our restricted reader against torch.load", run, (
    Param("models", ["yolov8n.yaml", "yolo11x.yaml"], "ultralytics YAMLs to write files of", quick=["yolov8n.yaml"]),
    Param("rounds", 5, "reads a file", quick=1),
), requires=("ultralytics",), doc=__doc__)
