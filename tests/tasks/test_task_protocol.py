"""The task protocol holds: ``commands/``, ``export/``, ``ablation/``, ``search/`` and ``analysis/`` ask the task record
(vision_attn/tasks/task.py) and never compare task names, dispatch on a dict keyed by them, test a
concrete loss or head class with ``isinstance``, or name a task's metric key (ARCHITECTURE.md, "Tasks")."""
from __future__ import annotations

import ast
import importlib
import inspect
import pkgutil
from pathlib import Path

import pytest

import vision_attn
import vision_attn.losses
from vision_attn.export.outputs import OUTPUTS
from vision_attn.tasks import TASKS

ROOT = Path(vision_attn.__file__).parent
ASKERS = ("commands", "export", "ablation", "search", "analysis")
HEAD_MODULES = ("detect", "segment", "pose", "obb", "classify", "rtdetr_decoder", "v10")


def _task_words() -> set[str]:
    """The registered task names, and the network families a branch would name (``rtdetr``)."""
    return set(TASKS) | {"rtdetr"}


def _forbidden_classes() -> set[str]:
    """The names of every loss class (vision_attn.losses) and every head class (the YOLO head modules)."""
    modules = [importlib.import_module(f"vision_attn.losses.{m.name}")
               for m in pkgutil.iter_modules(vision_attn.losses.__path__)]
    modules += [importlib.import_module(f"vision_attn.models.yolo.{m}") for m in HEAD_MODULES]
    return {name for mod in modules for name, obj in vars(mod).items()
            if inspect.isclass(obj) and obj.__module__ == mod.__name__}


def _strings(node: ast.AST) -> list[str]:
    """The string constants of ``node``: itself, or the items of a tuple, list or set literal."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return [node.value]
    if isinstance(node, (ast.Tuple, ast.List, ast.Set)):
        return [s for e in node.elts for s in _strings(e)]
    return []


def _class_names(node: ast.AST) -> list[str]:
    """The class names an ``isinstance`` second argument names (a name, an attribute, or a tuple of them)."""
    if isinstance(node, ast.Name):
        return [node.id]
    if isinstance(node, ast.Attribute):
        return [node.attr]
    if isinstance(node, ast.Tuple):
        return [n for e in node.elts for n in _class_names(e)]
    return []


def violations(source: str, filename: str, words: set[str], classes: set[str]) -> list[str]:
    """Each task-name comparison, dict keyed by task names, ``task_of(...)`` call and ``isinstance`` on a
    loss or head class in ``source``, as ``file:line: what``."""
    found = []
    for node in ast.walk(ast.parse(source, filename)):
        if isinstance(node, ast.Compare):
            named = {s for part in (node.left, *node.comparators) for s in _strings(part)} & words
            if named:
                found.append(f"{filename}:{node.lineno}: compares with task name(s) {sorted(named)}")
        elif isinstance(node, ast.Dict):
            keys = {k.value for k in node.keys if isinstance(k, ast.Constant) and isinstance(k.value, str)}
            if len(keys & words) >= 2:
                found.append(f"{filename}:{node.lineno}: a dict keyed by task names {sorted(keys & words)}")
        elif isinstance(node, ast.Call) and isinstance(node.func, (ast.Name, ast.Attribute)):
            name = node.func.id if isinstance(node.func, ast.Name) else node.func.attr
            if name == "task_of":
                found.append(f"{filename}:{node.lineno}: task_of() (ask the Task record of load_run(...).task)")
            elif name == "isinstance" and len(node.args) == 2:
                bad = sorted(set(_class_names(node.args[1])) & classes)
                if bad:
                    found.append(f"{filename}:{node.lineno}: isinstance on {bad}")
    return found


def test_the_checker_finds_each_kind_of_branch():
    source = ("if args.task == 'det': pass\n"
              "if run.task in ('det', 'seg'): pass\n"
              "f = {'cls': 1, 'det': 2}[task]\n"
              "t = task_of(ckpt)\n"
              "if isinstance(self.criterion, RTDETRLoss): pass\n"
              "if isinstance(m, (nn.Conv2d, yolo.Detect)): pass\n"
              "if kind == 'segmenter' or isinstance(x, int): pass\n")
    found = violations(source, "x.py", _task_words(), _forbidden_classes())
    assert sorted(int(f.split(":")[1]) for f in found) == [1, 2, 3, 4, 5, 6], found


@pytest.mark.parametrize("package", ASKERS)
def test_the_commands_ask_the_task_record(package):
    words, classes = _task_words(), _forbidden_classes()
    assert {"RTDETRLoss", "DetectionLoss", "Detect", "Segment", "RTDETRDecoder"} <= classes
    found = []
    for path in sorted((ROOT / package).rglob("*.py")):
        found += violations(path.read_text(), str(path.relative_to(ROOT.parent)), words, classes)
    assert not found, "ask the Task record instead:\n" + "\n".join(found)


def test_every_task_record_answers_the_commands():
    for task in TASKS.values():
        assert task.export_kind in OUTPUTS, task.name
        assert task.insertion in ("yaml", "model", None), task.name
        if task.insertion is not None:
            assert task.headline, f"{task.name}: ablate needs Task.headline"


def test_the_commands_name_no_metric_key_of_a_task():
    """compare, ablate, search and the report rank runs by the record's primary metric (Task.primary): no
    metrics.json key or logged name of a task's metric is written into them."""
    keys = {k for t in TASKS.values() for k in (t.primary.key, t.primary.logged, *(h[0] for h in t.headline))}
    assert {"val_pose_map", "val/pose_mAP50-95", "val_map", "val_map50", "val_top1"} <= keys
    found = []
    for package in ASKERS:
        for path in sorted((ROOT / package).rglob("*.py")):
            for node in ast.walk(ast.parse(path.read_text(), str(path))):
                if isinstance(node, ast.Constant) and node.value in keys:
                    found.append(f"{path.relative_to(ROOT.parent)}:{node.lineno}: {node.value!r}")
    assert not found, "ask Task.primary / Task.reported instead:\n" + "\n".join(found)


def test_a_task_registers_once(monkeypatch):
    from dataclasses import replace

    from vision_attn.errors import ConfigError
    from vision_attn.tasks import get_task, register_task

    monkeypatch.setattr("vision_attn.tasks.registry.TASKS", dict(TASKS))
    other = replace(get_task("cls"), name="cls2")
    assert register_task(other) is other and get_task("cls2") is other
    with pytest.raises(ConfigError, match="registered already"):
        register_task(replace(other))
    assert register_task(replace(other), replace=True).name == "cls2"
    with pytest.raises(ConfigError, match="unknown task 'nope'"):
        get_task("nope")


@pytest.mark.parametrize("module", ["tasks/detect/module.py", "tasks/segment/module.py"])
def test_the_detection_modules_have_no_loss_family_branch(module):
    """Every detector loss has one call (losses.BatchLoss): the modules neither test a loss or head class nor
    name RT-DETR."""
    path = ROOT / module
    found = violations(path.read_text(), module, {"rtdetr"}, _forbidden_classes())
    assert not found, "call the loss through losses.BatchLoss instead:\n" + "\n".join(found)
