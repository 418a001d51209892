"""The gpu suite's dry run on the CPU (`tools/bench.py gpu --dry-run`): the same code path as on a GPU, tiny
sizes, its JSON record (the loader and inference phases; the training phases start eight processes that train,
minutes on 2 cores: their dry run is `--only cls,det,seg,rtdetr`, by hand). The training phases' clock: images/s
and the data-wait share from a timeline."""
import json
import subprocess
import sys
from pathlib import Path

import pytest

from tools.suites.gpu import phases
from tools.suites.gpu_train import StepClock

ROOT = Path(__file__).resolve().parents[1]


def test_gpu_check_dry_run(tmp_path):
    proc = subprocess.run([sys.executable, str(ROOT / "tools" / "bench.py"), "gpu", "--dry-run", "--models",
                           "vit_tiny_patch16_224", "--only", "loader,inference", "--json", str(tmp_path / "gpu_check.json")], cwd=ROOT,
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "| model | mode | batch | img/s (bf16) |" in proc.stdout
    record = json.loads((tmp_path / "gpu_check.json").read_text())
    assert record["suite"] == "gpu" and record["params"]["dry_run"] is True and "isa" in record["environment"]
    d = record["results"]
    check = d["checks"]["vit_tiny_patch16_224"]
    assert check["fp32_max_abs_diff"] < 1e-4 * max(1.0, check["logit_scale"])  # same weights, same function
    assert check["grad_max_rel_diff"] < 1e-3
    ours, theirs = d["results"]
    assert ours["model"] == "vit_tiny_patch16_224" and theirs["model"] == "timm vit_tiny_patch16_224"
    assert ours["precision"] == "bf16" and ours["ratio"] > 0 and 0 < ours["mfu"]
    assert ours["flops_per_call"] == theirs["flops_per_call"]
    assert d["info"]["phases"] == ["loader", "inference"] and d["training"] == []
    loader = d["loader"]
    # data.normalize: both modes, and data.augment: device; batches copied to the device
    assert set(loader["loader"]) == {"device", "loader", "augment device"}
    assert loader["loader"]["augment device"]["augment"] == "device"
    assert loader["loader"]["device"]["dtype"] == "torch.uint8" and loader["loader"]["loader"]["dtype"] == "torch.float32"
    assert all(v["images_per_s"] > 0 for v in loader["loader"].values())
    assert loader["model_img_per_s"]["vit_tiny_patch16_224"] > 0
    assert loader["device_decode_img_per_s"] > 0  # the dry run always measures the device decoder (on the CPU)
    assert "| data module's train loader, data.normalize device, data.augment loader, 1 workers, to cpu |" in proc.stdout
    assert "| data module's train loader, data.normalize device, data.augment device, 1 workers, to cpu |" in proc.stdout


def test_step_clock_counts_the_steps_after_start_up_and_the_gaps_before_them():
    clock = StepClock()
    # step 0 (start-up): ready at 0, done at 5; step 1: waits 1 s for data, steps 2 s; step 2: waits 3, steps 2
    for ready, done in ((0.0, 5.0), (6.0, 8.0), (11.0, 13.0)):
        clock.batch_ready(ready)
        clock.step_done(done)
    s = clock.summary(batch=4, skip=1)
    assert s["steps"] == 3 and s["timed_steps"] == 2
    assert s["img_per_s"] == pytest.approx(8 / 8.0)  # 2 steps of 4 images from 5 s to 13 s
    assert s["data_wait_share"] == pytest.approx(4 / 8.0)
    assert s["wait_ms"] == pytest.approx(2000.0) and s["step_ms"] == pytest.approx(2000.0)
    assert s["peak_mib"] is None  # no device memory on the CPU
    with pytest.raises(ValueError, match="skip between 1 and 2"):
        clock.summary(batch=4, skip=3)
    clock.batch_ready(14.0)
    with pytest.raises(ValueError, match="4 batches ready but 3 steps done"):
        clock.summary(batch=4, skip=1)


def test_only_names_phases_in_the_suites_order():
    assert phases("inference, det") == ["det", "inference"]
    assert phases("all")[:4] == ["cls", "det", "seg", "rtdetr"]
    with pytest.raises(SystemExit, match="--only 'train': choose among cls, det, seg, rtdetr, loader, inference"):
        phases("train")
