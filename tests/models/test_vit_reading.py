"""What a reader follows from ``VisionTransformer.forward``: the files and function lines a forward
pass runs through, counted by tracing the calls (ARCHITECTURE.md, "Reading a ViT forward pass")."""
from __future__ import annotations

import inspect
import os
import sys

import torch

import vision_attn

ROOT = os.path.dirname(vision_attn.__file__)
INLINE = ("<listcomp>", "<genexpr>", "<dictcomp>", "<setcomp>", "<lambda>")  # counted with their function


def functions_run(model: torch.nn.Module, x: torch.Tensor) -> dict[str, dict[str, int]]:
    """file (relative to the package) -> function name -> its source lines, for every function of
    vision_attn that ``model(x)`` calls."""
    seen = {}

    def tracer(frame, event, arg):
        code = frame.f_code
        if event == "call" and code.co_filename.startswith(ROOT) and code.co_name not in INLINE:
            seen[(code.co_filename, code.co_firstlineno)] = code
    with torch.no_grad():
        sys.settrace(tracer)
        try:
            model(x)
        finally:
            sys.settrace(None)
    files: dict[str, dict[str, int]] = {}
    for (path, _), code in seen.items():
        files.setdefault(os.path.relpath(path, ROOT), {})[code.co_name] = len(inspect.getsourcelines(code)[0])
    return files


def test_a_vit_forward_pass_reads_in_at_most_8_files_and_300_function_lines():
    model = vision_attn.create_model("vit_small_patch16_224", depth=2).eval()
    files = functions_run(model, torch.randn(1, 3, 224, 224))
    lines = sum(sum(f.values()) for f in files.values())
    assert len(files) <= 8 and lines <= 300, files
    assert not [f for f in files if f.startswith("kernels")], files  # no layer chooses a kernel
    assert {"models/vit.py", "layers/attention.py", "layers/mlp.py", "layers/block.py"} <= set(files)
