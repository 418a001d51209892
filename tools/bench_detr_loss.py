"""Benchmark-only: RT-DETR's Hungarian matching (and the whole loss) of ours against ultralytics', in one
process, alternating.

Random predictions of ``--queries`` queries x ``--classes`` classes for ``--batch`` images with ``--boxes``
ground-truth boxes each. ``match``: one layer matched (ours: :class:`HungarianMatcher` on (1, B, Q, .);
theirs: ``HungarianMatcher`` with costs 2, 5, 2). ``loss``: the whole training loss on ``--layers`` decoder
layers + the encoder's top-k and 100 denoising queries (ours: :class:`RTDETRLoss`; theirs:
``RTDETRDetectionLoss(use_vfl=True)`` as ``RTDETRDetectionModel.loss`` calls it), forward and backward.
``--rounds`` rounds of ``--iters`` calls each, the order swapped every round; the clock is the thread's CPU
time with ``--threads 1`` (which other processes cannot inflate), wall time otherwise. Prints one JSON
line per benchmark: the median over rounds of theirs/ours time (above 1: ours is faster).

    .venv/bin/python tools/bench_detr_loss.py --threads 1 --rounds 9
"""
from __future__ import annotations

import argparse
import json
import statistics
import time
from types import SimpleNamespace
from typing import Any, Callable

import torch
from ultralytics_env import quiet_ultralytics_environment  # tools/, the script's folder


def _setup(args: argparse.Namespace) -> dict[str, Any]:
    from vision_attn.losses.detr import detr_targets

    g = torch.Generator().manual_seed(0)
    b, n, q, nc = args.batch, args.boxes, args.queries, args.classes
    lo = torch.rand(b * n, 2, generator=g) * 500
    boxes = torch.cat((lo, lo + 20 + torch.rand(b * n, 2, generator=g) * 120), 1).split(n)
    labels = torch.randint(0, nc, (b * n,), generator=g).split(n)
    t = detr_targets(list(boxes), list(labels), (640, 640))
    padded = torch.nn.utils.rnn.pad_sequence(t["bboxes"].split(t["gt_groups"]), batch_first=True)
    padded_cls = torch.nn.utils.rnn.pad_sequence(t["cls"].split(t["gt_groups"]), batch_first=True)
    return {"boxes": list(boxes), "labels": list(labels), "targets": t, "padded": padded, "padded_cls": padded_cls,
            "pred_boxes": torch.rand(b, q, 4, generator=g) * 0.5 + 0.1, "logits": torch.randn(b, q, nc, generator=g)}


def _match_pair(data: dict[str, Any]) -> tuple[Callable[[], Any], Callable[[], Any]]:
    from ultralytics.models.utils.ops import HungarianMatcher as Theirs

    from vision_attn.losses.matcher import HungarianMatcher

    ours, theirs = HungarianMatcher(), Theirs(cost_gain={"class": 2, "bbox": 5, "giou": 2})
    t, pb, lg = data["targets"], data["pred_boxes"], data["logits"]
    counts = t["gt_groups"]
    return (lambda: ours(pb[None], lg[None], data["padded"], data["padded_cls"], counts),
            lambda: theirs(pb, lg, t["bboxes"], t["cls"], counts))


def _loss_pair(data: dict[str, Any], layers: int) -> tuple[Callable[[], Any], Callable[[], Any]]:
    from ultralytics.models.utils.loss import RTDETRDetectionLoss
    from ultralytics.models.utils.ops import get_cdn_group
    from ultralytics.nn.tasks import RTDETRDetectionModel

    from vision_attn.losses.detr import RTDETRLoss

    t, pb, lg = data["targets"], data["pred_boxes"], data["logits"]
    b, q, nc = lg.shape
    torch.manual_seed(0)
    meta = get_cdn_group(dict(t), nc, q, torch.randn(nc, 8), num_dn=100, training=True)[3]
    dn = meta["dn_num_split"][0]
    g = torch.Generator().manual_seed(1)
    preds = [torch.rand(layers, b, dn + q, 4, generator=g) * 0.5 + 0.1, torch.randn(layers, b, dn + q, nc, generator=g),
             pb, lg]
    ours = RTDETRLoss()
    owner = SimpleNamespace(criterion=RTDETRDetectionLoss(nc=nc, use_vfl=True), training=True)
    batch = {"img": torch.zeros(b, 3, 640, 640), "batch_idx": t["batch_idx"].float(), "cls": t["cls"].float()[:, None],
             "bboxes": t["bboxes"]}

    def run_ours() -> None:
        leaves = [p.detach().requires_grad_(True) for p in preds]
        ours((*leaves, meta), data["boxes"], data["labels"], input_size=(640, 640)).total.backward()

    def run_theirs() -> None:
        leaves = [p.detach().requires_grad_(True) for p in preds]
        RTDETRDetectionModel.loss(owner, batch, (*leaves, meta))[0].backward()

    return run_ours, run_theirs


def _time(fn: Callable[[], Any], iters: int, clock: Callable[[], float]) -> float:
    start = clock()
    for _ in range(iters):
        fn()
    return (clock() - start) / iters


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--queries", type=int, default=300)
    parser.add_argument("--boxes", type=int, default=50)
    parser.add_argument("--classes", type=int, default=80)
    parser.add_argument("--layers", type=int, default=6)
    parser.add_argument("--rounds", type=int, default=9)
    parser.add_argument("--iters", type=int, default=10)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--which", nargs="+", default=["match", "loss"], choices=["match", "loss"])
    args = parser.parse_args()
    quiet_ultralytics_environment()
    torch.set_num_threads(args.threads)
    clock = time.thread_time if args.threads == 1 else time.perf_counter
    data = _setup(args)
    for name in args.which:
        ours, theirs = _match_pair(data) if name == "match" else _loss_pair(data, args.layers)
        ours(), theirs()  # warm-up
        ratios, ours_s, theirs_s = [], [], []
        for r in range(args.rounds):
            order = (ours, theirs) if r % 2 == 0 else (theirs, ours)
            times = {fn: _time(fn, args.iters, clock) for fn in order}
            ours_s.append(times[ours])
            theirs_s.append(times[theirs])
            ratios.append(times[theirs] / times[ours])
        print(json.dumps({"bench": name, "batch": args.batch, "queries": args.queries, "boxes": args.boxes,
                          "classes": args.classes, "threads": args.threads,
                          "ours_ms": round(1000 * statistics.median(ours_s), 3),
                          "theirs_ms": round(1000 * statistics.median(theirs_s), 3),
                          "theirs_over_ours": round(statistics.median(ratios), 3)}))


if __name__ == "__main__":
    main()
