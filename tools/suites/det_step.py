"""One detection training step of ours against ultralytics' on the same batch, in one process,
alternating (ultralytics: a test-only peer).

For each ``--models`` name (``yolo26n``, ``yolo12n``, ...) it builds our detector from
``configs/models/<family>.yaml`` and ultralytics' from its own ``<name>.yaml`` (both from scratch, 10
classes), and times a full step on one batch of ``--batch`` demo:digit-boxes training images at
``--img-size`` (mosaic on, as in training): forward, loss (ours: :class:`DetectionLoss` or
:class:`EndToEndLoss`, as ``train det`` picks; theirs: ``model.init_criterion()``, i.e.
``v8DetectionLoss`` or ``E2ELoss``), backward, AdamW. ``--rounds`` rounds of ``--iters`` steps each,
the order swapped every round. With ``--threads 1`` the clock is the thread's CPU time
(``time.thread_time``), which other processes on a busy machine cannot inflate; otherwise wall time.
One row per model: the median over rounds of ours/theirs images per second.

    python tools/bench.py det-step --models yolo26n yolo12n --rounds 5 --iters 1 --threads 1
"""
from __future__ import annotations

import re

import torch

from tools.suites.harness import CLOCKS, ROOT, Param, Suite, alternate, median, median_ratio
from tools.ultralytics_env import quiet_ultralytics_environment


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


def run(p, record) -> None:
    quiet_ultralytics_environment()
    batch = _batch(p.img_size, p.batch)
    lines = []
    for name in p.models:
        torch.manual_seed(0)
        ours, ours_step = _ours(name, batch)
        theirs, theirs_step = _theirs(name, batch, p.img_size)
        torch.set_num_threads(p.threads)  # after ultralytics' import, which changes it
        clock = CLOCKS["thread" if p.threads == 1 else "wall"]
        times = alternate({"ours": ours_step, "ultralytics": theirs_step}, p.rounds, iters=p.iters, clock=clock,
                          warmup_calls=1)
        row = record.add("rows", {
            "model": name, "img_size": p.img_size, "batch": p.batch, "threads": p.threads,
            "clock": clock.__name__, "rounds": p.rounds, "iters": p.iters,
            "params_ours": sum(q.numel() for q in ours.parameters()),
            "params_ultralytics": sum(q.numel() for q in theirs.parameters()),
            "ours_img_s": round(p.batch / median(times["ours"]), 2),
            "ultralytics_img_s": round(p.batch / median(times["ultralytics"]), 2),
            "speed_ratio_ours_over_ultralytics": round(median_ratio(times, "ultralytics", "ours"), 3)})
        lines.append([name, f"{row['params_ours']:,}", f"{row['params_ultralytics']:,}", row["ours_img_s"],
                      row["ultralytics_img_s"], row["speed_ratio_ours_over_ultralytics"]])
    record.table(["model", "params ours", "params ultralytics", "ours img/s", "ultralytics img/s",
                  "ours / ultralytics speed"], lines)


SUITE = Suite("det-step", "a detection training step against ultralytics' on the same batch", run, (
    Param("models", ["yolo26n", "yolo12n"], "detector names with their scale letter", quick=["yolov8n"]),
    Param("img_size", 160, "pixels", quick=64),
    Param("batch", 32, "images a step", quick=2),
    Param("rounds", 7, "alternating rounds", quick=1),
    Param("iters", 2, "steps a round", quick=1),
    Param("threads", 1, "torch threads (1: the thread's CPU time as the clock)"),
), requires=("ultralytics",), doc=__doc__)
