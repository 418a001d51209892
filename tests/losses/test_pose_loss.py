"""The keypoint loss equals ultralytics' ``v8PoseLoss`` on the same predictions and targets, with COCO's
sigmas for (17, 3) keypoints and with a data set's own sigmas for (4, 2) keypoints; YOLO26's equals its
``E2ELoss(PoseLoss26)``; bad keypoint input is named."""
import pytest
import torch
from pycocotools import cocoeval

from tests.models.yolo.peer_zoo import peer_dict, peer_yaml, ultralytics_tasks
from tests.peers import import_ultralytics
from vision_attn.errors import ConfigError, DataError
from vision_attn.data.keypoints import COCO_SIGMAS
from vision_attn.losses import Pose26Loss, PoseLoss, detector_loss, keypoint_sigmas
from vision_attn.models.yolo import build_detector

from .test_obb_loss import HYP, SIZE, per_level

ul_loss = import_ultralytics("ultralytics.utils.loss")
ul_metrics = import_ultralytics("ultralytics.utils.metrics")


def targets(k: int, d: int) -> tuple[list[torch.Tensor], list[torch.Tensor], list[torch.Tensor], dict]:
    g = torch.Generator().manual_seed(2)
    boxes = [torch.tensor([[10.0, 12.0, 50.0, 70.0], [40.0, 30.0, 90.0, 60.0]]), torch.zeros(0, 4),
             torch.tensor([[20.0, 20.0, 80.0, 90.0]])]
    labels = [torch.tensor([0, 1]), torch.zeros(0, dtype=torch.long), torch.tensor([1])]
    keypoints = []
    for bx in boxes:
        n = len(bx)
        xy = bx[:, None, :2] + torch.rand(n, k, 2, generator=g) * (bx[:, None, 2:] - bx[:, None, :2])
        vis = torch.randint(0, 3, (n, k, 1), generator=g).float()  # 0: not labelled, 1, 2: labelled
        keypoints.append(torch.cat((xy, vis), -1)[..., :d])
    xyxy = torch.cat(boxes)
    xywh = torch.cat(((xyxy[:, :2] + xyxy[:, 2:]) / 2, xyxy[:, 2:] - xyxy[:, :2]), 1) / SIZE
    kp = torch.cat(keypoints).clone()
    kp[..., :2] /= SIZE
    batch = {"batch_idx": torch.tensor([0.0, 0, 2]), "cls": torch.cat(labels).float().view(-1, 1), "bboxes": xywh,
             "keypoints": kp}
    return boxes, labels, keypoints, batch


@pytest.mark.parametrize("kpt_shape,sigmas", [((17, 3), None), ((4, 2), (0.05, 0.1, 0.07, 0.02))])
def test_matches_ultralytics_v8_pose_loss(kpt_shape, sigmas):
    torch.manual_seed(0)
    rel = "v8/yolov8-pose.yaml"
    peer = ultralytics_tasks.PoseModel(peer_dict(rel, "n"), nc=2, data_kpt_shape=kpt_shape, verbose=False).train()
    peer.args = HYP
    if sigmas is not None:
        peer.kpt_oks_sigmas = torch.tensor(sigmas)  # a data set's sigmas, as ultralytics' trainer sets them
    ours = build_detector(peer_yaml(rel), scale="n", num_classes=2, kpt_shape=kpt_shape)
    preds = peer(torch.rand(3, 3, SIZE, SIZE, generator=torch.Generator().manual_seed(1)))
    boxes, labels, keypoints, batch = targets(*kpt_shape)
    loss = detector_loss(ours, kpt_sigmas=sigmas)
    assert isinstance(loss, PoseLoss) and loss.batch_keys == ("boxes", "labels", "keypoints")
    parts = loss.batch_loss({"feats": per_level(preds, 2, 16), "kpts": preds["kpts"]},
                            {"boxes": boxes, "labels": labels, "keypoints": keypoints})
    total, items = ul_loss.v8PoseLoss(peer)(preds, batch)
    names = ("box_loss", "pose_loss", "kobj_loss", "cls_loss", "dfl_loss")
    theirs = torch.stack([items[k] for k in names])
    mine = torch.stack([7.5 * parts.box, 12 * parts.pose, parts.kobj, 0.5 * parts.cls, 1.5 * parts.dfl])
    assert (theirs[[0, 1, 3, 4]] > 0).all() and (theirs[2] > 0) == (kpt_shape[1] == 3)
    torch.testing.assert_close(mine, theirs, rtol=1e-4, atol=1e-5)
    torch.testing.assert_close(parts.total * 3, total.sum().detach(), rtol=1e-4, atol=1e-4)
    parts.total.backward()
    assert peer.model[-1].cv4[0][-1].weight.grad.abs().sum() > 0  # the keypoint branch learns


