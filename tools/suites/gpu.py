"""GPU check: every task trained beside its peer, and ours against timm, on a CUDA machine in one short run.

    python tools/bench.py gpu --json DIR/gpu_check.json          # phases cls,det,seg,rtdetr,inference
    python tools/bench.py gpu --only all                         # and the loader phase
    python tools/bench.py gpu --only det,seg --det-images 8000   # a subset, other sizes
    python tools/bench.py gpu --dry-run --only all --json /tmp/gc/gpu_check.json   # the same steps on the CPU, tiny

Phases (``--only``, in this order):
- ``cls``, ``det``, ``seg``, ``rtdetr``: ``vision-attn train`` through Lightning on ``accelerator=gpu`` in
  ``bf16-mixed`` beside its peer on the same files and the same GPU (DeiT-S with the DeiT recipe, the image-folder
  loader and ``data.augment: device`` against timm's loader and train.py step; YOLOv8n, YOLOv8n-seg and
  rtdetr-s at 640 px on 5,000 generated images against ultralytics' trainers): images/s after the start-up
  steps, the share of each step spent waiting for data, peak GPU memory (tools/suites/gpu_train.py says how
  each is taken);
- ``loader``: images/s of the data module's image-folder train loader at 224 px (JPEG photos, reduced-size
  decoding and the recipes' augmentations in ``--workers`` processes, default: all CPUs; ``data.normalize``
  device and loader, each batch copied to the GPU and normalised as the data module does; and
  ``data.augment: device``: jitter and RandAugment on the GPU) against images/s of AdamW training steps
  (bf16 autocast) of ViT-S and Swin-T at 224 px on synthetic batches, and of
  :class:`vision_attn.data.device_decode.DeviceDecodeAugment` (the batch's JPEGs decoded by
  ``torchvision.io.decode_jpeg`` on the device, crop, flip and normalisation there);
- ``inference``: for each model (default ViT-B/16 and Swin-T, 224 px), with the same random weights in ours
  and timm's: parity (fp32 logits (TF32 off) and bf16-autocast logits against timm, and the gradients of one
  fp32 training step, relative to timm's largest gradient per tensor), then inference at bf16 autocast, eager
  and torch.compile, ours and timm alternating in one process
  (:func:`vision_attn.analysis.benchmark.benchmark_models`: CUDA events, median over rounds), with model
  FLOP utilisation against a bf16 matrix-multiply peak measured before the loader phase.
Prints Markdown tables and writes the record (``--json``; default: $OUT/gpu_check.json where $OUT is
set) after every phase (and every training side), so that a run stopped at a time limit keeps what it
measured. ``--dry-run`` runs every step on the CPU: 64 px classification and 160 px detection, batch 4,
one start-up and two timed training steps a side, 16 generated images; the loader's model step at 64 px;
inference with ViT-Ti instead of ViT-B, batch 1, one round, no torch.compile (minutes of compiling on a
CPU); the device decoder on the CPU: to check the script itself.
"""
from __future__ import annotations

import os
import tempfile
import time
from pathlib import Path

import torch
import torch.nn.functional as F

import vision_attn
from tools.suites import gpu_train
from tools.suites.data import make_photos, normalize_rate
from tools.suites.gpu_train import DATA, images_needed, make_digit_sets, make_photo_folders
from tools.suites.gpu_train import PHASES as TRAIN_PHASES
from tools.suites.harness import Param, Suite, in_fresh_process


def parity(name: str, img: int, device: str) -> dict[str, float]:
    """Max |ours - timm| of fp32 and bf16 logits and the largest relative gradient difference."""
    from vision_attn.analysis.benchmark import timm_twin

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


