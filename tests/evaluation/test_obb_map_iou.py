"""Which IoU `eval obb` matches with: the polygons' exact one, which sees a near-square box turned by 45 degrees
(ultralytics' ``batch_probiou`` does not: a square's Gaussian is round); ``obb_map(iou=...)`` swaps it, so the
same detections can be scored under ultralytics' convention."""
import numpy as np
import pytest

from tests.peers import import_ultralytics
from vision_attn.evaluation import obb_map

metrics = import_ultralytics("ultralytics.utils.metrics")


def probiou(a, b):
    return metrics.batch_probiou(np.asarray(a, np.float64), np.asarray(b, np.float64)).numpy()


def _scored(turn_deg, **kw):
    truth = [{"image_id": 1, "rboxes": np.array([[50.0, 50.0, 20.0, 20.0, 0.0]]), "labels": np.array([0]),
              "orig_size": (100, 100)}]
    found = [{"image_id": 1, "rboxes": np.array([[50.0, 50.0, 20.0, 20.0, np.radians(turn_deg)]]),
              "scores": np.array([0.9]), "labels": np.array([0])}]
    return obb_map(truth, found, names=["a"], category_ids=[1], **kw)


def test_a_square_turned_45_degrees_is_half_right_by_polygon_iou_and_all_right_by_probiou():
    exact = _scored(45)  # IoU 0.707: counted at .50 ... .70, missed at .75 ... .95
    assert exact.map50 == pytest.approx(1.0) and exact.map == pytest.approx(0.5)
    loose = _scored(45, iou=probiou)  # ProbIoU 1: the same Gaussian, whatever the angle
    assert probiou([[0, 0, 20, 20, 0]], [[0, 0, 20, 20, np.radians(45)]])[0, 0] == pytest.approx(1.0, abs=1e-3)
    assert loose.map50 == pytest.approx(1.0) and loose.map == pytest.approx(1.0)
    assert _scored(0).map == pytest.approx(1.0)  # the same box: 1 by either


def test_probiou_exceeds_polygon_iou_on_a_moved_box():
    truth = [{"image_id": 1, "rboxes": np.array([[50.0, 50.0, 20.0, 20.0, 0.0]]), "labels": np.array([0]),
              "orig_size": (100, 100)}]
    found = [{"image_id": 1, "rboxes": np.array([[54.0, 50.0, 20.0, 20.0, 0.0]]),  # IoU 16/24 = 0.667
              "scores": np.array([0.9]), "labels": np.array([0])}]
    exact = obb_map(truth, found, names=["a"], category_ids=[1])
    loose = obb_map(truth, found, names=["a"], category_ids=[1], iou=probiou)
    assert exact.map == pytest.approx(0.4)  # .50 ... .65
    assert loose.map > exact.map  # ProbIoU 0.76 here: counted up to .75
