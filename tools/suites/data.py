"""Data throughput against training speed: can the input pipeline feed the model?

Measures (1) images/s of the classification train pipeline (PIL decoding of JPEG photos, random
resized crop to 224, flip, colour jitter, two RandAugment-style ops, normalisation, collation) through
a DataLoader with ``--workers`` processes, and (2) images/s of training steps of vit_small_patch16_224
(AdamW, batch 16, 224 px; fp32 and bf16 autocast) on random tensors. The two are measured one after
the other, not together: on a 2-core machine loading and training compete for the same cores.

The photos are scikit-learn's two sample images (427x640 JPEG), cut into ``--images`` different
crops of ImageNet-like size (about 375x500) and saved as JPEG files in a temporary folder.

``--normalize device|loader|both`` measures instead the classification data module's loader
(``TrainFileTransform`` through training's ``make_loader``, pinned when the device is a GPU) with
``data.normalize`` set so: images/s of the batches on ``--device`` (the copy there included, and under
``device`` the normalisation there) and the bytes of a batch's images (uint8 is a quarter of float32's);
the training steps are then not measured.

    python tools/bench.py data --workers 2 --images 256 --batch 16
    python tools/bench.py data --normalize both --workers 2 --batch 32 --images 512 --epochs 3
"""
from __future__ import annotations

import statistics
import tempfile
import time
from pathlib import Path

import numpy as np
import torch

from tools.suites.harness import Param, Suite

def make_photos(root: Path, n: int, seed: int = 0) -> list[tuple[str, int]]:
    """``n`` JPEG crops (about 375x500) of scikit-learn's sample photos in 10 class folders."""
    from PIL import Image
    from sklearn.datasets import load_sample_images

    photos = load_sample_images().images  # two (427, 640, 3) uint8
    rng = np.random.default_rng(seed)
    samples = []
    for i in range(n):
        photo = photos[i % 2]
        h, w = 375, 500
        y, x = rng.integers(0, photo.shape[0] - h + 1), rng.integers(0, photo.shape[1] - w + 1)
        crop = photo[y:y + h, x:x + w]
        path = root / str(i % 10) / f"{i:05d}.jpg"
        path.parent.mkdir(parents=True, exist_ok=True)
        Image.fromarray(crop).save(path, quality=90)
        samples.append((str(path), i % 10))
    return samples


def pipeline_rate(samples: list[tuple[str, int]], workers: int, batch: int, epochs: int) -> dict:
    """Images/s of the train pipeline through a DataLoader (the first epoch is a warm-up)."""
    from vision_attn.data import ImageFolder, seed_worker, train_transforms

    tf = train_transforms(224, color_jitter=0.4, rand_augment=2, seed=0)
    loader = torch.utils.data.DataLoader(ImageFolder(samples, [str(i) for i in range(10)], tf), batch_size=batch,
                                         shuffle=True, num_workers=workers, persistent_workers=workers > 0,
                                         worker_init_fn=seed_worker if workers else None, drop_last=True)
    rates = []
    for epoch in range(epochs + 1):
        start = time.perf_counter()
        n = sum(x.shape[0] for x, _ in loader)
        if epoch:  # epoch 0 starts the workers
            rates.append(n / (time.perf_counter() - start))
    return {"workers": workers, "batch": batch, "images_per_s": round(statistics.median(rates), 1),
            "per_epoch": [round(r, 1) for r in rates]}


def normalize_rate(samples: list[tuple[str, int]], normalize: str, workers: int, batch: int, epochs: int,
                   device: str, augment: str = "loader") -> dict:
    """Images/s of the data module's train loader with ``data.normalize`` = ``normalize``, each batch
    copied to ``device`` and normalised there as the data module's hook does (the first epoch is a
    warm-up), and the bytes of a batch's images as the loader gives them; ``augment="device"``
    (``data.augment: device``): the workers decode, crop and flip, and the colour jitter and
    RandAugment run on the batch on ``device`` (:class:`~vision_attn.data.device_augment.DeviceAugment`)."""
    from vision_attn.data import ImageFolder, train_transforms
    from vision_attn.data.device_augment import DeviceAugment, batch_seed
    from vision_attn.data.file_transforms import TrainFileTransform
    from vision_attn.data.loader import end_loader_workers, make_loader

    dev = torch.device(device)
    on_device = augment == "device"
    tf = TrainFileTransform(train_transforms(224, color_jitter=0.0 if on_device else 0.4,
                                             rand_augment=0 if on_device else 2, seed=0), normalize_on=normalize)
    augmenter = DeviceAugment(color_jitter=0.4, rand_augment=2) if on_device else None
    loader = make_loader(ImageFolder(samples, [str(i) for i in range(10)], tf), batch, train=True, num_workers=workers,
                         persistent_workers=workers > 0, pin_memory=dev.type == "cuda", drop_last=True, seed=0)
    rates, nbytes, dtype = [], 0, None
    for epoch in range(epochs + 1):
        start = time.perf_counter()
        n = 0
        for i, (x, _) in enumerate(loader):
            nbytes, dtype = x.nbytes, x.dtype
            x = x.to(dev, non_blocking=True)  # then what on_after_batch_transfer does (a float batch as it is)
            x = augmenter(x, batch_seed(0, 0, epoch, i)) if augmenter is not None else tf.pixels(x)
            n += x.shape[0]
        if dev.type == "cuda":
            torch.cuda.synchronize(dev)
        if epoch:  # epoch 0 starts the workers
            rates.append(n / (time.perf_counter() - start))
    end_loader_workers()
    return {"normalize": normalize, "augment": augment, "device": str(dev), "workers": workers, "batch": batch, "dtype": str(dtype),
            "bytes_per_batch": nbytes, "images_per_s": round(statistics.median(rates), 1),
            "per_epoch": [round(r, 1) for r in rates]}