def loader_against_model(device: str, workers: int, images: int, batch: int, models: list[str],
                         decode_batches: int, peak: float, model_size: int = 224) -> dict:
    """Images/s of the data module's train loader at 224 px (``workers`` processes; ``data.normalize``
    device and loader, batches copied to ``device``) against those of bf16 AdamW training steps of
    ``models`` at ``model_size`` px; and of the device decoder (the batch's JPEGs decoded there)."""
    from torchvision.io import read_file

    from vision_attn.analysis.benchmark import benchmark_models

    from vision_attn.data.device_decode import DeviceDecodeAugment

    out: dict = {"workers": workers, "images": images, "batch": batch}
    with tempfile.TemporaryDirectory() as tmp:
        samples = make_photos(Path(tmp), images)
        out["loader"] = {mode: normalize_rate(samples, mode, workers, batch, epochs=2, device=device)
                         for mode in ("device", "loader")}
        out["loader"]["augment device"] = normalize_rate(samples, "device", workers, batch, epochs=2, device=device,
                                                         augment="device")
        rates = {}
        for name in models:
            (r,) = benchmark_models({name: vision_attn.create_model(name, img_size=model_size)}, batch=batch,
                                    img_size=model_size, device=device,
                                    precision="bf16", train=True, optimizer="adamw", peak_flops=peak,
                                    rounds=3 if device == "cuda" else 1,
                                    iters=5 if device == "cuda" else 1, warmup=2 if device == "cuda" else 1)
            rates[name] = r.throughput
        out["model_img_per_s"] = rates
        best = max(v["images_per_s"] for v in out["loader"].values())
        out["loader_is_bottleneck"] = best < max(rates.values())
        files = [read_file(p) for p, _ in samples]
        aug = DeviceDecodeAugment(224, device)
        chunks = [files[i:i + batch] for i in range(0, len(files) - batch + 1, batch)]
        aug(chunks[0])  # warm-up: the decoder's handles, the kernels
        _sync(device)
        start, n = time.perf_counter(), 0
        for i in range(decode_batches):
            n += aug(chunks[i % len(chunks)]).shape[0]
        _sync(device)
        out["device_decode_img_per_s"] = n / (time.perf_counter() - start)
    return out


def _sync(device: str) -> None:
    if device == "cuda":
        torch.cuda.synchronize()


PHASES = (*TRAIN_PHASES, "loader", "inference")


def phases(only: str) -> list[str]:
    """The phases ``--only`` names (comma-separated; ``all``: every phase), in the suite's order."""
    names = {n.strip() for n in only.split(",") if n.strip()}
    if "all" in names:
        return list(PHASES)
    unknown = sorted(names - set(PHASES))
    if unknown or not names:
        raise SystemExit(f"--only {only!r}: choose among {', '.join(PHASES)} or all (comma-separated)")
    return [n for n in PHASES if n in names]


def training(p, record, device: str, todo: list[str]) -> None:
    """The training phases: each task through Lightning beside its peer (tools/suites/gpu_train.py), the
    record saved after each side."""
    rows = record.results.setdefault("training", [])
    sizes = record.results["info"]["training_sizes"] = {}
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        settings = {"device": device, "workers": p.train_workers, "warmup": p.warmup_steps, "steps": p.train_steps,
                    "runs": str(root / "runs")}
        cls = {**settings, "batch": p.cls_batch, "img_size": p.cls_size}
        det = {**settings, "batch": p.det_batch, "img_size": p.det_size}
        data: dict[str, str] = {}
        t = time.time()
        if "cls" in todo:
            n = images_needed(p.cls_batch, p.warmup_steps, p.train_steps)
            data["cls"] = make_photo_folders(root / "photos", n, max(p.cls_batch, 16), p.train_workers)
            sizes["cls"] = {"train_images": n, "seconds_to_make": round(time.time() - t, 1)}
            record.line(f"cls: {n} JPEG photos in {time.time() - t:.1f} s")
        if any(ph in todo for ph in DATA):
            t = time.time()
            n = max(p.det_images, images_needed(p.det_batch, p.warmup_steps, p.train_steps))
            yamls = make_digit_sets(root / "digits", n, p.det_val_images, p.det_size, p.train_workers)
            data.update({ph: yamls[kind] for ph, kind in DATA.items()})
            sizes["det"] = {"train_images": n, "val_images": p.det_val_images, "img_size": p.det_size,
                            "seconds_to_make": round(time.time() - t, 1)}
            record.line(f"det, seg, rtdetr: {n} + {p.det_val_images} images at {p.det_size} px, boxes and masks, "
                        f"in {time.time() - t:.1f} s")
        record.save()
        for phase in todo:
            s = cls if phase == "cls" else det
            sides = [("ours", gpu_train.ours, (phase, data[phase], s))]
            sides.append(("timm", gpu_train.timm_side, (data[phase], s)) if phase == "cls"
                         else ("ultralytics", gpu_train.ultralytics_side, (phase, data[phase], s)))
            for side, fn, args in sides:
                t = time.time()
                try:
                    row = in_fresh_process(fn, *args)
                except RuntimeError as e:  # one side that fails leaves the others to run
                    row = {"phase": phase, "side": side, "error": str(e)[-2000:]}
                    record.line(f"{phase} {side} failed:\n{row['error']}")
                row["wall_s"] = round(time.time() - t, 1)
                rows.append(row)
                record.save()
    ok = [r for r in rows if "error" not in r]
    record.table(["task", "side", "model", "precision", "batch", "px", "img/s", "data wait", "step ms", "wait ms",
                  "peak MiB", "process s", "ours / peer"],
                 [[f"train {r['phase']}", r["side"], r["model"], r["precision"], r["batch"], r["img_size"],
                   f"{r['img_per_s']:.0f}", f"{100 * r['data_wait_share']:.1f}%", f"{r['step_ms']:.1f}",
                   f"{r['wait_ms']:.1f}", "" if r["peak_mib"] is None else f"{r['peak_mib']:.0f}",
                   f"{r['wall_s']:.0f}", _ratio(ok, r)] for r in ok],
                 title=f"Training, {p.warmup_steps} start-up steps then {p.train_steps} timed, device synchronised "
                       f"each step, {p.train_workers} loader workers a side")


