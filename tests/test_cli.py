"""The `vision-attn` command, called in-process through main() and once as the installed script."""
import json
import subprocess
import sys
from pathlib import Path

import pytest

from vision_attn.cli import main
from vision_attn.errors import ConfigError


def test_models_table(capsys):
    """The table of a pattern's variants (every variant's parameter count is compared with its peer's in
    tests/models/test_registry.py, GMACs with published figures in tests/analysis/test_flops.py; the
    whole table of 48 takes half a minute here)."""
    assert main(["models", "deit_*"]) == 0
    out = capsys.readouterr().out
    assert "deit_tiny_distilled_patch16_224" in out and "vit_large_patch16_224" not in out
    assert "4.60" in out and "22.05" in out and "224x224" in out
    assert main(["models", "vit_base_patch16_384"]) == 0
    assert "384x384" in capsys.readouterr().out


def test_models_json(capsys):
    assert main(["models", "deit_*", "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)
    assert [r["name"] for r in rows] == sorted(r["name"] for r in rows) and len(rows) == 6
    assert all(r["name"].startswith("deit_") for r in rows)
    small = next(r for r in rows if r["name"] == "deit_small_patch16_224")
    assert small["params"] == 22_050_664 and small["img_size"] == [224, 224]
    assert small["gmacs"] == pytest.approx(4.60, rel=0.01)


def test_models_counts_each_variant_once_per_version_of_the_code(capsys, monkeypatch):
    """The counts are kept in the cache folder under a fingerprint of the code: a second listing counts
    nothing (start-up: docs/benchmarks.md, "Start-up"); other code counts again."""
    from vision_attn.analysis import model_table

    assert main(["models", "deit_*", "--json"]) == 0
    first = json.loads(capsys.readouterr().out)

    def counted(name):
        raise AssertionError(f"{name} counted again")

    with monkeypatch.context() as patch:
        patch.setattr(model_table, "_count", counted)
        assert main(["models", "deit_*", "--json"]) == 0
        assert json.loads(capsys.readouterr().out) == first
    seen = []
    real = model_table._count
    monkeypatch.setattr(model_table, "_count", lambda name: seen.append(name) or real(name))
    monkeypatch.setattr(model_table, "code_fingerprint", lambda: "other code")
    assert main(["models", "deit_tiny*", "--json"]) == 0
    assert seen == ["deit_tiny_distilled_patch16_224", "deit_tiny_patch16_224"]


def test_models_no_match(capsys):
    assert main(["models", "efficientnet*"]) == 2
    assert capsys.readouterr().err.startswith("error: no registered model matches 'efficientnet*'")


def test_flops_json(capsys):
    assert main(["flops", "deit_small_patch16_224", "--json"]) == 0
    d = json.loads(capsys.readouterr().out)
    assert d["gmacs"] == pytest.approx(4.60, rel=0.01)
    assert d["flops"] == 2 * d["macs"] and d["params"] == 22_050_664
    assert d["input_shape"] == [1, 3, 224, 224]
    assert d["macs_without_fused_attention"] / 1e9 == pytest.approx(4.24, rel=0.01)
    assert "multiply-accumulates" in d["conventions"]["macs"] and "by_module" not in d


def test_flops_table_states_conventions(capsys):
    assert main(["flops", "vit_tiny_patch16_224", "--img-size", "224", "320", "--batch", "2", "--by-module"]) == 0
    out = " ".join(capsys.readouterr().out.split())  # rich wraps long lines
    assert "input 2x3x224x320" in out
    assert "MACs: multiply-accumulates, what papers call FLOPs" in out
    assert "FLOPs = 2 x MACs, torch.utils.flop_counter's convention" in out
    assert "fused attention (scaled_dot_product_attention) is counted" in out
    assert "MACs by module" in out and "blocks.11" in out


def test_unknown_model_is_one_line_with_suggestion(capsys):
    assert main(["flops", "deit_smal_patch16_224"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("error: unknown model 'deit_smal_patch16_224'")
    assert "did you mean deit_small_patch16_224" in err and "Traceback" not in err


def test_debug_reraises():
    with pytest.raises(ConfigError, match="unknown model"):
        main(["--debug", "flops", "deit_smal_patch16_224"])


def test_indivisible_image_size(capsys):
    assert main(["flops", "vit_tiny_patch16_224", "--img-size", "225"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "not divisible by the patch size" in err


@pytest.mark.parametrize("argv", [["flops", "vit_tiny_patch16_224", "--img-size", "1", "2", "3"],
                                  ["flops", "vit_tiny_patch16_224", "--batch", "x"], ["nonsense"], []])
def test_usage_errors_exit_2(argv, capsys):
    assert main(argv) == 2
    assert "usage: vision-attn" in capsys.readouterr().err


def test_help_exits_0(capsys):
    assert main(["--help"]) == 0
    out = capsys.readouterr().out
    assert all(cmd in out for cmd in ("models", "flops", "demo"))


def test_demo_runs(capsys, monkeypatch):
    # the tour's first section is the table of test_models_table (every registered model's FLOPs on the
    # meta device, over a minute): here it lists two, and the rest of the tour runs as it is
    import vision_attn

    every = vision_attn.list_models
    monkeypatch.setattr(vision_attn, "list_models", lambda pattern="*": every("deit_small*"))
    assert main(["demo"]) == 0
    out = capsys.readouterr().out
    assert "deit_small_patch16_224" in out and "22.05" in out and "4.60" in out  # the FLOPs table
    assert "Random initialisation" in out and "1x3x224x320" in out and "(1, 282, 192)" in out


def test_installed_script():
    script = Path(sys.executable).with_name("vision-attn")
    cmd = [str(script)] if script.exists() else [sys.executable, "-m", "vision_attn.cli"]
    done = subprocess.run([*cmd, "models", "vit_tiny*"], capture_output=True, text=True, timeout=120,
                          env={"NO_ALBUMENTATIONS_UPDATE": "1", "PATH": "/usr/bin:/bin", "COLUMNS": "100"})
    assert done.returncode == 0, done.stderr
    assert "vit_tiny_patch16_224" in done.stdout and "5.72" in done.stdout
    assert done.stderr == ""  # no warnings on import


def test_piped_output_is_not_cut_at_80_columns(capsys, tmp_path, monkeypatch):
    """With standard output a pipe or a file (CI, a log), rich lays tables out at their full width: no
    description, output shape or path is cut or folded."""
    monkeypatch.delenv("COLUMNS", raising=False)  # pytest-xdist's workers set COLUMNS=80
    from vision_attn.io.resources import shipped_configs

    import os

    import vision_attn

    env = {k: v for k, v in os.environ.items() if k != "COLUMNS"}
    env["PYTHONPATH"] = str(Path(vision_attn.__file__).resolve().parents[1])  # this checkout
    proc = subprocess.run([sys.executable, "-m", "vision_attn", "configs"], capture_output=True, text=True, env=env,
                          timeout=120, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    longest = max((c for c in shipped_configs()), key=lambda c: len(c.description))
    assert len(longest.description) > 80 and longest.description in proc.stdout
    assert max(len(line) for line in proc.stdout.splitlines()) > 80
    assert main(["yaml", "info", "yolov8n.yaml"]) == 0
    out = capsys.readouterr().out
    assert "1x16x320x320" in out and "…" not in out


def test_an_unknown_option_is_one_line_with_the_closest_option(capsys):
    assert main(["models", "--jsn"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("error: vision-attn models: unknown option --jsn: did you mean --json?")
    assert main(["models", "--sortt"]) == 2
    assert "unknown option --sortt (its options: --json;" in capsys.readouterr().err
    assert main(["data", "check", "x", "--jsno"]) == 2
    assert "vision-attn data check: unknown option --jsno: did you mean --json?" in capsys.readouterr().err


def test_help_lists_every_task_and_the_readme_names_the_optional_runtimes(capsys):
    from vision_attn.commands.train import TASK_NAMES

    assert main(["--help"]) == 0
    out = capsys.readouterr().out
    every = "|".join(TASK_NAMES)
    for command in ("train", "eval", "predict"):
        line = next(line for line in out.splitlines() if line.strip().startswith(command + " "))
        assert f"{command} {every}" in line, line
    readme = (Path(__file__).resolve().parents[1] / "README.md").read_text()
    runtimes = readme[readme.index("Optional runtimes"):readme.index("## Use it from Python")]
    assert "export openvino" in runtimes and "pip install -c constraints.txt -e '.[openvino]'" in runtimes
    assert "pip install transformers" in runtimes and "--unchecked" in runtimes
