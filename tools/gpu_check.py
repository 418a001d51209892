"""GPU check: our ViT against timm's on a CUDA machine, in one short run.

    PYTHONPATH=. python3 tools/gpu_check.py [--out DIR] [--models a,b] [--batch 256]

Checks the GPU paths and measures them side by side, alternating ours and timm in one process:
- parity on the GPU: fp32 logits (TF32 off) and bf16-autocast logits against timm with the same weights;
- inference throughput at batch 256, 224 px: fp32, bf16 autocast, bf16 autocast + torch.compile;
- a bf16-autocast training step (AdamW) at batch 128;
- model FLOP utilisation against a bf16 matrix-multiply peak measured at the start of the run;
- the attention-recording path (explicit softmax weights) on the GPU.
Timing uses CUDA events after warm-up; each figure is the median over rounds. Prints a Markdown table
and writes gpu_check.json to --out (default: $OUT if set, else the current folder).
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import time

import timm
import torch
from torch.utils.flop_counter import FlopCounterMode

import vision_attn
from vision_attn.layers import record_attention


def cuda_time(fn, iters: int) -> float:
    """Seconds per call of ``fn`` over ``iters`` calls, timed with CUDA events."""
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(iters):
        fn()
    end.record()
    torch.cuda.synchronize()
    return start.elapsed_time(end) / 1000 / iters


def matmul_peak(dtype: torch.dtype, n: int = 8192) -> float:
    a, b = torch.randn(n, n, device="cuda", dtype=dtype), torch.randn(n, n, device="cuda", dtype=dtype)
    for _ in range(3):
        a @ b
    return 2 * n**3 / cuda_time(lambda: a @ b, 10)


def forward_flops(model: torch.nn.Module, x: torch.Tensor) -> int:
    with FlopCounterMode(display=False) as counter, torch.no_grad():
        model(x)
    return counter.get_total_flops()


def alternate(fns: dict, rounds: int, iters: int) -> dict[str, float]:
    """Median seconds per call for each function, alternating their order every round."""
    for fn in fns.values():
        fn(), fn()
    torch.cuda.synchronize()
    times: dict[str, list[float]] = {k: [] for k in fns}
    names = list(fns)
    for r in range(rounds):
        for k in names if r % 2 == 0 else names[::-1]:
            times[k].append(cuda_time(fns[k], iters))
    return {k: statistics.median(v) for k, v in times.items()}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", default=os.environ.get("OUT", "."))
    ap.add_argument("--models", default="vit_small_patch16_224,vit_base_patch16_224")
    ap.add_argument("--compile-model", default="vit_base_patch16_224", help="the model also run under torch.compile")
    ap.add_argument("--batch", type=int, default=256)
    ap.add_argument("--train-batch", type=int, default=128)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--iters", type=int, default=10)
    args = ap.parse_args()
    assert torch.cuda.is_available(), "no CUDA device"
    t0 = time.time()
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    info = {"device": torch.cuda.get_device_name(), "torch": torch.__version__, "timm": timm.__version__,
            "bf16_matmul_peak_tflops": matmul_peak(torch.bfloat16) / 1e12}
    print(json.dumps(info))
    rows, checks = [], {}
    for name in args.models.split(","):
        torch.manual_seed(0)
        theirs = timm.create_model(name).cuda().eval()
        ours = vision_attn.create_model(name).cuda().eval()
        ours.load_state_dict(theirs.state_dict())
        x = torch.randn(args.batch, 3, 224, 224, device="cuda")
        flops_per_img = forward_flops(ours, x[:1])
        with torch.no_grad():
            checks[f"{name} fp32 max|diff|"] = (theirs(x[:8]) - ours(x[:8])).abs().max().item()
            with torch.autocast("cuda", dtype=torch.bfloat16):
                a, b = theirs(x[:8]).float(), ours(x[:8]).float()
            checks[f"{name} bf16 max|diff| / max|logit|"] = ((a - b).abs().max() / a.abs().max()).item()
            with record_attention(ours) as maps:
                ours(x[:2])
            checks[f"{name} recorded maps"] = [len(maps), list(maps[-1].shape)]

        modes = {"fp32": (False, False), "bf16": (True, False)}
        if name == args.compile_model:
            modes["bf16+compile"] = (True, True)
        for mode, (bf16, compiled) in modes.items():
            impl = {"timm": theirs, "ours": ours}
            if compiled:
                impl = {k: torch.compile(m) for k, m in impl.items()}

            def run(m=None):
                with torch.no_grad(), torch.autocast("cuda", dtype=torch.bfloat16, enabled=bf16):
                    m(x)

            tc = time.time()
            sec = alternate({k: (lambda m=m: run(m)) for k, m in impl.items()}, args.rounds, args.iters)
            for k, s in sec.items():
                rows.append({"model": name, "impl": k, "mode": f"infer {mode}", "batch": args.batch,
                             "img_s": args.batch / s, "mfu": flops_per_img * args.batch / s / (info["bf16_matmul_peak_tflops"] * 1e12),
                             "seconds_incl_compile": round(time.time() - tc, 1)})

        # one bf16 training step (forward, backward, AdamW), ours vs timm
        xt = x[: args.train_batch]
        target = torch.randint(0, 1000, (args.train_batch,), device="cuda")
        steps = {}
        for k, m in {"timm": theirs, "ours": ours}.items():
            m.train()
            opt = torch.optim.AdamW(m.parameters(), lr=1e-4, fused=True)

            def step(m=m, opt=opt):
                with torch.autocast("cuda", dtype=torch.bfloat16):
                    loss = torch.nn.functional.cross_entropy(m(xt), target)
                loss.backward()
                opt.step()
                opt.zero_grad(set_to_none=True)

            steps[k] = step
        torch.cuda.reset_peak_memory_stats()
        sec = alternate(steps, args.rounds, max(args.iters // 2, 3))
        for k, s in sec.items():
            rows.append({"model": name, "impl": k, "mode": "train bf16", "batch": args.train_batch,
                         "img_s": args.train_batch / s,
                         "mfu": 3 * flops_per_img * args.train_batch / s / (info["bf16_matmul_peak_tflops"] * 1e12)})
        del theirs, ours
        torch.cuda.empty_cache()

    print(json.dumps(checks, indent=1))
    print("\n| model | mode | batch | timm img/s | ours img/s | ours/timm | ours MFU |")
    print("| --- | --- | --- | --- | --- | --- | --- |")
    for r_t, r_o in zip(rows[0::2], rows[1::2]):
        t, o = (r_t, r_o) if r_t["impl"] == "timm" else (r_o, r_t)
        print(f"| {o['model']} | {o['mode']} | {o['batch']} | {t['img_s']:.0f} | {o['img_s']:.0f} | "
              f"{o['img_s'] / t['img_s']:.3f} | {100 * o['mfu']:.1f}% |")
    print(f"\ntotal {time.time() - t0:.0f} s")
    os.makedirs(args.out, exist_ok=True)
    with open(os.path.join(args.out, "gpu_check.json"), "w") as f:
        json.dump({"info": info, "checks": checks, "rows": rows}, f, indent=1)


if __name__ == "__main__":
    main()
