"""The benchmark suites of ``tools/bench.py``: one module a suite, each defining ``SUITE``
(:class:`tools.suites.harness.Suite`). A suite imports the peers it measures against (timm,
ultralytics, onnxruntime, OpenVINO) inside its functions, so that listing the suites imports none."""
from __future__ import annotations

import importlib

from tools.suites.harness import Suite

MODULES = (
    "attention_kernels", "linear_kernels", "small_layers", "vit", "swin", "swin_v2", "plugins",
    "deformable_attention", "optimizer", "grad_checkpointing", "checkpoint", "data", "loader", "data_check",
    "det_data", "det_augment", "det_step", "detr_loss", "export", "profile_inference", "predict_video",
    "load_memory", "ultralytics_pt", "obb_validators", "startup", "flops_peers", "untrusted_inputs", "gpu", "search",
    "explain_peaks", "report_page",
    "token_merging", "deploy_table", "compiled",
)
GROUPS = ("cpu", "gpu", "check")


def suites() -> dict[str, Suite]:
    """Every suite by name, in the order of :data:`MODULES`."""
    out = {}
    for module in MODULES:
        suite = importlib.import_module(f"tools.suites.{module}").SUITE
        out[suite.name] = suite
    return out
