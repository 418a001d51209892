"""GPU check: ours against timm on a CUDA machine, in one short run (replaces gpu_check_swin.py).

    PYTHONPATH=. python tools/gpu_check.py [--out DIR] [--models vit_base_patch16_224,swin_tiny_patch4_window7_224]
    PYTHONPATH=. python tools/gpu_check.py --dry-run      # the same steps on the CPU, tiny sizes, seconds

For each model (default ViT-B/16 and Swin-T, 224 px), with the same random weights in ours and timm's:
- parity: fp32 logits (TF32 off) and bf16-autocast logits against timm, and the gradients of one fp32
  training step (relative to timm's largest gradient per tensor);
- inference at bf16 autocast, eager and torch.compile, ours and timm alternating in one process
  (:func:`vision_attn.analysis.benchmark.benchmark_models`: CUDA events, median over rounds), with
  model FLOP utilisation against a bf16 matrix-multiply peak measured at the start;
then a few Lightning training steps of the digits demo config (configs/train/classify/demo_digits.yaml)
on ``accelerator="gpu"``. Prints a Markdown table and writes gpu_check.json to --out (default: $OUT
if set, else the current folder). ``--dry-run`` runs every step on the CPU with ViT-Ti instead of
ViT-B, batch 1, one round, two Lightning steps and no torch.compile (minutes of compiling on a
CPU), to check the script itself.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time

import timm
import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import vision_attn  # noqa: E402
from vision_attn.analysis.benchmark import benchmark_models, matmul_peak, timm_twin  # noqa: E402
from vision_attn.analysis.tables import to_markdown  # noqa: E402


def parity(name: str, img: int, device: str) -> dict[str, float]:
    """Max |ours - timm| of fp32 and bf16 logits and the largest relative gradient difference."""
    torch.manual_seed(0)
    peer = timm_twin(name, img).to(device).eval()
    ours = vision_attn.create_model(name, img_size=img).to(device).eval()
    ours.load_state_dict(peer.state_dict())
    x = torch.randn(2, 3, img, img, device=device)
    with torch.no_grad():
        ref = peer(x)
        out = {"fp32_max_abs_diff": (ours(x) - ref).abs().max().item(), "logit_scale": ref.abs().max().item()}
        with torch.autocast(device, dtype=torch.bfloat16):
            out["bf16_max_abs_diff"] = (ours(x).float() - peer(x).float()).abs().max().item()
    peer.train()
    ours.train()
    for m in (peer, ours):
        for mod in m.modules():  # stochastic depth off: the same function in both
            if hasattr(mod, "drop_prob"):
                mod.drop_prob = 0.0
    y = torch.randint(0, 1000, (2,), device=device)
    F.cross_entropy(peer(x), y).backward()
    F.cross_entropy(ours(x), y).backward()
    theirs = dict(peer.named_parameters())
    out["grad_max_rel_diff"] = max(
        ((p.grad - theirs[n].grad).abs().max() / theirs[n].grad.abs().max().clamp_min(1e-12)).item()
        for n, p in ours.named_parameters() if p.grad is not None)
    return out


def lightning_steps(device: str, steps: int, runs_dir: str) -> dict[str, float]:
    """A few training steps of the digits demo on ``accelerator=gpu`` (cpu in a dry run)."""
    from vision_attn.tasks import train_classifier

    argv = ["--config", "configs/train/classify/demo_digits.yaml", "--name", "gpu_check", "--runs_dir", runs_dir,
            "--overwrite", "true", "--trainer.accelerator", "gpu" if device == "cuda" else "cpu",
            "--trainer.devices", "1", "--trainer.max_steps", str(steps), "--trainer.limit_val_batches", "2",
            "--data.num_workers", "0", "--data.persistent_workers", "false"]
    if device == "cuda":
        argv += ["--trainer.precision", "bf16-mixed", "--threads", "4"]
    m = train_classifier(argv, echo=lambda _line: None).metrics
    images = m["global_step"] * 32  # the config's batch size
    return {"steps": m["global_step"], "fit_time_s": m["fit_time_s"], "img_per_s": images / m["fit_time_s"],
            "gmacs_per_image": m["gmacs"], "precision": m["precision"]}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", default=os.environ.get("OUT", "."))
    ap.add_argument("--models", default="vit_base_patch16_224,swin_tiny_patch4_window7_224")
    ap.add_argument("--batch", type=int, default=256)
    ap.add_argument("--img-size", type=int, default=224)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--iters", type=int, default=10)
    ap.add_argument("--train-steps", type=int, default=30, help="Lightning steps of the digits demo")
    ap.add_argument("--dry-run", action="store_true", help="CPU, vit_tiny and swin_tiny, batch 1, one round, no compile")
    args = ap.parse_args()
    device = "cpu" if args.dry_run else "cuda"
    if args.dry_run:
        args.batch, args.rounds, args.iters, args.train_steps = 1, 1, 1, 2
        args.models = args.models.replace("vit_base", "vit_tiny")
    elif not torch.cuda.is_available():
        raise SystemExit("no CUDA device: run with --dry-run to check the script on the CPU")
    t0 = time.time()
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    peak = matmul_peak(device, "bf16")
    info = {"device": torch.cuda.get_device_name() if device == "cuda" else "cpu (dry run)",
            "torch": torch.__version__, "timm": timm.__version__, "bf16_matmul_peak_tflops": peak / 1e12}
    print(json.dumps(info))
    checks, results = {}, []
    for name in args.models.split(","):
        checks[name] = parity(name, args.img_size, device)
        for compiled in ([False] if args.dry_run else [False, True]):
            torch.manual_seed(0)
            models = {name: vision_attn.create_model(name, img_size=args.img_size),
                      f"timm {name}": timm_twin(name, args.img_size)}
            results += benchmark_models(models, batch=args.batch, img_size=args.img_size, device=device,
                                        precision="bf16", compile=compiled, rounds=args.rounds, iters=args.iters,
                                        warmup=1 if args.dry_run else 3,
                                        peak_flops=peak, pairs={name: f"timm {name}"})
            del models
            if device == "cuda":
                torch.cuda.empty_cache()
    info["seconds_models"] = round(time.time() - t0, 1)
    with tempfile.TemporaryDirectory() as runs:
        train = lightning_steps(device, args.train_steps, runs)
    info["seconds_total"] = round(time.time() - t0, 1)
    train["mfu"] = 3 * 2e9 * train["gmacs_per_image"] * train["img_per_s"] / peak

    print(json.dumps(checks, indent=1))
    rows = [[r.model, "compile" if r.compiled else "eager", r.batch, f"{r.throughput:.1f}", f"{r.latency_ms:.2f}",
             f"{r.peak_memory_mb:.0f}", f"{100 * r.mfu:.1f}%", "" if r.ratio is None else f"{r.ratio:.3f}"]
            for r in results]
    print("\n" + to_markdown(["model", "mode", "batch", "img/s (bf16)", "latency ms", "peak MiB", "MFU", "vs timm"],
                             rows))
    print(f"Lightning, digits demo ({train['precision']}): {train['steps']} steps, {train['img_per_s']:.0f} img/s "
          f"including start-up, MFU {100 * train['mfu']:.2f}% (a 1.2 M-parameter model: launch-bound)")
    print(f"total {time.time() - t0:.0f} s")
    os.makedirs(args.out, exist_ok=True)
    with open(os.path.join(args.out, "gpu_check.json"), "w") as f:
        json.dump({"info": info, "checks": checks, "results": [r.to_dict() for r in results], "lightning": train},
                  f, indent=1)


if __name__ == "__main__":
    main()
