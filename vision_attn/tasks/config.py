"""The training configuration: a YAML file plus ``--section.key value`` overrides (jsonargparse).

Sections follow LightningCLI: ``model`` (:class:`ClassificationModule`'s or :class:`DetectionModule`'s
arguments), ``data`` (:class:`ClassificationDataModule`'s or :class:`DetectionDataModule`'s), ``trainer`` (``pytorch_lightning.Trainer``'s, passed through:
``devices``, ``strategy``, ``num_nodes``, ``precision``, ``gradient_clip_val``, ...), and top-level
``name``, ``runs_dir``, ``seed``, ``resume``, ``ckpt_path``, ``overwrite``, ``threads``, ``kernels`` and ``checkpoint``
(``every_n_steps``, ``every_minutes``: periodic mid-epoch checkpoints). A key that is not known
is a :class:`ConfigError` naming the closest known key; so is a value of the wrong type.
"""
from __future__ import annotations

import inspect
import os
import re
from argparse import Namespace as _ArgNamespace
from pathlib import Path
from typing import Any, Literal, Mapping, Sequence

from vision_attn.errors import ConfigError, VisionAttnError
from vision_attn.io.config_keys import closest, remember_keys, scalar_kinds, wanted
from vision_attn.io.resources import KINDS, resolve_path, training_config
from vision_attn.io.yaml import CONFIG_LIMITS, check_file_size, check_yaml
from vision_attn.tasks.task import Task

__all__ = ["build_train_parser", "parse_train_config", "config_keys", "dump_config", "to_dict", "PRINT_CONFIG_FLAGS"]

PRINT_CONFIG_FLAGS = ("--print-config", "--print_config")
TRAINER_SKIP = {"callbacks", "logger", "enable_checkpointing", "default_root_dir", "plugins",
                "use_distributed_sampler"}  # the data modules split the data between processes themselves
# Lightning's batch limits: an int is that many batches, a float that fraction of them. Its annotation,
# ``Optional[Union[int, float]]``, is typing's cached Union: a package imported earlier (rich) that wrote
# ``Optional[Union[float, int]]`` makes it ``Union[float, int, None]``, and jsonargparse then reads
# ``--trainer.limit_val_batches 1`` as 1.0, the whole set. These keys get an int-first type of their own.
BATCH_LIMITS = ("limit_train_batches", "limit_val_batches", "limit_test_batches", "limit_predict_batches",
                "overfit_batches")
TRAINER_DEFAULTS = {"max_epochs": 10, "num_sanity_val_steps": 0, "log_every_n_steps": 10,
                    "enable_model_summary": False}


PARSER_MODE = "vision_attn"  # jsonargparse's YAML loader behind the bounds of vision_attn.io.yaml


def _register_bounded_loader() -> None:
    """Every config file and value jsonargparse reads is checked by :func:`check_yaml` (size, depth,
    nodes after alias expansion) before its own loader builds it."""
    import jsonargparse
    import yaml

    try:
        jsonargparse.get_loader(PARSER_MODE)
        return  # registered once per process
    except KeyError:
        plain = jsonargparse.get_loader("yaml")

    def bounded(text: str, path: str | os.PathLike = "") -> Any:
        check_yaml(text, str(getattr(path, "absolute", path) or "<config value>"), CONFIG_LIMITS)
        return plain(text)

    jsonargparse.set_loader(PARSER_MODE, bounded, exceptions=(yaml.YAMLError,))