def _ratio(rows: list[dict], row: dict) -> str:
    """Our images/s over the peer's for the same phase (on our row)."""
    if row["side"] != "ours":
        return ""
    peer = [r for r in rows if r["phase"] == row["phase"] and r["side"] != "ours"]
    return f"{row['img_per_s'] / peer[0]['img_per_s']:.2f}" if peer else ""


def run(p, record) -> None:
    import timm

    from vision_attn.analysis.benchmark import matmul_peak

    todo = phases(p.only)
    device = "cpu" if p.dry_run else "cuda"
    if p.dry_run:
        p.batch, p.rounds, p.iters = 1, 1, 1  # p.img_size stays: Swin-T's windows need its 224 px
        p.models = p.models.replace("vit_base", "vit_tiny")
        p.workers, p.images, p.loader_batch = 1, 4, 2
        p.train_workers, p.warmup_steps, p.train_steps = 1, 1, 2
        p.cls_batch, p.cls_size, p.det_batch, p.det_size = 4, 64, 4, 160
        p.det_images, p.det_val_images = 16, 4
    elif not torch.cuda.is_available():
        raise SystemExit("no CUDA device: run with --dry-run to check the suite on the CPU")
    if record.json_path is None and os.environ.get("OUT"):
        record.json_path = os.path.join(os.environ["OUT"], "gpu_check.json")
    t0 = time.time()
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    info = {"device": torch.cuda.get_device_name() if device == "cuda" else "cpu (dry run)",
            "torch": torch.__version__, "timm": timm.__version__, "phases": todo}
    record.line(str(info))
    report = record.results
    report.update({"info": info, "checks": {}, "results": [], "training": [], "loader": {}})

    train_phases = [ph for ph in todo if ph in TRAIN_PHASES]
    if train_phases:
        training(p, record, device, train_phases)
        info["seconds_training"] = round(time.time() - t0, 1)
        record.save()
    if "loader" not in todo and "inference" not in todo:
        info["seconds_total"] = round(time.time() - t0, 1)
        record.line(f"total {time.time() - t0:.0f} s")
        return
    peak = matmul_peak(device, "bf16", n=256 if p.dry_run else None)  # a CPU without bf16 instructions: slow
    info["bf16_matmul_peak_tflops"] = peak / 1e12
    if "loader" in todo:
        loader_phase(p, record, device, peak)
        info["seconds_loader"] = round(time.time() - t0, 1)
        record.save()  # after every phase: a run stopped at its time limit keeps what it measured
    if "inference" in todo:
        inference_phase(p, record, device, peak)
    info["seconds_total"] = round(time.time() - t0, 1)
    record.line(f"total {time.time() - t0:.0f} s")


def loader_phase(p, record, device: str, peak: float) -> None:
    """The data module's loader at 224 px against ViT-S and Swin-T training steps, and the device decoder."""
    loader_models = ["vit_tiny_patch16_224"] if p.dry_run else ["vit_small_patch16_224", "swin_tiny_patch4_window7_224"]
    loader = record.results["loader"] = loader_against_model(
        device, p.workers, p.images, p.loader_batch, loader_models,
        decode_batches=2 if p.dry_run else 16, peak=peak,
        model_size=64 if p.dry_run else 224)  # bf16 is emulated on most CPUs
    lrows = [[f"data module's train loader, data.normalize {v['normalize']}, data.augment {v['augment']}, "
              f"{v['workers']} workers, to {v['device']}", f"{v['images_per_s']:.0f}"] for v in loader["loader"].values()]
    lrows += [[f"{m} training step, bf16, batch {loader['batch']}", f"{v:.0f}"] for m, v in loader["model_img_per_s"].items()]
    lrows.append([f"decode_jpeg + crop/flip/normalise on {device}, batch {loader['batch']}",
                  f"{loader['device_decode_img_per_s']:.0f}"])
    record.table(["224 px", "images/s"], lrows)


