"""An ablation's plan: the variants (no attention, then one attention block each at the same sites) of one
training config, the seeds, and one ordinary run folder per variant and seed under ``RUNS/NAME/``.

A detector config's variants are YAMLs written by the row editor (:func:`insert_attention_file`: every
``from`` re-indexed, the edit checked to build at every scale), a classifier config's are
``create_model(..., attention=...)`` specs (:func:`vision_attn.models.insertion.insert_into_module`). Every
variant of a seed trains with the same seed, so the data order and the initial weights of the layers the
variants share are the same, and the differences against ``none`` are paired.

The plan is written to ``RUNS/NAME/ablation_plan.json``: running the same ablation again continues it
(finished runs are kept), and a folder that holds another ablation is refused.
"""
from __future__ import annotations

import collections
import hashlib
import json
import os
import shutil
import sys
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Sequence

import torch

from vision_attn.errors import ConfigError
from vision_attn.io.atomic import write_json
from vision_attn.io.json import read_json
from vision_attn.io.resources import KINDS as SHIPPED_KINDS, find_shipped, resolve_path, without_scale
from vision_attn.io.yaml import CONFIG_LIMITS, DETECTOR_LIMITS, read_yaml
from vision_attn.layers.plugins.registry import ATTENTION_BLOCKS, attention_factory
from vision_attn.models import create_model
from vision_attn.models.insertion import default_attention_sites, select_modules
from vision_attn.models.yolo.editor import insert_attention_file, attention_row_module
from vision_attn.models.yolo.modules import MODULES
from vision_attn.tasks.registry import TASKS, get_task, task_of_config

__all__ = ["AblationPlan", "RunSpec", "SITES", "PLAN_FILE", "make_plan", "read_plan", "read_config", "canonical_blocks",
           "detector_variants", "classifier_variants"]

PLAN_FILE = "ablation_plan.json"
SITES = ("backbone", "neck", "all")
"""Named sites; anything else is a row pattern: row indices (``4,6``) or a module name (``C2f``) for a
detector, a module name glob (``layer*.0``) or type for a classifier."""
_SECTION = {"backbone": "backbone", "neck": "head", "all": "all"}  # ultralytics YAMLs keep the neck in `head`
_NOT_A_STAGE = {"Conv", "DWConv", "GhostConv", "nn.ConvTranspose2d", "SPP", "SPPF", "SPPELAN", "ADown", "AConv", "SCDown",
                "HGStem"}
"""Convolution rows that are single layers, pooling, downsampling or a stem, not the stage blocks attention follows."""
_STAGE_KINDS = ("conv", "hgnet", "resnet")
"""The registry's kinds of convolution rows: YOLO's, RT-DETR's HGNet (HGBlock) and ResNet (ResNetLayer) backbones."""


@dataclass(frozen=True)
class RunSpec:
    """One training of the ablation: ``variant`` (``none`` or a block), ``seed``, its run folder and the
    arguments of ``vision-attn train TASK`` that make it."""

    variant: str
    seed: int
    folder: Path
    args: tuple[str, ...]

    @property
    def name(self) -> str:
        return self.folder.name


@dataclass
class AblationPlan:
    """What an ablation trains; ``variants`` maps each variant's name to the arguments that make it."""

    name: str
    task: str  # a registered task's name
    config: str  # the training config's absolute path
    config_sha256: str
    blocks: list[str]
    sites: str
    after: str | None
    seeds: list[int]
    epochs: int | None
    extra: list[str]
    where: str | None = None  # the module (pattern) the blocks went after, ``after`` or the YAML's default
    variants: dict[str, list[str]] = field(default_factory=dict)
    folder: Path = Path(".")

    def identity(self) -> dict[str, Any]:
        """What the user asked for, by which two plans are the same ablation."""
        return {k: v for k, v in asdict(self).items() if k not in ("folder", "where", "variants")}

    def to_json(self) -> dict[str, Any]:
        return {k: v for k, v in asdict(self).items() if k != "folder"}

    def runs(self, threads: int | None = None) -> list[RunSpec]:
        """Every variant x seed, seeds outermost (so the first finished seed is already a paired comparison)."""
        specs = []
        for seed in self.seeds:
            for variant, args in self.variants.items():
                folder = self.folder / f"{variant}-s{seed}"
                common = ["--config", self.config, "--runs_dir", str(self.folder), "--name", folder.name,
                          "--seed", str(seed)]
                if self.epochs is not None:
                    common += ["--trainer.max_epochs", str(self.epochs)]
                if threads is not None:
                    common += ["--threads", str(threads)]
                specs.append(RunSpec(variant, seed, folder, tuple(common + list(args) + list(self.extra))))
        return specs

    def command(self, spec: RunSpec) -> list[str]:
        """The process that trains ``spec`` (this Python, the package's CLI)."""
        return [sys.executable, "-m", "vision_attn", "train", self.task, *spec.args]


