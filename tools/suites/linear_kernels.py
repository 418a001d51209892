"""GFLOP/s of each product of a linear layer's training step (forward, input gradient, weight gradient),
ATen's kernel (MKL's GEMM in fp32) against oneDNN's, on the shapes of ViT and Swin layers at batch 16,
fp32 and bf16, 2 threads, the median of 6 alternating calls after one warm-up round (docs/benchmarks.md,
"Linear products: ATen against oneDNN"). The kernels are those of the self-check,
``vision_attn.kernels.onednn.PRODUCTS``; oneDNN's cells read "n/a" for a dtype it cannot run here
(``onednn_works``: bf16 on a CPU without bf16 instructions).

    python tools/bench.py linear-kernels
"""
from __future__ import annotations

import torch

from tools.suites.harness import Param, Suite, alternate, median

SHAPES = {"vit_s_fc1": ("ViT-S fc1 b16 (3152x384->1536)", (3152, 384, 1536)),
          "vit_s_fc2": ("ViT-S fc2 b16 (3152x1536->384)", (3152, 1536, 384)),
          "vit_ti_qkv": ("ViT-Ti qkv b16 (3152x192->576)", (3152, 192, 576)),
          "swin_t_s1_fc1": ("Swin-T s1 fc1 b16 (50176x96->384)", (50176, 96, 384)),
          "probe": ("probe (256x384->1536)", (256, 384, 1536)),
          "square_2048": ("square 2048", (2048, 2048, 2048))}


def run(p, record) -> None:
    from vision_attn.kernels.onednn import PRODUCTS as KERNELS, onednn_works  # the self-check's (internal)

    torch.set_num_threads(p.threads)
    headers = ["shape", "dtype"] + [f"{prod} {k}" for prod in ("fwd", "dgrad", "wgrad") for k in ("aten", "onednn")]
    cells = []
    for dt in (getattr(torch, d) for d in p.dtypes):
        names = ("aten", "onednn") if onednn_works(dt) else ("aten",)
        for key in p.shapes:
            label, (M, K, N) = SHAPES[key]
            g0 = torch.Generator().manual_seed(0)
            x, w, g = (torch.randn(*s, generator=g0).to(dt) for s in ((M, K), (N, K), (M, N)))
            b = torch.randn(N, generator=g0).to(dt)
            ops = {"forward": (x, w, b), "input_grad": (g, w), "weight_grad": (g, x)}
            row, line = {"shape": label, "dtype": str(dt)[6:]}, [label, str(dt)[6:]]
            for prod, args in ops.items():
                times = alternate({k: (lambda k=k, prod=prod, args=args: KERNELS[prod][k](*args)) for k in names},
                                  p.rounds, warmup_rounds=1)
                for k in ("aten", "onednn"):
                    gflops = 2 * M * K * N / median(times[k]) / 1e9 if k in times else None
                    row[f"{prod} {k} gflops"] = gflops
                    line.append("n/a" if gflops is None else f"{gflops:.0f}")
            record.add("rows", row)
            cells.append(line)
    record.table(headers, cells)


SUITE = Suite("linear-kernels", "GFLOP/s of a linear layer's three products: ATen against oneDNN", run, (
    Param("threads", 2, "torch threads", quick=1),
    Param("rounds", 6, "timed alternating rounds (after one warm-up round)", quick=1),
    Param("dtypes", ["float32", "bfloat16"], "dtypes", quick=["float32"]),
    Param("shapes", list(SHAPES), "shapes, by name", choices=list(SHAPES), quick=["probe"]),
), doc=__doc__)
