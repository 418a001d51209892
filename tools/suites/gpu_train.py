"""The GPU check's training phases (``tools/bench.py gpu --only cls,det,seg,rtdetr``): each task trained by
``vision-attn train`` (Lightning, ``accelerator=gpu``, ``bf16-mixed``) beside its peer, on the same files and the
same GPU, each side in a fresh process (its own start-up, its own peak memory, no global setting of one side
left for the other):

- ``cls``: ours on configs/train/classify/deit_small_imagenet.yaml (DeiT-S, the DeiT recipe: Mixup/CutMix,
  RandAugment, random erasing, stochastic depth, EMA) with the data module's image-folder loader and
  ``data.augment: device``; timm: ``create_dataset`` / ``create_loader`` (its prefetcher, ``FastCollateMixup``,
  ``rand-m9-mstd0.5-inc1``, random erasing 0.25 on the device) and the step of timm's train.py (bf16 autocast,
  ``create_optimizer_v2`` AdamW, ``SoftTargetCrossEntropy``, ``ModelEmaV3``, ``loss.item()`` for its meter);
  JPEG photos of 500x375 in 10 class folders (the ``data`` suite's photos).
- ``det``: YOLOv8n (configs/train/detect/demo_digit_boxes.yaml) against ultralytics' ``YOLO("yolov8n.yaml")``;
  ``seg``: YOLOv8n-seg (demo_digit_masks.yaml) against ``YOLO("yolov8n-seg.yaml")``; ``rtdetr``: our rtdetr-s
  (demo_digit_boxes_rtdetr.yaml) against ultralytics' RT-DETR trainer on the same YAML
  (``RTDETR("configs/models/rtdetr-s.yaml")``, which ultralytics builds from the same rows). ultralytics as
  its users run it (AMP, its defaults), with ``epochs`` our configs' 14 (mosaic on in the first epoch, as ours),
  horizontal flips off as in our configs, and the same workers and batch as ours. The data: demo:digit-boxes
  and demo:digit-masks drawn in shards by parallel processes (a seed each), each canvas enlarged 4x to
  640 px (640x640, 480x640, 640x480) and written as JPEG (quality 90) in one YOLO layout that both sides read.

Timing (:class:`StepClock`): at each step, the device is synchronised and the time taken when the batch is
ready (ours: Lightning's ``on_train_batch_start``, after the fetch, the copy and ``on_after_batch_transfer``
(the device augmentation); ultralytics: its ``on_train_batch_start`` callback, before its copy to the device;
timm: after its prefetcher's ``next``) and when the step is done (after the optimizer step and, for
ultralytics and timm, the EMA update). The first ``warmup`` steps are start-up and not counted: images/s is
the images of the other steps over their time, the data wait the share of that time between one step's end and
the next batch's readiness (the fetch, and for ours the copy, device augmentation and the EMA update of
our module's ``on_train_batch_end``). Synchronising each step removes the overlap of the next fetch with the
device's queue, the same way on both sides. Peak memory: ``torch.cuda.max_memory_allocated`` of the side's
process when its last training step is done (before ultralytics' validation).
"""
from __future__ import annotations

import json
import multiprocessing
import os
import shutil
import time
from concurrent.futures import ProcessPoolExecutor
from contextlib import nullcontext
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from tools.suites.harness import ROOT

PHASES = ("cls", "det", "seg", "rtdetr")
CONFIGS = {"cls": "configs/train/classify/deit_small_imagenet.yaml",
           "det": "configs/train/detect/demo_digit_boxes.yaml",
           "seg": "configs/train/segment/demo_digit_masks.yaml",
           "rtdetr": "configs/train/detect/demo_digit_boxes_rtdetr.yaml"}
TASKS = {"cls": "cls", "det": "det", "seg": "seg", "rtdetr": "det"}
OURS = {"cls": "deit_small_patch16_224", "det": "yolov8n", "seg": "yolov8n-seg", "rtdetr": "rtdetr-s"}
PEERS = {"cls": "timm deit_small_patch16_224", "det": "ultralytics yolov8n.yaml",
         "seg": "ultralytics yolov8n-seg.yaml", "rtdetr": "ultralytics RTDETR rtdetr-s.yaml"}
DATA = {"det": "boxes", "seg": "masks", "rtdetr": "boxes"}
PEER_EPOCHS = 14  # our detection configs' max_epochs: ultralytics closes mosaic in its last close_mosaic (10)
CANVAS = 160  # demo:digit-boxes' canvases are at most 160 px


# ------------------------------------------------------------------------------------------ timing

