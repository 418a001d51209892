"""`vision-attn flops` on models, YAMLs and runs (--by-module tree, --json, --markdown) and
`vision-attn benchmark` (ours vs timm, training steps, JSON), with their one-line errors."""
import json

import pytest
import torch

from vision_attn.analysis import count_model_flops
from vision_attn.analysis.benchmark import benchmark_models, call_seconds, percentile
from vision_attn.cli import main
from vision_attn.errors import ConfigError
from vision_attn.models import create_model as vision_attn_create


def _error(capsys) -> str:
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("error: ") and "Traceback" not in err, err
    return err


def test_flops_yaml_json_and_tree(capsys):
    assert main(["flops", "configs/models/yolov8.yaml", "--scale", "n", "--json", "--by-module", "--depth", "1"]) == 0
    d = json.loads(capsys.readouterr().out)
    assert d["kind"] == "yaml" and d["input_shape"] == [1, 3, 640, 640] and d["params"] == 3_157_200
    assert 8.7 <= d["gflops"] <= 8.9
    tree = d["module_tree"]
    assert all(row["level"] == 0 for row in tree) and sum(row["macs"] for row in tree) == d["macs"]


def test_flops_markdown_and_attention(capsys):
    assert main(["flops", "resnet50", "--attention", "cbam", "--markdown", "--by-module", "--depth", "2"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("**resnet50+cbam**, input 1x3x224x224")
    assert "| parameters | GMACs | GFLOPs |" in out
    assert "| layer1 |" in out and "| &nbsp;&nbsp;layer1.0 |" in out  # the tree, indented
    plain = count_model_flops("resnet50")
    assert f"{plain.params:,}" not in out  # CBAM added parameters


def test_flops_run_checkpoint(tmp_path, capsys):
    torch.save({"hyper_parameters": {"name": "deit_tiny_patch16_224", "num_classes": 7, "img_size": 32,
                                     "model_kwargs": {"patch_size": 8}}, "state_dict": {}}, tmp_path / "best.ckpt")
    assert main(["flops", str(tmp_path), "--json"]) == 0
    d = json.loads(capsys.readouterr().out)
    assert d["kind"] == "checkpoint" and d["input_shape"] == [1, 3, 32, 32]
    assert "by_module" not in d


def test_flops_unknown_target(capsys):
    assert main(["flops", "resnet5O"]) == 2
    err = _error(capsys)
    assert err.startswith("error: unknown model 'resnet5O'") and "did you mean resnet50" in err
    assert "a detector YAML" in err and "a checkpoint or run folder" in err and "none of them" in err


def test_benchmark_vs_timm_json(capsys):
    argv = ["benchmark", "vit_tiny_patch16_224", "--batch", "1,2", "--img-size", "32", "--vs", "timm",
            "--rounds", "2", "--iters", "1", "--warmup", "1", "--json", "--device", "cpu"]
    assert main(argv) == 0
    d = json.loads(capsys.readouterr().out)
    assert d["matmul_peak_flops"] > 1e9
    rows = d["results"]
    assert [(r["model"], r["batch"]) for r in rows] == [("vit_tiny_patch16_224", 1), ("timm vit_tiny_patch16_224", 1),
                                                         ("vit_tiny_patch16_224", 2), ("timm vit_tiny_patch16_224", 2)]
    macs = count_model_flops("vit_tiny_patch16_224", 32).macs
    for r in rows:
        assert r["img_size"] == [32, 32] and r["mode"] == "inference"
        assert r["flops_per_call"] == 2 * macs * r["batch"]  # ours and timm's count the same work
        assert r["latency_p90_ms"] >= r["latency_ms"] > 0
        assert r["throughput"] == pytest.approx(1e3 * r["batch"] / r["latency_ms"])
        assert 0 < r["mfu"] and r["peak_memory_mb"] > 0 and len(r["rounds"]) == 2
    assert rows[0]["ratio_to"] == "timm vit_tiny_patch16_224" and rows[0]["ratio"] > 0
    assert rows[1]["ratio"] is None


def test_benchmark_training_step_counts_backward():
    model = torch.nn.Sequential(torch.nn.Conv2d(3, 8, 3), torch.nn.Flatten(), torch.nn.LazyLinear(4))
    model(torch.zeros(1, 3, 8, 8))
    (infer,) = benchmark_models({"m": model}, batch=2, img_size=8, rounds=1, iters=1, peak_flops=1e9)
    (train,) = benchmark_models({"m": model}, batch=2, img_size=8, rounds=1, iters=1, peak_flops=1e9, train=True,
                                precision="bf16")
    assert train.mode == "train" and train.precision == "bf16"
    # forward + input and weight gradients, except the first layer's input gradient: 3x - conv input grad
    conv = 2 * 2 * 8 * 6 * 6 * 27
    assert train.flops_per_call == 3 * infer.flops_per_call - conv


def test_benchmark_bad_arguments(capsys):
    assert main(["benchmark", "vit_tiny_patch16_224", "--batch", "0,x"]) == 2
    assert "--batch '0,x'" in _error(capsys)
    assert main(["benchmark", "vit_b_16", "--vs", "timm", "--device", "cpu"]) == 2
    assert "timm has no model named 'vit_b_16'" in _error(capsys)


def test_timing_helpers():
    assert percentile([1, 2, 3, 4], 50) == 2.5 and percentile([5], 90) == 5
    assert percentile(list(range(11)), 90) == pytest.approx(9)
    times = call_seconds(lambda: sum(range(1000)), 3)
    assert len(times) == 3 and all(t > 0 for t in times)


def test_benchmark_adamw_step_and_shared_weights():
    import timm

    from vision_attn.analysis.benchmark import share_weights

    ours = vision_attn_create("vit_tiny_patch16_224", depth=1, img_size=32, num_classes=5)
    twin = timm.create_model("vit_tiny_patch16_224", depth=1, img_size=32, num_classes=5)
    assert share_weights(ours, twin)
    x = torch.randn(2, 3, 32, 32)
    with torch.no_grad():
        torch.testing.assert_close(ours.eval()(x), twin.eval()(x), atol=1e-5, rtol=1e-5)
    assert not share_weights(ours, torch.nn.Linear(3, 4))  # another layout: each keeps its own
    before = ours.head.weight.detach().clone()
    (train,) = benchmark_models({"m": ours}, batch=2, img_size=32, rounds=1, iters=1, peak_flops=1e9, train=True,
                                optimizer="adamw")
    assert train.mode == "train" and not torch.equal(before, ours.head.weight)  # AdamW moved the weights
    with pytest.raises(ConfigError, match="optimizer 'lamb'"):
        benchmark_models({"m": ours}, batch=2, img_size=32, train=True, optimizer="lamb")


def test_benchmark_steps_each_side_as_its_trainer_builds_it():
    import timm

    from vision_attn.analysis.benchmark import timm_optimizer, torch_optimizer, trainer_optimizer
    from vision_attn.tasks.optim import build_optimizer

    ours = vision_attn_create("vit_tiny_patch16_224", depth=1, img_size=32, num_classes=5)
    twin = timm.create_model("vit_tiny_patch16_224", depth=1, img_size=32, num_classes=5)
    mine = trainer_optimizer("adamw")(ours)
    assert mine.defaults["fused"] is build_optimizer("adamw", [{"params": [torch.nn.Parameter(torch.zeros(1))]}]).defaults["fused"] is True
    theirs = timm_optimizer("adamw")(twin)  # timm's create_optimizer_v2: torch's AdamW, its default step
    assert type(theirs) is torch.optim.AdamW and not theirs.defaults["fused"] and theirs.defaults["lr"] == 1e-4
    assert sum(len(g["params"]) for g in theirs.param_groups) == len(list(twin.parameters()))
    plain = torch_optimizer("adamw")(ours)
    assert not plain.defaults["fused"] and len(plain.param_groups[0]["params"]) == len(list(ours.parameters()))
