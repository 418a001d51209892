"""A search space file (SPACE.yaml): the attention blocks, insertion sites, model scales and, optionally,
the learning-rate range a search chooses from, checked against the training config before anything runs.

```yaml
blocks: [none, SE, CBAM, ECA]      # attention blocks (none: the config's model as it is)
sites: [backbone, neck, all, "4,6"] # named as `vision-attn ablate --sites` names them
scales: [n, s]                      # a detector YAML's scales (optional: the config's scale)
lr: {low: 0.0005, high: 0.005, log: true}   # optional: the config's model.lr otherwise
```

Blocks and sites are checked by the same code that makes `ablate`'s variants
(:mod:`vision_attn.ablation.plan`): every site is inserted once (detector YAMLs: the edited YAML must
build at every scale; classifiers: the module pattern must match), so a site the model lacks is a
one-line :class:`~vision_attn.errors.ConfigError` naming the key and the candidates.
"""
from __future__ import annotations

import math
import os
import tempfile
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from vision_attn.ablation.plan import canonical_blocks, classifier_variants, detector_variants, read_config
from vision_attn.errors import ConfigError
from vision_attn.io.resources import resolve_path
from vision_attn.io.yaml import CONFIG_LIMITS, DETECTOR_LIMITS, read_yaml
from vision_attn.tasks.registry import get_task

__all__ = ["LrRange", "SearchSpace", "read_space", "variant_arguments"]

_KEYS = ("blocks", "sites", "scales", "lr")


@dataclass(frozen=True)
class LrRange:
    low: float
    high: float
    log: bool = True


@dataclass(frozen=True)
class SearchSpace:
    """What a trial chooses from; ``blocks`` canonical (``none`` first when given), ``scales`` empty when the
    config's scale stays."""

    blocks: tuple[str, ...]
    sites: tuple[str, ...]
    scales: tuple[str, ...] = ()
    lr: LrRange | None = None

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    def size(self) -> int | None:
        """The number of distinct architectures (None with a continuous learning rate)."""
        if self.lr is not None:
            return None
        real = [b for b in self.blocks if b != "none"]
        return (len(real) * len(self.sites) + ("none" in self.blocks)) * max(1, len(self.scales))


def _strings(value: Any, key: str, path: Path) -> list[str]:
    if isinstance(value, (str, int)):
        value = [value]
    if not isinstance(value, list) or not value or not all(isinstance(v, (str, int)) for v in value):
        raise ConfigError(f"{path}: key {key} must be a non-empty list of names, e.g. {key}: [a, b]")
    return [str(v).strip() for v in value]


def _lr(value: Any, path: Path) -> LrRange:
    if not isinstance(value, dict) or not {"low", "high"} <= set(value) or set(value) - {"low", "high", "log"}:
        raise ConfigError(f"{path}: key lr must be {{low: X, high: Y, log: true}} (log optional)")
    try:
        low, high = float(value["low"]), float(value["high"])
    except (TypeError, ValueError):
        raise ConfigError(f"{path}: key lr: low and high must be numbers, e.g. {{low: 0.0005, high: 0.005}}") from None
    if not (math.isfinite(low) and math.isfinite(high) and 0 < low < high):
        raise ConfigError(f"{path}: key lr: give 0 < low < high (got low={low}, high={high})")
    return LrRange(low, high, bool(value.get("log", True)))


def _detector_scales(cfg: dict[str, Any], config: Path) -> list[str]:
    model = cfg["model"]
    source = resolve_path(str(model["yaml"]), base=config.parent, kinds=("model",))
    if source is None or not source.is_file():
        raise ConfigError(f"{config}: model.yaml {model['yaml']!r} is not a file or a shipped model YAML")
    scales = read_yaml(source, DETECTOR_LIMITS, what="detector YAML").get("scales") or {}
    return [str(k) for k in scales]


def variant_arguments(cfg: dict[str, Any], config: Path, task: str, block: str, site: str,
                      folder: Path) -> list[str]:
    """The `train` arguments that put ``block`` at ``site`` (``ablate``'s variant of that block; a detector's
    edited YAML written under ``folder``, or the one an earlier trial wrote there)."""
    if get_task(task).insertion == "yaml":
        variants, _ = detector_variants(cfg, config, ["none", block], site, None, folder, reuse=True)
    else:
        variants, _ = classifier_variants(cfg, ["none", block], site, None)
    return variants[block.lower()]


def read_space(path: str | os.PathLike, config: str) -> SearchSpace:
    """The space in ``path`` for the training config ``config``, every block, site and scale checked."""
    path = Path(path)
    if not path.is_file():
        raise ConfigError(f"--space {path}: no such file; write a SPACE.yaml with blocks, sites (and optionally "
                          "scales, lr); docs/ablation.md has an example")
    data = read_yaml(path, CONFIG_LIMITS, what="search space")
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: a search space is a mapping with keys {', '.join(_KEYS)}")
    unknown = sorted(set(data) - set(_KEYS))
    if unknown:
        raise ConfigError(f"{path}: unknown key {unknown[0]!r}; a search space has the keys {', '.join(_KEYS)}")
    if "blocks" not in data:
        raise ConfigError(f"{path}: no key blocks; give the attention blocks to try, e.g. blocks: [none, SE, CBAM]")
    config_path, task, cfg = read_config(config)
    if get_task(task).insertion is None:
        raise ConfigError(f"--config {config}: the {task} task says nowhere to insert attention (Task.insertion); "
                          "search a classifier or detector config")
    names = _strings(data["blocks"], "blocks", path)
    try:
        blocks = canonical_blocks(names, task)
    except ConfigError as e:
        raise ConfigError(f"{path}: key blocks: {str(e).replace('--block ', '').replace('--blocks ', '')}") from None
    if not any(n.lower() == "none" for n in names):
        blocks = blocks[1:]
    sites = _strings(data.get("sites", ["backbone"]), "sites", path)
    real = [b for b in blocks if b != "none"]
    with tempfile.TemporaryDirectory(prefix="vision_attn-space-") as tmp:
        for site in sites:  # each site made once, by ablate's code: a site the model lacks fails here
            try:
                variant_arguments(cfg, config_path, task, real[0], site, Path(tmp))
            except ConfigError as e:
                raise ConfigError(f"{path}: key sites: {site!r} is not a site of {config_path.name}'s model "
                                  f"({str(e).replace('--sites ' + site + ': ', '')}); sites are backbone, neck, all, "
                                  "row indices or module names, as `vision-attn ablate --sites` takes them") from None
    scales: list[str] = []
    if "scales" in data:
        scales = _strings(data["scales"], "scales", path)
        have = _detector_scales(cfg, config_path) if get_task(task).insertion == "yaml" else []
        for scale in scales:
            if scale not in have:
                listed = f"its scales are {', '.join(have)}" if have else "it has no scales"
                raise ConfigError(f"{path}: key scales: {scale!r} is not a scale of {config_path.name}'s model; {listed}")
    lr = _lr(data["lr"], path) if "lr" in data else None
    return SearchSpace(tuple(blocks), tuple(sites), tuple(scales), lr)
