"""Per-core throughput of the classification pipelines from the file against timm's, and against decoding alone.

One process, one thread (torch and OpenCV), the pipelines measured in alternating rounds over the same
``--images`` JPEG files (scikit-learn's sample photos cut into crops of about 500x375, quality 90, the
files the ``data`` suite makes; ``--side`` other than 500 resizes them so that the longer side is
that long); each figure is the median of ``--rounds`` rounds, in images per second:

- ``decode``: PIL decoding each file at full size (``Image.open`` + ``load``): what a pipeline that
  decodes every file at full size cannot beat; ``decode+rgb``: the same plus the RGB array
  of the whole image (``convert`` + ``np.asarray``); ``decode (opencv)``: ``cv2.imdecode``;
- ``ours``: vision_attn's pipelines from the file (data/file_transforms.py: the crop drawn on the
  header's size, a JPEG decoded at 1/2, 1/4 or 1/8 where the crop stays at least the output size,
  uint8 to the end, OpenCV's JPEG decoder, ``data.normalize: device``: the data module's defaults,
  the uint8 image out of the workers, normalised where the batch goes (``normalize`` in
  ``device_cost``); ``ours, normalize in loader``: float32 out of the workers); ``ours (full decode)``: the same
  with ``reduce=False``; ``ours (pil)``: with PIL's JPEG decoder (``decoder="pil"``); ``before``:
  the same albumentations Compose on that RGB array of the whole decoded image (no file transform);
  ``ours, augment on device``: what the workers do under ``data.augment: device`` (decode, crop,
  flip, to a uint8 tensor: the same for ``on`` and ``off``), the colour jitter, RandAugment and
  erasing left to :class:`~vision_attn.data.device_augment.DeviceAugment` on the training device,
  timed apart on this CPU (one thread, batches of 32);
- ``timm``: ``timm.data.transforms_imagenet_train`` (what ``create_transform(is_training=True)``
  calls) with equal settings: bicubic RandomResizedCrop (0.08-1, 3/4-4/3), flip 0.5, colour jitter
  0.4 with probability 0.8 (``force_color_jitter``: timm turns it off under RandAugment unless told),
  ``rand-m9-n2`` and per-pixel random erasing 0.25 (``on``), or neither (``off``); eval:
  ``create_transform(is_training=False, crop_pct=0.875, interpolation="bicubic")``; each on the file
  read as timm's ``ImageDataset`` reads it (``Image.open(f).convert("RGB")``).

Then through a DataLoader (batch 32, ``--workers`` processes with one thread each, after a warm-up
pass, alternating): ours through training's own loader, timm's through a plain DataLoader.

    python tools/bench.py loader --images 300 --rounds 7 --workers 1 2 --passes 3
    python tools/bench.py loader --side 1000 --workers 2 --rounds 5   # the same photos at 1000x750
"""
from __future__ import annotations

import statistics
import tempfile
import time
from pathlib import Path
from typing import Callable

import cv2
import numpy as np
import torch
from PIL import Image

from tools.suites.data import make_photos
from tools.suites.harness import Param, Suite


def _one_thread() -> None:
    torch.set_num_threads(1)
    cv2.setNumThreads(1)


def _old_load(path: str) -> np.ndarray:
    """The whole image as an RGB array (a convert copy and an array copy): the "before" pipelines' input."""
    with Image.open(path) as img:
        img.load()
        return np.asarray(img.convert("RGB"))


def _timm_read(path: str) -> Image.Image:
    with open(path, "rb") as f:
        return Image.open(f).convert("RGB")


