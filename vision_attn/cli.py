"""The ``vision-attn`` command: argument parsing and printing only; every command calls the public API.

Subcommands: ``models`` (registered variants with parameters and GMACs), ``flops`` (one model, detector
YAML or run in detail), ``demo``, ``train cls|det`` (a classifier on image folders or a YOLO-style
detector on COCO/YOLO data, configured by YAML and ``--section.key value`` overrides), ``eval`` and
``predict`` (a trained run's checkpoint), ``yaml info|insert|remove`` (detector YAMLs); ``benchmark``,
``compare``, ``attn-map`` and ``export`` live in :mod:`vision_attn.commands`, one file each. Errors that vision_attn reports (:class:`~vision_attn.errors.VisionAttnError`)
are printed as one line ``error: ...`` on stderr with exit status 2; ``--debug`` shows the traceback.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
from typing import Any, Sequence

from rich.console import Console
from rich.table import Table

import vision_attn
from vision_attn.analysis import FlopReport, count_model_flops
from vision_attn.commands import ImgSize, register_all
from vision_attn.errors import ConfigError, VisionAttnError

CONVENTIONS = {
    "macs": "MACs: multiply-accumulates, what papers call FLOPs",
    "flops": "FLOPs = 2 x MACs, torch.utils.flop_counter's convention",
    "attention": "fused attention (scaled_dot_product_attention) is counted",
}
CONVENTIONS_LINE = "; ".join(CONVENTIONS.values()) + "."
DEMO_MODEL = "deit_tiny_distilled_patch16_224"


# ------------------------------------------------------------------------------------------------
# formatting helpers
def _size(hw: Sequence[int]) -> str:
    return "x".join(str(s) for s in hw)


def _model_row(name: str) -> tuple[FlopReport, dict[str, Any]]:
    report = count_model_flops(name)  # meta device: nothing allocated, nothing computed
    row = {"name": name, "params": report.params, "macs": report.macs, "gmacs": round(report.gmacs, 4),
           "img_size": list(report.input_shape[-2:])}
    return report, row


def models_table(names: Sequence[str], title: str | None = None) -> tuple[Table, list[dict[str, Any]]]:
    """A table (and JSON rows) of registered variants: parameters, GMACs at their default size."""
    table = Table(title=title, caption=CONVENTIONS["macs"] + ".", caption_justify="left")
    table.add_column("model")
    table.add_column("params (M)", justify="right")
    table.add_column("GMACs", justify="right")
    table.add_column("image", justify="right")
    rows = []
    for name in names:
        report, row = _model_row(name)
        rows.append(row)
        table.add_row(name, f"{report.params / 1e6:.2f}", f"{report.gmacs:.2f}", _size(row["img_size"]))
    return table, rows


def flops_table(report: FlopReport) -> Table:
    """Parameters, MACs, FLOPs and what a counter without the fused-attention formulas reads."""
    table = Table(title=f"{report.model}, input {_size(report.input_shape)}",
                  caption=CONVENTIONS_LINE, caption_justify="left")
    table.add_column("quantity")
    table.add_column("value", justify="right")
    table.add_column("meaning")
    table.add_row("parameters", f"{report.params / 1e6:.2f} M", f"{report.params:,}")
    table.add_row("MACs", f"{report.gmacs:.3f} G", "multiply-accumulates (papers' FLOPs)")
    table.add_row("FLOPs", f"{report.gflops:.3f} G", "2 x MACs (torch.utils.flop_counter)")
    table.add_row("fused attention", f"{report.fused_attention_macs / 1e9:.3f} GMACs", "included in MACs")
    table.add_row("plain counter", f"{report.macs_without_fused_attention / 1e9:.3f} GMACs",
                  "torch/fvcore/thop, no fused attention")
    return table


def module_table(report: FlopReport) -> Table:
    """MACs per module as a tree (enclosing modules with the sum below them), with shares of the total."""
    from vision_attn.analysis.flops import module_tree

    table = Table(title="MACs by module")
    table.add_column("module")
    table.add_column("GMACs", justify="right")
    table.add_column("share", justify="right")
    for name, level, macs in module_tree(report.by_module):
        table.add_row("  " * level + name, f"{macs / 1e9:.4f}", f"{100 * macs / max(report.macs, 1):.1f}%")
    return table


# ------------------------------------------------------------------------------------------------
# commands
def _cmd_models(args: argparse.Namespace, console: Console) -> int:
    names = vision_attn.list_models(args.pattern)
    if not names:
        raise ConfigError(f"no registered model matches {args.pattern!r}: run `vision-attn models` to list them all")
    table, rows = models_table(names)
    if args.json:
        print(json.dumps(rows, indent=2))
    else:
        console.print(table)
    return 0


def flops_markdown(report: FlopReport, by_module: bool) -> str:
    """The report (and, with ``by_module``, the module tree) as Markdown tables."""
    from vision_attn.analysis.flops import module_tree
    from vision_attn.analysis.tables import to_markdown

    text = f"**{report.model}**, input {_size(report.input_shape)}. {CONVENTIONS_LINE}\n\n"
    text += to_markdown(["parameters", "GMACs", "GFLOPs", "fused attention GMACs", "plain counter GMACs"],
                        [[f"{report.params:,}", f"{report.gmacs:.3f}", f"{report.gflops:.3f}",
                          f"{report.fused_attention_macs / 1e9:.3f}",
                          f"{report.macs_without_fused_attention / 1e9:.3f}"]])
    if by_module:
        rows = [["&nbsp;&nbsp;" * level + name, f"{macs / 1e9:.4f}", f"{100 * macs / max(report.macs, 1):.1f}%"]
                for name, level, macs in module_tree(report.by_module)]
        text += "\n" + to_markdown(["module", "GMACs", "share"], rows)
    return text


def _cmd_flops(args: argparse.Namespace, console: Console) -> int:
    from vision_attn.analysis import count_flops
    from vision_attn.analysis.flops import module_tree
    from vision_attn.analysis.targets import load_target

    target = load_target(args.model, scale=args.scale, attention=args.attention)
    img_size = target.img_size
    if args.img_size is not None:
        img_size = args.img_size[0] if len(args.img_size) == 1 else tuple(args.img_size)
    if args.depth < 1:
        raise ConfigError(f"--depth {args.depth}: give 1 or more module levels")
    report = count_flops(target.model, img_size, args.batch, depth=args.depth, name=target.name)
    if args.json:
        out = report.to_dict()
        out["kind"] = target.kind
        if args.by_module:
            out["module_tree"] = [{"name": n, "level": lv, "macs": m} for n, lv, m in module_tree(report.by_module)]
        else:
            out.pop("by_module")
        out["conventions"] = CONVENTIONS
        print(json.dumps(out, indent=2))
        return 0
    if args.markdown:
        print(flops_markdown(report, args.by_module), end="")
        return 0
    console.print(flops_table(report))
    if args.by_module:
        console.print(module_table(report))
    return 0


def _cmd_demo(args: argparse.Namespace, console: Console) -> int:
    from vision_attn.analysis.demo import attention_forward, sample_photo  # scikit-learn loads here

    console.rule("1. FLOPs of the ViT/DeiT zoo")
    console.print("Counted on the meta device (no memory, no arithmetic): "
                  "[bold]vision_attn.analysis.count_model_flops(name)[/bold]")
    table, _ = models_table(vision_attn.list_models())
    console.print(table)

    console.rule(f"2. One forward pass of {DEMO_MODEL}")
    console.print("[bold]Random initialisation[/bold]: no checkpoint is loaded, so the logits mean nothing; "
                  "pass pretrained=PATH to create_model for real weights.")
    console.print("Input: scikit-learn's sample photo china.jpg, resized to cover the size, centre-cropped, "
                  "ImageNet-normalised (vision_attn.analysis.demo.sample_photo).")
    model = vision_attn.create_model(DEMO_MODEL).eval()
    runs = [attention_forward(model, sample_photo(size)) for size in ((224, 224), (224, 320))]
    pos = model.patch_embed.grid_size
    shapes = Table()
    for col in ("input", "patch grid", "tokens (B, N, D)", "logits", "ms / image"):
        shapes.add_column(col, justify="right")
    for run in runs:
        shapes.add_row(_size(run.input_shape), _size(run.grid), str(run.tokens_shape), str(run.logits_shape),
                       f"{1e3 * run.seconds_per_image:.1f}")
    console.print(shapes)
    console.print(f"N = 2 prefix tokens (class, distillation) + the patches. At 224x320 the learned "
                  f"{_size(pos)} position table is resampled bicubically to the {_size(runs[1].grid)} grid "
                  f"on the fly; nothing is retrained.")

    console.rule("3. Where the class token looks: attention entropy per layer")
    console.print("with vision_attn.layers.record_attention(model) as maps: model(x)  "
                  "# maps: one (B, heads, N, N) tensor per layer")
    console.print("Maximum (uniform attention): " + ", ".join(
        f"log {run.tokens_shape[1]} = {run.max_entropy:.2f} nats at {_size(run.input_shape[-2:])}" for run in runs))
    ent = Table()
    ent.add_column("layer", justify="right")
    for run in runs:
        ent.add_column(f"{_size(run.input_shape[-2:])} (nats)", justify="right")
        ent.add_column("of max", justify="right")
    for layer in range(len(runs[0].cls_entropy)):
        cells = []
        for run in runs:
            h = run.cls_entropy[layer]
            cells += [f"{h:.3f}", f"{100 * h / run.max_entropy:.1f}%"]
        ent.add_row(str(layer), *cells)
    console.print(ent)
    console.print("Entropy of the class token's attention over the N tokens, averaged over heads: log N means "
                  "uniform attention, 0 means one token. With random weights it stays near log N; a trained "
                  "ViT concentrates its attention on the object in its later layers.")
    return 0


def _cmd_train(args: argparse.Namespace, console: Console) -> int:
    if args.task == "det":
        from vision_attn.commands._detection import train_det

        return train_det(args, console)
    from vision_attn.tasks import dump_config, parse_train_config, train_classifier  # Lightning loads here
    from vision_attn.tasks.config import PRINT_CONFIG_FLAGS, build_train_parser

    rest = list(args.args)
    if any(a in ("-h", "--help") for a in rest):
        build_train_parser().print_help()
        return 0
    printing = any(a in PRINT_CONFIG_FLAGS for a in rest)
    cfg = parse_train_config([a for a in rest if a not in PRINT_CONFIG_FLAGS])
    if printing:
        print(dump_config(cfg), end="")
        return 0
    result = train_classifier(cfg, echo=lambda line: console.print(line, markup=False))
    if result.metrics:
        m = result.metrics
        top1 = "n/a" if m["val_top1"] is None else f"{100 * m['val_top1']:.2f}%"
        console.print(f"[bold]final val top-1: {top1}[/bold] ({m['model']}, {m['epochs']} epochs, "
                      f"{m['wall_time_s']:.0f} s, {m['params'] / 1e6:.2f} M params, {m['gmacs']:.4f} GMACs)")
        console.print(f"run folder: {result.run_dir}")
    return 0


def _cmd_eval(args: argparse.Namespace, console: Console) -> int:
    if args.task == "det":
        from vision_attn.commands._detection import eval_det

        return eval_det(args, console)
    from vision_attn.tasks import evaluate_classifier

    report = evaluate_classifier(args.checkpoint, args.data, batch_size=args.batch_size, num_workers=args.workers)
    if args.json:
        print(json.dumps(report, indent=2))
        return 0
    table = Table(title=f"{report['model']} on {report['data']} ({report['images']} images)")
    table.add_column("class")
    table.add_column("images", justify="right")
    table.add_column("accuracy", justify="right")
    for name, acc in report["per_class_accuracy"].items():
        n = report["per_class_images"][name]
        table.add_row(name, str(n), "n/a" if acc is None else f"{100 * acc:.1f}%")
    console.print(table)
    console.print(f"top-1 {100 * report['top1']:.2f}%, top-5 {100 * report['top5']:.2f}%")
    return 0


def _cmd_predict(args: argparse.Namespace, console: Console) -> int:
    if args.task == "det":
        from vision_attn.commands._detection import predict_det

        return predict_det(args, console)
    from vision_attn.tasks import predict_images

    results = predict_images(args.checkpoint, args.images, top_k=args.top_k, batch_size=args.batch_size)
    if args.json:
        print(json.dumps(results, indent=2))
        return 0
    table = Table()
    table.add_column("image")
    table.add_column(f"top-{args.top_k} (probability)")
    for r in results:
        table.add_row(r["image"], ", ".join(f"{t['label']} ({t['prob']:.3f})" for t in r["top"]))
    console.print(table)
    return 0



def _parse_at(value: str | None) -> list[int] | None:
    if value is None:
        return None
    try:
        return [int(v) for v in value.replace(" ", "").split(",") if v]
    except ValueError:
        raise ConfigError(f"--at {value!r}: give row indices separated by commas, e.g. 4,6") from None


def _parse_block_args(value: str | None) -> list[Any] | None:
    from vision_attn.io.yaml import load_yaml

    if value is None:
        return None
    loaded = load_yaml(value, f"--args {value!r}")
    if not isinstance(loaded, dict):
        raise ConfigError(f"--args {value!r}: must be a mapping of keyword arguments, e.g. '{{reduction: 8}}'")
    return [loaded]


def _yaml_source(file: str | None, checkpoint: str | None) -> "YamlSource":
    from vision_attn.models.yolo.from_ultralytics import YamlSource

    return YamlSource.resolve(file, checkpoint)


def _cmd_yaml_edit(args: argparse.Namespace, console: Console) -> int:
    """``yaml insert`` / ``yaml remove``: edit a detector YAML's rows (re-indexed, comments kept)."""
    import difflib

    from vision_attn.analysis.yaml_info import compare_yaml
    from vision_attn.io.atomic import save_torch, write_text
    from vision_attn.models.yolo import check_builds, insert_attention_text, remove_attention_text
    from vision_attn.models.yolo.transfer import transfer_weights
    from vision_attn.tasks.det_inference import detector_checkpoint

    source = _yaml_source(args.file, args.checkpoint)
    if not args.dry_run and not args.output:
        raise ConfigError(f"yaml {args.action}: say where to write the result with -o OUT.yaml (or use --dry-run)")
    if args.checkpoint and not args.dry_run and not args.checkpoint_out:
        raise ConfigError("--checkpoint needs --checkpoint-out NEW.pt: where to save the remapped state dict")
    for out in (args.output, args.checkpoint_out):
        if out and not args.dry_run and not os.path.isdir(os.path.dirname(os.path.abspath(out))):
            raise ConfigError(f"{out}: the folder {os.path.dirname(os.path.abspath(out))} does not exist; "
                              "nothing was written")
    text = source.text
    check_builds(text, source.label)
    if args.action == "insert":
        if not args.block:
            raise ConfigError("yaml insert: say which block with --block, e.g. --block CBAM")
        block_args = _parse_block_args(args.args)
        if source.checkpoint_path and args.identity_init:
            block_args = [{**(block_args[0] if block_args else {}), "zero_init": True}]
        result = insert_attention_text(text, args.block, after=args.after, at=_parse_at(args.at),
                                       section=args.section, args=block_args, source=source.label)
        what = (f"inserted {len(result.inserted)} {args.block} row(s) at {', '.join(map(str, result.inserted))}"
                if result.inserted else f"nothing to insert: every position is already followed by {args.block}")
    else:
        result = remove_attention_text(text, args.block, source=source.label)
        what = f"removed {len(result.removed)} row(s)" if result.removed else "nothing to remove"
    check_builds(result.text, args.output or f"{source.label} (edited)", stage="output")

    if args.dry_run:
        diff = difflib.unified_diff(text.splitlines(keepends=True), result.text.splitlines(keepends=True),
                                    fromfile=source.label, tofile=args.output or f"{source.label} (edited)")
        sys.stdout.write("".join(diff) or "(no change)\n")
        table = Table(title=f"parameters and GFLOPs at {args.img_size}x{args.img_size}, before -> after")
        for col in ("scale", "params before", "params after", "change", "GFLOPs before", "GFLOPs after"):
            table.add_column(col, justify="left" if col == "scale" else "right")
        for r in compare_yaml(text, result.text, img_size=args.img_size):
            table.add_row(r["scale"] or "-", f"{r['params_before']:,}", f"{r['params_after']:,}",
                          f"{r['params_after'] - r['params_before']:+,}", f"{r['gflops_before']:.2f}",
                          f"{r['gflops_after']:.2f}")
        console.print(table)
        console.print(what + " (dry run: nothing written)")
        return 0

    state = source.weights()
    moved = transfer_weights(state, result.text, result.index_map, scale=args.scale) if state is not None else None
    saved: Any = moved.state if moved is not None else None
    if moved is not None and source.ultralytics is not None:
        # a whole detector checkpoint: the edited YAML, the class names, every tensor of the edited model
        saved = detector_checkpoint(result.text, moved.state, names=source.ultralytics.names, scale=args.scale,
                                    img_size=source.ultralytics.img_size, source=str(source.checkpoint_path))
    write_text(args.output, result.text)
    console.print(f"{what} -> {args.output}")
    if moved is not None:
        save_torch(saved, args.checkpoint_out)
        console.print(f"checkpoint: {len(moved.transferred)} of {moved.total} tensors transferred -> "
                      f"{args.checkpoint_out}; {len(moved.new_keys)} new key(s) to train: "
                      f"{', '.join(moved.new_keys) if moved.new_keys else 'none'}", soft_wrap=True)
    return 0


