"""RT-DETR's head (``RTDETRDecoder``): a DETR decoder over the multi-scale maps of a detector YAML.

1. Input projection: each level's map (B, c_i, H_i, W_i) becomes ``hd`` channels (1x1 convolution +
   batch norm) and the levels' positions are concatenated into one sequence (B, A, hd), A = sum H_i W_i.
2. Query selection: every position has an anchor box (its cell's centre, side 0.05 x 2^level of the
   image, as a logit; cells at the image border are invalid). An encoder head scores each position
   (``enc_score_head``) and refines its anchor (``enc_bbox_head``); the ``nq`` best-scored positions
   become the queries: their features the content, their boxes the reference boxes.
3. Decoding: ``ndl`` layers of query self-attention, multi-scale deformable cross-attention (each
   query samples ``ndp`` points per head and level around its reference box:
   :class:`~vision_attn.layers.deformable_attention.MultiScaleDeformableAttention`) and a feed-forward
   network. After each layer a head predicts a box correction (iterative refinement: the refined box is
   the next layer's reference) and class logits. The positional embedding of a query is an MLP of its
   reference box.
4. In training, denoising queries (:mod:`~vision_attn.models.yolo.denoising`) built from the batch's
   ground truth are put before the ordinary ones, with an attention mask between them.

The row ``[[P3, P4, P5], 1, RTDETRDecoder, [nc, hd, nq, ndp, nh, ndl, d_ffn, dropout, act, eval_idx, nd,
label_noise_ratio, box_noise_scale, learnt_init_query]]`` (all after ``nc`` optional) receives its inputs'
channels as the second argument, as in ultralytics' parser. Parameter names and shapes equal
ultralytics' ``RTDETRDecoder`` (``input_proj.0.0.weight``, ``decoder.layers.0.cross_attn.value_proj``,
``dec_bbox_head.5.layers.2.bias``, ...), so its state dict loads unchanged.
"""
from __future__ import annotations

import copy
import math
from typing import Any, Mapping, Sequence

import torch
from torch import nn

from vision_attn.errors import ConfigError, DataError
from vision_attn.layers.deformable_attention import MultiScaleDeformableAttention
from vision_attn.models.yolo.denoising import DenoisingQueries, denoising_queries
from vision_attn.models.yolo.rtdetr import PackedAttention

__all__ = ["RTDETRDecoder", "DecoderLayer", "DeformableDecoder", "BoxMLP", "make_anchors", "inverse_sigmoid"]

DecoderTrainOutput = tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor, "dict[str, Any] | None"]


def inverse_sigmoid(x: torch.Tensor, eps: float = 1e-5) -> torch.Tensor:
    """log(x / (1 - x)) of x clamped to [0, 1], both terms at least ``eps``."""
    x = x.clamp(0, 1)
    return torch.log(x.clamp(min=eps) / (1 - x).clamp(min=eps))


def make_anchors(shapes: list[tuple[int, int]], like: torch.Tensor, grid_size: float = 0.05,
                 eps: float = 1e-2) -> tuple[torch.Tensor, torch.Tensor]:
    """Anchor boxes of every position of the levels ``shapes`` [(H_i, W_i)], in ``like``'s dtype and
    device: (1, A, 4) logits of normalised cx, cy, w, h (w = h = ``grid_size`` x 2^level), +inf where
    the box reaches within ``eps`` of the image border; and that validity, (1, A, 1) bool."""
    boxes = []
    for i, (h, w) in enumerate(shapes):
        gy, gx = torch.meshgrid(torch.arange(h, device=like.device, dtype=like.dtype),
                                torch.arange(w, device=like.device, dtype=like.dtype), indexing="ij")
        xy = torch.stack([(gx + 0.5) / w, (gy + 0.5) / h], -1).view(h * w, 2)  # (H*W, 2)
        boxes.append(torch.cat([xy, torch.full_like(xy, grid_size * 2.0**i)], -1))  # (H*W, 4)
    anchors = torch.cat(boxes, 0)[None]  # (1, A, 4)
    valid = ((anchors > eps) & (anchors < 1 - eps)).all(-1, keepdim=True)  # (1, A, 1)
    return torch.log(anchors / (1 - anchors)).masked_fill(~valid, float("inf")), valid


