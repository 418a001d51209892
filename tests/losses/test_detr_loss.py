"""The RT-DETR loss: the same Hungarian assignment as ultralytics' ``HungarianMatcher``, and the same twelve
terms, total and gradients as ``RTDETRDetectionLoss(use_vfl=True)`` fed the way its ``RTDETRDetectionModel``
feeds it (denoising groups from its own ``get_cdn_group``); finite with no box at all."""
from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest
import torch

from vision_attn.errors import ConfigError, DataError
from vision_attn.losses.detr import RTDETRLoss, detr_targets
from vision_attn.losses.matcher import HungarianMatcher
from tests.peers import import_ultralytics

L, Q, NC, SIZE = 3, 30, 5, (64, 96)  # decoder layers, queries, classes, input (H, W)


def _targets(counts: list[int], seed: int) -> tuple[list[torch.Tensor], list[torch.Tensor]]:
    """Random xyxy boxes in input pixels and labels, ``counts[i]`` for image i."""
    g = torch.Generator().manual_seed(seed)
    h, w = SIZE
    boxes, labels = [], []
    for n in counts:
        lo = torch.rand(n, 2, generator=g) * 0.7
        hi = lo + 0.05 + torch.rand(n, 2, generator=g) * 0.25
        boxes.append(torch.cat((lo, hi), 1) * torch.tensor([w, h, w, h]))
        labels.append(torch.randint(0, NC, (n,), generator=g))
    return boxes, labels


def _peer_batch(boxes: list[torch.Tensor], labels: list[torch.Tensor]) -> dict[str, Any]:
    """The targets as ultralytics' trainer hands them to ``RTDETRDetectionModel.loss``."""
    h, w = SIZE
    xyxy = torch.cat(boxes)
    xywh = torch.cat(((xyxy[:, :2] + xyxy[:, 2:]) / 2, xyxy[:, 2:] - xyxy[:, :2]), 1) / torch.tensor([w, h, w, h])
    batch_idx = torch.cat([torch.full((len(b),), float(i)) for i, b in enumerate(boxes)])
    return {"img": torch.zeros(len(boxes), 3, h, w), "batch_idx": batch_idx,
            "cls": torch.cat(labels).float().view(-1, 1), "bboxes": xywh}


def _predictions(b: int, dn_meta: dict[str, Any] | None, seed: int) -> list[torch.Tensor]:
    """Random decoder training outputs: dec boxes/logits (L, B, num_dn + Q, .), encoder top-k (B, Q, .)."""
    g = torch.Generator().manual_seed(seed)
    q = Q + (dn_meta["dn_num_split"][0] if dn_meta else 0)
    return [torch.randn(L, b, q, 4, generator=g).sigmoid(), torch.randn(L, b, q, NC, generator=g) * 2,
            torch.randn(b, Q, 4, generator=g).sigmoid(), torch.randn(b, Q, NC, generator=g) * 2]


def _dn_meta(boxes: list[torch.Tensor], labels: list[torch.Tensor], num_dn: int) -> dict[str, Any] | None:
    """Denoising groups from ultralytics' own ``get_cdn_group`` on the peer's targets (fixed seed)."""
    ops = import_ultralytics("ultralytics.models.utils.ops")
    batch = _peer_batch(boxes, labels)
    targets = {"cls": batch["cls"].long().view(-1), "bboxes": batch["bboxes"],
               "batch_idx": batch["batch_idx"].long(), "gt_groups": [len(x) for x in boxes]}
    torch.manual_seed(3)
    return ops.get_cdn_group(targets, NC, Q, torch.randn(NC, 8), num_dn=num_dn, training=True)[3]


def _peer(preds: list[torch.Tensor], dn_meta: dict[str, Any] | None, boxes: list[torch.Tensor],
          labels: list[torch.Tensor], aux: bool = True) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """ultralytics' total and twelve terms, through ``RTDETRDetectionModel.loss`` (its split and encoder concat)."""
    loss_mod = import_ultralytics("ultralytics.models.utils.loss")
    tasks = import_ultralytics("ultralytics.nn.tasks")
    seen: dict[str, torch.Tensor] = {}

    class Recording(loss_mod.RTDETRDetectionLoss):
        def forward(self, *args: Any, **kwargs: Any) -> dict[str, torch.Tensor]:
            seen.update(super().forward(*args, **kwargs))
            return seen

    owner = SimpleNamespace(criterion=Recording(nc=NC, use_vfl=True, aux_loss=aux), training=True)
    total, _ = tasks.RTDETRDetectionModel.loss(owner, _peer_batch(boxes, labels), (*preds, dn_meta))
    return total, seen


