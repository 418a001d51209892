"""GPU check: ours against timm on a CUDA machine, in one short run.

    python tools/bench.py gpu --json DIR/gpu_check.json [--models vit_base_patch16_224,swin_tiny_patch4_window7_224]
    python tools/bench.py gpu --dry-run --json /tmp/gc/gpu_check.json   # the same steps on the CPU, tiny sizes

For each model (default ViT-B/16 and Swin-T, 224 px), with the same random weights in ours and timm's:
- parity: fp32 logits (TF32 off) and bf16-autocast logits against timm, and the gradients of one fp32
  training step (relative to timm's largest gradient per tensor);
- inference at bf16 autocast, eager and torch.compile, ours and timm alternating in one process
  (:func:`vision_attn.analysis.benchmark.benchmark_models`: CUDA events, median over rounds), with
  model FLOP utilisation against a bf16 matrix-multiply peak measured at the start (last);
and:
- ``train cls`` (the digits demo, configs/train/classify/demo_digits.yaml) and ``train det`` (YOLOv8n on
  demo:digit-boxes, configs/train/detect/demo_digit_boxes.yaml) through Lightning on ``accelerator=gpu``
  for ``--train-steps`` steps each, bf16-mixed, eager and with ``--model.compile``;
- the loader against the model (first): images/s of the data
  module's image-folder train loader at 224 px (JPEG photos, reduced-size decoding and the recipes'
  augmentations in ``--workers`` processes, default: all CPUs; ``data.normalize`` device and loader,
  each batch copied to the GPU and normalised as the data module does; and ``data.augment: device``:
  jitter and RandAugment on the GPU) against images/s of AdamW
  training steps (bf16 autocast) of ViT-S and Swin-T at 224 px, and of
  :class:`vision_attn.data.device_decode.DeviceDecodeAugment` (the batch's JPEGs decoded by
  ``torchvision.io.decode_jpeg`` on the device, crop, flip and normalisation there).
Prints Markdown tables and writes the record (``--json``; default: $OUT/gpu_check.json where $OUT is
set) after every phase, so that a run stopped at a time limit keeps what it measured.
``--dry-run`` runs every step on the CPU with ViT-Ti instead of ViT-B, batch 1, one round, two
Lightning steps, a few images, the device decoder on the CPU, and no torch.compile (minutes of
compiling on a CPU), to check the script itself.
"""
from __future__ import annotations

import os
import tempfile
import time
from pathlib import Path

import torch
import torch.nn.functional as F

import vision_attn
from tools.suites.data import make_photos, normalize_rate
from tools.suites.harness import ROOT, Param, Suite


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


TRAIN_CONFIGS = {"cls": "configs/train/classify/demo_digits.yaml", "det": "configs/train/detect/demo_digit_boxes.yaml"}


def lightning_steps(task: str, device: str, steps: int, runs_dir: str, compile: bool = False,
                    workers: int = 0) -> dict:
    """``train cls`` / ``train det`` for ``steps`` steps on ``accelerator=gpu`` in bf16-mixed (in a dry
    run: the CPU, fp32), with or without ``--model.compile``."""
    from vision_attn.tasks import train_classifier, train_detector

    name = f"gpu_check_{task}{'_compiled' if compile else ''}"
    argv = ["--config", os.path.join(ROOT, TRAIN_CONFIGS[task]), "--name", name, "--runs_dir", runs_dir,
            "--overwrite", "true", "--trainer.accelerator", "gpu" if device == "cuda" else "cpu",
            "--trainer.devices", "1", "--trainer.max_steps", str(steps), "--trainer.limit_val_batches", "2",
            "--trainer.check_val_every_n_epoch", "1", "--trainer.enable_progress_bar", "false",
            "--data.num_workers", str(workers), "--data.persistent_workers", str(workers > 0).lower(),
            "--model.compile", str(compile).lower()]
    if device == "cuda":
        argv += ["--trainer.precision", "bf16-mixed", "--threads", "4"]
    train = train_classifier if task == "cls" else train_detector
    m = train(argv, echo=lambda _line: None).metrics
    batch = 32  # both configs' batch size
    return {"task": task, "compiled": compile, "steps": m["global_step"], "fit_time_s": m["fit_time_s"],
            "img_per_s": m["global_step"] * batch / m["fit_time_s"], "precision": m["precision"],
            "gmacs_per_image": m["gmacs"] if "gmacs" in m else m["gflops"] / 2}


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


