"""Oriented-box detections from the head's output: the same boxes, scores and classes as ultralytics'
``non_max_suppression(..., rotated=True)`` on its own OBB model's output; the end-to-end head's top-k;
rotated boxes and keypoints back in original pixels as ultralytics' ``scale_boxes`` / ``scale_coords``."""
import math

import torch

from vision_attn.models.yolo.postprocess import keypoints_to_original, postprocess_rotated, rotated_to_original

from .peer_zoo import import_ultralytics, peer_model

ul_nms = import_ultralytics("ultralytics.utils.nms")
ul_ops = import_ultralytics("ultralytics.utils.ops")


def test_rotated_detections_equal_ultralytics_nms():
    peer = peer_model("v8/yolov8-obb.yaml", "n", "OBBModel")
    with torch.no_grad():
        pred, _ = peer(torch.rand(2, 3, 128, 128, generator=torch.Generator().manual_seed(0)))
    pred[:, 4:-1] = ((pred[:, 4:-1] - 0.46) * 10).clamp(0, 1)  # random weights give every class about 0.5
    for conf, iou, multi_label in ((0.25, 0.7, False), (0.7, 0.3, True)):
        ours = postprocess_rotated(pred, conf=conf, iou=iou, multi_label=multi_label)
        theirs = ul_nms.non_max_suppression(pred, conf, iou, multi_label=multi_label, nc=80, rotated=True)
        for got, want in zip(ours, theirs):  # want: (N, 7) x, y, w, h, score, class, angle
            assert len(got) == len(want) > 5
            torch.testing.assert_close(got.scores, want[:, 4])
            assert got.labels.tolist() == want[:, 5].long().tolist()
            # ultralytics' predictor reports each rectangle with its angle in [0, pi/2), as ours
            torch.testing.assert_close(got.boxes, ul_ops.regularize_rboxes(torch.cat((want[:, :4], want[:, 6:]), 1)))


def test_end_to_end_output_is_read_with_a_top_k():
    pred = torch.zeros(1, 4 + 2 + 1, 5)
    pred[0, :4] = torch.tensor([10.0, 10, 4, 2]).view(4, 1)
    pred[0, 4] = torch.tensor([0.9, 0.1, 0.5, 0.3, 0.2])
    pred[0, 6] = torch.arange(5.0)  # the angle of each anchor
    (dets,) = postprocess_rotated(pred, conf=0.25, end2end=True, max_det=3)
    assert dets.scores.tolist() == [0.8999999761581421, 0.5, 0.30000001192092896]
    assert dets.labels.tolist() == [0, 0, 0]
    # angles 0, 2 and 3 rad reported in [0, pi/2): 2 and 3 turn the box a quarter turn (w and h swapped)
    torch.testing.assert_close(dets.boxes, torch.tensor([[10.0, 10, 4, 2, 0.0], [10.0, 10, 2, 4, 2 - math.pi / 2],
                                                         [10.0, 10, 2, 4, 3 - math.pi / 2]]))


def test_rotated_boxes_and_keypoints_back_in_original_pixels():
    """A 480 x 640 image letterboxed to 320 x 320 (scale 0.5, 40 px of padding above and below)."""
    g = torch.Generator().manual_seed(3)
    rboxes = torch.cat((torch.rand(6, 4, generator=g) * 300 + 10, torch.rand(6, 1, generator=g) * 3), 1)
    kpts = torch.cat((torch.rand(6, 4, 2, generator=g) * 340 - 10, torch.rand(6, 4, 1, generator=g)), -1)
    ratio_pad = ((0.5, 0.5), (0, 40))
    ours = rotated_to_original(rboxes, scale=0.5, pad=(0, 40))
    theirs = ul_ops.scale_boxes((320, 320), rboxes.clone(), (480, 640), ratio_pad=ratio_pad, xywh=True)
    torch.testing.assert_close(ours, theirs)
    ours = keypoints_to_original(kpts, scale=(0.5, 0.5), pad=(0, 40), orig_size=(480, 640))
    theirs = ul_ops.scale_coords((320, 320), kpts.clone(), (480, 640), ratio_pad=ratio_pad)
    torch.testing.assert_close(ours, theirs)  # x, y clipped to the image, the visibility kept
    assert ours[..., 1].max() <= 480 and ours[..., 0].min() >= 0
