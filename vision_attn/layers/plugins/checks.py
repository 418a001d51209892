"""What every attention plug-in checks and computes alike: the input is an NCHW feature map with the
channel count the block was built for, and the reduced width of its bottleneck."""
from __future__ import annotations

import torch

from vision_attn.errors import ConfigError, DataError


def check_nchw(x: torch.Tensor, channels: int | None, block: str) -> None:
    """Raise a :class:`DataError` unless ``x`` is a (B, ``channels``, H, W) tensor (any C if None).

    Symbolic tracing (``torch.fx``) passes proxies without a shape; they are let through.
    """
    if not isinstance(x, torch.Tensor):
        return
    if x.dim() != 4:
        raise DataError(
            f"{block} expects a (B, C, H, W) feature map, got a tensor of shape {tuple(x.shape)}; "
            f"attention plug-ins go between convolutional layers, not after pooling or flattening")
    if channels is not None and x.shape[1] != channels:
        raise DataError(
            f"{block} was built for {channels} channels but got a tensor of shape {tuple(x.shape)} "
            f"({x.shape[1]} channels); build it with the channel count of the layer it follows")


def check_channels(channels: int, block: str) -> None:
    if not isinstance(channels, int) or isinstance(channels, bool) or channels < 1:
        raise ConfigError(f"{block}: channels must be a positive int, got {channels!r}")


def check_kernel_size(kernel_size: int, block: str) -> None:
    if not isinstance(kernel_size, int) or isinstance(kernel_size, bool) or kernel_size < 1 or kernel_size % 2 == 0:
        raise ConfigError(f"{block}: kernel_size must be a positive odd int (so the map keeps its size), "
                          f"got {kernel_size!r}")


def reduced_channels(channels: int, reduction: float, divisor: int = 1) -> int:
    """``channels / reduction`` rounded to the nearest multiple of ``divisor`` (halves up), and at
    least ``divisor``: 256 / 16 -> 16; 64 / 16 with divisor 8 -> 8. The rule of timm's SE and CBAM."""
    if not reduction > 0:
        raise ConfigError(f"reduction must be positive, got {reduction!r}")
    if not isinstance(divisor, int) or divisor < 1:
        raise ConfigError(f"divisor must be a positive int, got {divisor!r}")
    return max(divisor, int(channels / reduction + divisor / 2) // divisor * divisor)
