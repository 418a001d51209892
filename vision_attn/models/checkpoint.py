"""Fitting state dicts to a model (the files are read by :mod:`vision_attn.io.state_dict`, which
executes nothing: ``torch.load(..., weights_only=True)`` or safetensors). A model class
may define ``convert_checkpoint(state_dict) -> state_dict`` that recognises foreign layouts (timm,
torchvision, official repos) and maps them to its own keys; this module then fits the classifier
and reports every key that does not fit.
"""
from __future__ import annotations

import warnings
from pathlib import Path
from typing import Collection

from torch import nn

from vision_attn.errors import CheckpointError
from vision_attn.io.state_dict import StateDict, read_state_dict

__all__ = ["StateDict", "read_state_dict", "fit_state_dict", "load_state_dict", "load_checkpoint"]


_HINT = "the file holds another architecture or variant: pick the matching model name"


def fit_state_dict(model: nn.Module, state_dict: StateDict, source: str = "checkpoint",
                   optional: Collection[str] = (), hint: str = _HINT, head_from_file: bool = False) -> StateDict:
    """Map ``state_dict`` to ``model``'s keys and check every key and shape.

    Classifier weights (``model.classifier_keys``) of another class count are dropped with a warning,
    so the model keeps its freshly initialised head; a model built without a classifier
    (``num_classes=0``) drops the file's, as timm does. With ``head_from_file`` (no ``num_classes``
    asked for) a model that defines ``file_head_width(state_dict)`` first takes the width of a head
    the file carries as part of the network (a CLIP image projection) with ``reset_classifier``. Keys in ``optional`` (blocks added to a
    pretrained backbone) may be absent from the file, all of them, and then keep their initialisation. Anything else
    that does not fit raises a :class:`CheckpointError` naming the keys, and ``hint`` (what to do).
    """
    file_head_width = getattr(model, "file_head_width", None)
    if head_from_file and file_head_width is not None:
        width = file_head_width(state_dict)
        if width is not None and width != model.num_classes:
            model.reset_classifier(width)
    convert = getattr(model, "convert_checkpoint", None)
    if convert is not None:
        try:
            state_dict = convert(state_dict)
        except CheckpointError as e:  # a layout's refusal names the key and the option; the file comes first
            if str(e).startswith(source):
                raise
            raise CheckpointError(f"{source}: {e}") from None
    own = model.state_dict()
    classifier_keys = getattr(model, "classifier_keys", ())
    head = [k for k in classifier_keys if k in own]
    if not head:  # no classifier in the model (num_classes=0): the file's goes, as in timm
        state_dict = {k: v for k, v in state_dict.items() if k not in classifier_keys}
    refit = [k for k in head if k not in state_dict or state_dict[k].shape != own[k].shape]
    if refit:
        found = ", ".join(f"{k} {tuple(state_dict[k].shape)}" if k in state_dict else f"{k} absent" for k in refit)
        state_dict = {k: v for k, v in state_dict.items() if k not in head}
    # optional keys are all absent (a plain backbone) or all checked (a file saved with the blocks)
    optional = set() if any(k in state_dict for k in optional) else set(optional)
    missing = [k for k in own if k not in state_dict and not (refit and k in head) and k not in optional]
    unexpected = [k for k in state_dict if k not in own]
    mismatched = [f"{k}: file {tuple(v.shape)} vs model {tuple(own[k].shape)}"
                  for k, v in state_dict.items() if k in own and v.shape != own[k].shape]
    if missing or unexpected or mismatched:
        parts = []
        for label, keys in (("shape mismatch", mismatched), ("missing from the file", missing),
                            ("not in the model", unexpected)):
            if keys:
                more = f" (+{len(keys) - 6} more)" if len(keys) > 6 else ""
                parts.append(f"{len(keys)} {label}: {'; '.join(keys[:6])}{more}")
        raise CheckpointError(
            f"{source}: does not fit {type(model).__name__} ({' | '.join(parts)}); {hint}"
        )
    if refit:
        warnings.warn(
            f"{source}: the classifier in the file ({found}) does not fit the model's num_classes; "
            f"it is re-initialised and needs training",
            stacklevel=3,
        )
    return state_dict


def load_checkpoint(model: nn.Module, path: str | Path, optional: Collection[str] = (),
                    head_from_file: bool = False) -> nn.Module:
    """Load the file at ``path`` into ``model`` (any supported layout), strictly apart from a refitted
    head and the ``optional`` keys the file lacks (see :func:`fit_state_dict`)."""
    return load_state_dict(model, read_state_dict(path), source=str(path), optional=optional,
                           head_from_file=head_from_file)


def load_state_dict(model: nn.Module, state_dict: StateDict, source: str = "checkpoint",
                    optional: Collection[str] = (), hint: str = _HINT, head_from_file: bool = False) -> nn.Module:
    """Fit ``state_dict`` (read from ``source``) to ``model`` and load it (see :func:`fit_state_dict`)."""
    state_dict = fit_state_dict(model, state_dict, source=source, optional=optional, hint=hint,
                                head_from_file=head_from_file)
    own = model.state_dict()
    strict = all(k in state_dict for k in own)
    model.load_state_dict(state_dict, strict=strict)
    return model
