"""The CPU kernel plan of a training run: recorded in the run folder, reused when the run continues,
fixed by ``--trainer.deterministic true``, and the same metrics whatever the self-checks would choose."""
import json

import pytest
import torch
from safetensors.torch import load_file

from vision_attn.errors import ConfigError
from vision_attn.kernels import KernelChoice, LinearKernels, current_plan, kernel_plan
from vision_attn.tasks import train_classifier

from tests.folders import make_folder

TINY = {
    "model": {"name": "vit_tiny_patch16_224", "model_kwargs": {"patch_size": 8, "depth": 1, "embed_dim": 32, "num_heads": 2,
                                                                 "mlp_ratio": 16},  # fc2 sums 512 products: kernels round apart
              "warmup_epochs": 0.5},
    "data": {"img_size": 16, "batch_size": 8, "num_workers": 0, "hflip": 0.0},
    "trainer": {"accelerator": "cpu", "max_epochs": 2, "enable_progress_bar": False},
}


def config(tmp_path, **top) -> dict:
    root = tmp_path / "data"
    if not root.exists():
        make_folder(root)
    return {**TINY, "data": {**TINY["data"], "root": str(root)}, "runs_dir": str(tmp_path / "runs"), **top}


def test_a_run_records_its_plan_and_a_resume_reuses_it(tmp_path):
    lines: list[str] = []
    result = train_classifier(config(tmp_path, name="a", kernels="onednn"), echo=lines.append)
    recorded = json.loads((result.run_dir / "kernels.json").read_text())
    assert recorded["plan"] == "onednn" and set(recorded) == {"plan", "float32", "bfloat16"}
    assert recorded["float32"]["forward"] in ("onednn", "aten")  # aten where oneDNN cannot run
    assert result.metrics["kernels"] == "onednn" and result.metrics["files"]["kernels"] == "kernels.json"
    assert any(line.startswith("kernels: the onednn plan (--kernels)") for line in lines)

    lines.clear()
    with kernel_plan("aten"):  # another process default: the run's own plan wins
        cfg = config(tmp_path, name="a", resume=True)
        cfg["trainer"] = {**cfg["trainer"], "max_epochs": 3}
        resumed = train_classifier(cfg, echo=lines.append)
        assert current_plan().name == "aten"  # put back after the run
    assert any("the onednn plan (recorded in kernels.json)" in line for line in lines)
    assert resumed.metrics["kernels"] == "onednn" and resumed.metrics["epochs"] == 3
    assert json.loads((resumed.run_dir / "kernels.json").read_text()) == recorded


def test_a_damaged_record_is_an_error_naming_the_file(tmp_path):
    result = train_classifier(config(tmp_path, name="b"))
    (result.run_dir / "kernels.json").write_text(json.dumps({"plan": "onednn", "float32": {"forward": "mkl"}}))
    cfg = config(tmp_path, name="b", resume=True)
    cfg["trainer"] = {**cfg["trainer"], "max_epochs": 3}
    with pytest.raises(ConfigError, match=r"kernel plan .*kernels\.json: float32: .*delete the file"):
        train_classifier(cfg)


def test_deterministic_runs_do_not_depend_on_what_the_self_checks_choose(tmp_path, monkeypatch):
    """The process measures (its plan is "measured"), and its measurement says oneDNN for one run and
    ATen for the next, as a loaded machine might; with --trainer.deterministic true both runs take
    the fixed ATen plan and end with the same metrics, to the bit."""
    fp32 = iter([KernelChoice("onednn", LinearKernels("onednn", "onednn", "onednn"), "explicit"), KernelChoice()])
    monkeypatch.setattr("vision_attn.kernels.plan._measure",
                        lambda dtype, threads: next(fp32) if dtype == torch.float32 else KernelChoice())
    runs = []
    for name in ("c", "d"):
        with kernel_plan("measured"):
            cfg = config(tmp_path, name=name)
            cfg["trainer"] = {**cfg["trainer"], "deterministic": True}
            runs.append(train_classifier(cfg))
    assert runs[0].metrics["kernels"] == runs[1].metrics["kernels"] == "aten"
    for key in ("val_loss", "train_loss", "val_top1"):
        assert runs[0].metrics[key] == runs[1].metrics[key], key
    c, d = (load_file(r.run_dir / "model.safetensors") for r in runs)  # the trained weights, to the bit
    assert c.keys() == d.keys() and all(torch.equal(c[k], d[k]) for k in c)


def test_the_kernels_key_is_checked(tmp_path):
    with pytest.raises(ConfigError, match="kernels"):
        train_classifier(config(tmp_path, name="e", kernels="fastest"))