def train_rate(batch: int, steps: int, bf16: bool, name: str = "vit_small_patch16_224", img_size: int = 224) -> dict:
    """Images/s of AdamW training steps of ``name`` at ``img_size`` px (median over ``steps``)."""
    from vision_attn import create_model

    model = create_model(name, num_classes=1000, **({} if img_size == 224 else {"img_size": img_size})).train()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    x = torch.randn(batch, 3, img_size, img_size)
    y = torch.randint(0, 1000, (batch,))
    times = []
    for i in range(steps + 1):
        start = time.perf_counter()
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16):
            loss = torch.nn.functional.cross_entropy(model(x), y)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        if i:  # step 0 is a warm-up
            times.append(time.perf_counter() - start)
    step = statistics.median(times)
    return {"model": name, "batch": batch, "precision": "bf16-mixed" if bf16 else "fp32",
            "seconds_per_step": round(step, 3), "images_per_s": round(batch / step, 2)}


def run(p, record) -> None:
    if p.normalize:
        modes = ("loader", "device") if p.normalize == "both" else (p.normalize,)
        device = p.device or ("cuda" if torch.cuda.is_available() else "cpu")
        with tempfile.TemporaryDirectory() as tmp:
            samples = make_photos(Path(tmp), p.images)
            rows = [normalize_rate(samples, m, p.workers, p.batch, p.epochs, device) for m in modes]
        record.results["loaders"] = rows
        for r in rows:
            record.line(f"data.normalize {r['normalize']}: {r['images_per_s']} images/s to {r['device']}, "
                        f"{r['workers']} workers, batch {r['batch']} of {r['dtype']}: "
                        f"{r['bytes_per_batch'] / 2**20:.2f} MiB")
        return
    with tempfile.TemporaryDirectory() as tmp:
        samples = make_photos(Path(tmp), p.images)
        data = pipeline_rate(samples, p.workers, p.batch, p.epochs)
        data_main = pipeline_rate(samples, 0, p.batch, 1)
    train = [train_rate(p.batch, p.steps, bf16, p.model, p.img_size) for bf16 in (False, True)]
    record.results.update({"pipeline": data, "pipeline_in_main_process": data_main, "train": train})
    record.line(f"train pipeline at 224 px, {p.workers} workers: {data['images_per_s']} images/s "
                f"(main process only: {data_main['images_per_s']})")
    for t in train:
        record.line(f"{t['model']} training step, batch {t['batch']}, {t['precision']}: {t['images_per_s']} images/s "
                    f"({t['seconds_per_step']} s/step)")
    fastest = max(t["images_per_s"] for t in train)
    record.line(f"pipeline / fastest training rate: {data['images_per_s'] / fastest:.1f}x")


SUITE = Suite("data", "the classification input pipeline's images/s against training steps' images/s", run, (
    Param("workers", 2, "loader processes", quick=0),
    Param("images", 256, "JPEG photos", quick=4),
    Param("batch", 16, "batch size", quick=2),
    Param("epochs", 2, "timed passes over the images (after a warm-up)", quick=1),
    Param("steps", 6, "timed training steps per precision", quick=1),
    Param("model", "vit_small_patch16_224", "the model of the training steps", quick="vit_tiny_patch16_224"),
    Param("img_size", 224, "the training steps' pixels", quick=32),
    Param("normalize", "", "measure the data module's loader with data.normalize so (both: each) instead",
          choices=["", "device", "loader", "both"]),
    Param("device", "", "where --normalize's batches go (default: cuda if available, else cpu)"),
), requires=("sklearn",), doc=__doc__)
