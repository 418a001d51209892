"""The configs shipped with vision_attn, found by name from any folder.

The repository's top-level ``configs/`` is the one copy: ``configs/models/`` holds detector YAMLs
(ultralytics schema, ours only), ``configs/train/classify/`` and ``configs/train/detect/`` the training
configs of ``vision-attn train cls`` and ``train det``. A wheel carries the same folder inside the
package as ``vision_attn/configs/`` (setup.py maps it there); a source checkout or an editable install
reads it beside the package.

A path a user gives (on the command line or inside a config) is looked up, in order: relative to the
config file that names it (when there is one), relative to the working directory, then among the
shipped names (``yolov8.yaml``, ``demo_digits``). A model YAML named with a scale letter that has no
file of its own (``yolov8n.yaml``) is the file without the letter (``yolov8.yaml``) at that scale, as
ultralytics names them.
"""
from __future__ import annotations

import fnmatch
import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable, Literal

__all__ = ["Kind", "ShippedConfig", "configs_root", "shipped_configs", "find_shipped", "resolve_path",
           "without_scale", "KINDS", "training_config"]

Kind = Literal["model", "cls", "det", "seg", "pose", "obb"]
KINDS: dict[str, tuple[str, ...]] = {"model": ("models",), "cls": ("train", "classify"), "det": ("train", "detect"),
                                 "seg": ("train", "segment"), "pose": ("train", "pose"), "obb": ("train", "obb")}
"""Each kind of shipped config and its folder under ``configs/``."""
YAML_SUFFIXES = (".yaml", ".yml")
_SCALE_IN_NAME = re.compile(r"yolo(?:e-)?v?\d+([nslmx])(?![a-z0-9])")  # ultralytics' rule (PEER_FACTS.md)


def configs_root() -> Path:
    """The folder of the shipped configs: ``vision_attn/configs`` in a wheel, else the checkout's ``configs``."""
    package = Path(__file__).resolve().parent.parent
    for candidate in (package / "configs", package.parent / "configs"):
        if candidate.is_dir():
            return candidate
    return package / "configs"


@dataclass(frozen=True)
class ShippedConfig:
    """One shipped file: its name (file name without ``.yaml``), kind and path."""

    name: str
    kind: Kind
    path: Path

    @property
    def description(self) -> str:
        """The first comment line of the file (what it is), or ''."""
        for line in self.path.read_text(encoding="utf-8").splitlines():
            if line.startswith("#"):
                return line.lstrip("# ").strip()
            if line.strip():
                break
        return ""


def shipped_configs(pattern: str = "*", kinds: Iterable[Kind] | None = None) -> list[ShippedConfig]:
    """The shipped configs whose name matches the shell-style ``pattern``, by kind (default: every kind of
    :data:`KINDS`), then name."""
    root = configs_root()
    out = []
    for kind in kinds if kinds is not None else tuple(KINDS):
        folder = root.joinpath(*KINDS[kind])
        for path in sorted(folder.glob("*.y*ml")) if folder.is_dir() else []:
            if fnmatch.fnmatch(path.stem, pattern) or fnmatch.fnmatch(path.name, pattern):
                out.append(ShippedConfig(path.stem, kind, path))
    return out


def without_scale(name: str) -> tuple[str, str | None]:
    """``yolov8n.yaml`` -> (``yolov8.yaml``, ``n``); a name without a scale letter is returned as it is."""
    p = Path(name)
    m = _SCALE_IN_NAME.search(p.stem.lower())
    if not m:
        return name, None
    return str(p.with_name(p.stem[: m.start(1)] + p.stem[m.end(1):] + p.suffix)), m.group(1)


def find_shipped(name: str, kinds: Iterable[Kind] | None = None) -> Path | None:
    """The shipped file called ``name`` (with or without ``.yaml``; ``yolov8n.yaml`` finds ``yolov8.yaml``)
    among the ``kinds`` (default: all)."""
    if not name or os.sep in name or "/" in name:
        return None
    stem = Path(name).stem if name.lower().endswith(YAML_SUFFIXES) else name
    found = {c.name: c.path for c in shipped_configs("*", kinds)}
    if stem in found:
        return found[stem]
    plain, scale = without_scale(stem + ".yaml")
    return found.get(Path(plain).stem) if scale else None


def training_config(value: str, kind: Kind) -> Path:
    """``--config VALUE`` of ``train KIND``: the file, else the shipped training config of that name; a
    ConfigError naming it otherwise (imports nothing heavy: the command checks it before torch loads)."""
    from vision_attn.errors import ConfigError

    if Path(value).expanduser().is_file():
        return Path(value).expanduser()
    shipped = find_shipped(value, (kind,)) if kind in KINDS else None  # a registered task may ship none
    if shipped is None:
        raise ConfigError(f"--config {value}: no such file, and no shipped {kind} config of that name; "
                          f"`vision-attn configs` lists them")
    return shipped


def resolve_path(value: str | os.PathLike, *, base: str | os.PathLike | None = None,
                 kinds: Iterable[Kind] = ()) -> Path | None:
    """The existing file or folder ``value`` names: relative to the folder ``base`` first, then the
    working directory, then a shipped config of ``kinds``; for a model YAML also without its scale
    letter at each place. None when nothing is found."""
    text = os.fspath(value)
    path = Path(text).expanduser()
    kinds = tuple(kinds)
    names = [path]
    if "model" in kinds:
        plain, scale = without_scale(text)
        if scale:
            names.append(Path(plain).expanduser())
    places = [] if path.is_absolute() or base is None else [Path(base)]
    for name in names:
        for place in (*places, Path(".")):
            candidate = name if name.is_absolute() else place / name
            if candidate.exists():
                return candidate
    return find_shipped(text, kinds) if kinds else None
