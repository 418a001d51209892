"""The gpu suite's dry run on the CPU (`tools/bench.py gpu --dry-run`): the same code path as on a GPU, tiny
sizes, its JSON record."""
import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_gpu_check_dry_run(tmp_path):
    proc = subprocess.run([sys.executable, str(ROOT / "tools" / "bench.py"), "gpu", "--dry-run", "--models",
                           "vit_tiny_patch16_224", "--json", str(tmp_path / "gpu_check.json")], cwd=ROOT,
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
    assert [(t["task"], t["steps"]) for t in d["training"]] == [("cls", 2), ("det", 2)]
    assert all(t["img_per_s"] > 0 and t["precision"] == "32-true" for t in d["training"])
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
