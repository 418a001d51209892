"""The Swin Transformer block and the rules that fit its windows to a feature map.

A block runs (shifted) window attention and an MLP on an NHWC map (B, H, W, C), each as a pre-norm
residual branch. A map that is not a window multiple is padded at the bottom and right (the padded
tokens take part in attention, as in timm and torchvision; the region mask of shifted windows is
built over the padded map). How the window and shift adapt to the map is a :class:`WindowRule`:

- :class:`TimmWindows` (timm with ``strict_img_size=False``; the official code at its configured
  size): window and shift are fixed at construction from the *configured* resolution of the stage.
  A stage no larger than the window gets window = resolution and no shift. At run time the map is
  rolled, then padded.
- :class:`TorchvisionWindows` (torchvision): the window is fixed; at run time the shift is dropped
  along a dimension where the window covers the whole *padded* map. The map is padded, then rolled.

The two give different outputs whenever a stage's run-time size differs from its configured one
(e.g. 192x256 images on a model configured for 224x224).
"""
from __future__ import annotations

from typing import Callable

import torch
import torch.nn.functional as F
from torch import nn

from vision_attn.layers.drop_path import DropPath
from vision_attn.layers.mlp import Mlp
from vision_attn.layers.patch_embed import to_2tuple
from vision_attn.layers.window_attention import ShiftedWindows, WindowAttention, gather_tokens

__all__ = ["WindowRule", "TimmWindows", "TorchvisionWindows", "WINDOW_RULES", "SwinBlock", "SwinV2Block"]

Pair = tuple[int, int]


class WindowRule:
    """How window and shift follow the feature map. ``pad_image``: pad an image to a patch multiple
    (else the remainder is dropped, as a strided convolution does); ``roll_before_pad``: the order of
    the cyclic shift and the padding."""

    name = "none"
    pad_image = True
    roll_before_pad = True

    def configure(self, resolution: Pair, window: Pair, shift: Pair) -> tuple[Pair, Pair]:
        """Window and shift for a stage configured for ``resolution`` (fixes the table size)."""
        return window, shift

    def at_run_time(self, padded: Pair, window: Pair, shift: Pair) -> Pair:
        """The shift for a map padded to ``padded``."""
        return shift

    def __repr__(self) -> str:
        return f"{type(self).__name__}()"


class TimmWindows(WindowRule):
    """timm's rule: window and shift from the configured resolution; roll, then pad."""

    name = "timm"
    pad_image = True
    roll_before_pad = True

    def configure(self, resolution: Pair, window: Pair, shift: Pair) -> tuple[Pair, Pair]:
        win = tuple(r if r <= w else w for r, w in zip(resolution, window))
        sh = tuple(0 if r <= w else s for r, w, s in zip(resolution, window, shift))
        return win, sh


class TorchvisionWindows(WindowRule):
    """torchvision's rule: fixed window; no shift along a dimension the window covers after padding;
    pad, then roll. Images are cut to a patch multiple, as torchvision's strided convolution does."""

    name = "torchvision"
    pad_image = False
    roll_before_pad = False

    def at_run_time(self, padded: Pair, window: Pair, shift: Pair) -> Pair:
        return tuple(0 if w >= p else s for p, w, s in zip(padded, window, shift))


WINDOW_RULES: dict[str, type[WindowRule]] = {"timm": TimmWindows, "torchvision": TorchvisionWindows}


def _padded(H: int, W: int, window: Pair) -> Pair:
    # non-negative operands only: a traced size divides like C (towards zero) in an ONNX graph
    return H + (window[0] - H % window[0]) % window[0], W + (window[1] - W % window[1]) % window[1]


def to_windows(block: SwinBlock, x: torch.Tensor
               ) -> tuple[torch.Tensor, torch.Tensor | None, torch.Tensor, torch.Tensor]:
    """Map (B, H, W, C) -> the block's (shifted) windows, their region mask and the gather orders.

    Shifted: token-major windows (B, N, nW, C), where the region mask (nW, N, N)
    broadcasts over the batch; else windows as rows (B*nW, N, 1, C), where the bias alone does
    (mask None). Returns (windows, mask, index, inverse)."""
    B, H, W, C = x.shape
    window = block.window_size
    Hp, Wp = _padded(H, W, window)
    shift = block.rule.at_run_time((Hp, Wp), window, block.shift_size)
    token_major = any(shift)
    index, inverse = block.windows.index((H, W), window, shift, block.rule.roll_before_pad, token_major, x.device)
    mask = block.windows.mask((Hp, Wp), window, shift, x.device, x.dtype) if token_major else None  # (nW, N, N)
    if Hp != H or Wp != W:
        x = F.pad(x, (0, 0, 0, Wp - W, 0, Hp - H))  # (B, Hp, Wp, C)
    n = window[0] * window[1]
    x = block.gather(x.reshape(B, Hp * Wp, C), index, inverse)  # (B, Hp*Wp, C) in window order
    return (x.view(B, n, -1, C) if token_major else x.view(-1, n, 1, C)), mask, index, inverse