def _leaves(preds: list[torch.Tensor]) -> list[torch.Tensor]:
    return [p.detach().clone().requires_grad_(True) for p in preds]


@pytest.mark.parametrize(("counts", "num_dn"), [([5, 0], 20), ([0, 4, 12], 10)])
def test_terms_total_and_gradients_match_ultralytics(counts: list[int], num_dn: int) -> None:
    boxes, labels = _targets(counts, seed=len(counts))
    dn_meta = _dn_meta(boxes, labels, num_dn)
    assert dn_meta is not None and dn_meta["dn_num_group"] >= 1
    if max(counts) > num_dn:  # the peer denoises a subset of a crowded image: its dn_gt_idx says which
        assert len(dn_meta["dn_gt_idx"][-1]) == num_dn
    preds = _predictions(len(counts), dn_meta, seed=7)
    ours_in, theirs_in = _leaves(preds), _leaves(preds)

    ours = RTDETRLoss()((*ours_in, dn_meta), boxes, labels, input_size=SIZE)
    theirs_total, theirs = _peer(theirs_in, dn_meta, boxes, labels)
    assert set(ours.terms) == set(theirs)
    for key, value in theirs.items():
        assert torch.allclose(ours.terms[key], value.detach(), atol=1e-4), (key, ours.terms[key], value)
    assert torch.allclose(ours.total, theirs_total, atol=1e-4)
    assert torch.allclose(torch.stack((ours.cls, 5 * ours.l1, 2 * ours.giou)),
                          torch.stack([theirs[k] for k in ("loss_class", "loss_bbox", "loss_giou")]), atol=1e-4)
    assert ours.dn > 0 and ours.aux > 0 and not ours.cls.requires_grad

    ours.total.backward()
    theirs_total.backward()
    for mine, peer in zip(ours_in, theirs_in):
        assert torch.allclose(mine.grad, peer.grad, atol=1e-4), (mine.grad - peer.grad).abs().max()


def test_without_denoising_matches_ultralytics_and_has_no_dn_term() -> None:
    boxes, labels = _targets([3, 6], seed=11)
    preds = _predictions(2, None, seed=12)
    ours_in, theirs_in = _leaves(preds), _leaves(preds)
    ours = RTDETRLoss()((*ours_in, None), boxes, labels, input_size=SIZE)
    theirs_total, theirs = _peer(theirs_in, None, boxes, labels)
    assert ours.dn == 0 and all(theirs[k] == 0 for k in theirs if k.endswith("_dn"))
    assert torch.allclose(ours.total, theirs_total, atol=1e-4)
    ours.total.backward()
    theirs_total.backward()
    for mine, peer in zip(ours_in, theirs_in):
        assert torch.allclose(mine.grad, peer.grad, atol=1e-4)


def test_without_auxiliary_terms_matches_ultralytics() -> None:
    boxes, labels = _targets([2, 4], seed=21)
    dn_meta = _dn_meta(boxes, labels, 20)
    preds = _predictions(2, dn_meta, seed=22)
    ours = RTDETRLoss(aux=False)((*preds, dn_meta), boxes, labels, input_size=SIZE)
    theirs_total, theirs = _peer(preds, dn_meta, boxes, labels, aux=False)
    assert ours.aux == 0 and ours.dn > 0 and not any("_aux" in k for k in theirs)
    assert torch.allclose(ours.total, theirs_total, atol=1e-4)