def pipelines(size: int) -> tuple[dict[str, Callable[[str], object]], dict[str, object]]:
    """name -> function(path) of every pipeline measured, and our file transforms (their decode counts)."""
    from timm.data import create_transform
    from timm.data.transforms_factory import transforms_imagenet_train

    from vision_attn.data.file_transforms import EvalFileTransform, TrainFileTransform
    from vision_attn.data.transforms import eval_transforms, train_transforms

    def ours_train(on: bool):
        return train_transforms(size, color_jitter=0.4, rand_augment=2 if on else 0,
                                random_erasing=0.25 if on else 0.0, seed=0)

    def timm_train(on: bool):
        return transforms_imagenet_train(size, scale=(0.08, 1.0), ratio=(3 / 4, 4 / 3), hflip=0.5,
                                         color_jitter=0.4, color_jitter_prob=0.8, force_color_jitter=True,
                                         auto_augment="rand-m9-n2" if on else None, interpolation="bicubic",
                                         re_prob=0.25 if on else 0.0, re_mode="pixel")

    out: dict[str, Callable[[str], object]] = {}

    def decode(p):
        with Image.open(p) as img:
            img.load()

    def decode_cv2(p):
        cv2.imdecode(np.fromfile(p, dtype=np.uint8), cv2.IMREAD_COLOR_RGB | cv2.IMREAD_IGNORE_ORIENTATION)

    out["decode"] = decode
    out["decode (opencv)"] = decode_cv2
    out["decode+rgb"] = _old_load
    # ours as the data module runs them by default (data.normalize: device: uint8 out of the workers,
    # normalised where the batch goes); "normalize in loader": float32 out of the workers
    dev = "device"
    for on in (True, False):
        tag = "on" if on else "off"
        fast, before, timm_tf = TrainFileTransform(ours_train(on), normalize_on=dev), ours_train(on), timm_train(on)
        out[f"train {tag}: ours"] = fast.read
        out[f"train {tag}: ours, normalize in loader"] = TrainFileTransform(ours_train(on)).read
        out[f"train {tag}: ours (full decode)"] = TrainFileTransform(ours_train(on), reduce=False, normalize_on=dev).read
        out[f"train {tag}: ours (pil)"] = TrainFileTransform(ours_train(on), decoder="pil", normalize_on=dev).read
        out[f"train {tag}: before"] = lambda p, c=before: c(image=_old_load(p))["image"]
        out[f"train {tag}: timm"] = lambda p, t=timm_tf: t(_timm_read(p))
    ev, ev_before = EvalFileTransform(eval_transforms(size), normalize_on=dev), eval_transforms(size)
    timm_ev = create_transform(size, is_training=False, crop_pct=0.875, interpolation="bicubic")
    # data.augment: device: the workers decode, crop and flip, to uint8; the rest runs on the batch
    # where it is (device_cost times it on this CPU)
    loader_part = TrainFileTransform(train_transforms(size, color_jitter=0.0, seed=0), normalize_on=dev)
    out["train on: ours, augment on device"] = loader_part.read
    out["train off: ours, augment on device"] = loader_part.read
    out["eval: ours"] = ev.read
    out["eval: ours, normalize in loader"] = EvalFileTransform(eval_transforms(size)).read
    out["eval: ours (pil)"] = EvalFileTransform(eval_transforms(size), decoder="pil", normalize_on=dev).read
    out["eval: before"] = lambda p: ev_before(image=_old_load(p))["image"]
    out["eval: timm"] = lambda p: timm_ev(_timm_read(p))
    ours = {"train on": out["train on: ours"].__self__, "train off": out["train off: ours"].__self__, "eval": ev,
            "augment on device": loader_part}
    return out, ours


def device_cost(size: int, rounds: int, batch: int = 32) -> dict[str, float]:
    """Images/s of DeviceAugment (the part of data.augment: device that leaves the workers) on this
    CPU, one thread, batches of ``batch``: ``on``: jitter 0.4, rand-m9-n2, erasing 0.25; ``off``:
    jitter only; ``normalize``: the normalisation alone (normalize: device)."""
    from vision_attn.data.device_augment import DeviceAugment

    _one_thread()
    images = torch.randint(0, 256, (batch, 3, size, size), dtype=torch.uint8)
    fns = {"on": DeviceAugment(color_jitter=0.4, rand_augment=2, random_erasing=0.25),
           "off": DeviceAugment(color_jitter=0.4)}
    out = {}
    for name, aug in fns.items():
        aug(images, 0)
        rates = []
        for r in range(rounds):
            start = time.perf_counter()
            for k in range(4):
                aug(images, r * 4 + k)
            rates.append(4 * batch / (time.perf_counter() - start))
        out[name] = round(statistics.median(rates), 1)
    pixels = fns["on"].pixels
    start = time.perf_counter()
    for _ in range(8):
        pixels(images)
    out["normalize"] = round(8 * batch / (time.perf_counter() - start), 1)
    return out


def per_core(paths: list[str], size: int, rounds: int) -> dict[str, dict]:
    """Images/s of each pipeline on one thread, alternating rounds; median and all rounds."""
    _one_thread()
    fns, ours = pipelines(size)
    for fn in fns.values():  # warm-up: first calls, file cache
        for p in paths[:16]:
            fn(p)
    for t in ours.values():
        t.factors.clear()
    rates: dict[str, list[float]] = {name: [] for name in fns}
    for r in range(rounds):
        order = list(fns) if r % 2 == 0 else list(fns)[::-1]
        for name in order:
            fn = fns[name]
            start = time.perf_counter()
            for p in paths:
                fn(p)
            rates[name].append(len(paths) / (time.perf_counter() - start))
    factors = {k: {str(f): n for f, n in sorted(t.factors.items())} for k, t in ours.items()}
    def vs(name: str, peer: str) -> float:  # the median of the per-round ratios
        return round(statistics.median(a / b for a, b in zip(rates[name], rates[peer])), 2)

    out = {k: {"images_per_s": round(statistics.median(v), 1), "rounds": [round(x, 1) for x in v]}
           for k, v in rates.items()}
    for name in out:
        group = name.split(":")[0]
        if ":" in name:
            out[name]["x_timm"] = vs(name, f"{group}: timm")
        out[name]["x_decode"] = vs(name, "decode")
    return {"rates": out, "decode_factors": factors}