def run(p, record) -> None:
    import timm

    from vision_attn.analysis.benchmark import benchmark_models, matmul_peak, timm_twin

    device = "cpu" if p.dry_run else "cuda"
    if p.dry_run:
        p.batch, p.rounds, p.iters, p.train_steps = 1, 1, 1, 2
        p.img_size = 64
        p.models = p.models.replace("vit_base", "vit_tiny")
        p.workers, p.images, p.loader_batch = 1, 4, 2
    elif not torch.cuda.is_available():
        raise SystemExit("no CUDA device: run with --dry-run to check the suite on the CPU")
    if record.json_path is None and os.environ.get("OUT"):
        record.json_path = os.path.join(os.environ["OUT"], "gpu_check.json")
    t0 = time.time()
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    peak = matmul_peak(device, "bf16", n=256 if p.dry_run else None)  # a CPU without bf16 instructions: slow
    info = {"device": torch.cuda.get_device_name() if device == "cuda" else "cpu (dry run)",
            "torch": torch.__version__, "timm": timm.__version__, "bf16_matmul_peak_tflops": peak / 1e12}
    record.line(str(info))
    report = record.results
    report.update({"info": info, "checks": {}, "results": [], "training": [], "loader": {}})

    loader_models = ["vit_tiny_patch16_224"] if p.dry_run else ["vit_small_patch16_224", "swin_tiny_patch4_window7_224"]
    loader = report["loader"] = loader_against_model(
        device, p.workers, p.images, p.loader_batch, loader_models,
        decode_batches=2 if p.dry_run else 16, peak=peak,
        model_size=p.img_size if p.dry_run else 224)  # bf16 is emulated on most CPUs
    lrows = [[f"data module's train loader, data.normalize {v['normalize']}, data.augment {v['augment']}, "
              f"{v['workers']} workers, to {v['device']}", f"{v['images_per_s']:.0f}"] for v in loader["loader"].values()]
    lrows += [[f"{m} training step, bf16, batch {loader['batch']}", f"{v:.0f}"] for m, v in loader["model_img_per_s"].items()]
    lrows.append([f"decode_jpeg + crop/flip/normalise on {device}, batch {loader['batch']}",
                  f"{loader['device_decode_img_per_s']:.0f}"])
    record.table(["224 px", "images/s"], lrows)
    info["seconds_loader"] = round(time.time() - t0, 1)
    record.save()  # after every phase: a run stopped at its time limit keeps what it measured

    train = report["training"]
    with tempfile.TemporaryDirectory() as runs:
        for task in ("cls", "det"):
            for compiled in ([False] if p.dry_run else [False, True]):
                t = lightning_steps(task, device, p.train_steps, runs, compiled,
                                    workers=0 if p.dry_run else min(p.workers, 8))
                t["mfu"] = 3 * 2e9 * t["gmacs_per_image"] * t["img_per_s"] / peak
                train.append(t)
                record.save()
    record.table(["task", "mode", "precision", "steps", "fit s", "img/s (with start-up)", "MFU"],
                 [[f"train {t['task']}", "compile" if t["compiled"] else "eager", t["precision"], t["steps"],
                   f"{t['fit_time_s']:.1f}", f"{t['img_per_s']:.0f}", f"{100 * t['mfu']:.2f}%"] for t in train])
    info["seconds_training"] = round(time.time() - t0, 1)

    checks, results = report["checks"], []
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
    info["seconds_total"] = round(time.time() - t0, 1)
    record.line(f"total {time.time() - t0:.0f} s")


SUITE = Suite("gpu", "ours against timm on a CUDA GPU: parity, bf16 inference (eager, compiled), training, loader",
              run, (
                  Param("models", "vit_base_patch16_224,swin_tiny_patch4_window7_224", "comma-separated models"),
                  Param("batch", 256, "inference batch"),
                  Param("img_size", 224, "pixels"),
                  Param("rounds", 5, "rounds"),
                  Param("iters", 10, "passes a round"),
                  Param("train_steps", 300, "Lightning steps of train cls and train det"),
                  Param("workers", os.cpu_count() or 1, "loader processes (default: all CPUs)"),
                  Param("images", 1024, "JPEG photos for the loader measurement"),
                  Param("loader_batch", 128, "batch of the loader and model measurement"),
                  Param("dry_run", False, "CPU, vit_tiny and swin_tiny, batch 1, one round, no compile "
                        "(checks the suite)", quick=True),
              ), group="gpu", requires=("timm", "sklearn"), doc=__doc__)