class BoxMLP(nn.Module):
    """``num_layers`` linear layers with ReLU between them (ultralytics' ``MLP``; keys ``layers.N``):
    (..., input_dim) -> (..., output_dim)."""

    def __init__(self, input_dim: int, hidden_dim: int, output_dim: int, num_layers: int) -> None:
        super().__init__()
        dims = [input_dim, *[hidden_dim] * (num_layers - 1), output_dim]
        self.layers = nn.ModuleList(nn.Linear(a, b) for a, b in zip(dims[:-1], dims[1:]))
        self.act = nn.ReLU()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for i, layer in enumerate(self.layers):
            x = layer(x) if i == len(self.layers) - 1 else self.act(layer(x))
        return x


class DecoderLayer(nn.Module):
    """Post-norm decoder layer: query self-attention (queries and keys with the positional
    embedding), multi-scale deformable cross-attention to the flattened maps around each query's
    reference box, feed-forward network. (B, Q, D) -> (B, Q, D)."""

    def __init__(self, d_model: int = 256, n_heads: int = 8, d_ffn: int = 1024, dropout: float = 0.0,
                 act: nn.Module | None = None, n_levels: int = 4, n_points: int = 4) -> None:
        super().__init__()
        self.self_attn = PackedAttention(d_model, n_heads, dropout)
        self.dropout1 = nn.Dropout(dropout)
        self.norm1 = nn.LayerNorm(d_model)
        self.cross_attn = MultiScaleDeformableAttention(d_model, n_levels, n_heads, n_points)
        self.dropout2 = nn.Dropout(dropout)
        self.norm2 = nn.LayerNorm(d_model)
        self.linear1 = nn.Linear(d_model, d_ffn)
        self.act = nn.ReLU() if act is None else act
        self.dropout3 = nn.Dropout(dropout)
        self.linear2 = nn.Linear(d_ffn, d_model)
        self.dropout4 = nn.Dropout(dropout)
        self.norm3 = nn.LayerNorm(d_model)

    def forward(self, embed: torch.Tensor, refer_bbox: torch.Tensor, feats: torch.Tensor,
                shapes: list[tuple[int, int]], padding_mask: torch.Tensor | None = None,
                attn_mask: torch.Tensor | None = None, query_pos: torch.Tensor | None = None) -> torch.Tensor:
        """``embed`` (B, Q, D), ``refer_bbox`` (B, Q, 4) normalised, ``feats`` (B, A, D), ``attn_mask``
        (Q, Q) bool (True: hidden), ``query_pos`` (B, Q, D)."""
        q = embed if query_pos is None else embed + query_pos
        embed = self.norm1(embed + self.dropout1(self.self_attn(q, embed, attn_mask)))
        q = embed if query_pos is None else embed + query_pos
        cross = self.cross_attn(q, refer_bbox.unsqueeze(2), feats, shapes, padding_mask)  # (B, Q, D)
        embed = self.norm2(embed + self.dropout2(cross))
        ffn = self.linear2(self.dropout3(self.act(self.linear1(embed))))
        return self.norm3(embed + self.dropout4(ffn))


