"""Where fvcore, thop and ptflops disagree with vision_attn's FLOP count, measured on the same models.

    /work/main/.venv/bin/python -m venv /tmp/flopvenv
    /tmp/flopvenv/bin/pip install -c constraints.txt torch torchvision timm fvcore thop ptflops
    /tmp/flopvenv/bin/pip install -e . --no-deps
    /tmp/flopvenv/bin/python tools/bench.py flops-peers    # the Markdown table of docs/flops.md

The counters are not dependencies of vision_attn, hence the throwaway environment; a counter that is
not installed reads "not installed". Every counter runs on the same module and a (1, 3, 224, 224)
input on the CPU; all figures are GMACs (each counter's "FLOPs" is a multiply-accumulate; ours are
reported as MACs too).
"""
from __future__ import annotations

import contextlib
import importlib.util
import io
import logging
import warnings

import torch

from tools.suites.harness import Param, Suite

MODELS = {
    "timm deit_tiny_patch16_224": lambda: __import__("timm").create_model("deit_tiny_patch16_224"),
    "timm vit_small_patch16_224": lambda: __import__("timm").create_model("vit_small_patch16_224"),
    "timm swin_tiny_patch4_window7_224": lambda: __import__("timm").create_model("swin_tiny_patch4_window7_224"),
    "torchvision resnet50": lambda: __import__("torchvision").models.resnet50(),
    "vision_attn resnet50 + CBAM": lambda: __import__("vision_attn").create_model("resnet50", attention="cbam"),
}


def ours(model: torch.nn.Module, x: torch.Tensor) -> float:
    from vision_attn.analysis import count_flops

    return count_flops(model, tuple(x.shape[1:])).gmacs


def fvcore(model: torch.nn.Module, x: torch.Tensor) -> float:
    from fvcore.nn import FlopCountAnalysis

    analysis = FlopCountAnalysis(model, x)
    analysis.unsupported_ops_warnings(False).uncalled_modules_warnings(False)
    return analysis.total() / 1e9


def thop(model: torch.nn.Module, x: torch.Tensor) -> float:
    from thop import profile

    macs, _ = profile(model, inputs=(x,), verbose=False)
    return macs / 1e9


def ptflops(model: torch.nn.Module, x: torch.Tensor, backend: str) -> float:
    from ptflops import get_model_complexity_info

    macs, _ = get_model_complexity_info(model, tuple(x.shape[1:]), as_strings=False, backend=backend,
                                        print_per_layer_stat=False, verbose=False)
    return macs / 1e9


COUNTERS = {
    "vision_attn": ours,
    "fvcore": fvcore,
    "thop": thop,
    "ptflops (pytorch)": lambda m, x: ptflops(m, x, "pytorch"),
    "ptflops (aten)": lambda m, x: ptflops(m, x, "aten"),
}


NEEDS = {"fvcore": "fvcore", "thop": "thop", "ptflops (pytorch)": "ptflops", "ptflops (aten)": "ptflops"}


def run(p, record) -> None:
    warnings.filterwarnings("ignore")
    logging.disable(logging.WARNING)
    x = torch.zeros(1, 3, p.img_size, p.img_size)
    lines = []
    for label in p.models:
        build = MODELS[label]
        cells = []
        for name, counter in COUNTERS.items():
            if name in NEEDS and importlib.util.find_spec(NEEDS[name]) is None:
                cells.append("not installed")
                continue
            torch.manual_seed(0)
            model = build().eval()  # a fresh model per counter: thop and ptflops leave hooks and buffers
            with torch.no_grad(), contextlib.redirect_stdout(io.StringIO()):
                try:
                    cells.append(f"{counter(model, x):.3f}")
                except Exception as e:  # noqa: BLE001 - a counter that fails is a finding too
                    cells.append(f"fails ({type(e).__name__})")
        record.add("rows", {"model": label, **dict(zip(COUNTERS, cells))})
        lines.append([label, *cells])
    record.table([f"model ({p.img_size} px, batch 1)", *COUNTERS], lines)


SUITE = Suite("flops-peers", "vision_attn's FLOP count against fvcore, thop and ptflops on the same models", run, (
    Param("models", list(MODELS), "models", choices=list(MODELS), quick=["timm deit_tiny_patch16_224"]),
    Param("img_size", 224, "pixels"),
), group="check", requires=("timm",), doc=__doc__)
