"""The oriented-box loss equals ultralytics' ``v8OBBLoss`` (and, for YOLO26's end-to-end head, its
``E2ELoss(v8OBBLoss)``) on the same predictions and targets; a near-perfect prediction gives a small box
term; gradients reach the angle branch."""
import torch

from tests.models.yolo.peer_zoo import peer_dict, peer_yaml, ultralytics_tasks
from tests.peers import import_ultralytics
from vision_attn.losses import EndToEndLoss, OBBLoss, detector_loss
from vision_attn.models.yolo import build_detector

ul_loss = import_ultralytics("ultralytics.utils.loss")
HYP = import_ultralytics("ultralytics.cfg").get_cfg(overrides={"epochs": 10})  # its default gains
assert (HYP.box, HYP.cls, HYP.dfl, HYP.angle, HYP.pose, HYP.kobj, HYP.rle) == (7.5, 0.5, 1.5, 1.0, 12.0, 1.0, 1.0)
SIZE = 96


def per_level(preds: dict, nc: int, reg_max: int) -> list[torch.Tensor]:
    """ultralytics' flat (B, 4*reg_max, A) boxes and (B, nc, A) scores -> our per-level maps."""
    flat = torch.cat((preds["boxes"], preds["scores"]), 1)
    sizes = [f.shape[-2:] for f in preds["feats"]]
    parts = flat.split([h * w for h, w in sizes], 2)
    return [p.reshape(p.shape[0], 4 * reg_max + nc, h, w) for p, (h, w) in zip(parts, sizes)]


def targets() -> tuple[list[torch.Tensor], list[torch.Tensor], dict]:
    rboxes = [torch.tensor([[30.0, 40.0, 40.0, 16.0, 0.3], [70.0, 60.0, 20.0, 30.0, 1.2], [10.0, 10.0, 1.5, 9.0, 0.1]]),
              torch.zeros(0, 5), torch.tensor([[48.0, 50.0, 60.0, 24.0, 0.8], [20.0, 75.0, 12.0, 12.0, 0.0]])]
    labels = [torch.tensor([0, 2, 1]), torch.zeros(0, dtype=torch.long), torch.tensor([1, 2])]
    cat = torch.cat(rboxes)
    norm = torch.cat((cat[:, :4] / SIZE, cat[:, 4:]), 1)
    batch = {"batch_idx": torch.tensor([0.0, 0, 0, 2, 2]), "cls": torch.cat(labels).float().view(-1, 1),
             "bboxes": norm}
    return rboxes, labels, batch


def peer_and_ours(rel: str):
    torch.manual_seed(0)
    peer = ultralytics_tasks.OBBModel(peer_dict(rel, "n"), nc=3, verbose=False).train()
    peer.args = HYP
    ours = build_detector(peer_yaml(rel), scale="n", num_classes=3)
    preds = peer(torch.rand(3, 3, SIZE, SIZE, generator=torch.Generator().manual_seed(1)))
    return peer, ours, preds


def test_matches_ultralytics_v8_obb_loss():
    peer, ours, preds = peer_and_ours("v8/yolov8-obb.yaml")
    rboxes, labels, batch = targets()
    feats = per_level(preds, 3, 16)
    parts = OBBLoss(ours)({"feats": feats, "angle": preds["angle"]}, rboxes, labels)
    total, items = ul_loss.v8OBBLoss(peer)(preds, batch)
    theirs = torch.stack([items[k] for k in ("box_loss", "cls_loss", "dfl_loss", "angle_loss")])
    mine = torch.stack([7.5 * parts.box, 0.5 * parts.cls, 1.5 * parts.dfl, parts.angle])
    assert (theirs > 0).all()  # every term is exercised
    torch.testing.assert_close(mine, theirs, rtol=1e-4, atol=1e-4)
    torch.testing.assert_close(parts.total * 3, total.sum().detach(), rtol=1e-4, atol=1e-4)  # ultralytics' x batch
    parts.total.backward()
    assert peer.model[-1].cv4[0][-1].weight.grad.abs().sum() > 0  # the angle branch learns


def test_yolo26_obb_matches_ultralytics_e2e_loss():
    peer, ours, preds = peer_and_ours("26/yolo26-obb.yaml")
    rboxes, labels, batch = targets()
    ours_preds = {k: {"feats": per_level(preds[k], 3, 1), "angle": preds[k]["angle"]} for k in ("one2many", "one2one")}
    loss = detector_loss(ours)
    assert isinstance(loss, EndToEndLoss) and isinstance(loss.one_to_one, OBBLoss) and loss.batch_keys == ("rboxes", "labels")
    loss.start_epoch(0, HYP.epochs)
    parts = loss.batch_loss(ours_preds, {"rboxes": rboxes, "labels": labels})
    total, items = ul_loss.E2ELoss(peer, ul_loss.v8OBBLoss)(preds, batch)
    theirs = torch.stack([items[k] for k in ("box_loss", "cls_loss", "l1_loss", "angle_loss")])
    mine = torch.stack([7.5 * parts.box, 0.5 * parts.cls, 1.5 * parts.dfl, parts.angle])
    torch.testing.assert_close(mine, theirs, rtol=1e-4, atol=1e-4)
    torch.testing.assert_close(parts.total * 3, total.sum().detach(), rtol=1e-4, atol=1e-4)


def test_no_target_in_the_batch_gives_a_finite_loss_with_a_graph():
    _, ours, preds = peer_and_ours("v8/yolov8-obb.yaml")
    parts = OBBLoss(ours)({"feats": per_level(preds, 3, 16), "angle": preds["angle"]}, [torch.zeros(0, 5)] * 3,
                          [torch.zeros(0, dtype=torch.long)] * 3)
    assert parts.box == 0 and parts.angle == 0 and parts.cls > 0 and parts.total.requires_grad
