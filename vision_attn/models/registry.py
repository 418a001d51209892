"""The model registry: variants are small functions registered by name over configurable classes."""
from __future__ import annotations

import difflib
import fnmatch
import functools
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

from torch import nn

from vision_attn.errors import ConfigError
from vision_attn.models.checkpoint import load_checkpoint
from vision_attn.models.features import FEATURE_CFG_KEYS, FeatureModule
from vision_attn.models.hf import load_transformers, read_transformers_folder, transformers_folder
from vision_attn.models.pretrained_cfg import model_cfg
from vision_attn.models.insertion import InsertionReport, default_attention_sites, insert_into_module

_ENTRYPOINTS: dict[str, Callable[..., nn.Module]] = {}
_CFGS: dict[str, dict[str, Any]] = {}
_PREFIXES: dict[str, Callable[..., nn.Module]] = {}
_Builder = Callable[..., nn.Module]


def register_model(fn: _Builder | None = None, *, cfg: Mapping[str, Any] | None = None) -> Any:
    """Register ``fn`` under its own name; ``fn(**kwargs)`` builds the model. ``@register_model(cfg=...)``
    also records the name's input configuration (:func:`~vision_attn.models.pretrained_cfg.data_cfg`),
    which :func:`create_model` puts on the model as ``pretrained_cfg``."""
    def register(fn: _Builder) -> _Builder:
        if fn.__name__ in _ENTRYPOINTS:
            raise ConfigError(f"model name {fn.__name__!r} is registered twice")
        _ENTRYPOINTS[fn.__name__] = fn
        if cfg is not None:
            _CFGS[fn.__name__] = dict(cfg)
        return fn

    return register if fn is None else register(fn)


def get_pretrained_cfg(name: str) -> dict[str, Any] | None:
    """The input configuration registered for ``name`` (a copy), or None."""
    cfg = _CFGS.get(name)
    return dict(cfg) if cfg is not None else None


def list_models(pattern: str = "*") -> list[str]:
    """Registered names matching a shell-style ``pattern`` (e.g. ``"deit_*"``), sorted."""
    return sorted(n for n in _ENTRYPOINTS if fnmatch.fnmatchcase(n, pattern))


def register_prefix(prefix: str, builder: Callable[..., nn.Module]) -> None:
    """Names ``"PREFIX:NAME"`` build ``builder(NAME, **kwargs)``: another library's models by their own
    names (``"timm:resnet50d"``). Such names are not listed by :func:`list_models`."""
    if prefix in _PREFIXES:
        raise ConfigError(f"model name prefix {prefix!r} is registered twice")
    _PREFIXES[prefix] = builder


def get_entrypoint(name: str) -> Callable[..., nn.Module]:
    prefix, colon, rest = name.partition(":")
    if colon:
        if prefix not in _PREFIXES:
            raise ConfigError(f"unknown model source {prefix!r} in {name!r}: known prefixes are "
                              f"{', '.join(f'{p}:' for p in _PREFIXES) or 'none'}")
        return functools.partial(_PREFIXES[prefix], rest)
    if name not in _ENTRYPOINTS:
        close = difflib.get_close_matches(name, _ENTRYPOINTS, n=3, cutoff=0.5)
        hint = f"did you mean {', '.join(close)}?" if close else "run `vision-attn models` to list them"
        raise ConfigError(f"unknown model {name!r}: {hint}")
    return _ENTRYPOINTS[name]


