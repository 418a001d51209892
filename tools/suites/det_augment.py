"""Detection augmentation on the device: what the loader workers still do, per core, against
ultralytics' training loader; and what the device part costs on the CPU.

On the same generated files (demo:digit-boxes drawn by the device check's writer, enlarged to
``--img-size`` and saved as JPEG), one process, one thread (OpenCV and torch), ``num_workers=0`` so
that each figure is one core's: each round takes one batch of ``--batch`` images from each loader,
alternating, timed with the process's CPU clock (other processes on a shared machine cannot inflate
it); medians over ``--rounds`` rounds after one warm-up round:

- ``ours, augment: device``: the workers' part of ``data.augment: device``
  (:class:`~vision_attn.data.det_device_augment.DetectionItems`: read, decode, resize to the canvas)
  through the data module's loader and collate;
- ``ours, augment: loader``: the loader path (DetectionTransform: 4-image mosaic, affine, HSV) for
  reference;
- ``ultralytics``: its YOLODataset with ``augment=True, mosaic=1.0`` (its defaults otherwise) and
  its InfiniteDataLoader, built by ``build_yolo_dataset`` / ``build_dataloader`` as its detection
  trainer builds them;
- ``device part on the CPU``: :class:`~vision_attn.data.det_device_augment.DetectionDeviceAugment`'s
  plan (draws and targets) and images (mosaic canvas, warp, HSV) of one of our batches, on this CPU
  with one thread: the cost the training device takes over (on a GPU it is a few kernels).

The ratio is the median over rounds of ultralytics' CPU seconds per batch over ours.

    python tools/bench.py det-augment   # --img-size 640 --batch 16 --images 256 --rounds 15
"""
from __future__ import annotations

import tempfile
import time
from pathlib import Path
from typing import Any, Callable, Iterator

from tools.suites.harness import Param, Suite, alternate, log, median, median_ratio


def _cycle(make: Callable[[], Any]) -> Iterator[Any]:
    """Batches of a loader forever (a new pass when one ends)."""
    while True:
        yield from make()


def loaders(data_yaml: str, img_size: int, batch: int) -> dict[str, Callable[[], object]]:
    """One call of each variant: the next batch of its loader (or the device part of one batch)."""
    import cv2
    import torch

    from tools.ultralytics_env import quiet_ultralytics_environment

    quiet_ultralytics_environment()
    from ultralytics.cfg import get_cfg
    from ultralytics.data import build_dataloader, build_yolo_dataset
    from ultralytics.data.utils import check_det_dataset

    from vision_attn.data import DetectionTransform, collate_detection, open_detection
    from vision_attn.data.det_device_augment import DetectionDeviceAugment, DetectionItems
    from vision_attn.data.loader import make_loader

    torch.set_num_threads(1)
    cv2.setNumThreads(1)

    def ours(transform: Any) -> Iterator[Any]:
        ds = open_detection(data_yaml, "train", transform=transform)
        return _cycle(lambda: make_loader(ds, batch, train=True, num_workers=0, persistent_workers=False,
                                          pin_memory=False, drop_last=True, seed=0, collate_fn=collate_detection))

    cfg = get_cfg(overrides={"imgsz": img_size, "mosaic": 1.0, "workers": 0})
    data = check_det_dataset(data_yaml)
    theirs_set = build_yolo_dataset(cfg, data["train"], batch, data, mode="train", rect=False, stride=32)
    theirs_loader = build_dataloader(theirs_set, batch, 0, shuffle=True, rank=-1, device="cpu")
    theirs = iter(theirs_loader)
    device_items = ours(DetectionItems(img_size))
    loader_path = ours(DetectionTransform(img_size, train=True, seed=0))
    augment = DetectionDeviceAugment(img_size)
    held = next(ours(DetectionItems(img_size)))
    seeds = iter(range(1 << 30))

    def device_part() -> None:
        batch_out, plans, hsv = augment.plan(held, next(seeds))
        augment.images(batch_out["images"], plans, hsv)

    return {"ours, augment: device": lambda: next(device_items), "ours, augment: loader": lambda: next(loader_path),
            "ultralytics": lambda: next(theirs), "device part on the CPU": device_part}


def run(p: Any, record: Any) -> None:
    from tools.suites.gpu_train import make_digit_sets

    with tempfile.TemporaryDirectory(prefix="det-augment-") as tmp:
        t0 = time.perf_counter()
        data_yaml = make_digit_sets(Path(tmp), p.images, 4, p.img_size, 1)["boxes"]
        record.line(f"{p.images} training images at {p.img_size} px written in {time.perf_counter() - t0:.0f} s")
        fns = loaders(data_yaml, p.img_size, p.batch)
        times = alternate(fns, p.rounds, clock=time.process_time, warmup_rounds=1, log=log)
    out = record.results
    rows = []
    for name, values in times.items():
        s = median(values)
        rows.append([name, round(1e3 * s, 1), round(p.batch / s, 1)])
        out[name] = {"ms_per_batch": round(1e3 * s, 2), "images_per_s": round(p.batch / s, 1)}
    out["speedup_workers_vs_ultralytics"] = round(median_ratio(times, "ultralytics", "ours, augment: device"), 2)
    out["speedup_loader_path_vs_ultralytics"] = round(median_ratio(times, "ultralytics", "ours, augment: loader"), 2)
    record.table(["per core, batch of %d" % p.batch, "CPU ms a batch", "images/s"], rows)
    record.line(f"the workers' part of augment: device against ultralytics' training loader: "
                f"{out['speedup_workers_vs_ultralytics']:.2f}x per core (median ratio of {p.rounds} rounds); "
                f"the loader path: {out['speedup_loader_path_vs_ultralytics']:.2f}x")


SUITE = Suite("det-augment", "detection augment: device: the workers' images/s per core against ultralytics' training "
              "loader (mosaic on); the device part's cost on the CPU", run, (
                  Param("img_size", 640, "training size (and the files' long side)", quick=128),
                  Param("batch", 16, "images a batch", quick=4),
                  Param("images", 256, "training images written", quick=16),
                  Param("rounds", 15, "alternating rounds (one batch of each a round)", quick=2),
              ), requires=("ultralytics",), doc=__doc__)
