"""The kernel plan (vision_attn.kernels.plan): the fixed plans, switching the process's plan, a plan
recorded as data and read back, names and recorded plans that are wrong, and a plan whose oneDNN
choices cannot run here.

No test here runs the self-checks: a measured plan's measurement is replaced by a fixed choice (and
its cache is a temporary one all the same)."""
from __future__ import annotations

import importlib
import json
import os
import re
import subprocess
import sys

import pytest
import torch

from vision_attn.errors import ConfigError
from vision_attn.kernels import (
    ENV,
    PLAN_NAMES,
    FusedLinear,
    KernelChoice,
    KernelPlan,
    LinearKernels,
    current_plan,
    kernel_plan,
    resolve_plan,
    set_kernel_plan,
)

from tests.ops import ops_of

plan_module = importlib.import_module("vision_attn.kernels.plan")

DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16}
ONEDNN = KernelChoice("onednn", LinearKernels("onednn", "onednn", "onednn"), "fused")


def test_the_fixed_plans():
    assert PLAN_NAMES == ("measured", "aten", "onednn") and ENV == "VISION_ATTN_KERNELS"
    aten = resolve_plan("aten")
    assert not aten.fast_paths and all(aten.choice(d) == KernelChoice() for d in DTYPES.values())
    onednn = resolve_plan("onednn")
    assert onednn.fast_paths
    assert onednn.choices[torch.float32] == ONEDNN  # as recorded; what runs here: KernelChoice.runnable
    assert onednn.choices[torch.bfloat16].attention == "explicit"
    assert onednn.choice(torch.float64) == KernelChoice()  # other dtypes: ATen's
    assert current_plan().name == "onednn"  # the test process's plan (tests/conftest.py)


def test_set_kernel_plan_returns_the_previous_and_kernel_plan_restores_it():
    before = current_plan()
    previous = set_kernel_plan("aten")
    try:
        assert previous is before and current_plan().name == "aten"
    finally:
        assert set_kernel_plan(previous).name == "aten"
    assert current_plan() is before
    with pytest.raises(RuntimeError, match="inside"):
        with kernel_plan("aten") as plan:
            assert plan is current_plan() and plan.name == "aten"
            raise RuntimeError("inside")
    assert current_plan() is before
    custom = KernelPlan("onednn", {torch.float32: ONEDNN, torch.bfloat16: KernelChoice()})
    with kernel_plan(custom) as plan:
        assert plan is custom  # a plan is used as it is, its memo with it
    with kernel_plan(custom.as_dict()) as plan:  # a recorded dict
        assert plan == custom.resolved()


def test_resolve_plan_of_an_unknown_name_lists_the_names():
    before = current_plan()
    for bad in ("fast", "ATEN", ""):
        with pytest.raises(ConfigError) as e:
            resolve_plan(bad)
        assert repr(bad) in str(e.value) and "measured, aten, onednn" in str(e.value)
        with pytest.raises(ConfigError):
            set_kernel_plan(bad)
        assert current_plan() is before  # a refused plan changes nothing


@pytest.mark.parametrize("name", PLAN_NAMES)
def test_as_dict_from_dict_round_trip(monkeypatch, tmp_path, name):
    """Every named plan (measured: the measurement replaced by a fixed choice), through JSON and back."""
    monkeypatch.setenv("VISION_ATTN_CACHE", str(tmp_path))
    measured = KernelChoice("onednn", LinearKernels("onednn", "aten", "onednn", {"forward": 1200, "weight_grad": 0}),
                            "explicit", {"linear": {"large": {"forward": {"aten": 2.0, "onednn": 1.0}}}})
    # as the self-check chooses: oneDNN only for a dtype it runs here
    monkeypatch.setattr(plan_module, "_measure", lambda dtype, threads: measured.runnable(dtype))
    plan = resolve_plan(name)
    data = plan.as_dict()
    assert data["plan"] == name and set(data) == {"plan", *DTYPES}
    back = KernelPlan.from_dict(json.loads(json.dumps(data)))
    assert back == plan.resolved() and back.name == name
    assert back.as_dict() == data
    for dtype in DTYPES.values():
        assert back.choice(dtype).seconds == plan.choice(dtype).seconds  # kept, though not compared
    if name == "measured":  # a recorded measured plan is not measured again
        monkeypatch.setattr(plan_module, "_measure", lambda dtype, threads: pytest.fail("measured again"))
        assert KernelPlan.from_dict(data).choice(torch.float32) == plan.choice(torch.float32)