def from_windows(block: SwinBlock, windows: torch.Tensor, x: torch.Tensor, index: torch.Tensor,
                 inverse: torch.Tensor) -> torch.Tensor:
    """Windows of :func:`to_windows` -> the map (B, H, W, C) of ``x``'s size: gathered back, cropped."""
    B, H, W, C = x.shape
    Hp, Wp = _padded(H, W, block.window_size)
    y = block.gather(windows.reshape(B, Hp * Wp, C), inverse, index).view(B, Hp, Wp, C)
    return y[:, :H, :W] if Hp != H or Wp != W else y


def attend_windows(block: SwinBlock, x: torch.Tensor) -> torch.Tensor:
    """Pad ``x`` (B, H, W, C) to a window multiple, roll it by -shift, run ``block.attn`` within the
    windows, undo both: (B, H, W, C)."""
    windows, mask, index, inverse = to_windows(block, x)
    return from_windows(block, block.attn(windows, mask), x, index, inverse)


# torch.fx symbolic tracing (torchvision's create_feature_extractor): one leaf node, which takes the
# layout for the run-time size exactly as the eager block does
torch.fx.wrap("attend_windows")


class SwinBlock(nn.Module):
    """x + attn(norm1(x)) with (shifted) window attention, then x + mlp(norm2(x)); (B, H, W, C) in and out.

    ``resolution``: the configured size of the maps the block will see, which the ``rule`` may use to
    fix window and shift (None: take them as given). ``windows``: the cache of gather orders and
    region masks, shared by the blocks of a stage. ``attn_layer``: the window attention, called as
    ``attn_layer(dim, num_heads, window, qkv_bias=, attn_drop=, proj_drop=)``. Keys ``norm1``, ``attn``,
    ``norm2``, ``mlp`` (timm's layout). ``gather``: the tokens' reordering into windows and back
    (:func:`~vision_attn.layers.window_attention.gather_tokens`' signature).
    """

    gather = staticmethod(gather_tokens)

    def __init__(
        self,
        dim: int,
        num_heads: int,
        window_size: int | Pair = (7, 7),
        shift_size: int | Pair = (0, 0),
        resolution: Pair | None = None,
        mlp_ratio: float = 4.0,
        qkv_bias: bool = True,
        proj_drop: float = 0.0,
        attn_drop: float = 0.0,
        drop_path: float = 0.0,
        act_layer: type[nn.Module] = nn.GELU,
        norm_layer: type[nn.Module] = nn.LayerNorm,
        rule: WindowRule | None = None,
        windows: ShiftedWindows | None = None,
        attn_layer: Callable[..., nn.Module] = WindowAttention,
    ) -> None:
        super().__init__()
        self.rule = rule or TimmWindows()
        window, shift = to_2tuple(window_size), to_2tuple(shift_size)
        if resolution is not None:
            window, shift = self.rule.configure(tuple(resolution), window, shift)
        self.window_size, self.shift_size = window, shift
        self.windows = windows if windows is not None else ShiftedWindows()
        self.norm1 = norm_layer(dim)
        self.attn = attn_layer(dim, num_heads, window, qkv_bias=qkv_bias, attn_drop=attn_drop, proj_drop=proj_drop)
        self.drop_path1 = DropPath(drop_path) if drop_path > 0.0 else nn.Identity()
        self.norm2 = norm_layer(dim)
        self.mlp = Mlp(dim, int(dim * mlp_ratio), act_layer=act_layer, drop=proj_drop)
        self.drop_path2 = DropPath(drop_path) if drop_path > 0.0 else nn.Identity()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        # roll, padding order and window partition are one gather each way (cached per map size)
        x = x + self.drop_path1(attend_windows(self, self.norm1(x)))
        return x + self.drop_path2(self.mlp(self.norm2(x)))

    def extra_repr(self) -> str:
        return f"window_size={self.window_size}, shift_size={self.shift_size}, rule={self.rule.name}"


class SwinV2Block(SwinBlock):
    """Swin V2's residual post-norm: x + norm1(attn(x)), then x + norm2(mlp(x)); (B, H, W, C) in and out.

    The norms sit at the end of each branch, so the residual stream itself is never normalised (what
    lets Swin V2 train deeper and wider than V1). Same keys as :class:`SwinBlock`; pair it with
    :class:`~vision_attn.layers.cosine_window_attention.CosineWindowAttention` as ``attn_layer``.
    """

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.drop_path1(self.norm1(attend_windows(self, x)))
        return x + self.drop_path2(self.norm2(self.mlp(x)))
