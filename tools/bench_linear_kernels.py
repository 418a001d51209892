"""GFLOP/s of each product of a linear layer's training step (forward, input gradient, weight gradient),
ATen's kernel (MKL's GEMM in fp32) against oneDNN's, on the shapes of ViT and Swin layers at batch 16,
fp32 and bf16, 2 threads, the median of 6 alternating calls; a Markdown table (docs/benchmarks.md,
"CPU kernels", "Linear products: ATen against oneDNN"). The kernels are those of the self-check,
``vision_attn.kernels.onednn.PRODUCTS``; oneDNN's cells read "n/a" for a dtype it cannot run here
(``onednn_works``: bf16 on a CPU without bf16 instructions).

    .venv/bin/python tools/bench_linear_kernels.py
"""
import statistics, time, torch
from vision_attn.kernels.onednn import PRODUCTS as KERNELS, onednn_works
SHAPES = {"ViT-S fc1 b16 (3152x384->1536)": (3152, 384, 1536), "ViT-S fc2 b16 (3152x1536->384)": (3152, 1536, 384),
          "ViT-Ti qkv b16 (3152x192->576)": (3152, 192, 576), "Swin-T s1 fc1 b16 (50176x96->384)": (50176, 96, 384),
          "probe (256x384->1536)": (256, 384, 1536), "square 2048": (2048, 2048, 2048)}


def main() -> None:
    torch.set_num_threads(2)
    print("| shape | dtype | fwd aten | fwd onednn | dgrad aten | dgrad onednn | wgrad aten | wgrad onednn |")
    print("| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: |")
    for dt in (torch.float32, torch.bfloat16):
        names = ("aten", "onednn") if onednn_works(dt) else ("aten",)
        for label, (M, K, N) in SHAPES.items():
            g0 = torch.Generator().manual_seed(0)
            x, w, g = (torch.randn(*s, generator=g0).to(dt) for s in ((M, K), (N, K), (M, N)))
            b = torch.randn(N, generator=g0).to(dt)
            ops = {"forward": (x, w, b), "input_grad": (g, w), "weight_grad": (g, x)}
            cells = []
            for prod, args in ops.items():
                t = {k: [] for k in names}
                for r in range(7):
                    for k in (list(t) if r % 2 == 0 else list(t)[::-1]):
                        s = time.perf_counter(); KERNELS[prod][k](*args); t[k].append(time.perf_counter() - s)
                for k in ("aten", "onednn"):
                    cells.append(f"{2 * M * K * N / statistics.median(t[k][1:]) / 1e9:.0f}" if k in t else "n/a")
            print(f"| {label} | {str(dt)[6:]} | " + " | ".join(cells) + " |", flush=True)


if __name__ == "__main__":
    main()