def _cmd_yaml(args: argparse.Namespace, console: Console) -> int:
    """``yaml info FILE``: the per-row table and the totals of a detector YAML."""
    from vision_attn.analysis.yaml_info import yaml_info

    if args.action in ("insert", "remove"):
        return _cmd_yaml_edit(args, console)
    info = yaml_info(_yaml_source(args.file, None).spec, scale=args.scale, img_size=args.img_size)
    if args.json:
        print(json.dumps(info.to_dict(), indent=2))
        return 0
    table = Table(title=f"{info.source}  scale {info.scale or '-'}  {info.img_size}x{info.img_size}")
    for col in ("index", "from", "repeats", "params", "module", "arguments", "output shape"):
        table.add_column(col, justify="right" if col in ("index", "repeats", "params") else "left")
    for layer in info.layers:
        shape = _size(layer.output_shape) if all(isinstance(s, int) for s in layer.output_shape) \
            else str(layer.output_shape)
        table.add_row(str(layer.index), str(layer.from_), str(layer.repeats), f"{layer.params:,}", layer.module,
                      str(layer.arguments), shape)
    console.print(table)
    console.print(f"{len(info.layers)} layers, {info.parameters:,} parameters, {info.gflops:.2f} GFLOPs "
                  "(2 x MACs of convolutions and matrix products)")
    return 0