class DeformableDecoder(nn.Module):
    """``num_layers`` copies of a :class:`DecoderLayer` with iterative box refinement. In training all
    layers' boxes (L, B, Q, 4) and logits (L, B, Q, nc); in eval only layer ``eval_idx``'s (1, B, Q, ...)."""

    def __init__(self, hidden_dim: int, decoder_layer: nn.Module, num_layers: int, eval_idx: int = -1) -> None:
        super().__init__()
        self.layers = nn.ModuleList(copy.deepcopy(decoder_layer) for _ in range(num_layers))
        self.num_layers = num_layers
        self.hidden_dim = hidden_dim
        self.eval_idx = eval_idx if eval_idx >= 0 else num_layers + eval_idx

    def forward(self, embed: torch.Tensor, refer_bbox: torch.Tensor, feats: torch.Tensor,
                shapes: list[tuple[int, int]], bbox_head: nn.ModuleList, score_head: nn.ModuleList,
                pos_mlp: nn.Module, attn_mask: torch.Tensor | None = None,
                padding_mask: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        """``refer_bbox`` (B, Q, 4) logits -> boxes (L, B, Q, 4) normalised cx, cy, w, h and logits (L, B, Q, nc)."""
        out, boxes, logits = embed, [], []
        last: torch.Tensor | None = None
        ref = refer_bbox.sigmoid()
        for i, layer in enumerate(self.layers):
            out = layer(out, ref, feats, shapes, padding_mask, attn_mask, pos_mlp(ref))
            delta = bbox_head[i](out)  # (B, Q, 4) in logit space
            refined = torch.sigmoid(delta + inverse_sigmoid(ref))
            if self.training:
                logits.append(score_head[i](out))
                # the reported box keeps the gradient through the previous layer's box (ref is detached)
                boxes.append(refined if last is None else torch.sigmoid(delta + inverse_sigmoid(last)))
            elif i == self.eval_idx:
                logits.append(score_head[i](out))
                boxes.append(refined)
                break
            last = refined
            ref = refined.detach() if self.training else refined
        return torch.stack(boxes), torch.stack(logits)


class RTDETRDecoder(nn.Module):
    """RT-DETR's head over ``len(ch)`` maps (see the module's description).

    Training (``forward(maps, batch)``): ``(dec_bboxes, dec_scores, enc_bboxes, enc_scores, dn_meta)``
    as ultralytics returns them; eval: (B, nq, 4 + nc), each query's normalised cx, cy, w, h and class
    probabilities (sigmoid) from decoder layer ``eval_idx`` (:meth:`as_rows`: a Detect head's layout,
    what :class:`~vision_attn.models.yolo.builder.DetectionModel` returns).
    """

    end2end = True
    """Each query is one detection: read with a top-k, never NMS (as an end-to-end Detect head)."""

    def __init__(self, nc: int = 80, ch: list[int] | tuple[int, ...] = (512, 1024, 2048), hd: int = 256,
                 nq: int = 300, ndp: int = 4, nh: int = 8, ndl: int = 6, d_ffn: int = 1024, dropout: float = 0.0,
                 act: nn.Module | None = None, eval_idx: int = -1, nd: int = 100, label_noise_ratio: float = 0.5,
                 box_noise_scale: float = 1.0, learnt_init_query: bool = False) -> None:
        super().__init__()
        _check_arguments(nc, ch, hd, nq, ndp, nh, ndl, d_ffn, eval_idx, nd)
        act = nn.ReLU() if act is None else act
        self.hidden_dim = hd
        self.nhead = nh
        self.nl = len(ch)
        self.nc = nc
        self.num_queries = nq
        self.num_decoder_layers = ndl
        self.stride: list[float] = []  # the levels' strides, set by the builder's probe
        self.input_proj = nn.ModuleList(
            nn.Sequential(nn.Conv2d(c, hd, 1, bias=False), nn.BatchNorm2d(hd, eps=1e-3, momentum=0.03)) for c in ch)
        layer = DecoderLayer(hd, nh, d_ffn, dropout, act, self.nl, ndp)
        self.decoder = DeformableDecoder(hd, layer, ndl, eval_idx)
        self.denoising_class_embed = nn.Embedding(nc, hd)
        self.num_denoising = nd
        self.label_noise_ratio = label_noise_ratio
        self.box_noise_scale = box_noise_scale
        self.learnt_init_query = learnt_init_query
        if learnt_init_query:
            self.tgt_embed = nn.Embedding(nq, hd)
        self.query_pos_head = BoxMLP(4, 2 * hd, hd, num_layers=2)
        self.enc_output = nn.Sequential(nn.Linear(hd, hd), nn.LayerNorm(hd))
        self.enc_score_head = nn.Linear(hd, nc)
        self.enc_bbox_head = BoxMLP(hd, hd, 4, num_layers=3)
        self.dec_score_head = nn.ModuleList(nn.Linear(hd, nc) for _ in range(ndl))
        self.dec_bbox_head = nn.ModuleList(BoxMLP(hd, hd, 4, num_layers=3) for _ in range(ndl))
        self._reset_parameters()

    def _reset_parameters(self) -> None:
        """Class biases at a prior probability of 0.01 (scaled by nc / 80, as RT-DETR does), box heads
        starting at zero correction, Xavier-uniform projections."""
        bias_cls = -math.log((1 - 0.01) / 0.01) / 80 * self.nc
        heads = [(self.enc_score_head, self.enc_bbox_head), *zip(self.dec_score_head, self.dec_bbox_head)]
        for cls_head, box_head in heads:
            nn.init.constant_(cls_head.bias, bias_cls)
            nn.init.zeros_(box_head.layers[-1].weight)
            nn.init.zeros_(box_head.layers[-1].bias)
        nn.init.xavier_uniform_(self.enc_output[0].weight)
        if self.learnt_init_query:
            nn.init.xavier_uniform_(self.tgt_embed.weight)
        for linear in self.query_pos_head.layers:
            nn.init.xavier_uniform_(linear.weight)
        for proj in self.input_proj:
            nn.init.xavier_uniform_(proj[0].weight)

    def forward(self, x: list[torch.Tensor], batch: Mapping[str, Any] | None = None,
                generator: torch.Generator | None = None) -> torch.Tensor | DecoderTrainOutput:
        """``x``: the ``nl`` maps (B, c_i, H_i, W_i). ``batch`` (training only: denoising queries): ``cls``
        (N,), ``bboxes`` (N, 4) normalised cx, cy, w, h, ``batch_idx`` (N,), optionally ``gt_groups``;
        ``generator`` seeds the denoising noise."""
        if len(x) != self.nl:
            raise DataError(f"RTDETRDecoder was built for {self.nl} feature levels (its row's inputs) but got "
                            f"{len(x)} maps; feed it the maps of the rows it was built with")
        feats, shapes = self._encoder_input(x)  # (B, A, hd)
        dn = None
        if self.training:
            dn = denoising_queries(batch, self.nc, min(self.num_queries, feats.shape[1]),
                                   self.denoising_class_embed.weight, self.num_denoising, self.label_noise_ratio,
                                   self.box_noise_scale, batch_size=feats.shape[0], generator=generator)
        embed, refer_bbox, enc_bboxes, enc_scores = self._decoder_input(feats, shapes, dn)
        dec_bboxes, dec_scores = self.decoder(embed, refer_bbox, feats, shapes, self.dec_bbox_head,
                                              self.dec_score_head, self.query_pos_head,
                                              attn_mask=None if dn is None else dn.mask)
        if not self.training:
            return torch.cat([dec_bboxes[0], dec_scores[0].sigmoid()], -1)  # (B, nq, 4 + nc)
        if dn is None:  # keep the denoising embedding in the graph (DDP) when the batch has no box
            dec_bboxes = dec_bboxes + 0 * self.denoising_class_embed.weight.sum()
        return dec_bboxes, dec_scores, enc_bboxes, enc_scores, None if dn is None else dn.meta

    @staticmethod
    def as_rows(queries: torch.Tensor, input_size: Sequence[int]) -> torch.Tensor:
        """Eval output (B, nq, 4 + nc), boxes normalised to the input -> a Detect head's layout (B, 4 + nc,
        nq): cx, cy, w, h in input pixels, then the class probabilities."""
        h, w = int(input_size[0]), int(input_size[1])
        scale = queries.new_tensor([w, h, w, h])
        return torch.cat([queries[..., :4] * scale, queries[..., 4:]], -1).transpose(1, 2)

    def _encoder_input(self, x: list[torch.Tensor]) -> tuple[torch.Tensor, list[tuple[int, int]]]:
        """The projected maps as one sequence (B, A, hd) and their (H_i, W_i)."""
        maps = [proj(m) for proj, m in zip(self.input_proj, x)]  # (B, hd, H_i, W_i)
        shapes = [(int(m.shape[2]), int(m.shape[3])) for m in maps]
        return torch.cat([m.flatten(2).transpose(1, 2) for m in maps], 1), shapes  # (B, A, hd)

    def _decoder_input(self, feats: torch.Tensor, shapes: list[tuple[int, int]], dn: DenoisingQueries | None
                       ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
        """Query selection: the queries' content (B, [num_dn +] k, hd), reference boxes as logits
        (B, [num_dn +] k, 4), and the encoder's boxes (B, k, 4, normalised) and logits (B, k, nc)."""
        b = feats.shape[0]
        anchors, valid = make_anchors(shapes, feats)  # (1, A, 4), (1, A, 1)
        features = self.enc_output(valid * feats)  # (B, A, hd)
        scores = self.enc_score_head(features)  # (B, A, nc)
        k = min(self.num_queries, scores.shape[1])
        top = scores.max(-1).values.topk(k, dim=1).indices  # (B, k)
        top_features = features.gather(1, top[..., None].expand(-1, -1, features.shape[-1]))  # (B, k, hd)
        refer_bbox = self.enc_bbox_head(top_features) + anchors[0, top]  # (B, k, 4) logits
        enc_bboxes = refer_bbox.sigmoid()
        enc_scores = scores.gather(1, top[..., None].expand(-1, -1, scores.shape[-1]))  # (B, k, nc)
        embed = self.tgt_embed.weight[:k].unsqueeze(0).repeat(b, 1, 1) if self.learnt_init_query else top_features
        if self.training:
            refer_bbox = refer_bbox.detach()
            if not self.learnt_init_query:
                embed = embed.detach()
        if dn is not None:
            refer_bbox = torch.cat([dn.boxes, refer_bbox], 1)
            embed = torch.cat([dn.embed, embed], 1)
        return embed, refer_bbox, enc_bboxes, enc_scores


def _check_arguments(nc: int, ch: list[int] | tuple[int, ...], hd: int, nq: int, ndp: int, nh: int, ndl: int,
                     d_ffn: int, eval_idx: int, nd: int) -> None:
    """One-line errors for arguments the decoder cannot be built with."""
    ints = {"nc": nc, "hd": hd, "nq": nq, "ndp": ndp, "nh": nh, "ndl": ndl, "d_ffn": d_ffn, "nd": nd}
    for name, value in ints.items():
        if not isinstance(value, int) or isinstance(value, bool):
            raise ConfigError(f"RTDETRDecoder's {name} must be a whole number, got {value!r}")
    for name in ("nc", "hd", "nq", "ndp", "nh", "ndl", "d_ffn"):
        if ints[name] < 1:
            what = "query count" if name == "nq" else name
            raise ConfigError(f"RTDETRDecoder's {what} ({name}) must be 1 or more, got {ints[name]}")
    if nd < 0:
        raise ConfigError(f"RTDETRDecoder's denoising query count (nd) must be 0 or more, got {nd}")
    if not ch:
        raise ConfigError("RTDETRDecoder takes at least one feature map; give its row a list of rows in 'from'")
    if hd % nh:
        raise ConfigError(f"RTDETRDecoder's hidden width {hd} does not split into {nh} heads; give hd divisible by nh")
    if not -ndl <= eval_idx < ndl:
        raise ConfigError(f"RTDETRDecoder's eval_idx {eval_idx} is not a layer of its {ndl}; give -1 (the last) "
                          f"to {ndl - 1}")
