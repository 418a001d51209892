"""For tests that check which kernel path a layer took: the aten ops a call runs, and what code
prints in a fresh process with the CPU fast paths switched off from the environment."""
from __future__ import annotations

import os
import subprocess
import sys
from typing import Callable

from torch.utils._python_dispatch import TorchDispatchMode

# A ViT and a Swin small enough for a training step in a test: (name, create_model kwargs, img size).
SMALL_MODELS = [
    ("vit_tiny_patch16_224", dict(depth=2, embed_dim=48, num_heads=2, num_classes=7), 32),
    ("swin_tiny_patch4_window7_224", dict(depths=(2, 2), embed_dim=16, num_heads=(1, 2), window_size=4, num_classes=7), 32),
]


class OpLog(TorchDispatchMode):
    """Records the name of every op dispatched inside the ``with`` block in ``ops``."""

    def __init__(self) -> None:
        super().__init__()
        self.ops: list[str] = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.ops.append(str(func._overloadpacket))
        return func(*args, **(kwargs or {}))


def ops_of(fn: Callable[[], object]) -> list[str]:
    """The ops ``fn()`` dispatches, in order."""
    with OpLog() as log:
        fn()
    return log.ops


def printed_with_fast_paths_off(code: str) -> list[str]:
    """The words ``code`` prints, run by a new Python process with ``VISION_ATTN_KERNELS=aten`` (the
    kernel plan of PyTorch's standard kernels: every CPU fast path off; the variable is read at the
    process's first :func:`~vision_attn.kernels.current_plan`)."""
    env = {**os.environ, "VISION_ATTN_KERNELS": "aten"}
    return subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True).stdout.split()