def build_train_parser(task: Task):
    """The jsonargparse parser of ``vision-attn train TASK``."""
    from jsonargparse import ActionConfigFile, ArgumentParser
    from pytorch_lightning import Trainer

    from vision_attn.kernels import PLAN_NAMES  # with torch: only where a training parser is built
    from vision_attn.tasks.signals import STOP_GRACE_S

    shipped = f"a shipped name such as those in configs/{'/'.join(KINDS[task.name])}/" if task.name in KINDS else \
        "no shipped ones for this task"
    _register_bounded_loader()
    parser = ArgumentParser(
        prog=f"vision-attn train {task.name}", exit_on_error=False, default_env=False, allow_abbrev=False,
        parser_mode=PARSER_MODE,
        description=task.title + " Give a YAML config (a file, or a shipped name: `vision-attn configs`) and "
        "override any key with --section.key value.")
    parser.add_argument("--config", action=ActionConfigFile,
                        help=f"a YAML config: a file, or {shipped}")
    parser.add_argument("--name", type=str | None, default=None,
                        help="run name: the run is written to RUNS_DIR/NAME (default: the config file's name)")
    parser.add_argument("--runs_dir", type=str, default="runs", help="folder of the runs")
    parser.add_argument("--seed", type=int, default=0, help="global seed (weights, shuffling, augmentation)")
    parser.add_argument("--resume", type=bool, default=False,
                        help="continue runs/NAME from its last.ckpt (optimizer, scheduler, EMA and epoch restored)")
    parser.add_argument("--ckpt_path", type=str | None, default=None,
                        help="continue from this checkpoint instead (a .ckpt of a run)")
    parser.add_argument("--overwrite", type=bool, default=False, help="replace an existing run folder NAME")
    parser.add_argument("--checkpoint.every_n_steps", type=int | None, default=None,
                        help="also write last.ckpt every N optimizer steps (it is written at each epoch's start, "
                             "on SIGTERM/Ctrl-C and at the end anyway); a resume continues with the next batch")
    parser.add_argument("--checkpoint.every_minutes", type=float | None, default=None,
                        help="also write last.ckpt every M minutes of training")
    parser.add_argument("--checkpoint.stop_grace_s", type=float | None, default=STOP_GRACE_S,
                        help="after SIGTERM, SIGINT or SIGUSR1, end the run with an error saying where it waits if "
                             "the next training batch has not started within this many seconds (null: wait)")
    parser.add_argument("--threads", type=int | None, default=None,
                        help="PyTorch CPU threads per process (default: one per core); on a small CPU, 1 thread "
                             "plus a data worker can beat 2 threads")
    parser.add_argument("--kernels", type=Literal[PLAN_NAMES] | None, default=None,
                        help="the CPU kernel plan: measured (timed once per machine), aten (PyTorch's standard "
                             "kernels) or onednn (fixed); default: the run's recorded plan when it continues, else "
                             "aten with --trainer.deterministic true, else $VISION_ATTN_KERNELS (measured)")
    parser.add_class_arguments(task.module, "model", skip=set(task.filled))
    parser.add_class_arguments(task.datamodule, "data")
    parser.add_class_arguments(Trainer, "trainer", skip=TRAINER_SKIP | set(BATCH_LIMITS))
    lightning = inspect.signature(Trainer.__init__).parameters
    for key in BATCH_LIMITS:
        parser.add_argument(f"--trainer.{key}", type=int | float | None, default=lightning[key].default,
                            help="Lightning's Trainer argument: an int is that many batches, a float that "
                                 "fraction of the batches")
    parser.set_defaults({f"trainer.{k}": v for k, v in TRAINER_DEFAULTS.items()})
    return parser


def config_keys(parser) -> list[str]:
    """Every dotted key the parser knows (``model.lr``, ``trainer.max_epochs``, ...)."""
    keys = []
    for action in parser._actions:
        dest = getattr(action, "dest", None)
        if dest and dest not in ("help", "config", "print_config") and not dest.startswith("_"):
            keys.append(dest)
    return sorted(set(keys))


_closest = closest  # the suggestion the command gives before the parser loads (vision_attn.io.config_keys)


def _config_error(e: Exception, keys: Sequence[str], task: str = "cls") -> ConfigError:
    text = " ".join(str(e).split())
    m = re.search(r"unrecognized arguments: (--?[\w.\-]+)", text)
    if m:
        return ConfigError(f"unknown option {m.group(1)}: {_closest(m.group(1), keys, task)}")
    m = re.search(r"Group '([\w.]+)' does not accept nested key '([\w.\-]+)'", text) or \
        re.search(r"Group '([\w.]+)' does not accept option '([\w.\-]+)'", text)
    if m:
        key = f"{m.group(1)}.{m.group(2)}"
        return ConfigError(f"unknown config key {key!r}: {_closest(key, keys, task)}")
    m = re.search(r"Key '([\w.\-]+)' is not expected", text) or re.search(r"Option '([\w.\-]+)' is not accepted", text) or re.search(r"No action for (?:destination )?key \"?'?([\w.\-]+)", text)
    if m:
        return ConfigError(f"unknown config key {m.group(1)!r}: {_closest(m.group(1), keys, task)}")
    m = re.search(r"Parser key \"([\w.]+)\": (.*)", text)
    if m:
        return ConfigError(f"config key {m.group(1)!r}: {_type_error(m.group(2))}")
    return ConfigError(f"training configuration: {text}")


def _type_error(detail: str) -> str:
    """jsonargparse's rejection of a value's type (``Expected a <class 'int'>. Got value: abc``, ``Does not
    validate against any of the Union subtypes ...``) in words: the value given and what to give."""
    union = re.search(r"Subtypes: \[(.*?)\]", detail)
    types = re.findall(r"<class '(\w+)'>", union.group(1) if union else detail.split("Got value", 1)[0])
    given = re.search(r"(?:Given value|Got value): (.*?)\s*$", detail)
    if not types or given is None:
        return detail
    text = wanted(types)
    return f"{given.group(1)!r} is not {text}: give {text}"


