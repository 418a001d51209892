"""``import vision_attn``, ``vision-attn --help`` and ``vision-attn configs`` load neither torch nor
Lightning (nor timm, torchvision, numpy, matplotlib, onnx): the public names load on first use and the
commands import their dependencies inside their functions. The commands that count a model on the meta
device (``yaml info``, ``flops``, ``models``) load torch but not its compiler stack (``torch._dynamo``,
sympy) nor Lightning. Each check runs in a fresh process, since this one has torch loaded already; what
is loaded is checked, never how long it takes."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

import vision_attn

HEAVY = ("torch", "torchvision", "lightning", "lightning_fabric", "pytorch_lightning", "timm", "numpy", "matplotlib",
         "onnx")
"""Top-level packages that a command which only parses or lists must not import."""

COMPILER_STACK = ("torch._dynamo", "sympy", "lightning", "lightning_fabric", "pytorch_lightning")
"""What a command that counts a model on the meta device must not import: torch's compiler stack (which
torch's Python meta kernels and its dispatch modes import on first use; vision_attn.analysis.meta_shapes)
and Lightning."""

# What a fresh python runs: sys.argv[1] names the modules to look for (comma-separated); CHECK_CLI
# runs the command line's main on the rest of sys.argv and prints, as JSON, its exit status, its output
# and which of those modules are loaded; CHECK_IMPORT only imports vision_attn.
CHECK_CLI = """
import contextlib, io, json, sys
from vision_attn.cli import main
with contextlib.redirect_stdout(io.StringIO()) as out:
    status = main(sys.argv[2:])