def test_a_batch_without_boxes_is_finite_and_matches_ultralytics() -> None:
    boxes, labels = _targets([0, 0], seed=1)
    assert _dn_meta(boxes, labels, 20) is None  # the peer's decoder makes no denoising group then
    preds = _predictions(2, None, seed=2)
    ours_in, theirs_in = _leaves(preds), _leaves(preds)
    ours = RTDETRLoss()((*ours_in, None), boxes, labels, input_size=SIZE)
    theirs_total, _ = _peer(theirs_in, None, boxes, labels)
    assert torch.isfinite(ours.total) and ours.l1 == 0 and ours.giou == 0 and ours.cls > 0
    assert torch.allclose(ours.total, theirs_total, atol=1e-4)  # ultralytics' focal loss on all-zero targets
    ours.total.backward()
    assert all(torch.isfinite(p.grad).all() for p in ours_in)
    assert ours_in[1].grad.abs().sum() > 0 and ours_in[0].grad.abs().sum() == 0  # only the scores learn


def test_the_assignment_equals_ultralytics_hungarian_matcher() -> None:
    ops = import_ultralytics("ultralytics.models.utils.ops")
    counts = [3, 0, 8, 35]  # the last image has more boxes than queries: only Q pairs
    boxes, labels = _targets(counts, seed=5)
    batch = _peer_batch(boxes, labels)
    g = torch.Generator().manual_seed(6)
    pred_boxes, logits = torch.randn(len(counts), Q, 4, generator=g).sigmoid(), torch.randn(len(counts), Q, NC,
                                                                                             generator=g)
    theirs = ops.HungarianMatcher(cost_gain={"class": 2, "bbox": 5, "giou": 2})(
        pred_boxes, logits, batch["bboxes"], batch["cls"].long().view(-1), counts)
    targets = detr_targets(boxes, labels, SIZE)
    padded_boxes = torch.nn.utils.rnn.pad_sequence(targets["bboxes"].split(counts), batch_first=True)
    padded_labels = torch.nn.utils.rnn.pad_sequence(targets["cls"].split(counts), batch_first=True)
    ours = HungarianMatcher()(pred_boxes[None], logits[None], padded_boxes, padded_labels, counts)
    assert ours.per_layer == 3 + 8 + Q and len(ours.query) == ours.per_layer
    offsets = [0, 3, 3, 11]
    for i, (rows, cols) in enumerate(theirs):
        mine = ours.image == i
        assert torch.equal(ours.query[mine], rows) and torch.equal(ours.target[mine] + offsets[i], cols), i


def test_targets_in_the_decoder_layout_and_bad_input() -> None:
    boxes = [torch.tensor([[0.0, 0.0, 48.0, 32.0]]), torch.zeros(0, 4), torch.tensor([[24.0, 16.0, 96.0, 64.0]])]
    labels = [torch.tensor([2]), torch.zeros(0, dtype=torch.long), torch.tensor([4])]
    t = detr_targets(boxes, labels, SIZE)
    assert torch.allclose(t["bboxes"], torch.tensor([[0.25, 0.25, 0.5, 0.5], [0.625, 0.625, 0.75, 0.75]]))
    assert t["batch_idx"].tolist() == [0, 2] and t["cls"].tolist() == [2, 4] and t["gt_groups"] == [1, 0, 1]

    preds = _predictions(3, None, seed=0)
    with pytest.raises(DataError, match="class index 5 but the decoder predicts 5 classes"):
        RTDETRLoss()((*preds, None), boxes, [labels[0], labels[1], torch.tensor([5])], input_size=SIZE)
    meta = {"dn_pos_idx": [torch.arange(2)], "dn_num_group": 1, "dn_num_split": [0, Q]}
    with pytest.raises(DataError, match=r"dn_pos_idx'\] has 1 entries for 3 images"):
        RTDETRLoss()((*preds, meta), boxes, labels, input_size=SIZE)
    meta = {"dn_pos_idx": [torch.arange(1), torch.arange(0), torch.arange(1)], "dn_gt_idx": [torch.tensor([0]),
            torch.tensor([], dtype=torch.long), torch.tensor([0])], "dn_num_group": 1, "dn_num_split": [0, Q]}
    with pytest.raises(DataError, match=r"dn_gt_idx'\]\[2\] names targets outside image 2's 1"):
        RTDETRLoss()((*preds, meta), boxes, labels, input_size=SIZE)  # global indices: image 2's box is 1
    with pytest.raises(ConfigError, match="dec_bboxes \\(L, B, Q, 4\\)"):
        RTDETRLoss()((preds[0][0], *preds[1:], None), boxes, labels, input_size=SIZE)
