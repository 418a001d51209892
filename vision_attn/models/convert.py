"""A model of ours handed to the peers: a timm state dict, or a Hugging Face ``transformers`` folder.

Each is checked before it is kept: the peer builds its own model from what was written, and its
outputs must equal ours on the same input (1e-4), else nothing is written and the error says what
differs. timm (a dependency of vision_attn) always checks; without ``transformers`` installed a
transformers folder cannot be checked and is not written unless asked for unchecked (``unchecked=True``,
``--unchecked``; the result says it was not checked).

- :func:`to_timm`: our ViT, DeiT, DINOv2, CLIP and Swin state dicts already carry timm's keys; the
  file loads with ``timm.create_model(name, pretrained=True, pretrained_cfg_overlay=dict(file=PATH),
  num_classes=N, **kwargs)``. Models timm does not have (torchvision's names, inserted attention
  blocks, options of ours such as ``pos_embed="rope"``) are refused with the reason.
- :func:`to_transformers`: the folder ``save_pretrained`` would write (``config.json`` and
  ``model.safetensors``), made by the family of :mod:`vision_attn.models.hf` that maps the model's
  name; it loads with ``AutoModelForImageClassification.from_pretrained(FOLDER)``.
"""
from __future__ import annotations

import fnmatch
import importlib.util
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping, Sequence

import torch
from torch import nn

from vision_attn.errors import CheckpointError
from vision_attn.io.atomic import atomic_folder, atomic_write
from vision_attn.models.hf import FAMILIES

__all__ = ["Converted", "to_timm", "to_transformers", "TRANSFORMERS_TYPES"]

# Our registered names -> the transformers model_type that holds them (the first pattern that matches).
TRANSFORMERS_TYPES: tuple[tuple[str, str], ...] = (
    ("vit_*_dinov3*", "dinov3_vit"),  # read only: refused with the types transformers is written as
    ("vit_*_reg*_dinov2", "dinov2_with_registers"),
    ("vit_*_dinov2", "dinov2"),
    ("deit_*_distilled_*", "deit"),
    ("*_siglip_*", "siglip_vision_model"),
    ("*_clip_*", "clip_vision_model"),
    ("vit_*", "vit"),
    ("deit_*", "vit"),  # transformers' facebook/deit-*-patch16-224 (no distillation token) are ViTs
    ("swinv2_*", "swinv2"),
    ("swin_v2_*", "swinv2"),  # torchvision's names
    ("swin_*", "swin"),
)
_TOLERANCE = 1e-4


@dataclass(frozen=True)
class Converted:
    """What was written: ``path``, for ``peer`` (``"timm"``/``"transformers"``), the Python line that
    loads it there, and the largest difference of the peer's outputs from ours (None: not checked,
    the peer is not installed)."""

    path: Path
    peer: str
    load: str
    max_diff: float | None


def _sample(img_size: tuple[int, int], in_chans: int = 3) -> torch.Tensor:
    generator = torch.Generator().manual_seed(0)
    return torch.randn(2, in_chans, *img_size, generator=generator)


def _outputs(model: nn.Module, x: torch.Tensor) -> torch.Tensor:
    with torch.no_grad():
        out = model.eval()(x)
    for field in ("logits", "image_embeds", "pooler_output"):  # a transformers output: what our model returns
        if getattr(out, field, None) is not None:
            out = getattr(out, field)
            break
    if isinstance(out, (tuple, list)):
        out = out[0]
    return out.float()


def _compare(ours: torch.Tensor, theirs: torch.Tensor, what: str) -> float:
    if ours.shape != theirs.shape:
        raise CheckpointError(f"{what}: the peer's output has shape {tuple(theirs.shape)}, ours "
                              f"{tuple(ours.shape)}; nothing was written")
    diff = float((ours - theirs).abs().max())
    scale = max(1.0, float(ours.abs().max()))
    if not diff <= _TOLERANCE * scale:
        raise CheckpointError(f"{what}: the peer computes other outputs from the converted weights (largest "
                              f"difference {diff:.3g}); the model has something the peer lacks; nothing was written")
    return diff


def _kwargs_text(kwargs: Mapping[str, Any]) -> str:
    return "".join(f", {k}={v!r}" for k, v in kwargs.items())


