"""``vision-attn train cls|det|seg|pose|obb --config NAME [--section.key value ...]``: parsing and printing only;
the work is :func:`vision_attn.tasks.train` of the task named (see :mod:`vision_attn.tasks.registry`)."""
from __future__ import annotations

import argparse
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from rich.console import Console

TASK_NAMES = ("cls", "det", "seg", "pose", "obb")
"""The built-in tasks of the registry (vision_attn.tasks.TASKS; a test keeps them registered), named here so
that `--help` imports no torch. The commands take any registered task's name (vision_attn.tasks.register_task):
the registry checks it."""
TASK_HELP = ("cls: image classification; det: object detection; seg: instance segmentation; pose: keypoints; "
             "obb: oriented boxes (or a task added with "
             "vision_attn.tasks.register_task)")
PRINT_CONFIG_FLAGS = ("--print-config", "--print_config")


def _check_early(rest: list[str], task: str) -> None:
    """Before torch and Lightning load: each ``--config`` file found and its YAML read, and the keys of the
    files and of ``--section.key`` arguments checked against those the task's parser last had for this
    code (vision_attn.io.config_keys): a mistyped path, a broken file or an unknown key is reported at
    once, with the ConfigError the full parse gives."""
    from vision_attn.errors import ConfigError
    from vision_attn.io.config_keys import unknown_key
    from vision_attn.io.resources import training_config
    from vision_attn.io.yaml import read_yaml

    documents = []
    for i, a in enumerate(rest):
        value = a.partition("=")[2] if a.startswith("--config=") else (a if i and rest[i - 1] == "--config" else None)
        if value:
            path = training_config(value, task)  # type: ignore[arg-type]
            documents.append((str(path), read_yaml(path, what="training config")))
    problem = unknown_key(task, rest, documents)
    if problem is not None:
        raise ConfigError(problem)


def _cmd_train(args: argparse.Namespace, console: Console) -> int:
    rest = list(args.args)
    if not any(a in ("-h", "--help") for a in rest):
        _check_early(rest, args.task)
    from vision_attn.tasks import dump_config, get_task, parse_train_config, train  # Lightning loads here
    from vision_attn.tasks.registry import build_train_parser

    if any(a in ("-h", "--help") for a in rest):
        build_train_parser(args.task).print_help()
        return 0
    printing = any(a in PRINT_CONFIG_FLAGS for a in rest)
    cfg = parse_train_config([a for a in rest if a not in PRINT_CONFIG_FLAGS], args.task)
    if printing:
        print(dump_config(cfg, task=args.task), end="")
        return 0
    result = train(args.task, cfg, echo=lambda line: console.print(line, markup=False, soft_wrap=True))
    if result.metrics:
        m = result.metrics
        size = f"{m['gmacs']:.4f} GMACs" if "gmacs" in m else f"{m['gflops']:.2f} GFLOPs"
        model = f"{m['model']} {m.get('scale') or ''}".strip()
        console.print(f"[bold]final {get_task(args.task).summary(m)}[/bold] ({model}, "
                      f"{m['epochs']} epochs, {m['wall_time_s']:.0f} s, {m['params'] / 1e6:.2f} M params, {size})")
        console.print(f"run folder: {result.run_dir}")
    return 0


def register(sub: "argparse._SubParsersAction[argparse.ArgumentParser]") -> None:
    """Add ``train``."""
    p = sub.add_parser("train", help=f"train a model: `train {'|'.join(TASK_NAMES)} --config NAME` (`vision-attn configs` lists them)",
                       description="Train a classifier (cls) on ImageNet-style folders, a YOLO-style detector (det) "
                       "on COCO json / YOLO txt data, a YOLO-style instance-segmentation model (seg) on COCO "
                       "segmentations / YOLO polygon labels, a keypoint model (pose) on YOLO keypoint labels / COCO "
                       "keypoints or an oriented-box model (obb) on DOTA-style labels with PyTorch Lightning. --config takes a file or a shipped "
                       "name (demo_digits, demo_digit_boxes, demo_digit_masks; `vision-attn configs`). `vision-attn train cls --help` "
                       "(or `train det --help`) lists every config key.")
    p.add_argument("task", help=TASK_HELP)
    p.add_argument("args", nargs=argparse.REMAINDER,
                   help="--config FILE|NAME, --section.key VALUE overrides, --print-config, --help")
    p.set_defaults(func=_cmd_train)