@dataclass
class StepClock:
    """When each training step's batch was ready and when the step was done (``device``: synchronised first,
    so that the times are the device's, not the queue's), and the peak memory the device had allocated when
    the last step was done (MiB; None on the CPU)."""

    device: str = "cpu"
    ready: list[float] = field(default_factory=list)
    done: list[float] = field(default_factory=list)
    peak_mib: float | None = None

    def _now(self, t: float | None) -> float:
        if t is not None:
            return t
        if self.device == "cuda":
            torch.cuda.synchronize()
        return time.perf_counter()

    def batch_ready(self, t: float | None = None) -> None:
        self.ready.append(self._now(t))

    def step_done(self, t: float | None = None) -> None:
        self.done.append(self._now(t))
        if self.device == "cuda":
            self.peak_mib = torch.cuda.max_memory_allocated() / 2**20

    def summary(self, batch: int, skip: int) -> dict[str, float]:
        """Images/s and the share of the time spent waiting for data over the steps after the first ``skip``
        (from the end of step ``skip`` to the end of the last), ``batch`` images a step."""
        n = len(self.done)
        if len(self.ready) != n:
            raise ValueError(f"{len(self.ready)} batches ready but {n} steps done: a step's times are missing")
        if not 1 <= skip < n:
            raise ValueError(f"{n} steps timed: skip between 1 and {n - 1} start-up steps")
        window = self.done[-1] - self.done[skip - 1]
        wait = sum(self.ready[i] - self.done[i - 1] for i in range(skip, n))
        timed = n - skip
        return {"steps": n, "timed_steps": timed, "img_per_s": batch * timed / window,
                "data_wait_share": wait / window, "wait_ms": 1e3 * wait / timed,
                "step_ms": 1e3 * (window - wait) / timed, "peak_mib": self.peak_mib}


def lightning_clock(clock: StepClock) -> Any:
    """A Lightning callback that feeds ``clock`` (defined here: importing Lightning takes seconds)."""
    import pytorch_lightning as pl

    class StepTimes(pl.Callback):
        def on_train_batch_start(self, trainer: Any, pl_module: Any, batch: Any, batch_idx: int) -> None:
            clock.batch_ready()

        def on_train_batch_end(self, trainer: Any, pl_module: Any, outputs: Any, batch: Any, batch_idx: int) -> None:
            clock.step_done()

    return StepTimes()


# ------------------------------------------------------------------------------------------- data

def _digit_shard(root: str, k: int, n_train: int, n_val: int, scale: float) -> int:
    """Shard ``k`` of the detection and segmentation sets: demo:digit-boxes and demo:digit-masks drawn with
    seed ``k`` by their own writers, each image enlarged ``scale`` times and written as JPEG into
    ``root/{boxes,masks}/images/SPLIT/`` with its label file beside (``k_`` before each name)."""
    import cv2

    from vision_attn.data.digit_boxes import DigitBoxesConfig, write_digit_boxes
    from vision_attn.data.digit_masks import write_digit_masks

    cv2.setNumThreads(1)
    cfg = DigitBoxesConfig(n_train=n_train, n_val=n_val, seed=k)
    tmp, n = Path(root) / f".shard{k}", 0
    for kind, write in (("boxes", write_digit_boxes), ("masks", write_digit_masks)):
        write(tmp / kind, cfg)
        for split in ("train", "val"):
            out = Path(root) / kind
            for png in sorted((tmp / kind / "yolo" / "images" / split).glob("*.png")):
                image = cv2.imread(str(png))
                if scale != 1:
                    image = cv2.resize(image, None, fx=scale, fy=scale, interpolation=cv2.INTER_LINEAR)
                cv2.imwrite(str(out / "images" / split / f"{k}_{png.stem}.jpg"), image, [cv2.IMWRITE_JPEG_QUALITY, 90])
                os.replace(tmp / kind / "yolo" / "labels" / split / f"{png.stem}.txt",
                           out / "labels" / split / f"{k}_{png.stem}.txt")
                n += 1
    shutil.rmtree(tmp)
    return n


def _photo_shard(root: str, k: int, n_train: int, n_val: int) -> int:
    """Shard ``k`` of the photo folders: the ``data`` suite's photos (seed ``k``) moved into
    ``root/{train,val}/CLASS/`` (``k_`` before each name)."""
    from tools.suites.data import make_photos

    tmp = Path(root) / f".shard{k}"
    for split, n, seed in (("train", n_train, k), ("val", n_val, 10_000 + k)):
        for path, label in make_photos(tmp / split, n, seed=seed):
            os.replace(path, Path(root) / split / str(label) / f"{k}_{Path(path).name}")
    shutil.rmtree(tmp)
    return n_train + n_val


