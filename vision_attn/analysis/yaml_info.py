"""Per-row summary of a detector YAML: what each row builds, its parameters and output shape.

The model is built on the ``meta`` device, so even the x scales cost no memory and no arithmetic.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Mapping

import torch

from vision_attn.analysis.flops import count_flops
from vision_attn.analysis.meta_shapes import meta_shapes
from vision_attn.errors import ConfigError
from vision_attn.models.yolo import build_detector, load_yaml

__all__ = ["YamlLayer", "YamlInfo", "yaml_info", "compare_yaml"]


@dataclass
class YamlLayer:
    """One row as built: index, from, repeats after depth scaling, params, module, the arguments the
    module received (channels inferred), and the output shape for a batch of one."""

    index: int
    from_: Any
    repeats: int
    params: int
    module: str
    arguments: list[Any]
    output_shape: list[int]


@dataclass
class YamlInfo:
    """Rows and totals of one YAML at one scale and image size."""

    source: str
    scale: str | None
    img_size: int
    layers: list[YamlLayer] = field(default_factory=list)
    parameters: int = 0
    gflops: float = 0.0

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        for layer in d["layers"]:
            layer["from"] = layer.pop("from_")
        d["num_layers"] = len(self.layers)
        return d


def _shape(out: Any) -> list[int]:
    if isinstance(out, torch.Tensor):
        return list(out.shape)
    return [list(o.shape) for o in out]  # type: ignore[return-value]


def yaml_info(yaml: str | Path | Mapping[str, Any], *, scale: str | None = None, img_size: int = 640,
              num_classes: int | None = None) -> YamlInfo:
    """Build ``yaml`` on the meta device and describe it at a square ``img_size`` (a multiple of the
    largest stride). GFLOPs are 2 x MACs of convolutions and matrix products (ultralytics' convention)."""
    with torch.device("meta"), meta_shapes():  # shapes without torch's Python meta kernels (meta_shapes.py)
        model = build_detector(yaml, scale=scale, num_classes=num_classes)
    largest = int(max(model.stride, default=32))
    if img_size < largest or img_size % largest:
        raise ConfigError(f"image size {img_size}: must be a multiple of the largest stride, {largest} "
                          f"(for example {max(largest, round(img_size / largest) * largest)})")
    shapes: dict[int, list[int]] = {}
    hooks = [layer.register_forward_hook(lambda m, i, o, k=k: shapes.__setitem__(k, _shape(o)))
             for k, layer in enumerate(model.model)]
    try:
        report = count_flops(model, (model.in_channels, img_size, img_size))
    finally:
        for h in hooks:
            h.remove()
    info = YamlInfo(source=model.source, scale=model.scale, img_size=img_size,
                    parameters=report.params, gflops=report.gflops)
    for k, row in enumerate(model.info):
        info.layers.append(YamlLayer(index=row["index"], from_=row["from_"], repeats=row["repeats"],
                                     params=row["params"], module=row["module"],
                                     arguments=row["args"] + ([row["kwargs"]] if row["kwargs"] else []),
                                     output_shape=shapes.get(k, [])))
    return info


def compare_yaml(before: str | Path | Mapping[str, Any], after: str | Path | Mapping[str, Any], *,
                 img_size: int = 640) -> list[dict[str, Any]]:
    """Parameters and GFLOPs of two versions of a YAML at every scale the first defines (or once
    without scales): one dict per scale with ``params_before/after`` and ``gflops_before/after``."""
    data, _ = load_yaml(before)
    scales = list(data.get("scales") or {}) or [None]
    rows = []
    for s in scales:
        a = yaml_info(before, scale=s, img_size=img_size)
        b = yaml_info(after, scale=s, img_size=img_size)
        rows.append({"scale": s, "params_before": a.parameters, "params_after": b.parameters,
                     "gflops_before": round(a.gflops, 3), "gflops_after": round(b.gflops, 3)})
    return rows