class _Files(torch.utils.data.Dataset):
    def __init__(self, paths: list[str], fn: Callable[[str], torch.Tensor]) -> None:
        self.paths, self.fn = paths, fn

    def __len__(self) -> int:
        return len(self.paths)

    def __getitem__(self, i: int):
        return self.fn(self.paths[i]), 0


def loader_rates(paths: list[str], size: int, workers: int, passes: int) -> dict[str, float]:
    """Images/s through a DataLoader (batch 32, ``workers`` processes with one thread each), ours
    through training's own loader (``make_loader``: ImageFolder, the per-item seeds of EpochItems),
    timm's through a plain DataLoader over its ImageDataset's reading; alternating."""
    from vision_attn.data import ImageFolder
    from vision_attn.data.loader import make_loader

    _one_thread()  # the workers are forked from here: OpenCV's and torch's one thread carry over
    fns, ours = pipelines(size)
    samples = [(p, 0) for p in paths]
    loaders = {}

    def ours_loader(transform):
        return make_loader(ImageFolder(samples, ["0"], transform), 32, train=transform is not ours["eval"],
                           num_workers=workers, persistent_workers=workers > 0, pin_memory=False, drop_last=False, seed=0)

    for name in ("train on", "train off", "eval"):
        loaders[f"{name}: ours"] = ours_loader(ours[name])
        loaders[f"{name}: timm"] = torch.utils.data.DataLoader(
            _Files(paths, fns[f"{name}: timm"]), batch_size=32, num_workers=workers, persistent_workers=workers > 0,
            worker_init_fn=lambda _: _one_thread(), prefetch_factor=4 if workers else None)
    loaders["train: ours, augment on device"] = ours_loader(ours["augment on device"])
    names = list(loaders)
    rates: dict[str, list[float]] = {n: [] for n in names}
    for n in names:  # warm-up: start the workers
        for _ in loaders[n]:
            pass
    for r in range(passes):
        for n in (names if r % 2 == 0 else names[::-1]):
            start = time.perf_counter()
            count = sum(x.shape[0] for x, _ in loaders[n])
            rates[n].append(count / (time.perf_counter() - start))
    return {n: round(statistics.median(v), 1) for n, v in rates.items()}


def run(p, record) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        samples = make_photos(Path(tmp), p.images)
        paths = [path for path, _ in samples]
        if p.side != 500:
            for path in paths:
                img = Image.open(path)
                img.resize((p.side, round(img.size[1] * p.side / img.size[0])), Image.BICUBIC).save(path, quality=90)
        with Image.open(paths[0]) as img:
            file_size = img.size
        result = record.results
        result.update({"size": p.size, "images": p.images, "file_size": list(file_size),
                       "per_core": per_core(paths, p.size, p.rounds),
                       "device_augment_on_this_cpu": device_cost(p.size, p.rounds),
                       "loader": {str(w): loader_rates(paths, p.size, w, p.passes) for w in p.workers}})
    rates = result["per_core"]["rates"]
    record.table(["pipeline", "images/s", "vs timm", "vs decode only"],
                 [[name, f"{r['images_per_s']:.1f}", f"{r['x_timm']:.2f}x" if "x_timm" in r else "",
                   f"{r['x_decode']:.2f}x"] for name, r in rates.items()],
                 f"{p.images} JPEGs of {file_size[0]}x{file_size[1]} (q90) at {p.size} px, one thread, median of "
                 f"{p.rounds} alternating rounds (images/s; ratios: medians of the per-round ratios)")
    record.line(f"decode factors (ours): {result['per_core']['decode_factors']}")
    record.line("DeviceAugment on this CPU, one thread, batch 32 (images/s; on a GPU it runs beside the model): "
                + ", ".join(f"{k} {v}" for k, v in result["device_augment_on_this_cpu"].items()))
    for w, r in result["loader"].items():
        record.line(f"DataLoader, {w} worker(s), batch 32: " + ", ".join(f"{k} {v}" for k, v in r.items()))


SUITE = Suite("loader", "the classification pipelines from the file, per core and through a DataLoader, against timm's",
              run, (
                  Param("images", 300, "JPEG files", quick=8),
                  Param("rounds", 5, "alternating rounds", quick=1),
                  Param("size", 224, "output pixels", quick=64),
                  Param("side", 500, "longer side of the files (500: ImageNet-like)"),
                  Param("workers", [1, 2], "DataLoader processes (each a measurement)", quick=[0]),
                  Param("passes", 3, "timed DataLoader passes per pipeline", quick=1),
              ), requires=("timm", "sklearn"), doc=__doc__)