def _in_parallel(fn: Any, jobs: list[tuple], workers: int) -> int:
    """``fn(*job)`` for each job in ``workers`` spawned processes (no fork of a process that may hold a CUDA
    context); the sum of what they return."""
    with ProcessPoolExecutor(max_workers=max(1, min(workers, len(jobs))),
                             mp_context=multiprocessing.get_context("spawn")) as pool:
        return sum(pool.map(fn, *zip(*jobs)))


def _split(n: int, parts: int) -> list[int]:
    return [n // parts + (i < n % parts) for i in range(parts)]


def make_digit_sets(root: Path, n_train: int, n_val: int, size: int, workers: int) -> dict[str, str]:
    """demo:digit-boxes and demo:digit-masks at ``size`` px (canvases enlarged ``size / 160`` times), ``n_train``
    and ``n_val`` images each, drawn in ``workers`` processes; their YOLO data YAMLs by kind."""
    shards = max(1, min(workers, n_val))
    for kind in ("boxes", "masks"):
        for split in ("train", "val"):
            for sub in ("images", "labels"):
                (root / kind / sub / split).mkdir(parents=True, exist_ok=True)
    jobs = [(str(root), k, t, v, size / CANVAS) for k, (t, v) in enumerate(zip(_split(n_train, shards),
                                                                                _split(n_val, shards)))]
    _in_parallel(_digit_shard, jobs, workers)
    from vision_attn.data.digit_boxes import DIGIT_NAMES

    out = {}
    for kind in ("boxes", "masks"):
        path = root / kind / "data.yaml"
        path.write_text(f"path: {json.dumps(str((root / kind).resolve()))}\ntrain: images/train\nval: images/val\n"
                        f"names: {json.dumps(DIGIT_NAMES)}\n")
        out[kind] = str(path)
    return out


def make_photo_folders(root: Path, n_train: int, n_val: int, workers: int) -> str:
    """``n_train`` and ``n_val`` JPEG photos (500x375) in ``root/{train,val}/CLASS/`` (10 classes), made in
    ``workers`` processes; returns ``root``."""
    shards = max(1, min(workers, n_val))
    for split in ("train", "val"):
        for c in range(10):
            (root / split / str(c)).mkdir(parents=True, exist_ok=True)
    jobs = [(str(root), k, t, v) for k, (t, v) in enumerate(zip(_split(n_train, shards), _split(n_val, shards)))]
    _in_parallel(_photo_shard, jobs, workers)
    return str(root)


# ------------------------------------------------------------------------------------- the sides

def ours(phase: str, data: str, s: dict[str, Any]) -> dict[str, Any]:
    """``vision-attn train`` of ``phase`` on ``data`` for ``s["warmup"] + s["steps"]`` steps (run in a fresh
    process by the suite)."""
    from vision_attn.tasks.registry import train

    cuda = s["device"] == "cuda"
    clock = StepClock(s["device"])
    steps = s["warmup"] + s["steps"]
    argv = ["--config", str(ROOT / CONFIGS[phase]), "--name", f"gpu_check_{phase}", "--runs_dir", s["runs"],
            "--overwrite", "true", "--trainer.accelerator", "gpu" if cuda else "cpu", "--trainer.devices", "1",
            "--trainer.strategy", "auto", "--trainer.precision", "bf16-mixed" if cuda else "32-true",
            "--trainer.max_steps", str(steps), "--trainer.limit_val_batches", "0",
            "--trainer.enable_progress_bar", "false", "--data.batch_size", str(s["batch"]),
            "--data.img_size", str(s["img_size"]), "--data.num_workers", str(s["workers"]),
            "--data.persistent_workers", str(s["workers"] > 0).lower()]
    if phase == "cls":
        argv += ["--data.root", data, "--data.augment", "device", "--data.normalize", "device"]
    else:
        argv += ["--data.data", data]
    if not cuda:
        argv += ["--kernels", "aten"]  # no kernel timing on the CPU of a dry run
    start = time.perf_counter()
    metrics = train(TASKS[phase], argv, echo=lambda _line: None, callbacks=[lightning_clock(clock)]).metrics
    return {"phase": phase, "side": "ours", "model": OURS[phase],
            "precision": metrics["precision"], "batch": s["batch"], "img_size": s["img_size"],
            "workers": s["workers"], **clock.summary(s["batch"], s["warmup"]), "process_s": time.perf_counter() - start}


def timm_side(root: str, s: dict[str, Any]) -> dict[str, Any]:
    """DeiT-S trained as timm's train.py trains it with the DeiT recipe's settings (Mixup 0.8, CutMix 1.0,
    label smoothing 0.1, RandAugment m9, random erasing 0.25, drop path 0.1, AdamW lr 1e-3 wd 0.05, EMA), its
    loader and prefetcher, for ``s["warmup"] + s["steps"]`` steps."""
    import timm
    from timm.data import FastCollateMixup, create_dataset, create_loader
    from timm.loss import SoftTargetCrossEntropy
    from timm.optim import create_optimizer_v2
    from timm.utils import ModelEmaV3

    device = torch.device(s["device"])
    cuda = device.type == "cuda"
    torch.manual_seed(0)
    start = time.perf_counter()
    size, batch = s["img_size"], s["batch"]
    model = timm.create_model("deit_small_patch16_224", num_classes=10, drop_path_rate=0.1, img_size=size).to(device)
    dataset = create_dataset("", root=root, split="train", is_training=True)
    mixup = FastCollateMixup(mixup_alpha=0.8, cutmix_alpha=1.0, prob=1.0, switch_prob=0.5, mode="batch",
                             label_smoothing=0.1, num_classes=10)
    loader = create_loader(dataset, input_size=(3, size, size), batch_size=batch, is_training=True, re_prob=0.25,
                           re_mode="pixel", re_count=1, scale=(0.08, 1.0), hflip=0.5, color_jitter=0.3,
                           auto_augment="rand-m9-mstd0.5-inc1", interpolation="bicubic", num_workers=s["workers"],
                           collate_fn=mixup, device=device, use_prefetcher=True, crop_pct=0.875,
                           persistent_workers=s["workers"] > 0)
    optimizer = create_optimizer_v2(model, opt="adamw", lr=1e-3, weight_decay=0.05)
    ema = ModelEmaV3(model, decay=0.99996)
    loss_fn = SoftTargetCrossEntropy().to(device)
    autocast = torch.autocast("cuda", dtype=torch.bfloat16) if cuda else nullcontext()
    clock = StepClock(s["device"])
    model.train()
    batches = iter(loader)
    for step in range(s["warmup"] + s["steps"]):
        x, y = next(batches)
        clock.batch_ready()
        with autocast:
            loss = loss_fn(model(x), y)
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()
        ema.update(model, step=step + 1)
        loss.item()  # train.py's loss meter
        clock.step_done()
    return {"phase": "cls", "side": "timm", "model": PEERS["cls"], "precision": "bf16 autocast" if cuda else "fp32",
            "batch": batch, "img_size": size, "workers": s["workers"], **clock.summary(batch, s["warmup"]),
            "process_s": time.perf_counter() - start}


def ultralytics_side(phase: str, data: str, s: dict[str, Any]) -> dict[str, Any]:
    """ultralytics' own trainer for ``phase`` on the YOLO data YAML ``data``, stopped (its ``stop`` flag, checked
    between batches) after ``s["warmup"] + s["steps"]`` steps; its validation then runs on the small val split."""
    from tools.ultralytics_env import quiet_ultralytics_environment

    quiet_ultralytics_environment()
    from ultralytics import RTDETR, YOLO

    cuda = s["device"] == "cuda"
    start = time.perf_counter()
    model = (RTDETR(str(ROOT / "configs" / "models" / "rtdetr-s.yaml")) if phase == "rtdetr"
             else YOLO("yolov8n-seg.yaml" if phase == "seg" else "yolov8n.yaml"))
    clock, steps, seen = StepClock(s["device"]), s["warmup"] + s["steps"], {}

    def batch_start(trainer: Any) -> None:
        clock.batch_ready()

    def batch_end(trainer: Any) -> None:
        clock.step_done()
        seen["amp"] = bool(trainer.amp)
        if len(clock.done) >= steps:
            trainer.stop = True

    model.add_callback("on_train_batch_start", batch_start)
    model.add_callback("on_train_batch_end", batch_end)
    model.train(data=data, epochs=PEER_EPOCHS, imgsz=s["img_size"], batch=s["batch"], workers=s["workers"],
                device=0 if cuda else "cpu", pretrained=False, plots=False, fliplr=0.0, project=s["runs"],
                name=f"ultralytics_{phase}", exist_ok=True, seed=0, verbose=False)
    return {"phase": phase, "side": "ultralytics", "model": PEERS[phase],
            "precision": "AMP fp16" if seen.get("amp") else "fp32", "batch": s["batch"], "img_size": s["img_size"],
            "workers": s["workers"], **clock.summary(s["batch"], s["warmup"]), "process_s": time.perf_counter() - start}


def images_needed(batch: int, warmup: int, steps: int) -> int:
    """Training images for ``warmup + steps`` full batches within one epoch, and one batch more."""
    return batch * (warmup + steps + 1)