def create_model(
    name: str | None = None,
    *,
    pretrained: str | Path | None = None,
    num_classes: int | None = None,
    img_size: int | tuple[int, int] | None = None,
    attention: str | Mapping[str, Any] | None = None,
    features_only: bool = False,
    out_indices: int | Sequence[int] | None = None,
    output_fmt: str | None = None,
    feature_cfg: Mapping[str, Any] | None = None,
    feature_cls: str | None = None,
    **kwargs,
) -> nn.Module:
    """Build the registered model ``name`` (or ``"timm:NAME"``, any timm model).

    ``pretrained`` is a local checkpoint (.pth, .pt, .bin, .safetensors) in timm, torchvision,
    official, OpenAI CLIP / open_clip or vision_attn layout; the layout is recognised from its keys. A
    ``num_classes`` other than the checkpoint's re-initialises the classifier (with a warning), 0 drops
    it (the model returns pooled features, as timm's); a CLIP file's image projection is the head when
    ``num_classes`` is not given (timm's configuration of those towers); an ``img_size`` other than
    the checkpoint's resamples the position embedding. ``pretrained`` may also be a Hugging Face
    ``transformers`` folder (``config.json`` + weights, or the weights file in it): the architecture
    and sizes come from its config (``name`` may then be omitted), and the file's head is kept
    (``num_classes`` None or equal), replaced (another count) or dropped (0)
    (:mod:`vision_attn.models.hf`).

    ``attention`` inserts attention blocks (:func:`~vision_attn.models.insertion.insert_into_module`): a
    block name (``"cbam"``: on the residual branch of every ResNet block), or a dict of
    ``insert_attention``'s arguments with the block under ``"block"``, e.g. ``{"block": "se",
    "reduction": 8, "after": "layer4.*", "position": "residual", "zero_init": True}``; ``None`` or
    ``"none"``: no blocks. The blocks are inserted before ``pretrained`` is loaded, so a file of the
    plain backbone loads strictly apart from the new blocks (which keep their initialisation), and a
    file saved with the blocks loads strictly.

    As in timm, ``features_only=True`` returns the feature maps instead
    (:class:`~vision_attn.models.features.FeatureModule`): those of the levels ``out_indices`` (as
    ``forward_intermediates`` counts them; default the family's, as timm's), in ``output_fmt``, with
    the final norm applied when ``feature_cfg={"norm": True}``, in the container and layout of timm's
    ``feature_cls`` (``"list"``, ``"dict"``, ``"hook"``, ``"fx"``, ``"getter"``; default the family's).
    The model carries its name's input configuration as ``pretrained_cfg``
    (:mod:`vision_attn.models.pretrained_cfg`).
    """
    folder = None
    if pretrained is not None and (name is None or ":" not in name) and transformers_folder(pretrained):
        folder = read_transformers_folder(pretrained)
        base, args = folder.model_args()
        name, kwargs = name or base, {**args, **kwargs}
    elif name is None:
        raise ConfigError("create_model: give a model name (`vision-attn models` lists them), or as pretrained= "
                          "a transformers folder, whose config.json names the architecture")
    fn = get_entrypoint(name)
    if num_classes is not None:
        kwargs["num_classes"] = num_classes
    if img_size is not None:
        kwargs["img_size"] = img_size
    feature_args = {"out_indices": out_indices, "output_fmt": output_fmt, "feature_cfg": feature_cfg,
                    "feature_cls": feature_cls}
    if not features_only:
        given = [k for k, v in feature_args.items() if v is not None]
        if given:
            raise ConfigError(f"create_model({name!r}): {given[0]} applies to feature maps; add features_only=True")
    elif ":" in name:  # another library's model: its own features_only
        kwargs.update({"features_only": True, **{k: v for k, v in feature_args.items() if v is not None}})
    model = fn(**kwargs)
    new_keys: tuple[str, ...] = ()
    if attention is not None and attention != "none":
        new_keys = _insert(model, attention, img_size).new_keys
    if folder is not None:
        load_transformers(model, folder, optional=new_keys)
    elif pretrained is not None:
        load_checkpoint(model, pretrained, optional=new_keys, head_from_file=num_classes is None)
    if name in _CFGS:
        cfg = _CFGS[name] if folder is None else {**_CFGS[name], **folder.normalisation()}
        model.pretrained_cfg = model.default_cfg = model_cfg(name, cfg, model, img_size)
    if features_only and ":" not in name:
        model = FeatureModule(model, out_indices, output_fmt, norm=_feature_norm(name, feature_cfg),
                              feature_cls=feature_cls)
    return model


def _feature_norm(name: str, feature_cfg: Mapping[str, Any] | None) -> bool:
    cfg = dict(feature_cfg or {})
    unknown = [k for k in cfg if k not in FEATURE_CFG_KEYS]
    if unknown:
        raise ConfigError(f"create_model({name!r}): feature_cfg key {unknown[0]!r} is not known; "
                          f"known: {', '.join(FEATURE_CFG_KEYS)}")
    return cfg.get("norm", False)


def _insert(model: nn.Module, attention: str | Mapping[str, Any], img_size: Any) -> InsertionReport:
    if isinstance(attention, str):
        spec: dict[str, Any] = {"block": attention}
    elif isinstance(attention, Mapping):
        spec = dict(attention)
    else:
        raise ConfigError(f"attention={attention!r}: give a block name ('se', 'cbam', ...) or a dict with 'block' "
                          f"and insert_attention's other arguments")
    if "block" not in spec:
        raise ConfigError(f"attention={attention!r} names no block: add 'block': 'se' (or 'cbam', 'eca', ...)")
    if "after" not in spec:
        defaults = default_attention_sites(model)
        if defaults is None:
            raise ConfigError(
                f"{type(model).__name__} has no ResNet blocks, where attention goes by default; say where: "
                f"attention={{'block': {spec['block']!r}, 'after': <module type, name glob or predicate>}}")
        spec = {**defaults, **spec}
    if img_size is not None:
        spec.setdefault("input_size", img_size)
    return insert_into_module(model, spec.pop("block"), **spec)
