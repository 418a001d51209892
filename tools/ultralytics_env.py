"""ultralytics run offline, with its settings file in a temporary folder removed at exit.

Importing ultralytics writes a settings file to ``YOLO_CONFIG_DIR`` (else to the user's config folder)
and probes the network unless ``YOLO_OFFLINE`` is set. The tools that run ultralytics and the tests
that use it as a peer call :func:`quiet_ultralytics_environment` before importing it.
"""
from __future__ import annotations

import atexit
import os
import shutil
import tempfile


def quiet_ultralytics_environment() -> None:
    """Offline, and settings under a temporary folder removed at exit (made once per process; a
    ``YOLO_CONFIG_DIR`` already set is kept)."""
    os.environ["YOLO_OFFLINE"] = "1"
    if "YOLO_CONFIG_DIR" not in os.environ:
        folder = tempfile.mkdtemp(prefix="vision_attn-ultralytics-")
        atexit.register(shutil.rmtree, folder, True)
        os.environ["YOLO_CONFIG_DIR"] = folder
