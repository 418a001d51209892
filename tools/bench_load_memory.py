"""The memory a large pretrained file takes to load: ``create_model(pretrained=FOLDER)`` of a ViT-B/16
transformers folder (86.6 M parameters, a 346 MB ``model.safetensors``), and the same weights as a
``pytorch_model.bin``, each in a fresh process.

A thread samples the process's anonymous resident memory (``RssAnon``: tensors the process owns) and
its file-backed resident memory (``RssFile``: pages of the memory-mapped file, which the kernel can
drop at any time) every 2 ms while the model is built and loaded; the figures are their peaks above
the level before the call, against the file's size. One full copy of the weights is the model's
own parameters; a loader that read the file into memory first holds two.

    .venv/bin/python tools/bench_load_memory.py [--folder /tmp/hf-vit-b]   # needs transformers (test extra)
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import threading
import time

os.environ.setdefault("NO_ALBUMENTATIONS_UPDATE", "1")


def _status() -> dict[str, float]:
    fields = {}
    with open("/proc/self/status") as f:
        for line in f:
            key, _, value = line.partition(":")
            if key in ("RssAnon", "RssFile"):
                fields[key] = int(value.split()[0]) / 1024  # MiB
    return fields


def _measure(source: str) -> None:
    """In the child: load ``source`` while sampling; print one JSON line."""
    import torch

    import vision_attn

    torch.set_num_threads(2)
    before = _status()
    peaks = dict(before)
    done = threading.Event()

    def sample() -> None:
        while not done.is_set():
            for k, v in _status().items():
                peaks[k] = max(peaks[k], v)
            time.sleep(0.002)

    thread = threading.Thread(target=sample, daemon=True)
    thread.start()
    t = time.perf_counter()
    model = vision_attn.create_model(pretrained=source)
    seconds = time.perf_counter() - t
    done.set()
    thread.join()
    params = sum(p.numel() * p.element_size() for p in model.parameters()) / 2**20
    print(json.dumps({"source": source, "seconds": round(seconds, 2), "params_mib": round(params, 1),
                      "anon_peak_mib": round(peaks["RssAnon"] - before["RssAnon"], 1),
                      "file_peak_mib": round(peaks["RssFile"] - before["RssFile"], 1)}))


def _write_folders(folder: str) -> None:
    import torch
    import transformers

    if os.path.isfile(os.path.join(folder + "-bin", "pytorch_model.bin")):
        return
    torch.manual_seed(0)
    model = transformers.ViTForImageClassification(transformers.ViTConfig(num_labels=1000))
    model.save_pretrained(folder)
    os.makedirs(folder + "-bin", exist_ok=True)  # the same weights as transformers 4.x's pytorch_model.bin
    shutil.copy(os.path.join(folder, "config.json"), folder + "-bin")
    torch.save(model.state_dict(), os.path.join(folder + "-bin", "pytorch_model.bin"))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--folder", default="/tmp/hf-vit-b")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        _measure(args.child)
        return
    _write_folders(args.folder)
    for source in (args.folder, args.folder + "-bin"):
        weights = next(os.path.join(source, n) for n in ("model.safetensors", "pytorch_model.bin")
                       if os.path.exists(os.path.join(source, n)))
        out = subprocess.run([sys.executable, __file__, "--child", source], capture_output=True, text=True, check=True)
        row = json.loads(out.stdout.strip().splitlines()[-1])
        row["file_mib"] = round(os.path.getsize(weights) / 2**20, 1)
        print(json.dumps(row))


if __name__ == "__main__":
    main()
