"""Swin Transformer (Liu et al. 2021): a hierarchy of shifted-window attention stages.

One configurable class, :class:`SwinTransformer`; the variants are small registered functions under
timm's names (``swin_tiny_patch4_window7_224``, ...) and torchvision's (``swin_t``, ``swin_s``,
``swin_b``). The two families differ in one rule, how a stage's window and shift follow the feature
map (:mod:`vision_attn.layers.swin_block`): models under timm's names follow timm, models under
torchvision's names follow torchvision, so users of either get the outputs they had.

The state-dict keys are timm's (patch merging at the start of stage i+1, ``head.fc``), so timm files
load as they are; torchvision's and the official Microsoft layout are mapped by
:func:`torchvision_to_timm` and :func:`official_to_timm` (layouts documented there), and recognised
by :meth:`SwinTransformer.convert_checkpoint`.
"""
from __future__ import annotations

import re
from typing import Callable, Literal, Sequence

import torch
from torch import nn

from vision_attn.errors import CheckpointError, ConfigError, DataError
from vision_attn.layers import PatchEmbed, to_2tuple
from vision_attn.layers.patch_merging import PatchMerging
from vision_attn.layers.swin_block import WINDOW_RULES, SwinBlock, WindowRule
from vision_attn.layers.window_attention import ShiftedWindows, WindowAttention, resample_relative_position_bias
from vision_attn.models.contract import TimmContract, run_blocks
from vision_attn.models.pretrained_cfg import data_cfg
from vision_attn.models.registry import register_model

__all__ = ["SwinTransformer", "SwinStage", "ClassifierHead", "torchvision_to_timm", "official_to_timm",
           "timm_to_torchvision"]


def fit_image(x: torch.Tensor, patch_size: tuple[int, int], img_size: tuple[int, int], pad: bool) -> torch.Tensor:
    """Refuse images smaller than one patch; without ``pad`` (torchvision's rule) cut the remainder
    of a size that is not a patch multiple, as torchvision's strided convolution does."""
    if x.ndim == 4:
        H, W = x.shape[-2:]
        ph, pw = patch_size
        if H < ph or W < pw:
            raise DataError(
                f"image size {H}x{W} is smaller than one {ph}x{pw} patch: resize the images to at least "
                f"{ph}x{pw} (the model was configured for {img_size[0]}x{img_size[1]})")
        if not pad and (H % ph or W % pw):
            x = x[..., : H - H % ph, : W - W % pw]
    return x


torch.fx.wrap("fit_image")  # torch.fx symbolic tracing: one leaf node, not a branch on a traced size


