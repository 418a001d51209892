"""Which precisions this CPU computes natively: :func:`cpu_has_bf16` and :func:`runnable_precision`.

bfloat16 arithmetic is native where the CPU has the instructions (x86: AVX-512 BF16 or AMX-BF16;
Arm: the BF16 extension). Elsewhere PyTorch emulates it through float32 conversions, several times
slower than float32 itself, while OpenVINO's ``bf16`` hint quietly runs float32. A bf16 request on such
a CPU therefore runs float32 and says so in one warning (the precision the hardware has), so that
every runtime of a comparison runs what it claims.
"""
from __future__ import annotations

import functools
import platform
import warnings
from pathlib import Path

import torch

__all__ = ["cpu_has_bf16", "runnable_precision", "BF16_FLAGS"]

BF16_FLAGS = ("avx512_bf16", "amx_bf16", "bf16")
"""The /proc/cpuinfo flags of native bfloat16 arithmetic (x86's two, Arm's ``bf16`` feature)."""


def _cpu_flags(cpuinfo: str) -> set[str]:
    return {flag for line in cpuinfo.splitlines() if line.split(":")[0].strip() in ("flags", "Features")
            for flag in line.split(":", 1)[1].split()}


@functools.cache
def cpu_has_bf16() -> bool:
    """Whether this CPU has bfloat16 instructions (read from /proc/cpuinfo on Linux; elsewhere
    oneDNN's own check)."""
    info = Path("/proc/cpuinfo")
    if platform.system() == "Linux" and info.is_file():
        return bool(_cpu_flags(info.read_text(errors="replace")) & set(BF16_FLAGS))
    return bool(torch.ops.mkldnn._is_mkldnn_bf16_supported())


def runnable_precision(precision: str, device: str | torch.device = "cpu") -> str:
    """``precision`` (``"fp32"`` or ``"bf16"``) as it runs on ``device``: ``"bf16"`` on a CPU without
    bfloat16 instructions runs ``"fp32"``, with a one-line warning saying why."""
    if precision == "bf16" and torch.device(device).type == "cpu" and not cpu_has_bf16():
        warnings.warn("--precision bf16: this CPU has no bfloat16 instructions (avx512_bf16, amx_bf16), where "
                      "bf16 would run emulated, several times slower; running fp32, as OpenVINO's bf16 hint does "
                      "here", stacklevel=2)
        return "fp32"
    return precision
