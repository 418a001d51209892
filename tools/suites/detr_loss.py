"""RT-DETR's Hungarian matching (and the whole loss) of ours against ultralytics', in one process,
alternating (ultralytics: a test-only peer).

Random predictions of ``--queries`` queries x ``--classes`` classes for ``--batch`` images with ``--boxes``
ground-truth boxes each. ``match``: one layer matched (ours: :class:`HungarianMatcher` on (1, B, Q, .);
theirs: ``HungarianMatcher`` with costs 2, 5, 2). ``loss``: the whole training loss on ``--layers`` decoder
layers + the encoder's top-k and 100 denoising queries (ours: :class:`RTDETRLoss`; theirs:
``RTDETRDetectionLoss(use_vfl=True)`` as ``RTDETRDetectionModel.loss`` calls it), forward and backward.
``--rounds`` rounds of ``--iters`` calls each, the order swapped every round; the clock is the thread's CPU
time with ``--threads 1`` (which other processes cannot inflate), wall time otherwise. One row per
benchmark: the median over rounds of theirs/ours time (above 1: ours is faster).

    python tools/bench.py detr-loss --threads 1 --rounds 11 --iters 10
"""
from __future__ import annotations

from types import SimpleNamespace
from typing import Any, Callable

import torch

from tools.suites.harness import CLOCKS, Param, Suite, alternate, median_ms, median_ratio


def _setup(args: Any) -> dict[str, Any]:
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


def run(p, record) -> None:
    from tools.ultralytics_env import quiet_ultralytics_environment

    quiet_ultralytics_environment()
    torch.set_num_threads(p.threads)
    clock = CLOCKS["thread" if p.threads == 1 else "wall"]
    data = _setup(p)
    lines = []
    for name in p.which:
        ours, theirs = _match_pair(data) if name == "match" else _loss_pair(data, p.layers)
        times = alternate({"ours": ours, "theirs": theirs}, p.rounds, iters=p.iters, clock=clock, warmup_calls=1)
        ms = median_ms(times)
        row = record.add("rows", {"bench": name, "batch": p.batch, "queries": p.queries, "boxes": p.boxes,
                                  "classes": p.classes, "threads": p.threads, "ours_ms": round(ms["ours"], 3),
                                  "theirs_ms": round(ms["theirs"], 3),
                                  "theirs_over_ours": round(median_ratio(times, "theirs", "ours"), 3)})
        lines.append([name, row["ours_ms"], row["theirs_ms"], row["theirs_over_ours"]])
    record.table(["bench", "ours ms", "ultralytics ms", "ultralytics / ours"], lines,
                 f"batch {p.batch}, {p.queries} queries, {p.boxes} boxes, {p.classes} classes, {p.threads} threads")


SUITE = Suite("detr-loss", "RT-DETR's Hungarian matching and whole loss against ultralytics'", run, (
    Param("batch", 8, "images", quick=2),
    Param("queries", 300, "queries", quick=30),
    Param("boxes", 50, "ground-truth boxes an image", quick=5),
    Param("classes", 80, "classes", quick=10),
    Param("layers", 6, "decoder layers of the loss", quick=2),
    Param("rounds", 9, "alternating rounds", quick=1),
    Param("iters", 10, "calls a round", quick=1),
    Param("threads", 1, "torch threads (1: the thread's CPU time as the clock)"),
    Param("which", ["match", "loss"], "what to time", choices=["match", "loss"]),
), requires=("ultralytics", "scipy"), doc=__doc__)