# ------------------------------------------------------------------------------------------------
def build_parser() -> argparse.ArgumentParser:
    """The ``vision-attn`` argument parser."""
    parser = argparse.ArgumentParser(
        prog="vision-attn", description="Attention in computer vision: models, FLOPs, training and a demo.",
        epilog=CONVENTIONS_LINE)
    parser.add_argument("--debug", action="store_true", help="show the full traceback of an error")
    parser.add_argument("--version", action="version", version=f"%(prog)s {vision_attn.__version__}")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    p = sub.add_parser("models", help="list registered models with parameters and GMACs",
                       description="Registered variants: parameters (M) and GMACs at their default image size. "
                       + CONVENTIONS["macs"] + ".")
    p.add_argument("pattern", nargs="?", default="*", help="shell-style pattern, e.g. 'deit_*' (default: all)")
    p.add_argument("--json", action="store_true", help="print a JSON list instead of a table")
    p.set_defaults(func=_cmd_models)

    p = sub.add_parser("flops", help="parameters, MACs and FLOPs of a model, a detector YAML or a run",
                       description="Parameters, MACs and FLOPs of one forward pass of a registered model, a "
                       "detector YAML or a run's checkpoint. " + CONVENTIONS_LINE)
    p.add_argument("model", metavar="TARGET", help="a registered model name (see `vision-attn models`), a detector "
                   "YAML (e.g. configs/detect/yolov8n.yaml) or a run (runs/NAME or its best.ckpt)")
    p.add_argument("--img-size", type=int, nargs="+", metavar="N", action=ImgSize,
                   help="image size: N (square) or H W; default: the model's own (640 for a YAML)")
    p.add_argument("--batch", type=int, default=1, help="batch size (default 1)")
    p.add_argument("--scale", default=None, help="YAML: a letter of its scales (default: from the file name)")
    p.add_argument("--attention", default=None, help="model name: insert this block first, e.g. cbam, se")
    p.add_argument("--json", action="store_true", help="print a JSON object instead of a table")
    p.add_argument("--markdown", action="store_true", help="print Markdown tables instead")
    p.add_argument("--by-module", action="store_true", help="also break the MACs down by module, as a tree")
    p.add_argument("--depth", type=int, default=2, help="--by-module: module levels shown (default 2)")
    p.set_defaults(func=_cmd_flops)

    p = sub.add_parser("demo", help="a tour: the FLOPs of the zoo, a forward pass on a photo, attention entropy",
                       description="FLOPs of the ViT/DeiT zoo, then one forward pass of a randomly initialised "
                       f"{DEMO_MODEL} on a photo at two sizes, with the class token's attention entropy per layer.")
    p.set_defaults(func=_cmd_demo)

    p = sub.add_parser("train", help="train a model: `train cls|det --config configs/{classify,detect}/NAME.yaml`",
                       description="Train a classifier (cls) on ImageNet-style folders or a YOLO-style detector (det) "
                       "on COCO json / YOLO txt data with PyTorch Lightning. `vision-attn train cls --help` "
                       "(or `train det --help`) lists every config key.")
    p.add_argument("task", choices=["cls", "det"], help="cls: image classification; det: object detection")
    p.add_argument("args", nargs=argparse.REMAINDER,
                   help="--config FILE, --section.key VALUE overrides, --print-config, --help")
    p.set_defaults(func=_cmd_train)

    p = sub.add_parser("eval", help="evaluate a trained run: `eval cls|det --checkpoint CKPT --data PATH`",
                       description="cls: top-1, top-5 and per-class accuracy of a run's checkpoint on a folder "
                       "(its val/ folder when it has one) or demo:NAME. det: COCO mAP@[.5:.95], mAP@.5 and "
                       "per-class AP on the val split of a COCO folder, a YOLO data YAML or demo:digit-boxes.")
    p.add_argument("task", choices=["cls", "det"], help="cls: image classification; det: object detection")
    p.add_argument("--checkpoint", required=True, help="a run's best.ckpt or last.ckpt (or the run folder)")
    p.add_argument("--data", required=True, help="a folder of class folders, a root with val/, or demo:digits")
    p.add_argument("--batch-size", type=int, default=64, help="images per batch (default 64)")
    p.add_argument("--workers", type=int, default=0, help="DataLoader worker processes (default 0)")
    p.add_argument("--json", action="store_true", help="print a JSON object instead of a table")
    p.set_defaults(func=_cmd_eval)

    p = sub.add_parser("predict", help="predict for images: `predict cls|det --checkpoint CKPT IMAGES... [-o OUT]`",
                       description="cls: top-k labels with probabilities; det: boxes with classes and scores (with "
                       "-o OUT: the images with boxes drawn and detections.json). Folders are searched for images.")
    p.add_argument("task", choices=["cls", "det"], help="cls: image classification; det: object detection")
    p.add_argument("images", nargs="+", help="image files or folders")
    p.add_argument("--checkpoint", required=True, help="a run's best.ckpt or last.ckpt (or the run folder)")
    p.add_argument("--top-k", type=int, default=5, help="labels per image (default 5)")
    p.add_argument("-o", "--output", default=None, help="det: folder for the images with boxes and detections.json")
    p.add_argument("--conf", type=float, default=0.25, help="det: lowest score of a detection (default 0.25)")
    p.add_argument("--iou", type=float, default=0.7, help="det: IoU of non-maximum suppression (default 0.7)")
    p.add_argument("--batch-size", type=int, default=32, help="images per batch (default 32)")
    p.add_argument("--json", action="store_true", help="print a JSON list instead of a table")
    p.set_defaults(func=_cmd_predict)

    p = sub.add_parser("yaml", help="detector YAMLs (ultralytics schema): `yaml info|insert|remove FILE`",
                       description="Detector YAMLs in the ultralytics schema, read safely (nothing in them runs). "
                       "insert/remove edit the rows with every `from` re-indexed and comments kept.")
    p.add_argument("action", choices=["info", "insert", "remove"],
                   help="info: per-row table (index, from, repeats, params, module, arguments, output shape) and "
                   "totals (layers, parameters, GFLOPs); insert: attention rows after rows of a module; "
                   "remove: take attention rows out")
    p.add_argument("file", nargs="?", default=None, help="a detector YAML, e.g. configs/detect/yolov8.yaml (or "
                   "yolov8n.yaml for scale n), or an ultralytics .pt (its model YAML); insert/remove: default the "
                   "YAML inside --checkpoint")
    p.add_argument("--scale", default=None, help="a letter of the file's scales (default: from the file name, "
                   "else the first)")
    p.add_argument("--img-size", type=int, default=640, help="square image size, a multiple of 32 (default 640)")
    p.add_argument("--json", action="store_true", help="print a JSON object instead of a table")
    p.add_argument("--block", default=None, help="insert/remove: attention module, e.g. CBAM, SE, ECA (remove: "
                   "default every attention block)")
    p.add_argument("--after", default=None, help="insert: after every row of this module, e.g. C2f")
    p.add_argument("--section", default="backbone", choices=["backbone", "head", "all"],
                   help="insert: where --after looks (default backbone)")
    p.add_argument("--at", default=None, help="insert: after these rows instead, e.g. 4,6")
    p.add_argument("--args", default=None, help="insert: the block's keyword arguments as a YAML mapping, "
                   "e.g. '{reduction: 8}'")
    p.add_argument("-o", "--output", default=None, help="insert/remove: the edited YAML (written atomically)")
    p.add_argument("--dry-run", action="store_true", help="insert/remove: print the diff and the parameter/GFLOPs "
                   "table at every scale; write nothing")
    p.add_argument("--checkpoint", default=None, help="insert/remove: a state dict of the original model to remap, "
                   "or an ultralytics .pt (best.pt: its YAML, weights and class names)")
    p.add_argument("--checkpoint-out", default=None, help="where to save the remapped state dict (for an ultralytics "
                   ".pt: a detector checkpoint that eval/predict/export/flops and train det's model.pretrained take)")
    p.add_argument("--no-identity-init", dest="identity_init", action="store_false",
                   help="insert with --checkpoint: new rows start from their own initialisation (default: as the "
                   "exact identity, so the model's outputs are unchanged until training moves them)")
    p.set_defaults(func=_cmd_yaml)
    register_all(sub)  # the commands kept in vision_attn/commands/
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line on ``argv`` (default ``sys.argv[1:]``); return the exit status."""
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as e:  # usage errors (status 2), --help and --version (0)
        return e.code if isinstance(e.code, int) else (0 if e.code is None else 2)
    console = Console(highlight=False)
    try:
        return args.func(args, console)
    except VisionAttnError as e:
        if args.debug:
            raise
        print("error: " + " ".join(str(e).split()), file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:  # `vision-attn models | head`: the reader left; stay quiet
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 1


if __name__ == "__main__":
    raise SystemExit(main())
