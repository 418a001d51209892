"""Benchmark-only: one detection training step of ours against ultralytics' on the same batch, in one
process, alternating.

For each ``--models`` name (``yolo26n``, ``yolo12n``, ...) it builds our detector from
``configs/models/<family>.yaml`` and ultralytics' from its own ``<name>.yaml`` (both from scratch, 10
classes), and times a full step on one batch of ``--batch`` demo:digit-boxes training images at
``--img-size`` (mosaic on, as in training): forward, loss (ours: :class:`DetectionLoss` or
:class:`EndToEndLoss`, as ``train det`` picks; theirs: ``model.init_criterion()``, i.e.
``v8DetectionLoss`` or ``E2ELoss``), backward, AdamW. ``--rounds`` rounds of ``--iters`` steps each,
the order swapped every round. With ``--threads 1`` the clock is the thread's CPU time
(``time.thread_time``), which other processes on a busy machine cannot inflate; otherwise wall time.
Prints one JSON line per model: the median over rounds of ours/theirs steps per second.

    .venv/bin/python tools/bench_det_step.py --models yolo26n yolo12n --rounds 7 --threads 1
"""
from __future__ import annotations

import argparse
import json
import re
import statistics
import time
from pathlib import Path

import torch
from ultralytics_env import quiet_ultralytics_environment  # tools/, the script's folder

ROOT = Path(__file__).resolve().parents[1]


def _batch(img_size: int, batch: int) -> dict:
    from vision_attn.data import DetectionTransform, collate_detection, open_detection

    ds = open_detection("demo:digit-boxes", "train", transform=DetectionTransform(img_size, train=True, seed=0))
    return collate_detection([ds[i] for i in range(batch)])


def _ultralytics_batch(batch: dict, img_size: int) -> dict:
    boxes = torch.cat(batch["boxes"]).float()
    idx = torch.cat([torch.full((len(b),), float(i)) for i, b in enumerate(batch["boxes"])])
    xywh = torch.cat(((boxes[:, :2] + boxes[:, 2:]) / 2, boxes[:, 2:] - boxes[:, :2]), 1) / img_size
    return {"batch_idx": idx, "cls": torch.cat(batch["labels"]).float().view(-1, 1), "bboxes": xywh}


def _ours(name: str, batch: dict):
    from vision_attn import build_detector
    from vision_attn.losses import DetectionLoss, EndToEndLoss

    family = re.sub(r"([nslmx])$", "", name)
    model = build_detector(ROOT / "configs" / "models" / f"{family}.yaml", scale=name[-1], num_classes=10).train()
    model.to(memory_format=torch.channels_last)  # train det's default
    loss = EndToEndLoss(model) if model.model[-1].has_one2one else DetectionLoss(model)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    x = batch["images"].contiguous(memory_format=torch.channels_last)

    def step() -> None:
        parts = loss(model(x), batch["boxes"], batch["labels"])
        (parts.total * x.shape[0]).backward()
        opt.step()
        opt.zero_grad(set_to_none=True)

    return model, step


def _theirs(name: str, batch: dict, img_size: int):
    quiet_ultralytics_environment()
    from ultralytics.cfg import get_cfg
    from ultralytics.nn.tasks import DetectionModel

    model = DetectionModel(f"{name}.yaml", nc=10, verbose=False).train()
    model.args = get_cfg()
    loss = model.init_criterion()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    x, target = batch["images"], _ultralytics_batch(batch, img_size)

    def step() -> None:
        total, _ = loss(model(x), target)
        total.sum().backward()
        opt.step()
        opt.zero_grad(set_to_none=True)

    return model, step


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", nargs="+", default=["yolo26n", "yolo12n"])
    ap.add_argument("--img-size", type=int, default=160)
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--iters", type=int, default=2)
    ap.add_argument("--threads", type=int, default=1)
    args = ap.parse_args()
    from vision_attn.analysis.benchmark import alternate, median_ratio

    batch = _batch(args.img_size, args.batch)
    for name in args.models:
        torch.manual_seed(0)
        ours, ours_step = _ours(name, batch)
        theirs, theirs_step = _theirs(name, batch, args.img_size)
        torch.set_num_threads(args.threads)  # after ultralytics' import, which changes it
        clock = time.thread_time if args.threads == 1 else time.perf_counter
        for fn in (ours_step, theirs_step):  # warm-up
            fn()
        rows = alternate({"ours": ours_step, "ultralytics": theirs_step}, rounds=args.rounds, iters=args.iters,
                         items=args.batch, clock=clock)
        print(json.dumps({
            "model": name, "img_size": args.img_size, "batch": args.batch, "threads": args.threads,
            "clock": clock.__name__, "rounds": args.rounds, "iters": args.iters,
            "params_ours": sum(p.numel() for p in ours.parameters()),
            "params_ultralytics": sum(p.numel() for p in theirs.parameters()),
            "ours_img_s": round(statistics.median(r["ours"] for r in rows), 2),
            "ultralytics_img_s": round(statistics.median(r["ultralytics"] for r in rows), 2),
            "speed_ratio_ours_over_ultralytics": round(median_ratio(rows, "ours", "ultralytics"), 3)}), flush=True)


if __name__ == "__main__":
    main()