def inference_phase(p, record, device: str, peak: float) -> None:
    """Parity with timm, then bf16 inference eager and compiled, ours and timm alternating."""
    from vision_attn.analysis.benchmark import benchmark_models, timm_twin

    checks, results, report = record.results["checks"], [], record.results
    for name in p.models.split(","):
        checks[name] = parity(name, p.img_size, device)
        for compiled in ([False] if p.dry_run else [False, True]):
            torch.manual_seed(0)
            models = {name: vision_attn.create_model(name, img_size=p.img_size),
                      f"timm {name}": timm_twin(name, p.img_size)}
            results += benchmark_models(models, batch=p.batch, img_size=p.img_size, device=device,
                                        precision="bf16", compile=compiled, rounds=p.rounds, iters=p.iters,
                                        warmup=1 if p.dry_run else 3,
                                        peak_flops=peak, pairs={name: f"timm {name}"})
            report["results"] = [r.to_dict() for r in results]
            record.save()
            del models
            if device == "cuda":
                torch.cuda.empty_cache()
    record.table(["model", "fp32 max abs diff", "bf16 max abs diff", "grad max rel diff"],
                 [[k, f"{v['fp32_max_abs_diff']:.2e}", f"{v['bf16_max_abs_diff']:.2e}", f"{v['grad_max_rel_diff']:.2e}"]
                  for k, v in checks.items()])
    record.table(["model", "mode", "batch", "img/s (bf16)", "latency ms", "peak MiB", "MFU", "vs timm"],
                 [[r.model, "compile" if r.compiled else "eager", r.batch, f"{r.throughput:.1f}", f"{r.latency_ms:.2f}",
                   f"{r.peak_memory_mb:.0f}", f"{100 * r.mfu:.1f}%", "" if r.ratio is None else f"{r.ratio:.3f}"]
                  for r in results])


SUITE = Suite("gpu", "on a CUDA GPU: every task trained beside its peer (timm, ultralytics); parity and bf16 "
              "inference (eager, compiled) against timm; the loader against the model", run, (
                  Param("only", "cls,det,seg,rtdetr,inference", f"comma-separated phases among {', '.join(PHASES)}, "
                        "or all"),
                  Param("models", "vit_base_patch16_224,swin_tiny_patch4_window7_224", "comma-separated models"),
                  Param("batch", 256, "inference batch"),
                  Param("img_size", 224, "pixels"),
                  Param("rounds", 5, "rounds"),
                  Param("iters", 10, "passes a round"),
                  Param("warmup_steps", 10, "training steps a side not timed (start-up)"),
                  Param("train_steps", 50, "training steps a side timed after the start-up steps"),
                  Param("train_workers", min(os.cpu_count() or 1, 16), "loader processes of each training side"),
                  Param("cls_batch", 128, "train cls batch (the DeiT recipe's per device)"),
                  Param("cls_size", 224, "train cls pixels"),
                  Param("det_batch", 64, "train det/seg/rtdetr batch (ultralytics' nominal batch: no accumulation)"),
                  Param("det_size", 640, "train det/seg/rtdetr pixels (the demo's canvases enlarged to it)"),
                  Param("det_images", 5000, "generated train images of the detection and segmentation sets"),
                  Param("det_val_images", 64, "their val images (ultralytics validates once when stopped)"),
                  Param("workers", os.cpu_count() or 1, "loader processes of the loader phase (default: all CPUs)"),
                  Param("images", 1024, "JPEG photos for the loader measurement"),
                  Param("loader_batch", 128, "batch of the loader and model measurement"),
                  Param("dry_run", False, "CPU, tiny sizes (64-160 px, 1+2 training steps a side, ViT-Ti for "
                        "ViT-B, batch 1, one round, no compile): checks the suite", quick=True),
              ), group="gpu", requires=("timm", "sklearn"), doc=__doc__)
