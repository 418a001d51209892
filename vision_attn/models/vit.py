"""Vision Transformer (Dosovitskiy et al. 2021) and DeiT (Touvron et al. 2021).

One configurable class, :class:`VisionTransformer`; the variants are small registered functions under
timm's names (``vit_small_patch16_224``, ``deit_tiny_distilled_patch16_224``, ...) and torchvision's
(``vit_b_16``, ...), and DINOv2's backbones under timm's names (``vit_small_patch14_dinov2``,
``vit_small_patch14_reg4_dinov2``, ... ``vit_giant_patch14_dinov2`` with a SwiGLU feed-forward network).
The state-dict keys are timm's, so timm checkpoints load as they are; torchvision checkpoints and the
official DINOv2 hub files are mapped by :func:`torchvision_to_timm` and :func:`dinov2_to_timm`
(layouts documented there); OpenAI CLIP and open_clip image towers by :func:`openai_clip_to_timm`.
The CLIP and SigLIP towers themselves are registered in :mod:`vision_attn.models.clip`.
"""
from __future__ import annotations

import functools
import inspect
import math
import re
from typing import Literal

import torch
import torch.nn.functional as F
from torch import nn

from vision_attn.errors import CheckpointError, ConfigError, DataError
from vision_attn.layers import (
    ACT_LAYERS,
    FFN_LAYERS,
    BLOCKS,
    Attention,
    AttentionPoolLatent,
    Block,
    LayerNorm6,
    Mlp,
    PatchEmbed,
    Rope2D,
    SwiGLU,
    resample_abs_pos_embed,
    sincos_2d,
)
from vision_attn.layers.attention import padding_bias
from vision_attn.layers.eva_attention import EvaAttention
from vision_attn.layers.eva_rope import RopeEva
from vision_attn.layers.naflex_batch import NaFlexBatch, linear_to_conv_patches
from vision_attn.layers.patch_embed import to_2tuple
from vision_attn.layers.rope_dinov3 import RopeDinov3
from vision_attn.layers.pos_embed import POS_EMBED_INTERPS, check_pos_embed_kind
from vision_attn.layers.tables import Tables
from vision_attn.layers.token_merging import MergingAttention, MergingBlock, TokenSizes
from vision_attn.models.contract import TimmContract, run_blocks
from vision_attn.models.pretrained_cfg import INCEPTION_MEAN, INCEPTION_STD, data_cfg
from vision_attn.models.registry import register_model

__all__ = ["VisionTransformer", "torchvision_to_timm", "timm_to_torchvision", "dinov2_to_timm", "dinov3_to_timm",
           "openai_clip_to_timm", "naflex_to_timm",
           "open_clip_trunk_to_timm"]

# torch.fx symbolic tracing: the position tables for the run-time grid are leaf nodes (they branch on it)
torch.fx.wrap("resample_abs_pos_embed")
torch.fx.wrap("sincos_2d")


