"""GPU check for Swin: ours against timm's (and torchvision's) on a CUDA machine, in one short run.

    PYTHONPATH=. python3 tools/gpu_check_swin.py [--out DIR] [--batch 256] [--train-batch 128]

- parity on the device: fp32 logits (TF32 off) and bf16-autocast logits against timm with the same
  weights at 224 and 192x256 (timm with ``strict_img_size=False``), and against torchvision's swin_t;
- gradients of a training step against timm's (fp32, stochastic depth off);
- the attention-recording path on the device;
- throughput of inference (fp32 and bf16 autocast) and of a bf16-autocast AdamW training step,
  ours and timm alternating in one process, timed with CUDA events, median over rounds.
Writes gpu_check_swin.json to --out (default: $OUT if set, else the current folder).
``--device cpu --batch 2 --train-batch 2 --rounds 1 --iters 1`` is a dry run of the script.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import time

import timm
import torch
import torch.nn.functional as F
import torchvision

import vision_attn
from vision_attn.layers import record_attention
from vision_attn.models.swin import torchvision_to_timm


def seconds(fn, iters: int, device: str) -> float:
    """Seconds per call over ``iters`` calls (CUDA events on a GPU)."""
    if device == "cuda":
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        for _ in range(iters):
            fn()
        end.record()
        torch.cuda.synchronize()
        return start.elapsed_time(end) / 1000 / iters
    t = time.perf_counter()
    for _ in range(iters):
        fn()
    return (time.perf_counter() - t) / iters


def alternate(fns: dict, rounds: int, iters: int, device: str) -> dict[str, float]:
    for fn in fns.values():
        fn(), fn()
    times: dict[str, list[float]] = {k: [] for k in fns}
    names = list(fns)
    for r in range(rounds):
        for k in names if r % 2 == 0 else names[::-1]:
            times[k].append(seconds(fns[k], iters, device))
    return {k: statistics.median(v) for k, v in times.items()}


def randomise(model: torch.nn.Module) -> torch.nn.Module:
    with torch.no_grad():
        for p in model.parameters():
            p.add_(torch.randn_like(p), alpha=0.02 if p.ndim > 1 else 0.1)
    return model


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", default=os.environ.get("OUT", "."))
    ap.add_argument("--model", default="swin_tiny_patch4_window7_224")
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--batch", type=int, default=256)
    ap.add_argument("--train-batch", type=int, default=128)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--iters", type=int, default=5)
    args = ap.parse_args()
    dev = args.device
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    torch.manual_seed(0)
    res: dict = {"torch": torch.__version__, "timm": timm.__version__, "model": args.model,
                 "device": torch.cuda.get_device_name() if dev == "cuda" else dev}
    t0 = time.time()

    peer = randomise(timm.create_model(args.model, strict_img_size=False)).to(dev).eval()
    ours = vision_attn.create_model(args.model).to(dev).eval()
    ours.load_state_dict(peer.state_dict())
    parity = {}
    for size in [(224, 224), (192, 256)]:
        x = torch.randn(4, 3, *size, device=dev)
        with torch.no_grad():
            ref = peer(x)
            parity[f"fp32_{size[0]}x{size[1]}"] = (ours(x) - ref).abs().max().item()
            with torch.autocast(dev, dtype=torch.bfloat16):
                a, b = ours(x).float(), peer(x).float()
            parity[f"bf16_{size[0]}x{size[1]}_vs_timm_bf16"] = (a - b).abs().max().item()
            parity[f"bf16_{size[0]}x{size[1]}_vs_fp32"] = (a - ref).abs().max().item()
            parity[f"logit_scale_{size[0]}x{size[1]}"] = ref.abs().max().item()
    tv = randomise(torchvision.models.swin_t(weights=None)).to(dev).eval()
    tv_ours = vision_attn.create_model("swin_t").to(dev).eval()
    tv_ours.load_state_dict(torchvision_to_timm(tv.state_dict()))
    x = torch.randn(4, 3, 192, 256, device=dev)
    with torch.no_grad():
        parity["torchvision_fp32_192x256"] = (tv_ours(x) - tv(x)).abs().max().item()
    res["parity"] = parity

    # gradients of one training step, fp32, stochastic depth off
    g_peer = timm.create_model(args.model, strict_img_size=False, drop_path_rate=0.0).to(dev).train()
    g_ours = vision_attn.create_model(args.model, drop_path_rate=0.0).to(dev).train()
    g_ours.load_state_dict(g_peer.state_dict())
    x = torch.randn(4, 3, 192, 256, device=dev)
    y = torch.randint(0, 1000, (4,), device=dev)
    F.cross_entropy(g_peer(x), y).backward()
    F.cross_entropy(g_ours(x), y).backward()
    theirs = dict(g_peer.named_parameters())
    res["grad_max_rel_diff"] = max(
        ((p.grad - theirs[n].grad).abs().max() / theirs[n].grad.abs().max().clamp_min(1e-12)).item()
        for n, p in g_ours.named_parameters())
    del g_peer, g_ours

    with torch.no_grad(), record_attention(ours) as maps:
        ours(torch.randn(1, 3, 224, 224, device=dev))
    res["attention_maps"] = [list(m.shape) for m in maps[:2]] + [len(maps)]

    speed = {}
    xi = torch.randn(args.batch, 3, 224, 224, device=dev)
    for mode in ("fp32", "bf16"):
        def infer(m, mode=mode):
            with torch.no_grad(), torch.autocast(dev, dtype=torch.bfloat16, enabled=mode == "bf16"):
                m(xi)
        t = alternate({"timm": lambda: infer(peer), "ours": lambda: infer(ours)}, args.rounds, args.iters, dev)
        speed[f"infer_{mode}_b{args.batch}"] = {k: args.batch / v for k, v in t.items()}
    xt = torch.randn(args.train_batch, 3, 224, 224, device=dev)
    yt = torch.randint(0, 1000, (args.train_batch,), device=dev)
    fns = {}
    for name, m in (("timm", peer), ("ours", ours)):
        m.train()
        opt = torch.optim.AdamW(m.parameters(), lr=1e-5, fused=dev == "cuda")

        def step(m=m, opt=opt):
            with torch.autocast(dev, dtype=torch.bfloat16):
                loss = F.cross_entropy(m(xt), yt)
            loss.backward()
            opt.step()
            opt.zero_grad(set_to_none=True)
        fns[name] = step
    t = alternate(fns, args.rounds, max(1, args.iters // 2), dev)
    speed[f"train_bf16_b{args.train_batch}"] = {k: args.train_batch / v for k, v in t.items()}
    for v in speed.values():
        v["ratio"] = v["ours"] / v["timm"]
    res["img_per_s"] = speed
    if dev == "cuda":
        res["max_memory_allocated_gib"] = torch.cuda.max_memory_allocated() / 2**30
    res["seconds"] = time.time() - t0
    os.makedirs(args.out, exist_ok=True)
    with open(os.path.join(args.out, "gpu_check_swin.json"), "w") as f:
        json.dump(res, f, indent=2)
    print(json.dumps(res, indent=2))


if __name__ == "__main__":
    main()