class SwinStage(nn.Module):
    """Optional patch merging (``downsample``), then ``depth`` blocks alternating plain and shifted
    windows; (B, H, W, C_in) -> (B, H', W', C_out), H' = ceil(H/2) when merging.

    ``resolution`` is the configured size of the stage's maps (after merging). The blocks share one
    cache of gather orders and region masks (:class:`~vision_attn.layers.window_attention.ShiftedWindows`).
    ``block_layer``, ``merge_layer`` and ``attn_layer`` are the block, patch merging and window
    attention classes (Swin V1's by default; Swin V2 injects its own).
    """

    def __init__(
        self,
        dim: int,
        out_dim: int,
        depth: int,
        num_heads: int,
        window_size: tuple[int, int],
        resolution: tuple[int, int],
        downsample: bool,
        rule: WindowRule,
        mlp_ratio: float = 4.0,
        qkv_bias: bool = True,
        proj_drop: float = 0.0,
        attn_drop: float = 0.0,
        drop_path: Sequence[float] = (),
        norm_layer: type[nn.Module] = nn.LayerNorm,
        block_layer: type[SwinBlock] = SwinBlock,
        merge_layer: type[nn.Module] = PatchMerging,
        attn_layer: Callable[..., nn.Module] = WindowAttention,
    ) -> None:
        super().__init__()
        self.resolution = resolution
        self.grad_checkpointing = False
        self.downsample = merge_layer(dim, out_dim, norm_layer) if downsample else nn.Identity()
        self.windows = ShiftedWindows()
        shift = (window_size[0] // 2, window_size[1] // 2)
        self.blocks = nn.Sequential(*[
            block_layer(out_dim, num_heads, window_size, (0, 0) if i % 2 == 0 else shift, resolution,
                        mlp_ratio=mlp_ratio, qkv_bias=qkv_bias, proj_drop=proj_drop, attn_drop=attn_drop,
                        drop_path=drop_path[i] if drop_path else 0.0, norm_layer=norm_layer, rule=rule,
                        windows=self.windows, attn_layer=attn_layer)
            for i in range(depth)
        ])

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return run_blocks(self, self.blocks, self.downsample(x))


class ClassifierHead(nn.Module):
    """Pool the map (B, H, W, C), dropout, then ``fc`` (timm's key ``head.fc``). ``pool_type``:
    ``"avg"`` (the mean over the map -> (B, C)) or ``""`` (no pooling, as timm's ``global_pool=''``:
    the map goes through as it is, NHWC, and ``fc`` acts on each position)."""

    def __init__(self, dim: int, num_classes: int, drop_rate: float = 0.0, pool_type: str = "avg") -> None:
        super().__init__()
        self.pool_type = check_pool(pool_type)
        self.drop = nn.Dropout(drop_rate)
        self.fc = nn.Linear(dim, num_classes) if num_classes > 0 else nn.Identity()

    def forward(self, x: torch.Tensor, pre_logits: bool = False) -> torch.Tensor:
        if self.pool_type:
            x = x.mean(dim=(1, 2))  # (B, C)
        x = self.drop(x)
        return x if pre_logits else self.fc(x)


def check_pool(pool_type: str) -> str:
    if pool_type not in ("avg", ""):
        raise ConfigError(f"global_pool={pool_type!r}: choose 'avg' (mean over the map) or '' (no pooling: the NHWC map)")
    return pool_type


class SwinTransformer(TimmContract, nn.Module):
    """Swin classifier: patch embedding (+ norm), four stages, norm, average pool, head.

    Images (B, C, H, W) of any size -> logits (B, num_classes). An image that is not a patch multiple
    is padded (``window_rule="timm"``) or cut (``"torchvision"``, as its strided convolution does); a
    map that is not a window multiple is padded; odd maps are padded before patch merging.
    ``img_size`` is the configured size: timm's rule takes each stage's window and shift from it, and
    every stage's configured resolution must be a multiple of the window (or no larger than it).

    ``window_rule``: ``"timm"`` or ``"torchvision"`` (or a :class:`WindowRule`), see
    :mod:`vision_attn.layers.swin_block`. Stochastic depth rises linearly from 0 over all blocks to
    ``drop_path_rate``. ``block_layer``, ``merge_layer`` and ``attn_layer`` (one for all stages or one
    per stage) are injected into every stage (see :class:`SwinStage`).

    timm's model interface (:class:`~vision_attn.models.contract.TimmContract`): one feature level per
    stage (``feature_info``: module ``layers.i`` at strides 4, 8, 16, 32), maps as NCHW or NHWC;
    ``features_only`` gives all four stages in NHWC by default, as timm's Swin does.
    """

    output_fmts = ("NCHW", "NHWC")
    features_only_fmt = "NHWC"
    output_fmt = "NHWC"
    """The layout of ``forward_features``' map (B, H, W, C), as timm's Swin says it (``model.output_fmt``)."""
    norm_last_level_only = True

    classifier_keys = ("head.fc.weight", "head.fc.bias")

    def __init__(
        self,
        *,
        img_size: int | tuple[int, int] = 224,
        patch_size: int = 4,
        in_chans: int = 3,
        num_classes: int = 1000,
        embed_dim: int = 96,
        depths: Sequence[int] = (2, 2, 6, 2),
        num_heads: Sequence[int] = (3, 6, 12, 24),
        window_size: int | tuple[int, int] = 7,
        mlp_ratio: float = 4.0,
        qkv_bias: bool = True,
        drop_rate: float = 0.0,
        proj_drop_rate: float = 0.0,
        attn_drop_rate: float = 0.0,
        drop_path_rate: float = 0.1,
        global_pool: Literal["avg", ""] = "avg",
        norm_layer: type[nn.Module] = nn.LayerNorm,
        window_rule: Literal["timm", "torchvision"] | WindowRule = "timm",
        block_layer: type[SwinBlock] = SwinBlock,
        merge_layer: type[nn.Module] = PatchMerging,
        attn_layer: Callable[..., nn.Module] | Sequence[Callable[..., nn.Module]] = WindowAttention,
    ) -> None:
        super().__init__()
        if len(depths) != len(num_heads) or not depths:
            raise ConfigError(f"depths {tuple(depths)} and num_heads {tuple(num_heads)} need one entry per stage")
        if isinstance(window_rule, str):
            if window_rule not in WINDOW_RULES:
                raise ConfigError(f"window_rule={window_rule!r}: choose one of {sorted(WINDOW_RULES)} or pass a WindowRule")
            window_rule = WINDOW_RULES[window_rule]()
        self.rule = window_rule
        self.num_classes = num_classes
        self.num_layers = len(depths)
        self.embed_dim = embed_dim
        self.num_features = int(embed_dim * 2 ** (self.num_layers - 1))
        window = to_2tuple(window_size)
        self.patch_embed = PatchEmbed(img_size, patch_size, in_chans, embed_dim, norm_layer=norm_layer, dynamic_pad=True)
        grid = self.patch_embed.grid_size

        dims = [int(embed_dim * 2**i) for i in range(self.num_layers)]
        dpr = torch.linspace(0, drop_path_rate, sum(depths), device="cpu").split(list(depths))  # cpu: builds under meta
        attn_layers = list(attn_layer) if isinstance(attn_layer, Sequence) else [attn_layer] * self.num_layers
        if len(attn_layers) != self.num_layers:
            raise ConfigError(f"attn_layer: {len(attn_layers)} classes for {self.num_layers} stages; give one or one per stage")
        self.feature_info: list[dict] = []
        stages, res = [], tuple(grid)
        for i, depth in enumerate(depths):
            if i > 0:
                res = tuple(-(-r // 2) for r in res)  # patch merging pads odd sizes
            for r, w in zip(res, window):
                if r > w and r % w:
                    raise ConfigError(
                        f"window_size {window} does not divide the configured resolution {res[0]}x{res[1]} of stage {i} "
                        f"(img_size {self.patch_embed.img_size}, patch {patch_size}): choose an img_size whose stage "
                        f"sizes are window multiples (224 for window 7, 384 for window 12) or another window_size; "
                        f"images of any size still run at that configuration")
            stages.append(SwinStage(
                dims[max(i - 1, 0)], dims[i], depth, num_heads[i], window, res, downsample=i > 0, rule=self.rule,
                mlp_ratio=mlp_ratio, qkv_bias=qkv_bias, proj_drop=proj_drop_rate, attn_drop=attn_drop_rate,
                drop_path=dpr[i].tolist(), norm_layer=norm_layer, block_layer=block_layer, merge_layer=merge_layer,
                attn_layer=attn_layers[i]))
            stride = max(to_2tuple(patch_size))  # timm's reduction is one number (a pair's: its larger side)
            self.feature_info.append(dict(num_chs=dims[i], reduction=stride * 2**i, module=f"layers.{i}"))
        self.layers = nn.Sequential(*stages)
        self.norm = norm_layer(self.num_features)
        self.head = ClassifierHead(self.num_features, num_classes, drop_rate, global_pool)
        self.global_pool = global_pool
        self.init_weights()

    # ---------------------------------------------------------------- init and bookkeeping
    def init_weights(self) -> None:
        """Truncated normal (std 0.02) for linear layers and bias tables; zero biases; unit norms."""
        for name, m in self.named_modules():
            if isinstance(m, nn.Linear):
                nn.init.trunc_normal_(m.weight, std=0.02)
                if m.bias is not None:
                    nn.init.zeros_(m.bias)
        for name, p in self.named_parameters():
            if name.endswith("relative_position_bias_table"):
                nn.init.trunc_normal_(p, std=0.02)

    def no_weight_decay(self) -> set[str]:
        """Parameter names that optimisers should exclude from weight decay (the bias tables)."""
        return {n for n, _ in self.named_parameters() if "relative_position_bias_table" in n}

    def get_classifier(self) -> nn.Module:
        return self.head.fc

    def reset_classifier(self, num_classes: int, global_pool: str | None = None) -> None:
        """Replace the head with a freshly initialised one for ``num_classes`` (0: no head); as timm's,
        ``global_pool`` (``"avg"`` or ``""``: no pooling, the model then returns the NHWC map) replaces
        the pooling, None keeps it."""
        if global_pool is not None:
            self.global_pool = self.head.pool_type = check_pool(global_pool)
        self.num_classes = num_classes
        device = next(self.parameters()).device
        self.head.fc = nn.Linear(self.num_features, num_classes, device=device) if num_classes > 0 else nn.Identity()
        if isinstance(self.head.fc, nn.Linear):
            nn.init.trunc_normal_(self.head.fc.weight, std=0.02)
            nn.init.zeros_(self.head.fc.bias)

    # ---------------------------------------------------------------- forward
    def embed(self, x: torch.Tensor) -> torch.Tensor:
        """Images (B, C, H, W) -> patch tokens (B, H/p, W/p, D), normalised."""
        return self.patch_embed(fit_image(x, self.patch_embed.patch_size, self.patch_embed.img_size, self.rule.pad_image))

    def forward_features(self, x: torch.Tensor) -> torch.Tensor:
        """Images (B, C, H, W) -> normalised last-stage map (B, H/32, W/32, C_last), NHWC."""
        return self.norm(self.layers(self.embed(x)))

    def forward_head(self, x: torch.Tensor, pre_logits: bool = False) -> torch.Tensor:
        """Map (B, h, w, C) -> logits (B, num_classes), or pooled features (B, C) with ``pre_logits``
        (with ``global_pool=""``: the map, or logits per position (B, h, w, num_classes))."""
        return self.head(x, pre_logits=pre_logits)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.forward_head(self.forward_features(x))

    # ---------------------------------------------------------------- timm's contract: one level a stage
    def _levels(self) -> nn.Sequential:
        return self.layers

    def _begin(self, x: torch.Tensor) -> tuple[torch.Tensor, None]:
        return self.embed(x), None

    def _run_level(self, i: int, x: torch.Tensor, context: None) -> torch.Tensor:
        return self.layers[i](x)

    def _feature_map(self, i: int, x: torch.Tensor, context: None, norm: bool, output_fmt: str) -> torch.Tensor:
        """Stage output (B, H, W, C) -> (B, C, H, W) or as it is (``"NHWC"``); ``norm`` applies the final
        norm to the last stage's map only (the norm has the last stage's width), as timm."""
        y = self.norm(x) if norm and i == self.num_layers - 1 else x
        return y if output_fmt == "NHWC" else y.permute(0, 3, 1, 2).contiguous()

    def _truncate(self, last: int) -> None:
        self.layers = self.layers[: last + 1]

    # ---------------------------------------------------------------- checkpoints
    def convert_checkpoint(self, state_dict: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        """Recognise a timm/vision_attn, torchvision or official state dict, map it to our keys, and
        resample relative position tables made for another window size."""
        if any(k.startswith("features.") for k in state_dict):
            state_dict = torchvision_to_timm(state_dict)
        elif _is_official(state_dict):
            state_dict = official_to_timm(state_dict)
        else:
            state_dict = dict(state_dict)
        for key, table in list(state_dict.items()):
            if not key.endswith(".relative_position_bias_table"):
                continue
            try:
                attn = self.get_submodule(key.rsplit(".", 1)[0])
            except AttributeError:
                continue  # a block this model lacks: fit_state_dict names it
            own = getattr(attn, "relative_position_bias_table", None)
            if own is None:
                continue  # an attention without a table (Swin V2): fit_state_dict names the key
            if table.ndim == 2 and table.shape != own.shape and table.shape[1] == own.shape[1]:
                try:
                    state_dict[key] = resample_relative_position_bias(table, attn.window_size)
                except ConfigError as e:
                    raise CheckpointError(f"{key}: {e}") from None
        return state_dict


# ------------------------------------------------------------------------------------------------
# Official Microsoft layout (github.com/microsoft/Swin-Transformer, models/swin_transformer.py),
# mapped key by key:
#   patch_embed.proj, patch_embed.norm            -> the same
#   layers.{i}.blocks.{j}.*                       -> the same
#   layers.{i}.blocks.{j}.attn.relative_position_index   (persistent buffer) -> dropped, recomputed
#   layers.{i}.blocks.{j}.attn_mask                      (persistent buffer) -> dropped, rebuilt per size
#   layers.{i}.blocks.{j}.attn.relative_coords_table     (Swin V2's buffer)  -> dropped, recomputed
#   layers.{i}.downsample.{norm,reduction}  (merging at the END of stage i)  -> layers.{i+1}.downsample.*
#   norm                                          -> norm
#   head.weight, head.bias                        -> head.fc.weight, head.fc.bias
# ``absolute_pos_embed`` (ape=True) has no counterpart and is refused.
_OFFICIAL_DROPPED = re.compile(
    r"^layers\.\d+\.blocks\.\d+\.(attn\.relative_position_index|attn\.relative_coords_table|attn_mask)$")
_OFFICIAL_DOWNSAMPLE = re.compile(r"^layers\.(\d+)\.downsample\.(.+)$")
_OFFICIAL_SAME = re.compile(r"^(patch_embed\.(proj|norm)\.|layers\.\d+\.blocks\.\d+\.|norm\.)")


def _is_official(state_dict: dict[str, torch.Tensor]) -> bool:
    """Official files merge at the end of stage 0, have ``head.weight``, or carry the index and mask buffers."""
    return ("layers.0.downsample.reduction.weight" in state_dict or "head.weight" in state_dict
            or any(_OFFICIAL_DROPPED.match(k) for k in state_dict))


def official_to_timm(state_dict: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """Map an official Swin state dict to timm's (and our) keys; every key must be accounted for."""
    out: dict[str, torch.Tensor] = {}
    for key, value in state_dict.items():
        if _OFFICIAL_DROPPED.match(key):
            continue
        m = _OFFICIAL_DOWNSAMPLE.match(key)
        if m:
            new = f"layers.{int(m.group(1)) + 1}.downsample.{m.group(2)}"
        elif key in ("head.weight", "head.bias"):
            new = "head.fc." + key.split(".")[1]
        elif _OFFICIAL_SAME.match(key):
            new = key
        else:
            raise CheckpointError(
                f"official Swin checkpoint: key {key!r} has no counterpart in vision_attn's Swin "
                f"(absolute_pos_embed / ape=True is not supported); remove it or use a model without it")
        assert new not in out, f"two official keys map to {new}"
        out[new] = value
    return out


# ------------------------------------------------------------------------------------------------
# torchvision layout (torchvision.models.swin_transformer), mapped key by key:
#   features.0.0 (Conv2d)                          -> patch_embed.proj
#   features.0.2 (LayerNorm after the Permute)     -> patch_embed.norm
#   features.{2s+1}.{j}.norm1 / norm2              -> layers.{s}.blocks.{j}.norm1 / norm2     (stage s)
#   features.{2s+1}.{j}.attn.qkv / attn.proj / attn.relative_position_bias_table -> the same under the block
#   features.{2s+1}.{j}.attn.relative_position_index (persistent buffer) -> dropped, recomputed
#   features.{2s+1}.{j}.mlp.0 / mlp.3 (torchvision.ops.MLP's two Linear layers) -> mlp.fc1 / mlp.fc2
#   Swin V2 (swin_v2_t/s/b) also: attn.logit_scale, attn.cpb_mlp.0 / cpb_mlp.2 -> the same under the block;
#   attn.relative_coords_table (persistent buffer) -> dropped, recomputed. Its attn.qkv.bias (3C, the
#   key third unused) stays as it is: vision_attn.models.swin_v2 fits it to q_bias / v_bias where needed.
#   features.{2s+2}.norm / reduction (merging after stage s) -> layers.{s+1}.downsample.norm / reduction
#   norm                                           -> norm
#   head                                           -> head.fc
_TV_STEM = {"features.0.0": "patch_embed.proj", "features.0.2": "patch_embed.norm"}
_TV_BLOCK = {"norm1": "norm1", "norm2": "norm2", "attn.qkv": "attn.qkv", "attn.proj": "attn.proj",
             "attn.relative_position_bias_table": "attn.relative_position_bias_table",
             "mlp.0": "mlp.fc1", "mlp.3": "mlp.fc2",
             "attn.logit_scale": "attn.logit_scale", "attn.cpb_mlp": "attn.cpb_mlp"}
_TV_DROPPED = ("attn.relative_position_index", "attn.relative_coords_table")
_TV_TOP = {"norm": "norm", "head": "head.fc"}
_TV_FEATURE = re.compile(r"^features\.(\d+)\.(.+)$")


def _map_key(key: str, table: dict[str, str]) -> str | None:
    for src, dst in table.items():
        if key == src or key.startswith(src + "."):
            return dst + key[len(src):]
    return None


def torchvision_to_timm(state_dict: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """Map a torchvision Swin state dict to timm's (and our) keys; every key must be accounted for."""
    out: dict[str, torch.Tensor] = {}
    for key, value in state_dict.items():
        new = _map_key(key, _TV_STEM) or _map_key(key, _TV_TOP)
        m = _TV_FEATURE.match(key)
        if new is None and m and int(m.group(1)) > 0:
            index, rest = int(m.group(1)), m.group(2)
            if index % 2 == 1:  # blocks of stage (index - 1) / 2
                block, _, tail = rest.partition(".")
                if tail in _TV_DROPPED:
                    continue
                mapped = _map_key(tail, _TV_BLOCK) if block.isdigit() else None
                new = f"layers.{(index - 1) // 2}.blocks.{block}.{mapped}" if mapped else None
            elif rest.split(".")[0] in ("norm", "reduction"):  # patch merging after stage index/2 - 1
                new = f"layers.{index // 2}.downsample.{rest}"
        if new is None:
            raise CheckpointError(
                f"torchvision Swin checkpoint: key {key!r} has no counterpart in vision_attn's Swin; "
                f"check that the file holds a torchvision swin_t/s/b or swin_v2_t/s/b")
        assert new not in out, f"two torchvision keys map to {new}"
        out[new] = value
    return out


def timm_to_torchvision(state_dict: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """The inverse map: our (timm) Swin keys -> torchvision's, for ``torchvision.models.swin_*``.
    torchvision's ``relative_position_index`` buffers are not produced: load with ``strict=False``
    or add them from a fresh torchvision model."""
    stem = {v: k for k, v in _TV_STEM.items()}
    top = {v: k for k, v in _TV_TOP.items()}
    block = {v: k for k, v in _TV_BLOCK.items()}
    out: dict[str, torch.Tensor] = {}
    for key, value in state_dict.items():
        new = _map_key(key, stem) or _map_key(key, top)
        m = re.match(r"^layers\.(\d+)\.(blocks\.(\d+)\.(.+)|downsample\.(.+))$", key)
        if new is None and m:
            s = int(m.group(1))
            if m.group(3) is not None:
                mapped = _map_key(m.group(4), block)
                new = f"features.{2 * s + 1}.{m.group(3)}.{mapped}" if mapped else None
            else:
                new = f"features.{2 * s}.{m.group(5)}"
        if new is None:
            raise CheckpointError(f"Swin key {key!r} has no counterpart in torchvision's SwinTransformer")
        out[new] = value
    return out


# ------------------------------------------------------------------------------------------------
# Variants. Each is a small function over SwinTransformer; keyword arguments override the config.
def _swin(config: dict, kwargs: dict) -> SwinTransformer:
    return SwinTransformer(**{**config, **kwargs})


_TINY = dict(patch_size=4, window_size=7, embed_dim=96, depths=(2, 2, 6, 2), num_heads=(3, 6, 12, 24))
_SMALL = dict(patch_size=4, window_size=7, embed_dim=96, depths=(2, 2, 18, 2), num_heads=(3, 6, 12, 24))
_BASE = dict(patch_size=4, window_size=7, embed_dim=128, depths=(2, 2, 18, 2), num_heads=(4, 8, 16, 32))
_LARGE = dict(patch_size=4, window_size=7, embed_dim=192, depths=(2, 2, 18, 2), num_heads=(6, 12, 24, 48))
_TV = dict(window_rule="torchvision")

# Input configurations (vision_attn.models.pretrained_cfg): timm's default weights under timm's names,
# torchvision's IMAGENET1K_V1 weights under torchvision's
_CFG_224 = data_cfg(224, crop_pct=0.9)
_CFG_384 = data_cfg(384, crop_pct=1.0)


@register_model(cfg=_CFG_224)
def swin_tiny_patch4_window7_224(**kwargs) -> SwinTransformer:
    """Swin-T (28.3 M parameters, 4.5 GMACs); timm's window rule."""
    return _swin(_TINY, kwargs)


@register_model(cfg=_CFG_224)
def swin_small_patch4_window7_224(**kwargs) -> SwinTransformer:
    """Swin-S (49.6 M, 8.7 GMACs)."""
    return _swin(_SMALL, kwargs)


@register_model(cfg=_CFG_224)
def swin_base_patch4_window7_224(**kwargs) -> SwinTransformer:
    """Swin-B (87.8 M, 15.4 GMACs)."""
    return _swin(_BASE, kwargs)


@register_model(cfg=_CFG_384)
def swin_base_patch4_window12_384(**kwargs) -> SwinTransformer:
    """Swin-B at 384 px with 12x12 windows (47.1 GMACs)."""
    return _swin({**_BASE, "window_size": 12, "img_size": 384}, kwargs)


@register_model(cfg=_CFG_224)
def swin_large_patch4_window7_224(**kwargs) -> SwinTransformer:
    """Swin-L (196.5 M)."""
    return _swin(_LARGE, kwargs)


@register_model(cfg=_CFG_384)
def swin_large_patch4_window12_384(**kwargs) -> SwinTransformer:
    """Swin-L at 384 px with 12x12 windows."""
    return _swin({**_LARGE, "window_size": 12, "img_size": 384}, kwargs)


@register_model(cfg=data_cfg(224, crop_pct=224 / 232))
def swin_t(**kwargs) -> SwinTransformer:
    """torchvision's Swin-T: torchvision's window rule, stochastic depth 0.2."""
    return _swin({**_TINY, **_TV, "drop_path_rate": 0.2}, kwargs)


@register_model(cfg=data_cfg(224, crop_pct=224 / 246))
def swin_s(**kwargs) -> SwinTransformer:
    """torchvision's Swin-S: stochastic depth 0.3."""
    return _swin({**_SMALL, **_TV, "drop_path_rate": 0.3}, kwargs)


@register_model(cfg=data_cfg(224, crop_pct=224 / 238))
def swin_b(**kwargs) -> SwinTransformer:
    """torchvision's Swin-B: stochastic depth 0.5."""
    return _swin({**_BASE, **_TV, "drop_path_rate": 0.5}, kwargs)
