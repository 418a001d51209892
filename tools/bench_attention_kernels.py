"""Milliseconds of one attention forward and backward pass (and of a forward alone) on the CPU, torch's
fused kernel (``scaled_dot_product_attention``) against the explicit path of
``vision_attn.kernels.explicit``, on the shapes of ViT and Swin at batch 16 and 8 and longer
sequences, fp32 and bf16, 2 threads, the median of 7 alternating calls; a Markdown table
(docs/benchmarks.md, "Attention kernels on the CPU").

    .venv/bin/python tools/bench_attention_kernels.py
"""
import statistics, time, torch
from vision_attn.kernels.measure import ATTENTION as KERNELS
SHAPES = {"ViT-Ti b16 (16, 3, 197, 64)": ((16, 3, 197, 64), None), "ViT-S b16 (16, 6, 197, 64)": ((16, 6, 197, 64), None),
          "ViT-S b8 (8, 6, 197, 64)": ((8, 6, 197, 64), None), "ViT-S 384 px b4 (4, 6, 577, 64)": ((4, 6, 577, 64), None),
          "1024 tokens (2, 6, 1024, 64)": ((2, 6, 1024, 64), None),
          "Swin-T stage 1 b16, bias (16, 192, 49, 32)": ((16, 192, 49, 32), (1, 192, 49, 49)),
          "Swin-T stage 3 b16, bias (16, 48, 49, 32)": ((16, 48, 49, 32), (1, 48, 49, 49))}


def main() -> None:
    torch.set_num_threads(2)
    print("| shape (B, heads, N, d) | dtype | fwd+bwd fused | fwd+bwd explicit | fwd fused | fwd explicit |")
    print("| --- | --- | ---: | ---: | ---: | ---: |")
    for dt in (torch.float32, torch.bfloat16):
        for label, (shape, mask_shape) in SHAPES.items():
            g0 = torch.Generator().manual_seed(0)
            q, k, v, g = (torch.randn(*shape, generator=g0).to(dt).requires_grad_() for _ in range(4))
            mask = torch.randn(*mask_shape, generator=g0).to(dt).requires_grad_() if mask_shape else None
            runs = {"fused": lambda q, k, v: torch.nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=mask),
                    "explicit": lambda q, k, v: KERNELS["explicit"](q, k, v, mask)}
            cells = []
            for grad in (True, False):
                t = {name: [] for name in runs}
                for r in range(8):
                    for name in (list(runs) if r % 2 == 0 else list(runs)[::-1]):
                        with torch.set_grad_enabled(grad):
                            s = time.perf_counter(); out = runs[name](q, k, v)
                            if grad:
                                out.backward(g)
                            t[name].append(time.perf_counter() - s)
                cells += [f"{statistics.median(t[name][1:]) * 1e3:.1f}" for name in runs]
            print(f"| {label} | {str(dt)[6:]} | " + " | ".join(cells) + " |", flush=True)


if __name__ == "__main__":
    main()