_BOOL_FLAGS = ("--resume", "--overwrite")
_DASHED = {"--ckpt-path": "--ckpt_path", "--runs-dir": "--runs_dir", "--print-config": "--print_config",
           "--precision": "--trainer.precision"}  # --precision bf16-mixed: the trainer's key


def _config_file(value: str, task: Task) -> str:
    """``--config VALUE``: a file, else a shipped training config of the task (``demo_digits``); refused
    by its size here, before jsonargparse reads it whole."""
    path = value if Path(value).expanduser().is_file() else str(training_config(value, task.name))  # type: ignore[arg-type]
    check_file_size(Path(path).expanduser(), CONFIG_LIMITS, what="training config")
    return path


def _normalise(argv: Sequence[str], task: Task) -> list[str]:
    """``--resume`` and ``--overwrite`` alone mean ``true``; ``--ckpt-path`` is ``--ckpt_path``;
    ``--config NAME`` names a shipped config when there is no such file; ``--precision`` is
    ``--trainer.precision``."""
    out: list[str] = []
    for i, a in enumerate(argv):
        head, eq, value = a.partition("=")
        if head == "--config" and eq:
            value = _config_file(value, task)
        elif i and argv[i - 1] == "--config":
            a = _config_file(a, task)
        a = _DASHED.get(head, head) + eq + value if head.startswith("--") else a
        out.append(a)
        nxt = argv[i + 1] if i + 1 < len(argv) else None
        if a in _BOOL_FLAGS and (nxt is None or nxt.startswith("--")):
            out.append("true")
    return out


def parse_train_config(args: Sequence[str] | Mapping[str, Any] | None, task: Task):
    """A validated configuration (a jsonargparse Namespace) of ``task`` from command-line arguments, or
    from a nested dict (``{"model": {"name": ...}, "data": {...}, "trainer": {...}}``) over the defaults.
    Paths in it (``task.paths``) are resolved: relative to the config file first, then the working
    directory, then the shipped configs."""
    parser = build_train_parser(task)
    keys = config_keys(parser)
    remember_keys(task.name, keys, scalar_kinds(parser._actions))  # checked by later commands before Lightning loads
    try:
        if isinstance(args, Mapping):
            cfg = parser.parse_object(dict(args))
        else:
            cfg = parser.parse_args(_normalise(list(args or []), task))
    except VisionAttnError:  # the bounded YAML reader's errors name the file and line already
        raise
    except (Exception, SystemExit) as e:  # argparse.ArgumentError, jsonargparse's errors, usage exits
        if isinstance(e, SystemExit) and not e.code:
            raise
        raise _config_error(e, keys, task.name) from None
    configs = [Path(str(c)) for c in cfg.get("config") or []]
    if cfg.get("name") is None:
        cfg.name = configs[-1].stem if configs else task.name
    if not re.fullmatch(r"[\w.\-]+", cfg.name):
        raise ConfigError(f"name={cfg.name!r}: use letters, digits, '_', '-' and '.' (it names the run folder)")
    _resolve_paths(cfg, task, configs[-1].parent if configs else None)
    return cfg


def _resolve_paths(cfg, task: Task, base: Path | None) -> None:
    """Each configured path of ``task.paths`` (``model.yaml``, ``data.root``, ...) as the file it names."""
    for key, kinds in task.paths.items():
        value = cfg.get(key)
        if not isinstance(value, str) or not value or value.startswith("demo:"):
            continue
        found = resolve_path(value, base=base, kinds=kinds)  # type: ignore[arg-type]
        if found is not None:
            cfg[key] = str(found)


RUN_FLAGS = {"resume": False, "ckpt_path": None, "overwrite": False}  # how one invocation starts, not the run


def dump_config(cfg, task: Task, *, run_flags: bool = True) -> str:
    """The full configuration as YAML: what ``--print-config`` prints and, with ``run_flags=False``
    (``resume``, ``ckpt_path`` and ``overwrite`` back at their defaults), what a run saves as config.yaml."""
    parser = build_train_parser(task)
    cfg = _strip(cfg)
    if not run_flags:
        for key, value in RUN_FLAGS.items():
            cfg[key] = value
    return parser.dump(cfg)


def _strip(cfg):
    cfg = cfg.clone()
    for key in ("config", "__path__"):
        if key in cfg:
            del cfg[key]
    return cfg


def to_dict(cfg) -> dict[str, Any]:
    """A plain nested dict of a configuration."""
    d = _strip(cfg).as_dict()
    return {k: (dict(v) if isinstance(v, (_ArgNamespace, dict)) else v) for k, v in d.items()}