loaded = sorted(set(sys.modules) & set(sys.argv[1].split(",")))
print(json.dumps({"status": status, "out": out.getvalue(), "loaded": loaded}))
"""
CHECK_IMPORT = """
import json, sys
import vision_attn
print(json.dumps({"loaded": sorted({m.split(".")[0] for m in sys.modules} & set(sys.argv[1].split(",")))}))
"""


def _env() -> dict[str, str]:
    """This process's environment (the conftest's HOME and caches), with this checkout first on the path."""
    root = str(Path(vision_attn.__file__).resolve().parent.parent)
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([root] + ([env["PYTHONPATH"]] if env.get("PYTHONPATH") else []))
    return env


def _fresh(script: str, *argv: str, modules: tuple[str, ...] = HEAVY) -> dict:
    """What a fresh ``python -c script MODULES argv...`` prints (its last line, JSON)."""
    proc = subprocess.run([sys.executable, "-c", script, ",".join(modules), *argv], capture_output=True, text=True,
                          env=_env(), timeout=300)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout.strip().splitlines()[-1])


def test_import_vision_attn_loads_no_torch():
    assert _fresh(CHECK_IMPORT)["loaded"] == []


@pytest.mark.parametrize("argv, shown", [
    (["--help"], "usage: vision-attn"),
    (["configs"], "yolov8"),
    (["configs", "show", "demo_digits"], "model:"),
    (["train", "--help"], "usage: vision-attn train"),
])
def test_listing_commands_load_no_torch(argv, shown):
    result = _fresh(CHECK_CLI, *argv)
    assert result["status"] == 0
    assert shown in result["out"]
    assert result["loaded"] == [], f"vision-attn {' '.join(argv)} imported {result['loaded']}"


def test_a_mistyped_or_broken_config_is_reported_before_torch_loads(tmp_path):
    """`train cls --config PATH` finds the file and reads its YAML before the task (torch, Lightning) loads:
    a mistyped path or a tab in the file is named in well under a second (docs/benchmarks.md, "Start-up")."""
    tab = tmp_path / "tab.yaml"
    tab.write_text("model:\n\tname: vit_tiny_patch16_224\n")
    for argv in (["train", "cls", "--config", str(tmp_path / "nope.yaml")], ["train", "det", f"--config={tab}"]):
        result = _fresh(CHECK_CLI, *argv)
        assert result["status"] == 2 and result["loaded"] == [], (argv, result)


def test_an_unknown_key_is_named_before_torch_loads_once_the_parser_has_run(tmp_path):
    """The task's parser keeps its keys in the cache folder for this code (vision_attn.io.config_keys): a
    later command names a mistyped key, on the command line or in the file, or a word given to a key of
    numbers, without loading torch (the same message as the full parse: tests/test_cli_train.py)."""
    from vision_attn.tasks import get_task, parse_train_config

    config = tmp_path / "ok.yaml"
    config.write_text("model:\n  name: vit_tiny_patch16_224\n  model_kwargs: {depth: 1}\ntrainer:\n  max_epochs: 1\n")
    parse_train_config(["--config", str(config)], get_task("cls"))  # the parser runs once: its keys are kept
    typo = tmp_path / "typo.yaml"
    typo.write_text("model:\n  lrr: 0.1\n")
    for argv, words in ((["--config", str(config), "--trainer.max_epoch", "3"], "unknown option --trainer.max_epoch: "
                         "did you mean trainer.max_epochs?"),
                        ([f"--config={typo}"], "unknown config key 'model.lrr': did you mean model.lr?"),
                        (["--config", str(config), "--trainer.max_epochs", "abc"],
                         "config key 'trainer.max_epochs': 'abc' is not an integer or null: give an integer or null")):
        proc = subprocess.run([sys.executable, "-c", CHECK_CLI, ",".join(HEAVY), "train", "cls", *argv],
                              capture_output=True, text=True, env=_env(), timeout=300)
        result = json.loads(proc.stdout.strip().splitlines()[-1])
        assert result["status"] == 2 and result["loaded"] == [], (argv, result, proc.stderr)
        assert proc.stderr == f"error: {words}\n", proc.stderr
    # a key inside a value (model_kwargs) and the run flags pass the early check: the parser takes them
    result = _fresh(CHECK_CLI, "train", "cls", "--config", str(config), "--model.model_kwargs.depth", "2",
                    "--model.lr", "1e30", "--runs-dir", str(tmp_path), "--print-config", modules=("torch",))
    assert result["status"] == 0 and "depth: 2" in result["out"] and "lr: 1.0e+30" in result["out"], result


@pytest.mark.parametrize("argv, shown", [
    (["yaml", "info", "yolov8n.yaml"], "3,157,200 parameters"),
    (["flops", "vit_tiny_patch16_224", "--img-size", "224"], "5,717,416"),
    (["models", "deit_*"], "deit_tiny_distilled_patch16_224"),
])
def test_counting_commands_load_no_compiler_stack(argv, shown):
    result = _fresh(CHECK_CLI, *argv, modules=("torch", *COMPILER_STACK))
    assert result["status"] == 0
    assert shown in result["out"]
    assert result["loaded"] == ["torch"], f"vision-attn {' '.join(argv)} imported {result['loaded']}"


def test_python_dash_m_help():
    proc = subprocess.run([sys.executable, "-m", "vision_attn", "--help"], capture_output=True, text=True,
                          env=_env(), timeout=300)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith("usage: vision-attn")


def test_public_names_resolve_on_first_use():
    from vision_attn import create_model
    from vision_attn.layers.plugins import get_attention
    from vision_attn.models import build_detector, insert_attention, list_models

    assert create_model is vision_attn.create_model is vision_attn.models.create_model
    assert (vision_attn.build_detector, vision_attn.list_models, vision_attn.insert_attention,
            vision_attn.get_attention) == (build_detector, list_models, insert_attention, get_attention)
    assert "vit_tiny_patch16_224" in vision_attn.list_models("vit_tiny*")
    assert vision_attn.kernels.current_plan is not None  # a subpackage, as an attribute
    assert issubclass(vision_attn.ConfigError, vision_attn.VisionAttnError)
    assert set(vision_attn.__all__) <= set(dir(vision_attn))
    namespace: dict = {}
    exec("from vision_attn import *", namespace)
    assert set(vision_attn.__all__) <= set(namespace)
    with pytest.raises(AttributeError, match="no attribute 'create_modle'"):
        vision_attn.create_modle