def test_coco_sigmas_are_ultralytics_and_pycocotools_ones():
    ours = keypoint_sigmas((17, 3)).double()  # the loss's default for COCO's 17 keypoints
    assert torch.allclose(ours, torch.from_numpy(COCO_SIGMAS).double())
    assert torch.allclose(ours, torch.from_numpy(ul_metrics.OKS_SIGMA).double())
    assert torch.allclose(ours, torch.from_numpy(cocoeval.Params(iouType="keypoints").kpt_oks_sigmas).double())


def test_bad_keypoints_are_named():
    with torch.device("meta"):
        model = build_detector(peer_yaml("v8/yolov8-pose.yaml"), scale="n", kpt_shape=(4, 3))
    model.to_empty(device="cpu")
    model.model[-1].stride.copy_(torch.tensor(model.stride))
    loss = PoseLoss(model)
    preds = model.train()(torch.zeros(1, 3, 64, 64))
    box, label = [torch.tensor([[8.0, 8.0, 40.0, 40.0]])], [torch.tensor([0])]
    with pytest.raises(DataError, match=r"image 0 of the batch has keypoints of shape \(1, 5, 3\); expected \(1, 4, 2 "
                                        r"or 3\)"):
        loss(preds, box, label, [torch.zeros(1, 5, 3)])
    with pytest.raises(DataError, match="image 0 of the batch has 1 boxes but 0 keypoint sets"):
        loss(preds, box, label, [torch.zeros(0, 4, 3)])
    with pytest.raises(ConfigError, match=r"keypoint sigmas \[0.5\] must be 4 positive numbers"):
        PoseLoss(model, sigmas=[0.5])
    with pytest.raises(ConfigError, match="YOLO26's keypoint loss needs a Pose26 head"):
        Pose26Loss(model)


def test_yolo26_pose_matches_ultralytics_e2e_pose_loss26():
    """YOLO26's keypoint loss (keypoint-aware assignment, residual log-likelihood through the head's flow)
    in both branches, weighted as ultralytics' ``E2ELoss(PoseLoss26)`` at the first epoch."""
    torch.manual_seed(0)
    rel = "26/yolo26-pose.yaml"
    peer = ultralytics_tasks.PoseModel(peer_dict(rel, "n"), nc=2, verbose=False).train()
    peer.args = HYP
    ours = build_detector(peer_yaml(rel), scale="n", num_classes=2)
    ours.model[-1].flow_model = peer.model[-1].flow_model  # the flow's weights are part of the loss
    preds = peer(torch.rand(3, 3, SIZE, SIZE, generator=torch.Generator().manual_seed(1)))
    boxes, labels, keypoints, batch = targets(17, 3)
    loss = detector_loss(ours)
    assert isinstance(loss.one_to_one, Pose26Loss)
    loss.start_epoch(0, HYP.epochs)
    ours_preds = {k: {"feats": per_level(preds[k], 2, 1), "kpts": preds[k]["kpts"], "kpts_sigma": preds[k]["kpts_sigma"]}
                  for k in ("one2many", "one2one")}
    parts = loss.batch_loss(ours_preds, {"boxes": boxes, "labels": labels, "keypoints": keypoints})
    total, items = ul_loss.E2ELoss(peer, ul_loss.PoseLoss26)(preds, batch)
    names = ("box_loss", "pose_loss", "kobj_loss", "cls_loss", "l1_loss", "rle_loss")
    theirs = torch.stack([items[k] for k in names])
    mine = torch.stack([7.5 * parts.box, 12 * parts.pose, parts.kobj, 0.5 * parts.cls, 1.5 * parts.dfl, parts.rle])
    assert (theirs != 0).all()
    torch.testing.assert_close(mine, theirs, rtol=1e-4, atol=1e-5)
    torch.testing.assert_close(parts.total * 3, total.sum().detach(), rtol=1e-4, atol=1e-4)
    parts.total.backward()
    assert all(p.grad is not None for p in peer.model[-1].flow_model.parameters())  # the flow learns too