def test_a_custom_plan_round_trips_with_its_crossovers_and_seconds():
    choice = KernelChoice("aten", LinearKernels("onednn", "onednn", "aten", {"forward": 10, "input_grad": 3}), "fused",
                          {"attention": {"fused": 0.5, "explicit": 0.7}})
    plan = KernelPlan("onednn", {torch.float32: choice, torch.bfloat16: KernelChoice(attention="explicit")})
    back = KernelPlan.from_dict(json.loads(json.dumps(plan.as_dict())))
    assert back == plan.resolved()
    assert back.choice(torch.float32).seconds == choice.seconds
    assert KernelChoice.from_dict(choice.as_dict()) == choice


def recorded(**changes) -> dict:
    """The "onednn" plan as a run folder records it, with ``changes`` to its float32 entry (None: removed)."""
    data = json.loads(json.dumps(resolve_plan("onednn").as_dict()))
    for key, value in changes.items():
        if value is None:
            del data["float32"][key]
        else:
            data["float32"][key] = value
    return data


@pytest.mark.parametrize("data,message", [
    (["plan"], "'plan' must be one of measured, aten, onednn"),
    ({"plan": "fast"}, "'plan' must be one of measured, aten, onednn"),
    ({**recorded(), "bfloat16": None}, "bfloat16: expected a mapping of kernels, got NoneType"),
    ({**recorded(), "bfloat16": "aten"}, "bfloat16: expected a mapping"),
    (recorded(forward="mkl"), "float32: forward: 'mkl' is not one of aten, onednn"),
    (recorded(weight_grad=None), "float32: weight_grad: None is not one of aten, onednn"),
    (recorded(inference=["onednn"]), "float32: inference: ['onednn'] is not one of aten, onednn"),
    (recorded(attention="flash"), "float32: attention: 'flash' is not one of fused, explicit"),
    (recorded(onednn_from={"forward": -1}), "float32: onednn_from: {'forward': -1}"),
    (recorded(onednn_from={"fwd": 0}), "float32: onednn_from: {'fwd': 0}"),
    (recorded(onednn_from={"forward": 1.5}), "float32: onednn_from"),
    (recorded(onednn_from={"forward": True}), "float32: onednn_from"),
    (recorded(onednn_from=[["forward", 0]]), "float32: onednn_from"),
])
def test_a_damaged_recorded_plan_raises_value_error_naming_the_key(data, message):
    with pytest.raises(ValueError, match=re.escape(message)):
        KernelPlan.from_dict(data)
    if isinstance(data, dict):  # what resolve_plan takes as a recorded plan
        with pytest.raises(ValueError, match=re.escape(message)):
            resolve_plan(data)


def test_a_plan_choosing_onednn_where_it_cannot_run_runs_aten(monkeypatch):
    """oneDNN reported unable to run any dtype (as on another CPU, or bf16 without bf16 instructions)."""
    monkeypatch.setattr(plan_module, "onednn_works", lambda dtype: False)
    plan = KernelPlan("onednn", {dtype: ONEDNN for dtype in DTYPES.values()})  # a new plan: nothing memoised
    for dtype in DTYPES.values():
        assert plan.choice(dtype) == KernelChoice("aten", LinearKernels(), "fused")
    assert resolve_plan("onednn").choice(torch.bfloat16) == KernelChoice(attention="explicit")  # attention kept
    layer, x = FusedLinear(8, 4), torch.randn(3, 8, requires_grad=True)
    with kernel_plan(plan):
        assert "mkldnn._linear_pointwise" not in ops_of(lambda: layer(x).sum().backward())
        with torch.no_grad():
            assert "mkldnn._linear_pointwise" not in ops_of(lambda: layer(x))
        with torch.no_grad(), torch.autocast("cpu", dtype=torch.bfloat16):
            assert "mkldnn._linear_pointwise" not in ops_of(lambda: layer(x))


def run_with_env(code: str, value: str) -> subprocess.CompletedProcess:
    env = {**os.environ, ENV: value}
    return subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)


def test_an_invalid_plan_in_the_environment_is_a_config_error():
    """Read at the first use, not at import: importing works, the first plan lookup names the variable."""
    code = ("import vision_attn, vision_attn.kernels as k; from vision_attn.errors import ConfigError\n"
            "print('imported')\n"
            "try:\n    k.current_plan()\nexcept ConfigError as e:\n    print('ConfigError:', e)\n")
    done = run_with_env(code, "bogus")
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == ["imported", "ConfigError: VISION_ATTN_KERNELS='bogus': choose one of "
                                        "measured, aten, onednn"]


@pytest.mark.parametrize("name", PLAN_NAMES)
def test_each_name_in_the_environment_is_the_process_plan(name):
    done = run_with_env("from vision_attn.kernels import current_plan; print(current_plan().name)", name)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == [name]
