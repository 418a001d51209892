"""The classifier network of a run: :func:`vision_attn.create_model` with the data's class count and
image size (or a YOLO classifier YAML's network: :mod:`vision_attn.tasks.classify.yolo`), as training
builds it and as a trained run is rebuilt from its checkpoint."""
from __future__ import annotations

from pathlib import Path
from typing import Any

from torch import nn

from vision_attn.data.transforms import IMAGENET_MEAN, IMAGENET_STD
from vision_attn.io.state_dict import read_checkpoint
from vision_attn.models import create_model
from vision_attn.models.hf import read_transformers_folder, transformers_folder
from vision_attn.models.hf.folder import read_normalisation
from vision_attn.models.registry import get_pretrained_cfg
from vision_attn.tasks.classify.yolo import build_yolo_classifier

__all__ = ["build_network", "network_spec", "pretrained_normalisation", "DEFAULT_MODEL"]

DEFAULT_MODEL = "vit_tiny_patch16_224"


def network_spec(name: str | None, model_kwargs: dict[str, Any] | None,
                 pretrained: str | None) -> tuple[str, dict[str, Any] | None]:
    """The model name and arguments a run records: a transformers folder as ``pretrained`` states its
    architecture (its closest variant's name unless ``name`` is given, and its sizes, under
    ``model_kwargs``' own; the class count and image size come from the data); otherwise ``name``
    (default :data:`DEFAULT_MODEL`) and ``model_kwargs`` as given."""
    if pretrained is not None and transformers_folder(pretrained) is not None:
        base, args = read_transformers_folder(pretrained).model_args()
        args = {k: v for k, v in args.items() if k not in ("num_classes", "img_size")}
        return name or base, {**args, **(model_kwargs or {})}
    return name or DEFAULT_MODEL, model_kwargs


def pretrained_normalisation(name: str, pretrained: str) -> dict[str, tuple[float, ...]]:
    """The ``mean`` and ``std`` the images of the pretrained checkpoint were normalised with: a
    transformers folder's ``preprocessor_config.json``, a vision_attn run's data settings, else the
    registered name's input
    configuration (CLIP's constants for the CLIP towers, 0.5 for Google's ViTs); {} when neither says."""
    folder = transformers_folder(pretrained)
    found = read_normalisation(folder) if folder is not None else {}
    run = _run_of(Path(pretrained)) if folder is None else None
    if run is not None:  # a run of ours, or a weights file inside one (its model.safetensors)
        ckpt = read_checkpoint(run)
        data = ckpt.get("datamodule_hyper_parameters") if isinstance(ckpt, dict) else None
        if isinstance(data, dict):  # what it trained with (a run states it; before, the default was ImageNet's)
            return {"mean": tuple(data.get("mean") or IMAGENET_MEAN), "std": tuple(data.get("std") or IMAGENET_STD)}
    if len(found) < 2:
        cfg = get_pretrained_cfg(name) or {}
        found = {k: tuple(cfg[k]) for k in ("mean", "std") if k in cfg}
    return found if len(found) == 2 else {}


def _run_of(path: Path) -> Path | None:
    """The run folder or checkpoint ``path`` names or lies in (a weights file beside a run's
    best.ckpt or last.ckpt), else None."""
    if path.is_dir() or path.suffix == ".ckpt":
        return path
    return next((c for c in (path.parent / "best.ckpt", path.parent / "last.ckpt") if c.is_file()), None)


def build_network(name: str, model_kwargs: dict[str, Any] | None = None, *, attention: Any = None,
                  pretrained: str | None = None, num_classes: int, img_size: int | None,
                  yaml: str | None = None, scale: str | None = None) -> nn.Module:
    """``create_model`` with the data's class count and image size (unless ``model_kwargs`` sets it);
    with ``yaml`` (a YOLO classifier YAML's text, as a run records it) the YOLO classifier it builds at
    ``scale`` (:mod:`vision_attn.tasks.classify.yolo`; ``name`` is then its label)."""
    if yaml is not None:
        return build_yolo_classifier(yaml, scale, num_classes)
    kwargs = dict(model_kwargs or {})
    if img_size is not None and "img_size" not in kwargs and not name.startswith("timm:"):
        kwargs["img_size"] = img_size
    if attention is not None:
        kwargs["attention"] = attention
    return create_model(name, pretrained=pretrained, num_classes=num_classes, **kwargs)
