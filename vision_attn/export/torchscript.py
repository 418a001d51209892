"""TorchScript export for C++ libtorch users: the network traced at its input size (``torch.jit.trace``),
written atomically, and loaded back for its parity check.

Tracing records the standard operators (the CPU fast paths of :mod:`vision_attn.kernels` stand aside
while a graph is captured), so the file runs in any libtorch of a compatible version. A traced graph
has the batch size free (the traced shapes of our models do not fix it) but the image size fixed;
trace again for another size.
"""
from __future__ import annotations

import os
import time
import warnings
from dataclasses import dataclass
from pathlib import Path

import torch
from torch import nn

from vision_attn.errors import ConfigError
from vision_attn.io.atomic import atomic_write

__all__ = ["TorchScriptExport", "export_torchscript", "load_torchscript"]


@dataclass
class TorchScriptExport:
    """What was written: the file, the traced input shape and the export seconds."""

    path: Path
    input_shape: tuple[int, ...]
    seconds: float


def export_torchscript(model: nn.Module, path: str | os.PathLike, input_size: tuple[int, int], *,
                       in_chans: int = 3) -> TorchScriptExport:
    """Trace ``model`` (eval mode, CPU) on a (1, in_chans, H, W) input and save it to ``path``; a tracer
    failure is a ConfigError naming the model, and nothing is left at ``path`` then."""
    model = model.eval()
    example = torch.randn(1, in_chans, *input_size)
    start = time.perf_counter()

    def write(tmp: str) -> None:
        with torch.no_grad(), warnings.catch_warnings():
            warnings.simplefilter("ignore", torch.jit.TracerWarning)  # shape arithmetic traced as constants
            try:
                traced = torch.jit.trace(model, example, check_trace=False)
            except Exception as e:  # noqa: BLE001 - the tracer raises many types; report one line
                detail = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
                raise ConfigError(f"TorchScript tracing of {type(model).__name__} at {input_size[0]}x{input_size[1]} "
                                  f"failed: {type(e).__name__}: {detail[:300]}") from None
        torch.jit.save(traced, tmp)

    atomic_write(path, write, suffix=".tmp.pt")
    return TorchScriptExport(Path(path), tuple(example.shape), time.perf_counter() - start)


def load_torchscript(path: str | os.PathLike) -> torch.jit.ScriptModule:
    """The TorchScript module at ``path`` on the CPU, in eval mode."""
    return torch.jit.load(str(path), map_location="cpu").eval()
