"""ultralytics as a test-only peer: imported offline, with its settings in a temporary folder, and
the process-wide settings its import changes put back.

ultralytics (AGPL) is installed by ``make test`` from requirements-test.txt; where it is missing the
tests that need it skip. Importing it writes a settings file (to ``YOLO_CONFIG_DIR``), probes the
network unless ``YOLO_OFFLINE`` is set, and changes numpy's and torch's print options and OpenCV's
thread count for the whole process, which would leak into unrelated tests of the same worker.
"""
from __future__ import annotations

from types import ModuleType

import numpy as np
import pytest
import torch
from PIL import Image

from tools.ultralytics_env import quiet_ultralytics_environment

__all__ = ["import_ultralytics", "quiet_ultralytics_environment"]


def import_ultralytics(module: str = "ultralytics.nn.tasks") -> ModuleType:
    """Import ``module`` of ultralytics (skipping the test module where it is not installed)."""
    quiet_ultralytics_environment()
    numpy_print = np.get_printoptions()
    torch_print = {k: getattr(torch._tensor_str.PRINT_OPTS, k)
                   for k in ("precision", "threshold", "edgeitems", "linewidth", "sci_mode")}
    threads = torch.get_num_threads()
    pil_open = Image.open  # ultralytics replaces it with a wrapper that pip-installs pi-heif on a bad file
    cv2 = pytest.importorskip("cv2")
    cv2_threads = cv2.getNumThreads()
    try:
        return pytest.importorskip(module)
    finally:
        np.set_printoptions(**numpy_print)
        torch.set_printoptions(**torch_print)
        torch.set_num_threads(threads)
        cv2.setNumThreads(cv2_threads)
        Image.open = pil_open