def _hash(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def read_config(config: str) -> tuple[Path, str, dict[str, Any]]:
    """The training config's file, task (a shipped config's folder, else its keys: see
    :func:`vision_attn.tasks.registry.task_of_config`) and contents."""
    path = Path(config).expanduser()
    task = None
    if not path.is_file():
        for kind in (name for name in TASKS if name in SHIPPED_KINDS):  # the tasks with shipped training configs
            shipped = find_shipped(config, (kind,))  # type: ignore[arg-type]
            if shipped is not None:
                path, task = shipped, kind
                break
        else:
            raise ConfigError(f"--config {config}: no such file, and no shipped training config of that name; "
                              f"`vision-attn configs` lists them")
    data = read_yaml(path, CONFIG_LIMITS, what="training config")
    model = data.get("model") if isinstance(data, dict) else None
    if task is None and isinstance(model, dict):
        task = task_of_config(model, path.parent)
    if task is None or not isinstance(model, dict):
        raise ConfigError(f"{path}: not a training config (no model.name of a classifier, no model.yaml of a detector)")
    return path.resolve(), task, data


def canonical_blocks(blocks: Sequence[str], task: str) -> list[str]:
    """``none`` first, then each block once by its canonical name; an unknown name suggests close ones."""
    out = ["none"]
    for b in blocks:
        b = b.strip()
        if not b or b.lower() == "none":
            continue
        if get_task(task).insertion == "yaml":
            name = attention_row_module(b)
        else:
            folded = {k.lower(): k for k in ATTENTION_BLOCKS}
            name = folded.get(b.lower(), b)
            attention_factory(name)  # a ConfigError with suggestions for an unknown block
        if name not in out:
            out.append(name)
    if len(out) == 1:
        raise ConfigError(f"--blocks {','.join(blocks)}: give at least one attention block besides none, "
                          f"e.g. --blocks none,SE,CBAM")
    return out


def _is_stage(module: str) -> bool:
    """A stage block of convolutions (by the registry's kind: no attention, encoder, head, concat or
    upsample row)."""
    spec = MODULES.get(module)
    return spec is not None and spec.kind in _STAGE_KINDS and module not in _NOT_A_STAGE


def _default_after(rows: list[list[Any]], section: str, n_backbone: int) -> str:
    """The module the YAML repeats most in ``section`` (C2f in YOLOv8, C3k2 in YOLO11): where attention goes."""
    span = {"backbone": rows[:n_backbone], "head": rows[n_backbone:], "all": rows}[section]
    counts = collections.Counter(m for m in (str(r[2]) for r in span[:-1]) if _is_stage(m))
    if not counts:
        raise ConfigError(f"no row in the {section} to put attention after; give --after MODULE or --sites ROW,ROW")
    return counts.most_common(1)[0][0]


def detector_variants(cfg: dict[str, Any], config: Path, blocks: list[str], sites: str, after: str | None,
                       folder: Path, *, reuse: bool = False) -> tuple[dict[str, list[str]], str | None]:
    """The variants' arguments, each block's edited YAML written to ``folder/variants/`` (``reuse``: a YAML
    already there, written by this edit before, is kept: the edit and its build checks are not repeated)."""
    model = cfg["model"]
    source = resolve_path(str(model["yaml"]), base=config.parent, kinds=("model",))
    if source is None or not source.is_file():
        raise ConfigError(f"{config}: model.yaml {model['yaml']!r} is not a file or a shipped model YAML")
    scale = model.get("scale") or without_scale(str(model["yaml"]))[1]
    data = read_yaml(source, DETECTOR_LIMITS, what="detector YAML")
    rows = list(data.get("backbone") or []) + list(data.get("head") or [])
    at: list[int] | None = None
    if sites in SITES:
        section = _SECTION[sites]
        after = after or _default_after(rows, section, len(data.get("backbone") or []))
    else:
        section = "all"
        if all(p.strip().lstrip("-").isdigit() for p in sites.split(",")):
            at, after = [int(p) for p in sites.split(",")], None
        else:
            after = sites
    variants: dict[str, list[str]] = {"none": []}
    scale_args = ["--model.scale", str(scale)] if scale else []
    (folder / "variants").mkdir(parents=True, exist_ok=True)
    for block in blocks[1:]:
        out = folder / "variants" / f"{block.lower()}.yaml"
        try:
            if not (reuse and out.is_file()):
                insert_attention_file(source, out, block, after=after, at=at, section=section)
        except ConfigError as e:
            raise ConfigError(f"--sites {sites}: {e}") from None
        variants[block.lower()] = ["--model.yaml", str(out.resolve()), *scale_args]
    return variants, after


def classifier_variants(cfg: dict[str, Any], blocks: list[str], sites: str,
                         after: str | None) -> tuple[dict[str, list[str]], str | None]:
    if sites == "neck":
        raise ConfigError("--sites neck: a classifier has no neck; use backbone or all (every residual block), "
                          "or a module name pattern such as 'layer4.*'")
    where = after or (None if sites in SITES else sites)
    model = cfg.get("model") or {}
    with torch.device("meta"):  # the architecture only: check that the sites exist before anything trains
        network = create_model(str(model["name"]), **dict(model.get("model_kwargs") or {}))
    if where is not None:
        try:
            select_modules(network, where)
        except ConfigError as e:
            raise ConfigError(f"--sites {where}: {e}") from None
    elif default_attention_sites(network) is None:
        raise ConfigError(f"--sites {sites}: {model['name']} has no residual blocks, where attention goes by default; "
                          f"give a module name pattern (--sites 'blocks.*') or --after")
    variants: dict[str, list[str]] = {"none": ["--model.attention", "none"]}
    for block in blocks[1:]:
        spec = block if where is None else json.dumps({"block": block, "after": where})  # JSON is YAML
        variants[block.lower()] = ["--model.attention", spec]
    return variants, where


def read_plan(folder: str | os.PathLike) -> AblationPlan:
    """The plan of the ablation in ``folder`` (its ``ablation_plan.json``)."""
    folder = Path(folder)
    path = folder / PLAN_FILE
    if not path.is_file():
        raise ConfigError(f"{folder}: no {PLAN_FILE} here; this is not an ablation folder (`vision-attn ablate` makes one)")
    data = read_json(path, what="ablation plan")
    try:
        return AblationPlan(**{**data, "folder": folder})
    except TypeError as e:
        raise ConfigError(f"{path}: not an ablation plan of this version ({e})") from None


def make_plan(config: str, blocks: Sequence[str], *, seeds: int, name: str | None = None,
              runs_dir: str | os.PathLike = "runs", sites: str = "backbone", after: str | None = None,
              epochs: int | None = None, extra: Sequence[str] = ()) -> AblationPlan:
    """Check the ablation, write its variants and plan under ``runs_dir/name`` and return it. The same
    ablation found there is returned as it is (to continue it); a different one is a :class:`ConfigError`."""
    if seeds < 1:
        raise ConfigError(f"--seeds {seeds}: give at least 1 (3 or more for a confidence interval worth reading)")
    if epochs is not None and epochs < 1:
        raise ConfigError(f"--epochs {epochs}: give at least 1")
    path, task, cfg = read_config(config)
    if get_task(task).insertion is None:
        raise ConfigError(f"--config {config}: the {task} task says nowhere to insert attention (Task.insertion); "
                          "ablate a classifier or detector config")
    blocks = canonical_blocks(blocks, task)
    name = name or f"ablate_{path.stem}"
    folder = Path(runs_dir) / name
    plan = AblationPlan(name=name, task=task, config=str(path), config_sha256=_hash(path), blocks=blocks,
                        sites=sites, after=after, seeds=list(range(seeds)), epochs=epochs, extra=list(extra),
                        folder=folder)
    existing = folder / PLAN_FILE
    if existing.is_file():
        old = read_plan(folder)
        requested, held = plan.identity(), old.identity()
        if held != requested:
            diff = [k for k in requested if requested[k] != held.get(k)]
            raise ConfigError(f"{folder} holds a different ablation ({', '.join(diff)} differ; see {existing}); "
                              f"give another --name, or delete that folder to start again")
        return old
    if folder.exists() and any(folder.iterdir()):
        raise ConfigError(f"{folder} exists and is not an ablation folder; give another --name or --runs_dir")
    created = not folder.exists()
    try:
        if get_task(task).insertion == "yaml":
            plan.variants, plan.where = detector_variants(cfg, path, blocks, sites, after, folder)
        else:
            plan.variants, plan.where = classifier_variants(cfg, blocks, sites, after)
        write_json(existing, plan.to_json(), mkdir=True)
    except BaseException:
        if created:  # a refused ablation leaves nothing behind
            shutil.rmtree(folder, ignore_errors=True)
        raise
    return plan
