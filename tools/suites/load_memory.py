"""The memory a large pretrained file takes to load: ``create_model(pretrained=FOLDER)`` of a ViT-B/16
transformers folder (86.6 M parameters, a 346 MB ``model.safetensors``), and the same weights as a
``pytorch_model.bin``, each in a fresh process.

A thread samples the process's anonymous resident memory (``RssAnon``: tensors the process owns) and
its file-backed resident memory (``RssFile``: pages of the memory-mapped file, which the kernel can
drop at any time) every 2 ms while the model is built and loaded; the figures are their peaks above
the level before the call, against the file's size. One full copy of the weights is the model's
own parameters; a loader that read the file into memory first holds two.

    python tools/bench.py load-memory   # writes /tmp/hf-vit-b{,-bin} once (needs transformers)
"""
from __future__ import annotations

import os
import shutil
import threading
import time

from tools.suites.harness import Param, Suite, in_fresh_process


def _status() -> dict[str, float]:
    fields = {}
    with open("/proc/self/status") as f:
        for line in f:
            key, _, value = line.partition(":")
            if key in ("RssAnon", "RssFile"):
                fields[key] = int(value.split()[0]) / 1024  # MiB
    return fields


def measure(source: str) -> dict:
    """In a fresh process: load ``source`` while sampling."""
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
    return {"source": source, "seconds": round(seconds, 2), "params_mib": round(params, 1),
            "anon_peak_mib": round(peaks["RssAnon"] - before["RssAnon"], 1),
            "file_peak_mib": round(peaks["RssFile"] - before["RssFile"], 1)}


def _write_folders(folder: str, small: bool) -> None:
    import torch
    import transformers

    if os.path.isfile(os.path.join(folder + "-bin", "pytorch_model.bin")):
        return
    torch.manual_seed(0)
    config = transformers.ViTConfig(num_labels=1000, **({"hidden_size": 64, "num_hidden_layers": 2,
                                                         "num_attention_heads": 2, "intermediate_size": 128,
                                                         "image_size": 32} if small else {}))
    model = transformers.ViTForImageClassification(config)
    model.save_pretrained(folder)
    os.makedirs(folder + "-bin", exist_ok=True)  # the same weights as transformers 4.x's pytorch_model.bin
    shutil.copy(os.path.join(folder, "config.json"), folder + "-bin")
    torch.save(model.state_dict(), os.path.join(folder + "-bin", "pytorch_model.bin"))


def run(p, record) -> None:
    _write_folders(p.folder, p.small)
    rows = []
    for source in (p.folder, p.folder + "-bin"):
        weights = next(os.path.join(source, n) for n in ("model.safetensors", "pytorch_model.bin")
                       if os.path.exists(os.path.join(source, n)))
        row = in_fresh_process(measure, source)
        row["file_mib"] = round(os.path.getsize(weights) / 2**20, 1)
        rows.append(record.add("rows", row))
    record.table(["source", "seconds", "params MiB", "anonymous peak MiB", "file-backed peak MiB", "file MiB"],
                 [list(r.values()) for r in rows])


SUITE = Suite("load-memory", "resident memory while loading a ViT-B/16 transformers folder (safetensors and .bin)", run, (
    Param("folder", "/tmp/hf-vit-b", "where the folders are written once (FOLDER and FOLDER-bin)",
          quick="/tmp/hf-vit-tiny-bench"),
    Param("small", False, "a 2-layer ViT of width 64 instead of ViT-B/16 (to check the suite)", quick=True),
), requires=("transformers",), doc=__doc__)
