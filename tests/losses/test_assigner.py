"""The task-aligned assigner on a hand-made 4x4 grid (stride 1): which anchors each box gets."""
import torch

from vision_attn.losses import TaskAlignedAssigner, anchors_in_boxes

POINTS = torch.stack(torch.meshgrid(torch.arange(4.0), torch.arange(4.0), indexing="xy"), -1).view(-1, 2) + 0.5


def _small_boxes() -> torch.Tensor:
    """Every anchor predicts the unit square around itself."""
    return torch.cat((POINTS - 0.5, POINTS + 0.5), -1).unsqueeze(0).clone()  # (1, 16, 4)


def _assign(pred_boxes, gt_boxes, gt_labels, topk, scores=None, min_side=0.0):
    scores = torch.full((1, 16, 2), 0.5) if scores is None else scores
    mask = torch.ones(gt_labels.shape, dtype=torch.bool)
    return TaskAlignedAssigner(topk=topk, min_side=min_side)(scores, pred_boxes, POINTS, gt_labels, gt_boxes, mask)


def test_candidates_are_the_anchor_centres_strictly_inside_the_box():
    inside = anchors_in_boxes(POINTS, torch.tensor([[[0.0, 0.0, 2.0, 2.0], [1.0, 1.0, 4.0, 3.0]]]))
    assert inside[0, 0].nonzero().flatten().tolist() == [0, 1, 4, 5]
    assert inside[0, 1].nonzero().flatten().tolist() == [5, 6, 7, 9, 10, 11]
    # a box smaller than min_side looks for candidates in a box of that side about its centre
    tiny = torch.tensor([[[1.9, 1.9, 2.1, 2.1]]])
    assert not anchors_in_boxes(POINTS, tiny).any()
    assert anchors_in_boxes(POINTS, tiny, min_side=2.0)[0, 0].nonzero().flatten().tolist() == [5, 6, 9, 10]


def test_top_k_best_aligned_anchors_are_picked_and_a_shared_anchor_goes_to_its_best_overlap():
    pred = _small_boxes()
    pred[0, 0] = torch.tensor([0.0, 0.0, 2.0, 2.0])  # exact box A
    pred[0, 1] = torch.tensor([0.0, 0.0, 2.0, 1.8])  # nearly box A
    pred[0, 5] = torch.tensor([1.0, 1.0, 4.0, 4.0])  # exact box B (and a poor fit of A)
    pred[0, 15] = torch.tensor([1.2, 1.2, 4.0, 4.0])  # nearly box B
    gt = torch.tensor([[[0.0, 0.0, 2.0, 2.0], [1.0, 1.0, 4.0, 4.0]]])
    labels = torch.tensor([[0, 1]])

    out = _assign(pred, gt, labels, topk=2)
    assert out.foreground[0].nonzero().flatten().tolist() == [0, 1, 5, 15]
    assert out.gt_index[0, [0, 1, 5, 15]].tolist() == [0, 0, 1, 1]
    assert torch.equal(out.boxes[0, 5], gt[0, 1]) and torch.equal(out.boxes[0, 1], gt[0, 0])
    # class targets: one-hot, scaled so the best anchor of each box gets its IoU (1 here), others less
    assert out.scores[0, 0].tolist() == [1.0, 0.0] and out.scores[0, 5].tolist() == [0.0, 1.0]
    assert 0 < out.scores[0, 1, 0] < 1 and out.scores[0, 1, 1] == 0
    assert out.scores[~out.foreground].abs().sum() == 0

    # with topk 4, box A also takes anchor 5 (a candidate of both): it stays with box B, its best overlap
    wide = _assign(pred, gt, labels, topk=4)
    assert wide.gt_index[0, 5] == 1 and wide.foreground[0, 4]
    assert (wide.gt_index[0][wide.foreground[0]] == 0).sum() == 3  # anchors 0, 1, 4


def test_padding_rows_and_a_batch_without_boxes_assign_nothing():
    pred = _small_boxes()
    gt = torch.tensor([[[0.0, 0.0, 2.0, 2.0], [0.0, 0.0, 0.0, 0.0]]])
    mask = torch.tensor([[True, False]])
    out = TaskAlignedAssigner(topk=10)(torch.full((1, 16, 2), 0.5), pred, POINTS, torch.tensor([[1, 0]]), gt, mask)
    assert out.foreground[0].nonzero().flatten().tolist() == [0, 1, 4, 5]
    assert (out.gt_index[0][out.foreground[0]] == 0).all() and torch.isfinite(out.scores).all()
    empty = TaskAlignedAssigner()(torch.full((2, 16, 2), 0.5), pred.expand(2, -1, -1), POINTS,
                                  torch.zeros(2, 0, dtype=torch.long), torch.zeros(2, 0, 4),
                                  torch.zeros(2, 0, dtype=torch.bool))
    assert not empty.foreground.any() and empty.scores.shape == (2, 16, 2)
