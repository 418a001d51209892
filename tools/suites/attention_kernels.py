"""Milliseconds of one attention forward and backward pass (and of a forward alone) on the CPU, torch's
fused kernel (``scaled_dot_product_attention``) against the explicit path of
``vision_attn.kernels.explicit``, on the shapes of ViT and Swin at batch 16 and 8 and longer
sequences, fp32 and bf16, 2 threads, the median of 7 alternating calls after one warm-up round
(docs/benchmarks.md, "Attention kernels on the CPU").

    python tools/bench.py attention-kernels
"""
from __future__ import annotations

import torch

from tools.suites.harness import Param, Suite, alternate, median_ms

SHAPES = {"vit_ti_b16": ("ViT-Ti b16 (16, 3, 197, 64)", (16, 3, 197, 64), None),
          "vit_s_b16": ("ViT-S b16 (16, 6, 197, 64)", (16, 6, 197, 64), None),
          "vit_s_b8": ("ViT-S b8 (8, 6, 197, 64)", (8, 6, 197, 64), None),
          "vit_s_384_b4": ("ViT-S 384 px b4 (4, 6, 577, 64)", (4, 6, 577, 64), None),
          "tokens_1024": ("1024 tokens (2, 6, 1024, 64)", (2, 6, 1024, 64), None),
          "swin_t_s1_b16": ("Swin-T stage 1 b16, bias (16, 192, 49, 32)", (16, 192, 49, 32), (1, 192, 49, 49)),
          "swin_t_s3_b16": ("Swin-T stage 3 b16, bias (16, 48, 49, 32)", (16, 48, 49, 32), (1, 48, 49, 49))}


def run(p, record) -> None:
    from vision_attn.kernels.measure import ATTENTION as KERNELS  # the self-check's kernels (internal)

    torch.set_num_threads(p.threads)
    rows = []
    for dt in (getattr(torch, d) for d in p.dtypes):
        for key in p.shapes:
            label, shape, mask_shape = SHAPES[key]
            g0 = torch.Generator().manual_seed(0)
            q, k, v, g = (torch.randn(*shape, generator=g0).to(dt).requires_grad_() for _ in range(4))
            mask = torch.randn(*mask_shape, generator=g0).to(dt).requires_grad_() if mask_shape else None
            runs = {"fused": lambda: torch.nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=mask),
                    "explicit": lambda: KERNELS["explicit"](q, k, v, mask)}
            row = {"shape": label, "dtype": str(dt)[6:]}
            for grad in (True, False):
                def call(fn, grad=grad):
                    with torch.set_grad_enabled(grad):
                        out = fn()
                        if grad:
                            out.backward(g)
                ms = median_ms(alternate({n: (lambda fn=fn: call(fn)) for n, fn in runs.items()}, p.rounds,
                                         warmup_rounds=1))
                for name in runs:
                    row[f"{'fwd+bwd' if grad else 'fwd'} {name} ms"] = round(ms[name], 2)
            rows.append(record.add("rows", row))
    record.table(list(rows[0]), [[f"{v:.1f}" if isinstance(v, float) else v for v in r.values()] for r in rows])


SUITE = Suite("attention-kernels", "attention pass on the CPU: torch's fused kernel against the explicit one", run, (
    Param("threads", 2, "torch threads", quick=1),
    Param("rounds", 7, "timed alternating rounds (after one warm-up round)", quick=1),
    Param("dtypes", ["float32", "bfloat16"], "dtypes", quick=["float32"]),
    Param("shapes", list(SHAPES), "shapes, by name", choices=list(SHAPES), quick=["swin_t_s3_b16"]),
), doc=__doc__)
