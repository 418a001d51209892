"""The precisions the CPU computes natively: bf16 on a CPU without bfloat16 instructions runs fp32,
with one warning (the benchmark's title says what ran)."""
from __future__ import annotations

import json

import pytest

from vision_attn.cli import main
from vision_attn.kernels import hardware
from vision_attn.kernels.hardware import _cpu_flags, runnable_precision

AVX2_HOST = "processor\t: 0\nflags\t\t: fpu sse2 avx avx2 fma\n\nprocessor\t: 1\nflags\t\t: fpu sse2 avx avx2 fma\n"
SAPPHIRE_RAPIDS = "flags\t\t: avx2 avx512f avx512_bf16 amx_bf16 amx_tile\n"
GRAVITON3 = "Features\t: fp asimd sve bf16 i8mm\n"


def test_the_bf16_flags_are_read_from_cpuinfo():
    assert not _cpu_flags(AVX2_HOST) & set(hardware.BF16_FLAGS)
    assert _cpu_flags(SAPPHIRE_RAPIDS) & set(hardware.BF16_FLAGS) == {"avx512_bf16", "amx_bf16"}
    assert "bf16" in _cpu_flags(GRAVITON3)


def test_bf16_without_the_instructions_runs_fp32_and_says_so(monkeypatch, capsys):
    monkeypatch.setattr(hardware, "cpu_has_bf16", lambda: False)
    with pytest.warns(UserWarning, match="no bfloat16 instructions"):
        assert runnable_precision("bf16", "cpu") == "fp32"
    assert runnable_precision("fp32", "cpu") == "fp32"
    monkeypatch.setattr(hardware, "cpu_has_bf16", lambda: True)
    assert runnable_precision("bf16", "cpu") == "bf16"

    monkeypatch.setattr(hardware, "cpu_has_bf16", lambda: False)
    argv = ["benchmark", "vit_tiny_patch16_224", "--batch", "1", "--img-size", "32", "--precision", "bf16",
            "--rounds", "1", "--iters", "1", "--warmup", "1", "--json", "--device", "cpu"]
    with pytest.warns(UserWarning) as warned:  # the command line prints each warning as one line
        assert main(argv) == 0
    assert [str(w.message).split(":")[0] for w in warned] == ["--precision bf16"]
    record = json.loads(capsys.readouterr().out)
    assert record["title"].startswith("inference, fp32") and record["results"][0]["precision"] == "fp32"