class VisionTransformer(TimmContract, nn.Module):
    """ViT / DeiT classifier: patch embedding, prefix tokens, position embedding, blocks, norm, head.

    Images (B, C, H, W) -> logits (B, num_classes). Any image size that is a multiple of the patch
    size runs (the learned position embedding is resampled on the fly); ``dynamic_img_pad`` pads
    other sizes. Prefix tokens come in the order class, distillation, registers.

    Options by name: ``pos_embed`` in ``"learn" | "sincos2d" | "rope" | "rope_dinov3" | "learn_rope" | "none"``
    (``"rope_dinov3"``: DINOv3's rotary embedding, periods ``rope_temperature ** (i / n)`` and, in
    training only, its augmentation of the coordinates ``rope_shift``, ``rope_jitter``, ``rope_rescale``
    (None: off); ``"learn_rope"``: a learned table and EVA-02's rotary embedding, positions scaled to
    ``rope_ref_grid``, default the patch grid; it needs ``attn_class=EvaAttention``); ``global_pool`` in
    ``"token" | "avg" | "map"`` (``"map"``: SigLIP's attention pooling, a learned query attending over
    the patch tokens, module ``attn_pool``); ``block`` in ``"pre" | "post"`` (or a block class);
    ``act_layer`` a class or a name of :data:`~vision_attn.layers.ACT_LAYERS` (``"quick_gelu"``);
    ``ffn_layer`` a class or a name of :data:`~vision_attn.layers.FFN_LAYERS` (``"swiglu"``);
    ``norm_eps`` every norm's epsilon (default: ``norm_layer``'s); ``pos_embed_interp`` how a learned
    table meets another grid: ``"timm"`` (antialiased bicubic, timm's; a file's table is resampled to
    the model's grid when loaded) or ``"transformers"`` (bicubic without antialiasing at run time, as
    transformers' ViT, DeiT and DINOv2 compute it); ``pos_embed_grid`` the grid the table is stored at
    (default: ``img_size``'s; a transformers folder keeps its own, to be resampled at run time). ``dynamic_img_size`` is accepted as
    timm's argument and changes nothing: every size runs (timm's models need it for other sizes). Named, they are plain data that a
    run records (a model read from a transformers folder states them so).
    CLIP's towers take ``pre_norm=True`` (a norm ``norm_pre`` over the embedded tokens before the
    blocks, OpenAI's ``ln_pre``; the patch projection then has no bias unless ``patch_bias``), and
    ``head_bias=False`` gives a projection head without bias (CLIP's ``proj``).
    With ``distilled=True`` (DeiT) a second head reads the distillation token: in training the model
    returns both logits ``(cls, dist)``, at evaluation their mean. ``mask_token=True`` adds DINOv2's
    learned mask token (1, D): ``forward_features(x, masks)`` puts it in place of the patch tokens
    that the boolean ``masks`` (B, h*w) select, and official DINOv2 files keep theirs.
    ``token_merging=r`` (ToMe, :mod:`~vision_attn.layers.token_merging`): each block merges its ``r``
    most similar pairs of patch tokens after attention (prefix tokens never), attention weighs merged
    tokens by size, and so does the average pool; ``0`` is the plain model. The parameters, and so
    the checkpoints, are the plain model's.

    timm's model interface (:class:`~vision_attn.models.contract.TimmContract`): one feature level per
    block (``feature_info``: ``embed_dim`` channels at the patch stride, module ``blocks.i``), maps as
    NCHW or tokens (``"NLC"``, prefix tokens dropped); ``features_only`` takes the last three blocks
    by default, as timm does.
    """

    output_fmts = ("NCHW", "NLC")
    default_out_indices = 3
    classifier_keys = ("head.weight", "head.bias", "head_dist.weight", "head_dist.bias")

    def __init__(
        self,
        *,
        img_size: int | tuple[int, int] = 224,
        patch_size: int = 16,
        in_chans: int = 3,
        num_classes: int = 1000,
        embed_dim: int = 768,
        depth: int = 12,
        num_heads: int = 12,
        mlp_ratio: float = 4.0,
        qkv_bias: bool = True,
        qk_norm: bool = False,
        init_values: float | None = None,
        class_token: bool = True,
        distilled: bool = False,
        reg_tokens: int = 0,
        no_embed_class: bool = False,
        pos_embed: Literal["learn", "sincos2d", "rope", "rope_dinov3", "learn_rope", "none"] = "learn",
        rope_ref_grid: int | tuple[int, int] | None = None,
        rope_temperature: float = 100.0,
        rope_shift: float | None = None,
        rope_jitter: float | None = None,
        rope_rescale: float | None = None,
        pos_embed_interp: Literal["timm", "transformers", "siglip2"] = "timm",
        pos_embed_grid: int | tuple[int, int] | None = None,
        global_pool: Literal["token", "avg", "map"] = "token",
        fc_norm: bool | None = None,
        block: str | type[nn.Module] = "pre",
        attn_class: type[nn.Module] = Attention,
        ffn_layer: type[nn.Module] | str = Mlp,
        act_layer: type[nn.Module] | str = nn.GELU,
        norm_layer: type[nn.Module] = LayerNorm6,
        norm_eps: float | None = None,
        mask_token: bool = False,
        drop_rate: float = 0.0,
        attn_drop_rate: float = 0.0,
        drop_path_rate: float = 0.0,
        dynamic_img_pad: bool = False,
        dynamic_img_size: bool = True,
        pre_norm: bool = False,
        patch_bias: bool | None = None,
        head_bias: bool = True,
        token_merging: int = 0,
    ) -> None:
        super().__init__()
        check_pos_embed_kind(pos_embed)
        if not isinstance(dynamic_img_size, bool):
            raise ConfigError(f"dynamic_img_size={dynamic_img_size!r}: give True or False (any multiple of the patch "
                              "size runs either way)")
        if pos_embed_interp not in POS_EMBED_INTERPS:
            raise ConfigError(f"pos_embed_interp={pos_embed_interp!r}: choose one of {tuple(POS_EMBED_INTERPS)} (how a "
                              f"position table is resampled to another grid: timm's or transformers' way)")
        if global_pool not in ("token", "avg", "map"):
            raise ConfigError(f"global_pool={global_pool!r}: choose 'token' (class token), 'avg' (mean of patch "
                              f"tokens) or 'map' (attention pooling with a learned query, SigLIP)")
        if isinstance(act_layer, str):
            if act_layer not in ACT_LAYERS:
                raise ConfigError(f"act_layer={act_layer!r} is not a known activation: choose one of "
                                  f"{sorted(ACT_LAYERS)} or pass a module class")
            act_layer = ACT_LAYERS[act_layer]
        if isinstance(ffn_layer, str):
            if ffn_layer not in FFN_LAYERS:
                raise ConfigError(f"ffn_layer={ffn_layer!r} is not a known feed-forward network: choose one of "
                                  f"{sorted(FFN_LAYERS)} or pass a module class")
            ffn_layer = FFN_LAYERS[ffn_layer]
        if norm_eps is not None:  # every norm of the model (transformers' configs state one layer_norm_eps)
            norm_layer = functools.partial(norm_layer, eps=norm_eps)
        if global_pool == "token" and not class_token:
            raise ConfigError("global_pool='token' needs class_token=True; use global_pool='avg' without a class token")
        if distilled and not (class_token and global_pool == "token"):
            raise ConfigError("distilled=True (DeiT) needs class_token=True and global_pool='token'")
        block_fn = BLOCKS.get(block) if isinstance(block, str) else block
        if block_fn is None:
            raise ConfigError(f"block={block!r}: choose one of {sorted(BLOCKS)} or pass a block class")

        self.num_classes = num_classes
        self.num_features = self.embed_dim = embed_dim
        self.global_pool = global_pool
        self.pos_embed_kind = pos_embed
        self.distilled = distilled
        self.distilled_training = distilled
        self.num_prefix_tokens = int(class_token) + int(distilled) + reg_tokens
        self.head_bias = head_bias
        # sincos2d and rope cover patch tokens only; a learned table covers the prefix unless no_embed_class
        self.no_embed_class = no_embed_class or pos_embed not in ("learn", "learn_rope")

        # timm's rule: a pre-normed (CLIP) tower's patch projection has no bias
        self.patch_embed = PatchEmbed(img_size, patch_size, in_chans, embed_dim,
                                      bias=not pre_norm if patch_bias is None else patch_bias,
                                      dynamic_pad=dynamic_img_pad)
        self.cls_token = nn.Parameter(torch.zeros(1, 1, embed_dim)) if class_token else None
        self.dist_token = nn.Parameter(torch.zeros(1, 1, embed_dim)) if distilled else None
        self.reg_token = nn.Parameter(torch.zeros(1, reg_tokens, embed_dim)) if reg_tokens else None
        self.mask_token = nn.Parameter(torch.zeros(1, embed_dim)) if mask_token else None
        self.pos_embed_interp = pos_embed_interp
        self.pos_embed_grid = self.patch_embed.grid_size if pos_embed_grid is None else to_2tuple(pos_embed_grid)
        embed_len = math.prod(self.pos_embed_grid) + (0 if self.no_embed_class else self.num_prefix_tokens)
        self.pos_embed = nn.Parameter(torch.zeros(1, embed_len, embed_dim)) if pos_embed in ("learn", "learn_rope") else None
        if pos_embed == "learn_rope":
            if not issubclass(getattr(attn_class, "func", attn_class), EvaAttention):
                raise ConfigError("pos_embed='learn_rope' rotates channels in pairs: it needs attn_class=EvaAttention")
            self.rope = RopeEva(embed_dim // num_heads, rope_ref_grid or self.patch_embed.grid_size)
        elif pos_embed == "rope_dinov3":
            self.rope = RopeDinov3(embed_dim // num_heads, rope_temperature, rope_shift, rope_jitter, rope_rescale)
        else:
            self.rope = Rope2D(embed_dim // num_heads) if pos_embed == "rope" else None
        self._sincos = Tables()  # (h, w, D, device, dtype) -> the sincos2d table (1, h*w, D)
        self.pos_drop = nn.Dropout(drop_rate)
        self.norm_pre = norm_layer(embed_dim) if pre_norm else nn.Identity()

        dpr = torch.linspace(0, drop_path_rate, depth, device="cpu").tolist()  # rises linearly; cpu: builds under a meta device
        self.blocks = nn.ModuleList(
            block_fn(embed_dim, num_heads, mlp_ratio=mlp_ratio, qkv_bias=qkv_bias, qk_norm=qk_norm,
                     proj_drop=drop_rate, attn_drop=attn_drop_rate, drop_path=dpr[i], init_values=init_values,
                     act_layer=act_layer, norm_layer=norm_layer, attn_class=attn_class, ffn_layer=ffn_layer)
            for i in range(depth)
        )
        use_fc_norm = global_pool == "avg" if fc_norm is None else fc_norm
        self.norm = nn.Identity() if use_fc_norm else norm_layer(embed_dim)
        self.attn_pool = (AttentionPoolLatent(embed_dim, num_heads, mlp_ratio=mlp_ratio, act_layer=act_layer,
                                              norm_layer=norm_layer) if global_pool == "map" else None)
        self.fc_norm = norm_layer(embed_dim) if use_fc_norm else nn.Identity()
        self.head_drop = nn.Dropout(drop_rate)
        self.head = nn.Linear(embed_dim, num_classes, bias=head_bias) if num_classes > 0 else nn.Identity()
        self.head_dist = ((nn.Linear(embed_dim, num_classes, bias=head_bias) if num_classes > 0 else nn.Identity())
                          if distilled else None)
        self.grad_checkpointing = False
        reduction = max(self.patch_embed.patch_size)
        self.feature_info = [dict(num_chs=embed_dim, reduction=reduction, module=f"blocks.{i}") for i in range(depth)]
        self.init_weights()
        self.token_sizes: TokenSizes | None = None
        if token_merging:
            self.set_token_merging(token_merging)

    def set_token_merging(self, r: int) -> None:
        """From now on each block merges ``r`` pairs of patch tokens after attention (ToMe; 0: none), in
        place: the blocks become :class:`~vision_attn.layers.token_merging.MergingBlock` with the same
        parameters. Only pre-norm blocks with the standard attention and an absolute (or no) position
        embedding merge; anything else is a ConfigError."""
        plain = all(type(b) in (Block, MergingBlock) and type(b.attn) in (Attention, MergingAttention) for b in self.blocks)
        if not isinstance(r, int) or r < 0 or not plain or self.rope is not None:
            raise ConfigError(f"token_merging={r!r}: merges tokens of the pre-norm block with the standard attention "
                              f"and an absolute or no position embedding; give r >= 0 with block='pre', the default "
                              f"attention and pos_embed 'learn', 'sincos2d' or 'none'")
        self.token_sizes = TokenSizes() if r else None
        for blk in self.blocks:
            blk.__class__, blk.attn.__class__ = (MergingBlock, MergingAttention) if r else (Block, Attention)
            blk.r, blk.protected, blk.sizes = r, self.num_prefix_tokens, self.token_sizes

    # ---------------------------------------------------------------- init and bookkeeping
    def init_weights(self) -> None:
        """Truncated normal (std 0.02) for linear layers, the position table and the distillation
        and register tokens; the class token starts near zero (std 1e-6) as in timm and DeiT."""
        for m in self.modules():
            if isinstance(m, nn.Linear):
                nn.init.trunc_normal_(m.weight, std=0.02)
                if m.bias is not None:
                    nn.init.zeros_(m.bias)
        for p in (self.pos_embed, self.dist_token):
            if p is not None:
                nn.init.trunc_normal_(p, std=0.02)
        for p in (self.cls_token, self.reg_token):
            if p is not None and not p.is_meta:  # normal_ of a meta tensor imports torch's compiler (2 s)
                nn.init.normal_(p, std=1e-6)

    def no_weight_decay(self) -> set[str]:
        """Parameter names that optimisers should exclude from weight decay."""
        return {"pos_embed", "cls_token", "dist_token", "reg_token", "mask_token"}

    def get_classifier(self) -> nn.Module:
        return self.head

    def reset_classifier(self, num_classes: int, global_pool: str | None = None) -> None:
        """Replace the head(s) with freshly initialised ones for ``num_classes`` (0: no head). As timm's,
        ``global_pool`` replaces the pooling (None keeps it): ``"token"``, ``"avg"``, ``""`` (none: the
        model returns the tokens (B, N, D)) or ``"map"`` (only where the attention pool exists; another
        choice drops it)."""
        if global_pool is not None:
            self._set_pool(global_pool)
        self.num_classes = num_classes
        device = next(self.parameters()).device
        make = lambda: (nn.Linear(self.embed_dim, num_classes, bias=self.head_bias, device=device)  # noqa: E731
                        if num_classes > 0 else nn.Identity())
        self.head = make()
        if self.distilled:
            self.head_dist = make()
        for m in (self.head, self.head_dist):
            if isinstance(m, nn.Linear):
                nn.init.trunc_normal_(m.weight, std=0.02)
                if m.bias is not None:
                    nn.init.zeros_(m.bias)

    def _set_pool(self, global_pool: str) -> None:
        if global_pool not in ("token", "avg", "map", ""):
            raise ConfigError(f"global_pool={global_pool!r}: choose 'token', 'avg', 'map' or '' (no pooling)")
        if global_pool == "map" and self.attn_pool is None:
            raise ConfigError("global_pool='map': this model has no attention pool to use (build it with global_pool='map')")
        if global_pool == "token" and self.cls_token is None:
            raise ConfigError("global_pool='token' needs a class token; this model has none")
        if self.distilled and global_pool != "token":
            raise ConfigError("a distilled model (DeiT) pools its class and distillation tokens: global_pool='token' only")
        if global_pool != "map":
            self.attn_pool = None
        self.global_pool = global_pool

    def set_distilled_training(self, enable: bool = True) -> None:
        """DeiT: return (cls, dist) logits in training (True, the default) or their mean (False)."""
        self.distilled_training = enable

    # ---------------------------------------------------------------- forward
    def _embed(self, x: torch.Tensor, masks: torch.Tensor | None = None) -> tuple[torch.Tensor, tuple[int, int]]:
        """Images (B, C, H, W) -> tokens (B, prefix + h*w, D) with positions added (and ``norm_pre``
        applied), and the grid (h, w); patch tokens selected by ``masks`` (B, h*w) become the mask
        token first."""
        if isinstance(x, NaFlexBatch):
            raise ConfigError("a NaFlex batch runs through forward and forward_features (tokens, pooled features); "
                              "feature maps and intermediates need images (B, C, H, W) of one size")
        x = self.patch_embed(x)  # (B, h, w, D)
        B, h, w, D = x.shape
        x = x.reshape(B, h * w, D)  # (B, h*w, D)
        if masks is not None:
            if self.mask_token is None:
                raise ConfigError("masks given, but the model has no mask token: build it with mask_token=True")
            if masks.shape != (B, h * w):
                raise DataError(f"masks of shape {tuple(masks.shape)}: expected ({B}, {h * w}), one per patch of the {h}x{w} grid")
            x = torch.where(masks.bool().unsqueeze(-1), self.mask_token.to(x.dtype), x)
        prefix = [t.expand(B, -1, -1) for t in (self.cls_token, self.dist_token, self.reg_token) if t is not None]
        if self.pos_embed is not None:
            n_pos_prefix = 0 if self.no_embed_class else self.num_prefix_tokens
            pos = resample_abs_pos_embed(self.pos_embed, (h, w), self.pos_embed_grid, n_pos_prefix,
                                         **POS_EMBED_INTERPS[self.pos_embed_interp])
        elif self.pos_embed_kind == "sincos2d":
            pos = self._sincos.get((h, w, D, x.device, x.dtype),
                                   lambda: sincos_2d((h, w), D, device=x.device, dtype=x.dtype)[None], x)  # (1, h*w, D)
        else:
            pos = None
        if pos is not None and self.no_embed_class:
            x = x + pos
        x = torch.cat(prefix + [x], dim=1) if prefix else x  # (B, prefix + h*w, D)
        if pos is not None and not self.no_embed_class:
            x = x + pos
        return self.norm_pre(self.pos_drop(x)), (h, w)

    def _embed_patches(self, batch: NaFlexBatch) -> tuple[torch.Tensor, torch.Tensor]:
        """A NaFlex batch -> tokens (B, prefix + N, D) with each image's positions added (the table
        resampled to its own grid, ``pos_embed_interp``'s way; padding takes the first position, as
        transformers' SigLIP 2 does) and the additive attention mask (B, 1, 1, prefix + N)."""
        patches, mask, shapes = batch
        proj = self.patch_embed.proj
        if self.rope is not None or self.pos_embed_kind not in ("learn", "none") or self.token_sizes is not None:
            raise ConfigError(f"NaFlex patches need a learned (or no) position table, without token merging; this "
                              f"model has pos_embed={self.pos_embed_kind!r}")
        for i, blk in enumerate(self.blocks):
            if not (_takes(blk, "attn_mask") and _takes(blk.attn, "attn_mask")):
                raise ConfigError(f"NaFlex patches: block {i} ({type(blk).__name__}) takes no attention mask; "
                                  f"build the model with block='pre' and the standard attention")
        weight = proj.weight.permute(0, 2, 3, 1).reshape(proj.out_channels, -1)  # (D, P*P*C): (row, col, channel)
        if patches.dim() != 3 or patches.shape[-1] != weight.shape[1] or mask.shape != patches.shape[:2] \
                or shapes.shape != (patches.shape[0], 2):
            raise DataError(f"NaFlex batch: patches {tuple(patches.shape)}, mask {tuple(mask.shape)}, shapes "
                            f"{tuple(shapes.shape)}; expected (B, N, {weight.shape[1]}) for patches of "
                            f"{tuple(self.patch_embed.patch_size)} px x {proj.in_channels} channels, (B, N), (B, 2)")
        x = self.patch_embed.norm(F.linear(patches.to(weight.dtype), weight, proj.bias))  # (B, N, D)
        B, N, D = x.shape
        n_pos_prefix = 0 if self.no_embed_class else self.num_prefix_tokens
        if self.pos_embed is not None:
            x = x + self._naflex_pos(shapes, N, n_pos_prefix).to(x.dtype)
        prefix = [t.expand(B, -1, -1) for t in (self.cls_token, self.dist_token, self.reg_token) if t is not None]
        if prefix:
            first = torch.cat(prefix, dim=1)
            if self.pos_embed is not None and n_pos_prefix:
                first = first + self.pos_embed[:, :n_pos_prefix]
            x = torch.cat([first, x], dim=1)
        keep = torch.cat([mask.new_ones(B, self.num_prefix_tokens), mask], dim=1).to(x.device)
        return self.norm_pre(self.pos_drop(x)), padding_bias(keep, x.dtype)

    def _naflex_pos(self, shapes: torch.Tensor, length: int, n_prefix: int) -> torch.Tensor:
        """(B, length, D): image i's rows are the table resampled to its grid (h_i, w_i), then its first row."""
        table = self.pos_embed[:, n_prefix:]
        grids = [tuple(g) for g in shapes.tolist()]
        resized = {g: resample_abs_pos_embed(table, g, self.pos_embed_grid, 0, **POS_EMBED_INTERPS[self.pos_embed_interp])
                   for g in set(grids)}
        rows = []
        for i, (h, w) in enumerate(grids):
            if h < 1 or w < 1 or h * w > length:
                raise DataError(f"NaFlex batch: image {i}'s grid {h}x{w} does not fit its {length} positions")
            r = resized[(h, w)][0]  # (h*w, D)
            rows.append(torch.cat([r, r[:1].expand(length - h * w, -1)], dim=0))
        return torch.stack(rows)

    def _rope(self, grid: tuple[int, int], x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor] | None:
        return self.rope(grid, x.device, x.dtype) if self.rope is not None else None

    def forward_features(self, x: torch.Tensor | NaFlexBatch, masks: torch.Tensor | None = None) -> torch.Tensor:
        """Images (B, C, H, W) -> normalised tokens (B, prefix + h*w, D); ``masks`` (B, h*w), boolean,
        replaces those patch tokens by the mask token (``mask_token=True``). A
        :class:`~vision_attn.data.naflex.NaFlexBatch` -> (B, prefix + N, D), attention kept off the padding."""
        if isinstance(x, NaFlexBatch):
            x, bias = self._embed_patches(x)
            return self.norm(run_blocks(self, self.blocks, x, attn_mask=bias))
        if self.token_sizes is not None:
            self.token_sizes.reset()
        x, grid = self._embed(x, masks)
        return self.norm(run_blocks(self, self.blocks, x, rope=self._rope(grid, x)))

    def pool(self, x: torch.Tensor, mask: torch.Tensor | None = None) -> torch.Tensor:
        """Tokens (B, N, D) -> (B, D): the class token, the mean of the patch tokens, or the attention
        pool over the patch tokens (``"map"``); ``mask`` (B, patch tokens), boolean: the real patches
        of a NaFlex batch (the padding is left out)."""
        if not self.global_pool:
            return x
        if self.global_pool == "map":
            return self.attn_pool(x[:, self.num_prefix_tokens:], mask) if self.attn_pool is not None else x  # pruned: tokens
        if self.global_pool == "avg" and mask is not None:
            keep = mask.to(x.dtype).unsqueeze(-1)  # (B, N, 1)
            return (x[:, self.num_prefix_tokens:] * keep).sum(dim=1) / keep.sum(dim=1)
        if self.global_pool == "avg":
            size = self.token_sizes.size if self.token_sizes is not None else None
            if size is not None:  # merged tokens: each weighs the patches it stands for
                return (x * size)[:, self.num_prefix_tokens:].sum(dim=1) / size[:, self.num_prefix_tokens:].sum(dim=1)
            return x[:, self.num_prefix_tokens:].mean(dim=1)
        return x[:, 0]

    def forward_head(self, x: torch.Tensor, pre_logits: bool = False,
                     mask: torch.Tensor | None = None) -> torch.Tensor | tuple[torch.Tensor, torch.Tensor]:
        """Tokens (B, N, D) -> logits (B, num_classes), or pooled features (B, D) with ``pre_logits``;
        ``mask``: a NaFlex batch's (see :meth:`pool`)."""
        if self.distilled:
            x, x_dist = self.head_drop(x[:, 0]), self.head_drop(x[:, 1])
            if pre_logits:
                return (x + x_dist) / 2
            x, x_dist = self.head(x), self.head_dist(x_dist)
            if self.training and self.distilled_training:
                return x, x_dist
            return (x + x_dist) / 2
        x = self.head_drop(self.fc_norm(self.pool(x, mask)))
        return x if pre_logits else self.head(x)

    def forward(self, x: torch.Tensor | NaFlexBatch) -> torch.Tensor | tuple[torch.Tensor, torch.Tensor]:
        """Images (B, C, H, W), or a :class:`~vision_attn.data.naflex.NaFlexBatch` of patch sequences
        (each image at its own aspect ratio, padded, with its mask) -> logits (or pooled features)."""
        if isinstance(x, NaFlexBatch):
            return self.forward_head(self.forward_features(x), mask=x.mask.to(x.patches.device))
        return self.forward_head(self.forward_features(x))

    # ---------------------------------------------------------------- timm's contract: one level a block
    def _levels(self) -> nn.ModuleList:
        return self.blocks

    def _begin(self, x: torch.Tensor) -> tuple[torch.Tensor, tuple]:
        if self.token_sizes is not None:
            raise ConfigError("token_merging changes the number of tokens block by block, so a block's tokens are no "
                              "feature map: build the model without token_merging for features or intermediates")
        x, grid = self._embed(x)
        return x, (grid, self._rope(grid, x))

    def _run_level(self, i: int, x: torch.Tensor, context: tuple) -> torch.Tensor:
        return run_blocks(self, [self.blocks[i]], x, rope=context[1])

    def _feature_map(self, i: int, x: torch.Tensor, context: tuple, norm: bool, output_fmt: str) -> torch.Tensor:
        """Tokens (B, prefix + h*w, D) -> (B, D, h, w) (``"NCHW"``) or (B, h*w, D) (``"NLC"``)."""
        y = (self.norm(x) if norm else x)[:, self.num_prefix_tokens:]  # (B, h*w, D)
        if output_fmt == "NLC":
            return y
        h, w = context[0]
        return y.reshape(y.shape[0], h, w, y.shape[-1]).permute(0, 3, 1, 2).contiguous()

    def _truncate(self, last: int) -> None:
        self.blocks = self.blocks[: last + 1]

    def _prune_head(self) -> None:
        """The classifier, ``fc_norm`` and SigLIP's attention pool go (as timm's ``prune_head``:
        a pruned ``"map"`` model's head returns the tokens unpooled)."""
        self.fc_norm = nn.Identity()
        self.attn_pool = None
        self.reset_classifier(0)

    # ---------------------------------------------------------------- checkpoints
    def file_head_width(self, state_dict: dict[str, torch.Tensor]) -> int | None:
        """The head a CLIP file carries as part of the tower: an OpenAI CLIP / open_clip image projection
        ``proj`` (D, E) gives E; an open_clip timm trunk its own head's width (0: none, SigLIP's). None
        for other layouts, whose head is a classifier. :func:`~vision_attn.models.create_model` builds
        that head when not given ``num_classes`` (timm's configuration of these towers)."""
        if _is_openai_clip(state_dict):
            proj = state_dict.get("visual.proj", state_dict.get("proj"))
            return None if proj is None else proj.shape[1]
        if _is_open_clip_trunk(state_dict):
            head = next((v for k, v in state_dict.items() if k.endswith("trunk.head.weight")), None)
            return 0 if head is None else head.shape[0]
        return None

    def convert_checkpoint(self, state_dict: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        """Recognise a timm/vision_attn, torchvision, official DINOv2 or DINOv3, or OpenAI CLIP / open_clip state
        dict, map it to our keys and resample the position table to this model's grid."""
        if "conv_proj.weight" in state_dict:
            state_dict = torchvision_to_timm(state_dict)
        elif _is_openai_clip(state_dict):
            head_bias = isinstance(self.head, nn.Linear) and self.head.bias is not None
            state_dict = openai_clip_to_timm(state_dict, head_bias=head_bias)
        elif _is_open_clip_trunk(state_dict):
            state_dict = open_clip_trunk_to_timm(state_dict)
        elif "storage_tokens" in state_dict:  # official DINOv3 (before DINOv2's test: it has a mask token too)
            q_bias = any(k.endswith("attn.q_bias") for k in self.state_dict())
            state_dict = dinov3_to_timm(state_dict, q_bias=q_bias, keep_mask_token=self.mask_token is not None)
        elif "embeds.proj.weight" in state_dict:  # timm's NaFlex ViT (SigLIP 2)
            state_dict = naflex_to_timm(state_dict, self.patch_embed.proj.in_channels)
        elif _is_dinov2(state_dict):
            state_dict = dinov2_to_timm(state_dict, no_embed_class=self.no_embed_class,
                                        keep_mask_token=self.mask_token is not None)
        else:
            state_dict = dict(state_dict)
        pos = state_dict.get("pos_embed")
        if pos is not None and self.pos_embed is not None and pos.shape != self.pos_embed.shape and pos.ndim == 3:
            n_prefix = 0 if self.no_embed_class else self.num_prefix_tokens
            n_grid = pos.shape[1] - n_prefix
            side = math.isqrt(max(n_grid, 0))
            if side * side == n_grid and pos.shape[-1] == self.embed_dim:
                state_dict["pos_embed"] = resample_abs_pos_embed(pos, self.pos_embed_grid, (side, side), n_prefix,
                                                                 **POS_EMBED_INTERPS[self.pos_embed_interp])
        return state_dict


# timm's NaFlex ViT (timm/models/naflexvit.py, SigLIP 2): the embeddings under ``embeds.``, the rest
# timm's ViT keys as they are:
#   embeds.proj (D, P*P*C), a Linear over (row, column, channel) patches -> patch_embed.proj (D, C, P, P)
#   embeds.pos_embed (1, h, w, D)                                       -> pos_embed (1, h*w, D)
# Refused by key: its other embeddings (a class or register token's, a norm: RADIO's variants).
def naflex_to_timm(state_dict: dict[str, torch.Tensor], in_chans: int) -> dict[str, torch.Tensor]:
    """Map timm's NaFlex ViT state dict (see above) to our keys."""
    out: dict[str, torch.Tensor] = {}
    for key, value in state_dict.items():
        if key == "embeds.proj.weight":
            out["patch_embed.proj.weight"] = linear_to_conv_patches(value, in_chans, f"timm NaFlex checkpoint: {key}")
        elif key == "embeds.proj.bias":
            out["patch_embed.proj.bias"] = value
        elif key == "embeds.pos_embed":
            out["pos_embed"] = value.reshape(1, -1, value.shape[-1])
        elif key.startswith("embeds."):
            raise CheckpointError(f"timm NaFlex checkpoint: key {key!r} is an embedding option vision_attn's SigLIP 2 "
                                  f"ViT does not have")
        else:
            out[key] = value
    return out


def _takes(module: nn.Module, name: str) -> bool:
    """Whether ``module``'s forward takes the keyword ``name``."""
    return name in inspect.signature(module.forward).parameters


# ------------------------------------------------------------------------------------------------
# torchvision layout (torchvision.models.vision_transformer), mapped key by key:
#   conv_proj                                         -> patch_embed.proj
#   class_token (1, 1, D)                             -> cls_token
#   encoder.pos_embedding (1, 1 + N, D)               -> pos_embed (covers the class token, as timm)
#   encoder.layers.encoder_layer_{i}.ln_1             -> blocks.{i}.norm1
#   ....self_attention.in_proj_weight/bias (3D, D)    -> blocks.{i}.attn.qkv.weight/bias (same q, k, v order)
#   ....self_attention.out_proj                       -> blocks.{i}.attn.proj
#   ....ln_2                                          -> blocks.{i}.norm2
#   ....mlp.0 / mlp.3 (mlp.linear_1 / linear_2 before torchvision 0.13) -> blocks.{i}.mlp.fc1 / fc2
#   encoder.ln                                        -> norm
#   heads.head                                        -> head
# torchvision's optional ``heads.pre_logits`` (representation_size) has no counterpart and is refused.
_TV_BLOCK = {
    "ln_1": "norm1", "self_attention.in_proj_weight": "attn.qkv.weight", "self_attention.in_proj_bias": "attn.qkv.bias",
    "self_attention.out_proj": "attn.proj", "ln_2": "norm2", "mlp.0": "mlp.fc1", "mlp.3": "mlp.fc2",
    "mlp.linear_1": "mlp.fc1", "mlp.linear_2": "mlp.fc2",
}
_TV_TOP = {"conv_proj": "patch_embed.proj", "class_token": "cls_token", "encoder.pos_embedding": "pos_embed",
           "encoder.ln": "norm", "heads.head": "head"}
_TV_LAYER = "encoder.layers.encoder_layer_"


def _map_key(key: str, table: dict[str, str]) -> str | None:
    for src, dst in table.items():
        if key == src:
            return dst
        if key.startswith(src + "."):
            return dst + key[len(src):]
    return None


def torchvision_to_timm(state_dict: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """Map a torchvision ViT state dict to timm's (and our) keys; every key must be accounted for."""
    out: dict[str, torch.Tensor] = {}
    for key, value in state_dict.items():
        if key.startswith(_TV_LAYER):
            index, rest = key[len(_TV_LAYER):].split(".", 1)
            new = _map_key(rest, _TV_BLOCK)
            new = f"blocks.{index}.{new}" if new else None
        else:
            new = _map_key(key, _TV_TOP)
        if new is None:
            raise CheckpointError(
                f"torchvision ViT checkpoint: key {key!r} has no counterpart in vision_attn's ViT "
                f"(heads.pre_logits / representation_size is not supported); remove it or use a plain head"
            )
        assert new not in out, f"two torchvision keys map to {new}"
        out[new] = value
    return out


def timm_to_torchvision(state_dict: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """The inverse map: our (timm) ViT keys -> torchvision's, for ``torchvision.models.vit_*``."""
    top = {v: k for k, v in _TV_TOP.items()}
    block = {v: k for k, v in _TV_BLOCK.items() if not k.startswith("mlp.linear")}
    out: dict[str, torch.Tensor] = {}
    for key, value in state_dict.items():
        if key.startswith("blocks."):
            _, index, rest = key.split(".", 2)
            new = _map_key(rest, block)
            new = f"{_TV_LAYER}{index}.{new}" if new else None
        else:
            new = _map_key(key, top)
        if new is None:
            raise CheckpointError(f"ViT key {key!r} has no counterpart in torchvision's VisionTransformer")
        out[new] = value
    return out


# ------------------------------------------------------------------------------------------------
# Official DINOv2 layout (github.com/facebookresearch/dinov2, dinov2/models/vision_transformer.py; the
# hub files dinov2_vit{s,b,l,g}14[_reg4]_pretrain.pth), mapped key by key:
#   cls_token, pos_embed (1, 1 + N, D: covers the class token), patch_embed.proj, norm -> the same
#   blocks.{i}.{norm1, attn.qkv, attn.proj, ls1.gamma, norm2, mlp.fc1, mlp.fc2, ls2.gamma} -> the same
#   blocks.{i}.mlp.w12 / mlp.w3 (the giant model's SwiGLU) -> blocks.{i}.mlp.fc1 / mlp.fc2
#   register_tokens (1, R, D) -> reg_token; for timm's register models (no_embed_class: the position
#     table covers the patches only) the class token's position row moves into the token:
#     cls_token + pos_embed[:, 0] -> cls_token, pos_embed[:, 1:] -> pos_embed (the same sums)
#   mask_token (1, D) -> mask_token where the model has one (mask_token=True), else dropped (timm's choice)
# The official hub files have no classifier. Block-chunked files (blocks.{c}.{i}, FSDP training) are refused.
_DINOV2_SWIGLU = re.compile(r"^(blocks\.\d+\.mlp\.)(w12|w3)\.(weight|bias)$")


def _is_dinov2(state_dict: dict[str, torch.Tensor]) -> bool:
    """Official DINOv2 files carry ``mask_token``, ``register_tokens`` or the packed SwiGLU ``w12``."""
    return ("mask_token" in state_dict or "register_tokens" in state_dict
            or any(_DINOV2_SWIGLU.match(k) for k in state_dict))


def dinov2_to_timm(state_dict: dict[str, torch.Tensor], no_embed_class: bool = False,
                   keep_mask_token: bool = False) -> dict[str, torch.Tensor]:
    """Map an official DINOv2 state dict to timm's (and our) keys (see above). ``no_embed_class``:
    the target's position table leaves out the prefix tokens (timm's ``_reg4_`` models)."""
    out: dict[str, torch.Tensor] = {}
    for key, value in state_dict.items():
        if key == "mask_token":
            if keep_mask_token:
                out[key] = value
            continue
        if re.match(r"^blocks\.\d+\.\d+\.", key):
            raise CheckpointError(f"DINOv2 checkpoint: key {key!r} is block-chunked (training layout); "
                                  f"load the hub file (blocks.N.*) or re-save the chunks unchunked")
        m = _DINOV2_SWIGLU.match(key)
        new = f"{m.group(1)}{'fc1' if m.group(2) == 'w12' else 'fc2'}.{m.group(3)}" if m else key
        new = "reg_token" if key == "register_tokens" else new
        out[new] = value
    # the official layout (register_tokens) covers the class token; a timm/vision_attn file (reg_token,
    # carrying a mask token) has it folded already
    if no_embed_class and "register_tokens" in state_dict and "pos_embed" in out and "cls_token" in out:
        pos = out["pos_embed"]
        out["cls_token"] = out["cls_token"] + pos[:, :1]
        out["pos_embed"] = pos[:, 1:]
    return out


# ------------------------------------------------------------------------------------------------
# Official DINOv3 layout (github.com/facebookresearch/dinov3, dinov3/models/vision_transformer.py; the
# files dinov3_vit*16_pretrain_*.pth), for the DINOv3 names of models/dinov3.py, mapped key by key:
#   cls_token, patch_embed.proj, norm, blocks.{i}.{norm1, attn.qkv.weight, attn.proj, norm2,
#     mlp.fc1, mlp.fc2}                                   -> the same
#   storage_tokens (1, R, D)                              -> reg_token
#   blocks.{i}.ls1.gamma / ls2.gamma                      -> blocks.{i}.gamma_1 / gamma_2
#   blocks.{i}.mlp.w1 / w2 / w3 (SwiGLU: gate, value, out) -> blocks.{i}.mlp.fc1_g / fc1_x / fc2
#   blocks.{i}.attn.qkv.bias (3D,) times its bias_mask (the key third masked to zero, as the model
#     computes it)                                        -> attn.q_bias, attn.v_bias (the _qkvb names); a
#     model without them takes only an all-zero bias (the distilled B, L, H+ files)
#   rope_embed.periods (recomputed here, as timm does), bias_mask, local_cls_norm (7B pre-training only)
#                                                         -> dropped; mask_token -> kept where the model has one
# Refused, naming the key: an untied class-token norm (cls_norm: untie_cls_and_patch_norms), a key bias
# the mask does not zero, anything else unknown.
_DINOV3_TOP = {"cls_token", "storage_tokens", "mask_token", "patch_embed.proj.weight", "patch_embed.proj.bias",
               "norm.weight", "norm.bias", "rope_embed.periods", "local_cls_norm.weight", "local_cls_norm.bias"}
_DINOV3_BLOCK = {"norm1.weight": "norm1.weight", "norm1.bias": "norm1.bias", "attn.qkv.weight": "attn.qkv.weight",
                 "attn.proj.weight": "attn.proj.weight", "attn.proj.bias": "attn.proj.bias",
                 "ls1.gamma": "gamma_1", "ls2.gamma": "gamma_2", "norm2.weight": "norm2.weight",
                 "norm2.bias": "norm2.bias", "mlp.fc1.weight": "mlp.fc1.weight", "mlp.fc1.bias": "mlp.fc1.bias",
                 "mlp.fc2.weight": "mlp.fc2.weight", "mlp.fc2.bias": "mlp.fc2.bias",
                 "mlp.w1.weight": "mlp.fc1_g.weight", "mlp.w1.bias": "mlp.fc1_g.bias",
                 "mlp.w2.weight": "mlp.fc1_x.weight", "mlp.w2.bias": "mlp.fc1_x.bias",
                 "mlp.w3.weight": "mlp.fc2.weight", "mlp.w3.bias": "mlp.fc2.bias"}


def dinov3_to_timm(state_dict: dict[str, torch.Tensor], q_bias: bool,
                   keep_mask_token: bool = False) -> dict[str, torch.Tensor]:
    """Map an official DINOv3 ViT state dict to timm's (and our) keys (see above); ``q_bias``: the
    target has query and value biases (timm's ``_qkvb`` names)."""
    out: dict[str, torch.Tensor] = {}
    for key, value in state_dict.items():
        m = re.match(r"^blocks\.(\d+)\.(.+)$", key)
        if m is None:
            if key == "cls_norm.weight" or key == "cls_norm.bias":
                raise CheckpointError(f"DINOv3 checkpoint: key {key!r} is a class-token norm apart from the patch "
                                      f"tokens' (DINOv3's untie_cls_and_patch_norms), an option vision_attn's DINOv3 "
                                      f"ViT does not have")
            if key not in _DINOV3_TOP:
                raise CheckpointError(f"DINOv3 checkpoint: key {key!r} has no counterpart in vision_attn's DINOv3 ViT")
            if key in ("cls_token", "patch_embed.proj.weight", "patch_embed.proj.bias", "norm.weight", "norm.bias"):
                out[key] = value
            elif key == "storage_tokens":
                out["reg_token"] = value
            elif key == "mask_token" and keep_mask_token:
                out[key] = value.reshape(1, -1)
            continue
        block, rest = m.groups()
        if rest == "attn.qkv.bias_mask":
            continue
        if rest == "attn.qkv.bias":
            mask = state_dict.get(f"blocks.{block}.attn.qkv.bias_mask")
            bias = value * mask if mask is not None else value
            q, k, v = bias.chunk(3)
            if torch.any(k != 0):
                raise CheckpointError(f"DINOv3 checkpoint: {key} has a key bias (its middle third, not masked to "
                                      f"zero), an option vision_attn's DINOv3 attention (timm's) does not have")
            if q_bias:
                out[f"blocks.{block}.attn.q_bias"], out[f"blocks.{block}.attn.v_bias"] = q, v
            elif torch.any(bias != 0):
                raise CheckpointError(f"DINOv3 checkpoint: {key} has query and value biases: load it into the "
                                      f"name's _qkvb variant (e.g. vit_small_patch16_dinov3_qkvb)")
            continue
        if rest not in _DINOV3_BLOCK:
            raise CheckpointError(f"DINOv3 checkpoint: key {key!r} has no counterpart in vision_attn's DINOv3 ViT")
        out[f"blocks.{block}.{_DINOV3_BLOCK[rest]}"] = value
    return out


# ------------------------------------------------------------------------------------------------
# OpenAI CLIP layout (github.com/openai/CLIP, clip/model.py VisionTransformer; open_clip's
# VisionTransformer in open_clip/transformer.py keeps the same keys), the image tower under ``visual.``
# in a full CLIP state dict, or without the prefix (a tower saved alone), mapped key by key:
#   conv1 (no bias)                                          -> patch_embed.proj
#   class_embedding (D,)                                     -> cls_token (1, 1, D)
#   positional_embedding (1 + N, D)                          -> pos_embed (1, 1 + N, D)
#   ln_pre                                                   -> norm_pre
#   transformer.resblocks.{i}.ln_1                           -> blocks.{i}.norm1
#   ....attn.in_proj_weight/bias (3D, D)                     -> blocks.{i}.attn.qkv.weight/bias (same q, k, v rows)
#   ....attn.out_proj                                        -> blocks.{i}.attn.proj
#   ....ls_1.gamma / ls_2.gamma (open_clip's ls_init_value)  -> blocks.{i}.ls1.gamma / ls2.gamma
#   ....ln_2                                                 -> blocks.{i}.norm2
#   ....mlp.c_fc / mlp.c_proj                                -> blocks.{i}.mlp.fc1 / mlp.fc2
#   ln_post                                                  -> norm
#   proj (D, E), applied as x @ proj                         -> head.weight (E, D) = proj.T, and a zero
#                                                               head.bias where the head has one (timm's towers)
# A full CLIP state dict's text tower is dropped: this is the image model (its keys outside ``visual.``:
# token_embedding, positional_embedding, transformer.resblocks.*, ln_final, text_projection,
# logit_scale; open_clip's logit_bias and the text.* of its CustomTextCLIP; OpenAI's attn_mask buffer
# and the input_resolution / context_length / vocab_size entries of its TorchScript files).
# Refused, by key: open_clip's attentional pooler (attn_pool, CoCa), timm trunks (visual.trunk.*:
# load the trunk's own timm state dict) and anything else unknown.
_CLIP_TEXT_TOWER = ("token_embedding", "positional_embedding", "transformer", "ln_final", "text_projection",
                    "logit_scale", "logit_bias", "text", "attn_mask", "input_resolution", "context_length",
                    "vocab_size")
_CLIP_BLOCK = {
    "ln_1": "norm1", "attn.in_proj_weight": "attn.qkv.weight", "attn.in_proj_bias": "attn.qkv.bias",
    "attn.out_proj": "attn.proj", "ls_1.gamma": "ls1.gamma", "ls_2.gamma": "ls2.gamma", "ln_2": "norm2",
    "mlp.c_fc": "mlp.fc1", "mlp.c_proj": "mlp.fc2",
}
_CLIP_TOP = {"conv1": "patch_embed.proj", "class_embedding": "cls_token", "positional_embedding": "pos_embed",
             "ln_pre": "norm_pre", "ln_post": "norm", "proj": "head.weight"}
_CLIP_LAYER = "transformer.resblocks."


def _is_openai_clip(state_dict: dict[str, torch.Tensor]) -> bool:
    """OpenAI CLIP and open_clip image towers: ``conv1`` and ``class_embedding``, under ``visual.`` or not."""
    return any(f"{p}conv1.weight" in state_dict and f"{p}class_embedding" in state_dict for p in ("visual.", ""))


def openai_clip_to_timm(state_dict: dict[str, torch.Tensor], head_bias: bool = True) -> dict[str, torch.Tensor]:
    """Map an OpenAI CLIP / open_clip state dict (a full CLIP model or its image tower alone) to
    timm's (and our) keys (see above); ``head_bias``: give the projection head a zero bias."""
    prefix = "visual." if "visual.conv1.weight" in state_dict else ""
    out: dict[str, torch.Tensor] = {}
    for key, value in state_dict.items():
        if prefix and not key.startswith(prefix):
            if key.split(".", 1)[0] in _CLIP_TEXT_TOWER:
                continue  # the text tower (see above)
            raise CheckpointError(f"CLIP checkpoint: key {key!r} is neither the image tower (visual.*) nor a "
                                  f"part of the text tower vision_attn drops; remove it")
        rest = key[len(prefix):]
        if rest.startswith(_CLIP_LAYER):
            index, tail = rest[len(_CLIP_LAYER):].split(".", 1)
            new = _map_key(tail, _CLIP_BLOCK)
            new = f"blocks.{index}.{new}" if new else None
        else:
            new = _map_key(rest, _CLIP_TOP)
        if new is None:
            raise CheckpointError(
                f"CLIP checkpoint: key {key!r} has no counterpart in vision_attn's ViT (open_clip's attentional "
                f"pooler and timm trunks are not supported; a timm trunk loads as its own timm state dict)")
        if rest == "class_embedding":
            value = value.reshape(1, 1, -1)
        elif rest == "positional_embedding":
            value = value.unsqueeze(0)
        elif rest == "proj":
            value = value.t().contiguous()
            if head_bias:
                out["head.bias"] = value.new_zeros(value.shape[0])
        assert new not in out, f"two CLIP keys map to {new}"
        out[new] = value
    return out


# ------------------------------------------------------------------------------------------------
# open_clip's towers built on a timm model (open_clip/timm_model.py TimmModel: SigLIP, ViT-*-SigLIP*,
# the timm_model_name configs), a full CLIP state dict (the tower under ``visual.``) or the tower alone:
#   visual.trunk.<timm key> / trunk.<timm key>   -> <timm key> (timm's own layout, unchanged: the trunk
#                                                   is built by timm.create_model with global_pool=timm_pool
#                                                   and num_classes 0 (timm_proj "none") or the embedding
#                                                   width (its head is then the projection))
#   the text tower (text.*, logit_scale, logit_bias) -> dropped, as above
# Refused, by key: open_clip's own head over the trunk (visual.head.*: timm_proj "linear"/"mlp", or its
# attention pools "abs_attn"/"rot_attn"), which has no counterpart here.
def _is_open_clip_trunk(state_dict: dict[str, torch.Tensor]) -> bool:
    return any(k.startswith(("visual.trunk.", "trunk.")) for k in state_dict)


def open_clip_trunk_to_timm(state_dict: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """Map an open_clip tower over a timm trunk (see above) to timm's (and our) keys."""
    prefix = "visual." if any(k.startswith("visual.trunk.") for k in state_dict) else ""
    out: dict[str, torch.Tensor] = {}
    for key, value in state_dict.items():
        if prefix and not key.startswith(prefix):
            if key.split(".", 1)[0] in _CLIP_TEXT_TOWER:
                continue
            raise CheckpointError(f"open_clip checkpoint: key {key!r} is neither the image tower (visual.*) nor a "
                                  f"part of the text tower vision_attn drops; remove it")
        rest = key[len(prefix):]
        if not rest.startswith("trunk."):
            raise CheckpointError(f"open_clip checkpoint: key {key!r} has no counterpart in vision_attn's ViT "
                                  f"(open_clip's projection or pooling over a timm trunk is not supported)")
        out[rest[len("trunk."):]] = value
    return out


# ------------------------------------------------------------------------------------------------
# Variants. Each is a small function over VisionTransformer; keyword arguments override the config.
def _vit(config: dict, kwargs: dict) -> VisionTransformer:
    return VisionTransformer(**{**config, **kwargs})


_TINY = dict(patch_size=16, embed_dim=192, depth=12, num_heads=3)
_SMALL = dict(patch_size=16, embed_dim=384, depth=12, num_heads=6)
_BASE = dict(patch_size=16, embed_dim=768, depth=12, num_heads=12)
_LARGE = dict(patch_size=16, embed_dim=1024, depth=24, num_heads=16)

# Input configurations (vision_attn.models.pretrained_cfg): timm's default weights under timm's names,
# torchvision's IMAGENET1K_V1 weights under torchvision's
_CFG_AUGREG = data_cfg(224, crop_pct=0.9, mean=INCEPTION_MEAN, std=INCEPTION_STD)  # Google's ViT weights
_CFG_DEIT = data_cfg(224, crop_pct=0.9)
_CFG_TV = data_cfg(224, crop_pct=224 / 256, interpolation="bilinear")
_CFG_DINOV2 = data_cfg(518, crop_pct=1.0)


@register_model(cfg=_CFG_AUGREG)
def vit_tiny_patch16_224(**kwargs) -> VisionTransformer:
    """ViT-Ti/16 (5.7 M parameters)."""
    return _vit(_TINY, kwargs)


@register_model(cfg=_CFG_AUGREG)
def vit_small_patch16_224(**kwargs) -> VisionTransformer:
    """ViT-S/16 (22.1 M)."""
    return _vit(_SMALL, kwargs)


@register_model(cfg=_CFG_AUGREG)
def vit_base_patch16_224(**kwargs) -> VisionTransformer:
    """ViT-B/16 (86.6 M)."""
    return _vit(_BASE, kwargs)


@register_model(cfg=_CFG_AUGREG)
def vit_base_patch32_224(**kwargs) -> VisionTransformer:
    """ViT-B/32 (88.2 M)."""
    return _vit({**_BASE, "patch_size": 32}, kwargs)


@register_model(cfg=data_cfg(384, crop_pct=1.0, mean=INCEPTION_MEAN, std=INCEPTION_STD))
def vit_base_patch16_384(**kwargs) -> VisionTransformer:
    """ViT-B/16 at 384 px."""
    return _vit({**_BASE, "img_size": 384}, kwargs)


@register_model(cfg=_CFG_AUGREG)
def vit_large_patch16_224(**kwargs) -> VisionTransformer:
    """ViT-L/16 (304 M)."""
    return _vit(_LARGE, kwargs)


@register_model(cfg=_CFG_DEIT)
def deit_tiny_patch16_224(**kwargs) -> VisionTransformer:
    """DeiT-Ti: the ViT-Ti architecture with DeiT's training recipe."""
    return _vit(_TINY, kwargs)


@register_model(cfg=_CFG_DEIT)
def deit_small_patch16_224(**kwargs) -> VisionTransformer:
    """DeiT-S."""
    return _vit(_SMALL, kwargs)


@register_model(cfg=_CFG_DEIT)
def deit_base_patch16_224(**kwargs) -> VisionTransformer:
    """DeiT-B."""
    return _vit(_BASE, kwargs)


@register_model(cfg=_CFG_DEIT)
def deit_tiny_distilled_patch16_224(**kwargs) -> VisionTransformer:
    """DeiT-Ti with the distillation token and second head."""
    return _vit({**_TINY, "distilled": True}, kwargs)


@register_model(cfg=_CFG_DEIT)
def deit_small_distilled_patch16_224(**kwargs) -> VisionTransformer:
    """DeiT-S distilled (22.4 M)."""
    return _vit({**_SMALL, "distilled": True}, kwargs)


@register_model(cfg=_CFG_DEIT)
def deit_base_distilled_patch16_224(**kwargs) -> VisionTransformer:
    """DeiT-B distilled."""
    return _vit({**_BASE, "distilled": True}, kwargs)


@register_model(cfg=_CFG_TV)
def vit_b_16(**kwargs) -> VisionTransformer:
    """torchvision's ViT-B/16; loads torchvision checkpoints (``timm_to_torchvision`` maps back)."""
    return _vit(_BASE, kwargs)


@register_model(cfg=_CFG_TV)
def vit_b_32(**kwargs) -> VisionTransformer:
    """torchvision's ViT-B/32."""
    return _vit({**_BASE, "patch_size": 32}, kwargs)


@register_model(cfg=data_cfg(224, crop_pct=224 / 242, interpolation="bilinear"))
def vit_l_16(**kwargs) -> VisionTransformer:
    """torchvision's ViT-L/16."""
    return _vit(_LARGE, kwargs)


# DINOv2 (Oquab et al. 2023) backbones, timm's configurations: patch 14 at 518 px, LayerScale 1e-5, no
# classifier (num_classes=0: the model returns the normalised class token); any multiple of 14 runs,
# the position table resampled bicubically with antialiasing, as timm's dynamic_img_size does.
_DINOV2 = dict(patch_size=14, img_size=518, init_values=1e-5, num_classes=0)
_REG4 = dict(reg_tokens=4, no_embed_class=True)
_GIANT = dict(embed_dim=1536, depth=40, num_heads=24, mlp_ratio=2.66667 * 2, ffn_layer=SwiGLU, act_layer=nn.SiLU)


@register_model(cfg=_CFG_DINOV2)
def vit_small_patch14_dinov2(**kwargs) -> VisionTransformer:
    """DINOv2 ViT-S/14 (22.1 M parameters)."""
    return _vit({**_SMALL, **_DINOV2}, kwargs)


@register_model(cfg=_CFG_DINOV2)
def vit_base_patch14_dinov2(**kwargs) -> VisionTransformer:
    """DINOv2 ViT-B/14 (86.6 M)."""
    return _vit({**_BASE, **_DINOV2}, kwargs)


@register_model(cfg=_CFG_DINOV2)
def vit_large_patch14_dinov2(**kwargs) -> VisionTransformer:
    """DINOv2 ViT-L/14 (304 M)."""
    return _vit({**_LARGE, **_DINOV2}, kwargs)


@register_model(cfg=_CFG_DINOV2)
def vit_giant_patch14_dinov2(**kwargs) -> VisionTransformer:
    """DINOv2 ViT-g/14 with a SwiGLU feed-forward network (1.14 B)."""
    return _vit({**_DINOV2, **_GIANT}, kwargs)


@register_model(cfg=_CFG_DINOV2)
def vit_small_patch14_reg4_dinov2(**kwargs) -> VisionTransformer:
    """DINOv2 ViT-S/14 with 4 register tokens."""
    return _vit({**_SMALL, **_DINOV2, **_REG4}, kwargs)


@register_model(cfg=_CFG_DINOV2)
def vit_base_patch14_reg4_dinov2(**kwargs) -> VisionTransformer:
    """DINOv2 ViT-B/14 with 4 register tokens."""
    return _vit({**_BASE, **_DINOV2, **_REG4}, kwargs)


@register_model(cfg=_CFG_DINOV2)
def vit_large_patch14_reg4_dinov2(**kwargs) -> VisionTransformer:
    """DINOv2 ViT-L/14 with 4 register tokens."""
    return _vit({**_LARGE, **_DINOV2, **_REG4}, kwargs)


@register_model(cfg=_CFG_DINOV2)
def vit_giant_patch14_reg4_dinov2(**kwargs) -> VisionTransformer:
    """DINOv2 ViT-g/14 (SwiGLU) with 4 register tokens."""
    return _vit({**_DINOV2, **_GIANT, **_REG4}, kwargs)
