"""``vision-attn attn-map``: where a model attends on one image, overlaid on it (parsing and printing
only; see vision_attn.analysis.attention_maps)."""
from __future__ import annotations

import argparse
import os
from typing import TYPE_CHECKING

from vision_attn.errors import ConfigError, DataError
from vision_attn.io.atomic import output_folder, write_json

if TYPE_CHECKING:
    from rich.console import Console

SAMPLE_PREFIX = "sklearn:"


def read_image(spec: str):
    """(H, W, 3) uint8: an image file, or ``sklearn:china.jpg`` / ``sklearn:flower.jpg`` (photos shipped
    with scikit-learn)."""
    from vision_attn.data import load_image

    if spec.startswith(SAMPLE_PREFIX):
        from sklearn.datasets import load_sample_image

        name = spec[len(SAMPLE_PREFIX):]
        try:
            return load_sample_image(name)
        except (AttributeError, ValueError):
            raise DataError(f"--image {spec}: scikit-learn ships no sample image {name!r}; use sklearn:china.jpg "
                            "or sklearn:flower.jpg") from None
    if not os.path.isfile(spec):
        raise DataError(f"--image {spec}: no such image file")
    try:
        return load_image(spec)
    except DataError as e:
        detail = str(e).split("(", 1)[1].split(")", 1)[0] if "(" in str(e) else "unknown format"
        raise DataError(f"--image {spec}: cannot decode the image ({detail}); give a JPEG, PNG, BMP, WebP or TIFF "
                        "file") from None


def _detector(args: argparse.Namespace):
    """(model, label, image size) for a detector YAML (``--model FILE.yaml``, random weights); None for the
    other targets."""
    if args.model and args.model.lower().endswith((".yaml", ".yml")):
        from vision_attn.models.yolo import build_detector

        label = f"{os.path.basename(args.model)}" + (f" ({args.scale})" if args.scale else "") + " (random weights)"
        return build_detector(args.model, scale=args.scale), label, args.img_size or 640
    return None


def _cmd_attn_map(args: argparse.Namespace, console: Console) -> int:
    from vision_attn.analysis.attention_maps import attention_maps, prepare_image, render_maps

    if bool(args.model) == bool(args.checkpoint):
        raise ConfigError("attn-map: give exactly one of --model NAME or --checkpoint CKPT")
    if args.json:
        output_folder(args.json, label=f"--json {args.json}")  # before any work: a missing folder is named first
    image = read_image(args.image)
    detector = _detector(args)
    if detector is not None:
        model, label, size = detector
        mean, std = (0.0, 0.0, 0.0), (1.0, 1.0, 1.0)  # detectors take 0..1 pixels
    elif args.checkpoint:
        from vision_attn.tasks import load_run

        run = load_run(args.checkpoint)  # any task's run: its network, size and normalisation
        name = run.hparams.get("name") or run.label.split(" (")[0]
        model, label = run.model, f"{name} (run {run.path.parent.name}, trained)"
        size = args.img_size or run.img_size
        mean, std = run.mean, run.std
    else:
        import vision_attn

        model = vision_attn.create_model(args.model, pretrained=args.weights, attention=args.attention)
        label = args.model + (f"+{args.attention}" if args.attention else "")
        label += "" if args.weights else " (random weights)"
        size = args.img_size or getattr(getattr(model, "patch_embed", None), "img_size", None) or 224
        mean = std = None
    kwargs = {k: v for k, v in (("mean", mean), ("std", std)) if v is not None}
    shown, x = prepare_image(image, size if isinstance(size, int) else tuple(size), **kwargs)
    maps = attention_maps(model, x)
    render_maps(shown, maps, args.output, title=label, max_panels=args.max_panels)
    if args.json:
        write_json(args.json, {"model": label, "image": args.image, "input_size": list(x.shape[-2:]), **maps.to_dict()})
    what = {"vit": "attention rollout and the last layer's class-token attention per head",
            "swin": "window attention received per token, first block of each stage",
            "cbam": "CBAM spatial attention gates",
            "yolo": "attention received per position, every area-attention and PSA block"}[maps.kind]
    shown_n = min(len(maps.maps), args.max_panels)
    written = args.output + (f", {args.json}" if args.json else "")
    console.print(f"{what}: {len(maps.maps)} map(s), {shown_n} drawn -> {written}", markup=False, soft_wrap=True)
    if maps.shares is not None and maps.shares.tokens:
        last = [row for row in maps.shares.rows if row.startswith("layer ")][-1]
        for row, text in (("rollout", "rollout"), (last, f"{last} (the last, mean of heads)")):
            parts = ", ".join(f"{c} {v:.3f}" for c, v in zip(maps.shares.columns, maps.shares.rows[row].tolist()))
            console.print(f"{maps.shares.query}'s attention, {text}: {parts}", markup=False, soft_wrap=True)
    return 0


def register(sub: "argparse._SubParsersAction[argparse.ArgumentParser]") -> None:
    p = sub.add_parser("attn-map", help="attention maps on an image: ViT rollout, Swin windows, CBAM gates, "
                       "YOLO attention blocks",
                       description="Overlay a model's attention on an image: ViT/DeiT attention rollout and the last "
                       "layer's class-token attention per head, with the shares of the class token, registers "
                       "(DINOv2 *_reg4, DINOv3) and patch grid apart; Swin window attention; CBAM spatial gates.")
    p.add_argument("--model", default=None, help="a registered model name (random weights unless --weights), or a "
                   "detector YAML with attention blocks, e.g. configs/models/yolo12.yaml (random weights)")
    p.add_argument("--scale", default=None, help="--model YAML: the scale letter (default: the file's first)")
    p.add_argument("--checkpoint", default=None, help="a classification or detection run's best.ckpt (or the run "
                   "folder)")
    p.add_argument("--weights", default=None, help="--model: a local checkpoint for create_model(pretrained=...)")
    p.add_argument("--attention", default=None, help="--model: insert this block into a CNN first, e.g. cbam")
    p.add_argument("--image", required=True, help="an image file, or sklearn:china.jpg / sklearn:flower.jpg")
    p.add_argument("--img-size", type=int, default=None, help="input size (default: the model's or the run's)")
    p.add_argument("--max-panels", type=int, default=8, help="at most this many maps (default 8)")
    p.add_argument("-o", "--output", required=True, help="the PNG to write (atomically)")
    p.add_argument("--json", default=None, metavar="FILE", help="also write the maps' values and, for a ViT, the shares "
                   "of the class token's attention on each prefix token (class, registers) and on the patch grid")
    p.set_defaults(func=_cmd_attn_map)
