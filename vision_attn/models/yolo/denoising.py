"""Contrastive denoising queries (DN-DETR / DINO, as RT-DETR trains): noisy copies of the ground truth
that the decoder learns to reconstruct, next to its ordinary queries.

Each training image's boxes are repeated in G groups; a group holds a positive copy of every box
(its corners moved by up to half the box size, ``box_noise_scale`` x U(0, 1)) and a negative copy
(moved by 1 to 2 times that: the decoder should call it background). A share of the labels
(``cls_noise_ratio`` / 2) is replaced by a random class. G = ``num_dn`` // (the most boxes of an image),
so about ``num_dn`` positives are used whatever the batch holds; an image with more than ``num_dn``
boxes contributes a random subset of them. Queries are padded per image to the same count; the
attention mask keeps the groups apart and hides every denoising query from the ordinary ones (which
must not learn from the answers).

:func:`denoising_queries` follows ultralytics' ``get_cdn_group`` (the same draws in the same order:
with a :class:`torch.Generator` seeded as ultralytics' global seed, the same queries) and returns the
same ``dn_meta``.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping

import torch

from vision_attn.errors import DataError

__all__ = ["DenoisingQueries", "denoising_queries", "denoising_mask"]


@dataclass
class DenoisingQueries:
    """The decoder's extra queries for one batch.

    ``embed`` (B, num_dn, D): class embeddings of the noisy labels (zeros where an image has fewer
    boxes); ``boxes`` (B, num_dn, 4): the noisy boxes, inverse-sigmoid (logits) of normalised cx, cy,
    w, h; ``mask`` (num_dn + num_queries,)*2 bool, True where a query may not attend to a key;
    ``meta``: ultralytics' ``dn_meta``: ``dn_pos_idx`` (per image, the positions of its positive
    queries among the num_dn, group-major), ``dn_gt_idx`` (per image, the batch-wide index of the
    ground-truth box each positive reconstructs, one group's worth), ``dn_num_group`` (G) and
    ``dn_num_split`` ([num_dn, num_queries], how the decoder's queries split).
    """

    embed: torch.Tensor
    boxes: torch.Tensor
    mask: torch.Tensor
    meta: dict[str, Any]


def _xywh_to_xyxy(b: torch.Tensor) -> torch.Tensor:
    xy, half = b[..., :2], b[..., 2:] / 2
    return torch.cat([xy - half, xy + half], -1)


def _xyxy_to_xywh(b: torch.Tensor) -> torch.Tensor:
    return torch.cat([(b[..., :2] + b[..., 2:]) / 2, b[..., 2:] - b[..., :2]], -1)


def denoising_mask(num_dn: int, group_size: int, num_queries: int, device: torch.device | None = None) -> torch.Tensor:
    """(num_dn + num_queries,)*2 bool, True = hidden: a denoising query sees its own group (of
    ``group_size`` queries) and the ordinary queries; an ordinary query sees no denoising query."""
    group = torch.arange(num_dn, device=device) // group_size  # (num_dn,)
    mask = torch.zeros(num_dn + num_queries, num_dn + num_queries, dtype=torch.bool, device=device)
    mask[:num_dn, :num_dn] = group[:, None] != group[None, :]
    mask[num_dn:, :num_dn] = True
    return mask


def denoising_queries(batch: Mapping[str, Any] | None, num_classes: int, num_queries: int, class_embed: torch.Tensor,
                      num_dn: int = 100, cls_noise_ratio: float = 0.5, box_noise_scale: float = 1.0, *,
                      batch_size: int | None = None, generator: torch.Generator | None = None
                      ) -> DenoisingQueries | None:
    """The denoising queries of a batch, or None (no batch, ``num_dn`` <= 0, or no box in it).

    ``batch``: ``cls`` (N,) class indices, ``bboxes`` (N, 4) normalised cx, cy, w, h, ``batch_idx`` (N,)
    the image of each box (non-decreasing), and ``gt_groups`` (boxes per image; counted from
    ``batch_idx`` and ``batch_size`` when absent). ``class_embed`` (num_classes, D): the label
    embedding table. Random draws come from ``generator`` (on its device) or torch's global one.
    """
    if batch is None or num_dn <= 0:
        return None
    gt_cls, gt_bbox, b_idx = batch["cls"].long().view(-1), batch["bboxes"], batch["batch_idx"].long().view(-1)
    if "gt_groups" in batch:
        gt_groups = [int(n) for n in batch["gt_groups"]]
    else:
        bs = batch_size if batch_size is not None else int(b_idx.max()) + 1 if len(b_idx) else 0
        gt_groups = torch.bincount(b_idx, minlength=bs).tolist()
    if not gt_groups or max(gt_groups) == 0:
        return None
    if len(b_idx) > 1 and bool((b_idx[1:] < b_idx[:-1]).any()):
        raise DataError("denoising queries: the batch's boxes are not ordered by image (batch_idx must not decrease); "
                        "sort the targets by batch_idx")
    device = gt_bbox.device
    draw = generator.device if generator is not None else device  # where random numbers are drawn
    max_nums = min(max(gt_groups), num_dn)
    num_group = num_dn // max_nums
    gt_idx = torch.arange(sum(gt_groups), dtype=torch.long, device=device)
    if max(gt_groups) > max_nums:  # an image with more boxes than num_dn: a random subset of them
        offsets = [0, *torch.tensor(gt_groups[:-1]).cumsum(0).tolist()]
        gt_idx = torch.cat([torch.randperm(n, generator=generator, device=draw)[:max_nums].sort().values.to(device) + o
                            for n, o in zip(gt_groups, offsets)])
        gt_cls, gt_bbox, b_idx = gt_cls[gt_idx], gt_bbox[gt_idx], b_idx[gt_idx]
        gt_groups = [min(n, max_nums) for n in gt_groups]
    total = sum(gt_groups)
    copies = 2 * num_group  # a positive and a negative copy per group
    dn_cls = gt_cls.repeat(copies)  # (2 G T,)
    dn_bbox = gt_bbox.repeat(copies, 1)  # (2 G T, 4)
    dn_b_idx = b_idx.repeat(copies)
    if cls_noise_ratio > 0:
        flip = torch.rand(dn_cls.shape, generator=generator, device=draw if generator is not None else "cpu")
        idx = torch.nonzero(flip < cls_noise_ratio * 0.5).squeeze(-1).to(device)
        new = torch.randint(0, num_classes, idx.shape, generator=generator, device=draw, dtype=dn_cls.dtype)
        dn_cls[idx] = new.to(device)
    if box_noise_scale > 0:
        corners = _xywh_to_xyxy(dn_bbox)
        reach = (dn_bbox[..., 2:] * 0.5).repeat(1, 2) * box_noise_scale  # (2 G T, 4): half the box size
        sign = torch.randint(0, 2, dn_bbox.shape, generator=generator, device=draw, dtype=dn_bbox.dtype).to(device)
        part = torch.rand(dn_bbox.shape, generator=generator, device=draw, dtype=dn_bbox.dtype).to(device)
        negative = (torch.arange(copies * total, device=device) // total) % 2 == 1  # second copy of each group
        part = (part + negative[:, None].to(part.dtype)) * (sign * 2.0 - 1.0)
        corners = (corners + part * reach).clip(0.0, 1.0)
        dn_bbox = torch.logit(_xyxy_to_xywh(corners), eps=1e-6)
    num_dn = max_nums * copies
    counts = torch.tensor(gt_groups, device=device)
    starts = torch.cumsum(counts, 0) - counts  # first box of each image
    within = torch.arange(total, device=device) - starts.repeat_interleave(counts)  # (T,) position in its image
    slots = within.repeat(copies) + max_nums * torch.arange(copies, device=device).repeat_interleave(total)  # (2 G T,)
    bs = len(gt_groups)
    embed = torch.zeros(bs, num_dn, class_embed.shape[-1], device=device, dtype=class_embed.dtype)
    boxes = torch.zeros(bs, num_dn, 4, device=device, dtype=dn_bbox.dtype)
    embed[dn_b_idx, slots] = class_embed[dn_cls.to(class_embed.device)].to(device)
    boxes[dn_b_idx, slots] = dn_bbox
    pos_idx = within[None] + 2 * max_nums * torch.arange(num_group, device=device)[:, None]  # (G, T)
    meta = {
        "dn_pos_idx": [p.reshape(-1) for p in pos_idx.cpu().split(gt_groups, dim=1)],
        "dn_gt_idx": list(gt_idx.cpu().split(gt_groups)),
        "dn_num_group": num_group,
        "dn_num_split": [num_dn, num_queries],
    }
    mask = denoising_mask(num_dn, 2 * max_nums, num_queries, device=class_embed.device)
    return DenoisingQueries(embed.to(class_embed.device), boxes.to(class_embed.device), mask, meta)