def to_timm(model: nn.Module, name: str, path: str | Path, *, kwargs: Mapping[str, Any] | None = None,
            img_size: tuple[int, int], inserted: bool = False) -> Converted:
    """Write ``model`` (built as ``create_model(name, **kwargs)``) as a timm state dict at ``path``
    (``.safetensors``, or a ``torch.save`` file for any other suffix), after timm's own model of that
    name loaded it strictly and gave our outputs. ``inserted``: the model has attention blocks of
    ours (refused: timm's model has none)."""
    import timm

    what = f"convert to timm ({name})"
    if inserted:
        raise CheckpointError(f"{what}: the run inserted attention blocks, which timm's {name} does not have; "
                              "convert a run without inserted blocks, or load our file with vision_attn")
    if name not in timm.list_models():
        raise CheckpointError(f"{what}: timm has no model named {name!r} (a name of vision_attn or torchvision); "
                              "train with the timm name of the architecture to convert it")
    kwargs = dict(kwargs or {})
    num_classes = int(getattr(model, "num_classes", 0))
    # a model built for its input size (ViT, Swin) is built at the run's; a CNN (ConvNeXt) takes none
    sized = getattr(model, "pretrained_cfg", {}).get("fixed_input_size", True)
    timm_kwargs = {"img_size": tuple(img_size), **{k: v for k, v in kwargs.items() if k != "num_classes"}}
    if not sized:
        del timm_kwargs["img_size"]
    state = {k: v.detach().cpu().contiguous() for k, v in model.state_dict().items()}
    x = _sample(img_size)
    ours = _outputs(model, x)
    checked: list[float] = []

    def write(tmp: str) -> None:  # kept only once timm has loaded it as the printed line does
        if Path(path).suffix == ".safetensors":
            from safetensors.torch import save_file

            save_file(state, tmp)
        else:
            torch.save(state, tmp)
        overlay = {"file": tmp, "num_classes": num_classes}  # timm drops a head whose count differs from its cfg's
        try:
            peer = timm.create_model(name, pretrained=True, pretrained_cfg_overlay=overlay, num_classes=num_classes,
                                     **timm_kwargs)
        except (TypeError, AssertionError, ValueError) as e:  # timm asserts on option values it lacks
            detail = str(e) or f"{type(e).__name__} in timm's constructor"
            raise CheckpointError(f"{what}: timm's {name} does not take the run's arguments "
                                  f"{_kwargs_text(kwargs).lstrip(', ')} ({detail}); nothing was written") from None
        except RuntimeError as e:  # load_state_dict's strict check
            first = str(e).splitlines()[1].strip() if len(str(e).splitlines()) > 1 else str(e)
            raise CheckpointError(f"{what}: the state dict does not fit timm's model ({first}); nothing was "
                                  "written") from None
        checked.append(_compare(ours, _outputs(peer, x), what))

    path = atomic_write(path, write, suffix=Path(path).suffix or ".tmp", error=CheckpointError)
    load = (f"timm.create_model({name!r}, pretrained=True, pretrained_cfg_overlay=dict(file={str(path)!r}, "
            f"num_classes={num_classes}), num_classes={num_classes}{_kwargs_text(timm_kwargs)})")
    return Converted(path, "timm", load, checked[0])


def transformers_type(name: str) -> str:
    """The transformers ``model_type`` for our model ``name``; CheckpointError when none holds it."""
    for pattern, model_type in TRANSFORMERS_TYPES:
        if fnmatch.fnmatchcase(name, pattern):
            if model_type not in FAMILIES or FAMILIES[model_type].from_ours is None:
                break
            return model_type
    raise CheckpointError(f"convert to transformers ({name}): transformers has no architecture vision_attn writes "
                          f"{name} as (it writes {', '.join(sorted(t for t, f in FAMILIES.items() if f.from_ours))})")


def to_transformers(model: nn.Module, name: str, folder: str | Path, *, class_names: Sequence[str] = (),
                    img_size: tuple[int, int], inserted: bool = False, unchecked: bool = False) -> Converted:
    """Write ``model`` as a transformers folder (``config.json``, ``model.safetensors``) at ``folder``,
    with ``class_names`` as its ``id2label``, once transformers has loaded it and given our outputs.
    Without transformers installed: a CheckpointError before anything is written, unless ``unchecked``
    (then written, and the result's ``max_diff`` is None)."""
    what = f"convert to transformers ({name})"
    if not unchecked and importlib.util.find_spec("transformers") is None:
        raise CheckpointError(f"{what}: transformers is not installed here, so the folder cannot be loaded there "
                              "and checked; nothing was written. Install it (pip install transformers) and run "
                              "again, or pass --unchecked to write the folder unchecked")
    if inserted:
        raise CheckpointError(f"{what}: the run inserted attention blocks, which transformers' models do not "
                              "have; convert a run without inserted blocks")
    family = FAMILIES[transformers_type(name)]
    assert family.from_ours is not None
    config, state = family.from_ours(model, model.state_dict())
    if class_names and getattr(model, "num_classes", 0):
        config["id2label"] = {str(i): str(c) for i, c in enumerate(class_names)}
        config["label2id"] = {str(c): i for i, c in enumerate(class_names)}
    state = {k: v.detach().cpu().contiguous() for k, v in state.items()}

    checked: list[float] = []

    def write(tmp: Path) -> None:  # the folder is put in place only once the peer has loaded it
        from safetensors.torch import save_file

        (tmp / "config.json").write_text(json.dumps(config, indent=2) + "\n", encoding="utf-8")
        save_file(state, str(tmp / "model.safetensors"), metadata={"format": "pt"})
        if importlib.util.find_spec("transformers") is not None:
            peer = _transformers_model(config["architectures"][0], tmp)
            x = _sample(img_size, int(config.get("num_channels", 3)))
            checked.append(_compare(_outputs(model, x), _outputs(peer, x), what))

    path = atomic_folder(folder, write, error=CheckpointError)
    load = f"transformers.AutoModelForImageClassification.from_pretrained({str(path)!r})"
    return Converted(path, "transformers", load, checked[0] if checked else None)


def _transformers_model(architecture: str, folder: Path) -> nn.Module:
    import transformers

    cls = getattr(transformers, architecture, None)
    if cls is None:
        raise CheckpointError(f"the installed transformers {transformers.__version__} has no {architecture}; "
                              "upgrade it to load the converted folder")
    return cls.from_pretrained(str(folder), use_kernels=False).eval()
