"""tools/suites/explain_peaks.py's ceilings for a classifier's maps: where a map on a coarse grid, resized to
the input as pytorch-grad-cam resizes it, can peak at all, and the peak of each cell's share of the object."""
import itertools

import numpy as np
from pytorch_grad_cam.utils.image import scale_cam_image

from tools.suites.explain_peaks import _oracle_peak, _peak_pixels


def test_a_4x4_map_at_16_px_can_peak_at_36_pixels_only():
    peaks = _peak_pixels((4, 4), (16, 16))
    near_centres = [0, 5, 6, 9, 10, 14]  # bilinear, half-pixel centres: a border cell's first pixel, inner cells' middle two
    assert peaks == list(itertools.product(near_centres, near_centres))
    rng = np.random.default_rng(0)
    for cam in rng.random((300, 1, 4, 4)).astype(np.float32):
        heat = scale_cam_image(cam, (16, 16))[0]
        assert np.unravel_index(int(np.argmax(heat)), heat.shape) in peaks


def test_the_oracle_map_peaks_in_the_cell_with_most_of_the_object():
    mask = np.zeros((16, 16), bool)
    mask[8:12, 4:8] = True  # all of cell (2, 1)
    mask[0, 0:2] = True  # a little of cell (0, 0)
    y, x = _oracle_peak(mask, (4, 4))
    assert (y // 4, x // 4) == (2, 1) and mask[y, x]
