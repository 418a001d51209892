"""``vision-attn export onnx|openvino|torchscript|quantize``: an ONNX file of a classifier or detector,
checked in onnxruntime; OpenVINO IR checked in OpenVINO's runtime; a traced TorchScript file for
libtorch; and the dynamic INT8 ONNX version with the latency and accuracy change (parsing and printing
only; see vision_attn.export)."""
from __future__ import annotations

import argparse
import os
from typing import TYPE_CHECKING

from vision_attn.commands import ImgSize
from vision_attn.errors import ConfigError
from vision_attn.io.atomic import output_folder

if TYPE_CHECKING:
    from rich.console import Console
    from rich.table import Table

DEFAULT_OPSET = 18  # vision_attn.export.DEFAULT_OPSET, repeated so that --help does not import torch


def _deployable(args: argparse.Namespace, console: Console, what: str):
    """The network ``--model``/``--checkpoint``/``--yaml`` name (its notes printed), once ``-o`` is checked."""
    from vision_attn.export import load_deployable

    if args.output is None:
        raise ConfigError(f"export {args.format}: say where to write {what} with -o {what}")
    output_folder(os.path.abspath(args.output), label=f"-o {args.output}")
    dep = load_deployable(model=args.model, checkpoint=args.checkpoint, yaml=args.yaml, scale=args.scale,
                          img_size=args.img_size)
    for note in dep.notes:
        console.print(f"note: {note}", markup=False, soft_wrap=True)
    return dep


def _print_parity(report, console: Console, runtime: str = "onnxruntime") -> None:
    from rich.table import Table

    table = Table(title=f"{runtime} vs PyTorch: max abs difference")
    table.add_column("input")
    table.add_column("shape")
    for k in report.tolerances:
        table.add_column(f"{k} (tol {report.tolerances[k]:g})", justify="right")
    for c in report.checks:
        table.add_row(c.input, "x".join(map(str, c.shape)), *[f"{c.diffs[k]:.2e}" for k in report.tolerances])
    console.print(table)
    for c in report.checks:
        if c.exact and any(c.diffs[k] > t for k, t in report.tolerances.items()):
            console.print(f"{c.input}: against a float64 PyTorch run, {runtime} is " +
                          ", ".join(f"{k} {c.exact[k]:.2e}" for k in report.tolerances) + " off and PyTorch float32 " +
                          ", ".join(f"{k} {c.own[k]:.2e}" for k in report.tolerances) +
                          ": within 4x float32's own rounding (docs/deploy.md)", markup=False, soft_wrap=True)


def _cmd_onnx(args: argparse.Namespace, console: Console) -> int:
    import torch

    from vision_attn.export import export_onnx
    from vision_attn.export.outputs import WITH_NMS
    from vision_attn.export.verify import verify_onnx
    from vision_attn.models.yolo.postprocess import is_end_to_end

    dep = _deployable(args, console, "OUT.onnx")
    model, exporter = dep.model, args.exporter or "dynamo"
    outputs, out_desc = _outputs(dep)
    end2end = dep.boxes and is_end_to_end(dep.model)
    if end2end:
        outputs, out_desc = _outputs(dep, "of the one-to-one branch (an end-to-end head needs no NMS: keep the top-k "
                                          "scores): ")
    if args.nms and not dep.boxes:
        raise ConfigError("--nms applies to detectors and segmenters (--yaml or a det/seg run); a classifier has no "
                          "boxes")
    if args.nms and dep.kind not in WITH_NMS:
        raise ConfigError(f"--nms applies to detectors and segmenters; {dep.label} exports its {dep.kind} rows "
                          f"({outputs[0]}): export it without --nms and run the NMS on them (eval / predict --runtime do)")
    if args.nms and end2end and dep.kind == "segmenter":
        raise ConfigError(f"{dep.label} is an end-to-end segmenter (YOLO26): export it without --nms and keep the "
                          "rows of its top-k scores (the graph's outputs are the one-to-one branch's)")
    if args.nms and end2end:
        from vision_attn.export.topk import DetectorWithTopK

        console.print(f"note: {dep.label} is end to end: --nms adds no NMS; the graph ends with the top-{args.max_det} "
                      "(anchor, class) scores of its one-to-one branch (--conf and --iou do not apply: drop the "
                      "rows under your threshold)", markup=False, soft_wrap=True)
        model = DetectorWithTopK(dep.model, max_det=args.max_det).eval()
        outputs = ["detections"]
        out_desc = f"(B, K, 6) with K = min({args.max_det}, anchors): x1, y1, x2, y2, score, class by falling score"
    elif args.nms:
        from vision_attn.export.nms import DetectorWithNMS, SegmenterWithNMS

        if args.dynamic_batch or args.exporter == "dynamo":
            raise ConfigError("--nms exports one image per call with the TorchScript exporter (torch.export cannot "
                              "hold a data-dependent box count): drop --dynamic-batch and --exporter dynamo")
        wrapper = SegmenterWithNMS if dep.kind == "segmenter" else DetectorWithNMS
        model, exporter = wrapper(dep.model, conf=args.conf, iou=args.iou, max_det=args.max_det).eval(), "torchscript"
        outputs = ["detections"]
        out_desc = f"(N, 6): x1, y1, x2, y2, score, class after NMS (conf {args.conf}, IoU {args.iou})"
        if dep.kind == "segmenter":
            outputs.append("masks")
            out_desc += ("; output 'masks' (N, H/4, W/4): each instance's mask logits at the prototypes' resolution "
                         "(resize to the input, keep > 0 inside its box: prediction's masks)")
    torch.set_num_threads(max(1, args.threads or torch.get_num_threads()))
    result = export_onnx(model, args.output, dep.input_size, dynamic_batch=args.dynamic_batch, opset=args.opset,
                         exporter=exporter, output_names=outputs)
    h, w = dep.input_size
    shape = f"({'B' if args.dynamic_batch else 1}, 3, {h}, {w})"
    console.print(f"{dep.label}: {args.output}  opset {result.opset}, {exporter} exporter, {result.nodes} nodes, "
                  f"{os.path.getsize(args.output) / 2**20:.1f} MiB, {result.seconds:.1f} s", markup=False, soft_wrap=True)
    console.print(f"input '{result.input_name}' {shape} float32; output '{result.output_names[0]}' {out_desc}",
                  markup=False, soft_wrap=True)
    if args.verify:
        report = verify_onnx(args.output, dep, batches=(1, 3) if args.dynamic_batch else (1,), model=model)
        _print_parity(report, console)
        console.print("parity: ok (every difference within tolerance)")
    return 0


def _outputs(dep, branch: str = "") -> tuple[list[str], str]:
    """The graph's output names and their description for the console (``branch``: words before the first
    output's description, e.g. which branch of an end-to-end head it is)."""
    names = [name for name, _ in dep.outputs]
    desc = "; ".join(f"{'' if i == 0 else f'output {n!r} '}{branch if i == 0 else ''}{d}"
                     for i, (n, d) in enumerate(dep.outputs))
    return names, desc


def _cmd_openvino(args: argparse.Namespace, console: Console) -> int:
    import torch

    from vision_attn.export.openvino import export_openvino, openvino_model, require_openvino, run_openvino
    from vision_attn.export.verify import verify_outputs

    require_openvino()  # before the model is built: the install hint comes first
    dep = _deployable(args, console, "OUT.xml")
    outputs, out_desc = _outputs(dep)
    torch.set_num_threads(max(1, args.threads or torch.get_num_threads()))
    result = export_openvino(dep.model, args.output, dep.input_size, dynamic_batch=args.dynamic_batch,
                             precision=args.precision, opset=args.opset, exporter=args.exporter or "dynamo",
                             output_names=tuple(outputs))
    h, w = dep.input_size
    mib = (os.path.getsize(result.xml) + os.path.getsize(result.bin)) / 2**20
    console.print(f"{dep.label}: {result.xml} + {result.bin.name}  {result.precision} weights, {mib:.1f} MiB, "
                  f"{result.seconds:.1f} s", markup=False, soft_wrap=True)
    console.print(f"input 'images' ({'B' if args.dynamic_batch else 1}, 3, {h}, {w}) float32; output "
                  f"'{outputs[0]}' {out_desc}", markup=False, soft_wrap=True)
    if args.verify:
        compiled = openvino_model(result.xml, threads=args.threads, hint="f32")
        report = verify_outputs(lambda x: run_openvino(compiled, x), result.xml, "OpenVINO", dep,
                                batches=(1, 3) if args.dynamic_batch else (1,),
                                scale=10.0 if args.precision == "fp16" else 1.0, factor=8.0,
                                hint="try --exporter torchscript or --precision fp32")
        _print_parity(report, console, "OpenVINO (f32 hint)")
        console.print("parity: ok (every difference within tolerance)")
    return 0


def _cmd_torchscript(args: argparse.Namespace, console: Console) -> int:
    import torch

    from vision_attn.export.torchscript import export_torchscript, load_torchscript
    from vision_attn.export.verify import verify_outputs

    dep = _deployable(args, console, "OUT.pt")
    _, out_desc = _outputs(dep)
    torch.set_num_threads(max(1, args.threads or torch.get_num_threads()))
    result = export_torchscript(dep.model, args.output, dep.input_size)
    console.print(f"{dep.label}: {result.path}  traced at {'x'.join(map(str, result.input_shape))}, "
                  f"{os.path.getsize(result.path) / 2**20:.1f} MiB, {result.seconds:.1f} s; output {out_desc}",
                  markup=False, soft_wrap=True)
    if args.verify:
        traced = load_torchscript(result.path)
        with torch.no_grad():
            report = verify_outputs(lambda x: traced(x), result.path, "TorchScript", dep, batches=(1, 3), scale=0.1)
        _print_parity(report, console, "TorchScript")
        console.print("parity: ok (every difference within tolerance)")
    return 0


def _cmd_qat(args: argparse.Namespace, console: Console) -> int:
    import torch
    from rich.table import Table

    from vision_attn.export.qat import quantize_aware

    if args.checkpoint is None or args.model is not None or args.yaml is not None:
        raise ConfigError("--qat fine-tunes a trained run: give --checkpoint runs/NAME (not --model or --yaml)")
    if args.output is None:
        raise ConfigError("--qat writes a folder: say where with -o FOLDER")
    if args.static or args.max_drop is not None or args.runtime != "onnxruntime" or args.fp32_output:
        raise ConfigError("--qat writes both OpenVINO INT8 and onnxruntime QDQ and takes no --static, --runtime, "
                          "--max-drop or --fp32-output")
    torch.set_num_threads(max(1, args.threads or torch.get_num_threads()))
    say = lambda line: console.print(line, markup=False, soft_wrap=True)  # noqa: E731
    r = quantize_aware(args.checkpoint, args.output, data=args.data, epochs=args.epochs, steps=args.steps,
                       lr_scale=args.lr_scale, calibration_images=args.calibration_images, say=say)
    table = Table(title=f"quantization-aware training: {r.quantizers} fake quantizers, {r.steps} steps")
    table.add_column("model")
    table.add_column("file")
    table.add_column("max diff from fake-quantized PyTorch", justify="right")
    if r.top1:
        table.add_column(f"top-1 on {r.images} images", justify="right")
        table.add_row("PyTorch FP32 (the run)", "", "", f"{100 * r.top1['fp32']:.2f}%")
    for name, path in r.files.items():
        cells = [f"{name} INT8", str(path), f"{r.parity[name]:.2e}"]
        table.add_row(*cells, *([f"{100 * r.top1[name]:.2f}%"] if r.top1 else []))
    console.print(table)
    say(f"QAT models in {r.folder} (qat.json: this report); accuracy of each: vision-attn eval {r.task} "
        f"--checkpoint {args.checkpoint} --data {args.data or 'DATA'} --runtime openvino-int8 --int8-model "
        f"{r.files['openvino']}")
    return 0


def _cmd_quantize(args: argparse.Namespace, console: Console) -> int:
    import torch
    from rich.table import Table

    from vision_attn.export.quantize import quantize_and_compare

    if args.qat:
        return _cmd_qat(args, console)
    dep = _deployable(args, console, "OUT.int8.xml" if args.runtime == "openvino" else "OUT.int8.onnx")
    if dep.boxes and not args.static and args.runtime == "onnxruntime":
        console.print("note: dynamic INT8 quantizes MatMul/Gemm weights; a convolutional detector has few of them, "
                      "so expect little change", markup=False, soft_wrap=True)
    torch.set_num_threads(max(1, args.threads or torch.get_num_threads()))
    r = quantize_and_compare(dep, args.output, fp32_output=args.fp32_output, data=args.data, batch=args.batch,
                             rounds=args.rounds, opset=args.opset, exporter=args.exporter or "dynamo",
                             static=args.static, calibration_images=args.calibration_images, runtime=args.runtime,
                             max_drop=args.max_drop)
    if args.runtime == "openvino":
        aware = f", accuracy-aware (top-1 drop at most {args.max_drop:g} pts)" if args.max_drop is not None else ""
        kind = f"NNCF static INT8, calibrated on {args.calibration_images} images{aware}"
    else:
        kind = f"static INT8, calibrated on {args.calibration_images} images" if args.static else "dynamic INT8"
    table = Table(title=f"{dep.label}: {kind} ({args.runtime}) vs FP32")
    table.add_column("quantity")
    table.add_column("FP32", justify="right")
    table.add_column("INT8", justify="right")
    table.add_column("change", justify="right")
    table.add_row("file MiB", f"{r.fp32_mib:.2f}", f"{r.int8_mib:.2f}", f"{r.int8_mib / r.fp32_mib:.2f}x")
    table.add_row(f"latency ms, batch {r.batch}", f"{r.fp32_ms:.2f}", f"{r.int8_ms:.2f}",
                  f"{r.fp32_ms / r.int8_ms:.2f}x faster")
    if r.fp32_top1 is not None and r.int8_top1 is not None:
        table.add_row(f"top-1 on {r.images} images", f"{100 * r.fp32_top1:.2f}%", f"{100 * r.int8_top1:.2f}%",
                      f"{100 * (r.int8_top1 - r.fp32_top1):+.2f} pts")
    console.print(table)
    console.print(f"INT8 model: {args.output} (torch.set_num_threads {torch.get_num_threads()}; "
                  "latency: median over alternating rounds)", markup=False, soft_wrap=True)
    if dep.boxes and args.data is not None and args.checkpoint is not None:
        runtime = "openvino-int8" if args.runtime == "openvino" else "onnxruntime-qdq" if args.static else \
            "onnxruntime-int8"
        console.print(f"mAP of each precision: vision-attn eval {dep.task} --checkpoint {args.checkpoint} --data {args.data} "
                      f"--runtime {runtime} (and --runtime {args.runtime} for FP32)", markup=False, soft_wrap=True)
    return 0


def register(sub: "argparse._SubParsersAction[argparse.ArgumentParser]") -> None:
    """Add ``export onnx|openvino|torchscript|quantize``."""
    p = sub.add_parser("export", help="ONNX, OpenVINO and TorchScript export with parity checks; INT8 quantization",
                       description="Deploy a classifier or detector: `export onnx` writes an ONNX file (checked "
                       "in onnxruntime with --verify); `export openvino` OpenVINO IR (checked in OpenVINO); "
                       "`export torchscript` a traced file for libtorch; `export quantize` the dynamic INT8 ONNX "
                       "version with the latency and accuracy change.")
    fmt = p.add_subparsers(dest="format", required=True, metavar="FORMAT")
    for name, help_text in (("onnx", "an ONNX file, optionally verified against PyTorch in onnxruntime"),
                            ("openvino", "OpenVINO IR (.xml + .bin) from the ONNX graph, optionally verified in "
                             "OpenVINO's CPU runtime (needs: pip install openvino)"),
                            ("torchscript", "a traced TorchScript file for libtorch (C++), optionally verified"),
                            ("quantize", "dynamic INT8 ONNX (onnxruntime) of the linear layers (MatMul/Gemm) of a model or run")):
        q = fmt.add_parser(name, help=help_text, description=help_text)
        src = q.add_argument_group("what to export (one of --model, --checkpoint, --yaml)")
        src.add_argument("--model", help="registered model name, e.g. vit_tiny_patch16_224 (random weights "
                         "unless --checkpoint gives a state dict)")
        src.add_argument("--checkpoint", help="a run's best.ckpt (or run folder), or with --model/--yaml a "
                         "state dict file")
        src.add_argument("--yaml", help="a detector YAML (ultralytics schema)")
        src.add_argument("--scale", help="the YAML's scale letter (n, s, m, ...)")
        q.add_argument("-o", "--output", help={"openvino": "the .xml file to write (the .bin goes beside it)",
                                                "torchscript": "the .pt file to write"}.get(name, "the .onnx file to write"))
        q.add_argument("--img-size", type=int, nargs="+", metavar="N", action=ImgSize,
                       help="input size N or H W (default: the model's, a run's, or 640 for detectors)")
        if name != "torchscript":
            q.add_argument("--opset", type=int, default=DEFAULT_OPSET, help=f"ONNX opset (default {DEFAULT_OPSET})")
            q.add_argument("--exporter", choices=("dynamo", "torchscript"), default=None,
                           help="torch.export-based (default; torchscript with --nms) or the legacy TorchScript "
                           "tracer (faster to export)")
        q.add_argument("--threads", type=int, default=None, help="CPU threads (default: torch's)")
        if name == "openvino":
            q.add_argument("--dynamic-batch", action="store_true", help="symbolic batch size (default: 1)")
            q.add_argument("--precision", choices=("fp32", "fp16"), default="fp32",
                           help="weights in the .bin: fp32 (default) or fp16 (half the file; the compiled model "
                           "chooses its arithmetic precision, see docs/deploy.md)")
            q.add_argument("--verify", action="store_true",
                           help="run OpenVINO (f32 hint) and PyTorch on random inputs and china.jpg; exit 2 above "
                           "1e-4 (1e-3 for detector boxes in pixels; ten times that with --precision fp16)")
            q.set_defaults(func=_cmd_openvino)
        elif name == "torchscript":
            q.add_argument("--verify", action="store_true",
                           help="load the file back and compare it with PyTorch on random inputs (batch 1 and 3) "
                           "and china.jpg; exit 2 above 1e-5")
            q.set_defaults(func=_cmd_torchscript)
        elif name == "onnx":
            q.add_argument("--dynamic-batch", action="store_true", help="symbolic batch size (default: 1)")
            q.add_argument("--verify", action="store_true",
                           help="run onnxruntime and PyTorch on random inputs and china.jpg; exit 2 above "
                           "1e-4 (1e-3 for detector boxes in pixels)")
            q.add_argument("--nms", action="store_true", help="detectors: NMS inside the graph, output (N, 6) "
                           "x1 y1 x2 y2 score class for one image (TorchScript exporter); an end-to-end detector "
                           "(YOLO26, YOLOv10) gets no NMS but its top-k, output (B, max-det, 6), any exporter")
            q.add_argument("--conf", type=float, default=0.25, help="--nms: lowest class probability kept (0.25)")
            q.add_argument("--iou", type=float, default=0.7, help="--nms: IoU threshold (0.7)")
            q.add_argument("--max-det", type=int, default=300, help="--nms: detections kept at most (300)")
            q.set_defaults(func=_cmd_onnx)
        else:
            q.add_argument("--data", help="labelled folder (class folders, or its val/) or demo:digits: "
                           "top-1 of FP32 and INT8")
            q.add_argument("--fp32-output", help="also keep the FP32 .onnx here (default: a temporary file)")
            q.add_argument("--batch", type=int, default=8, help="batch size of the latency figure (default 8)")
            q.add_argument("--rounds", type=int, default=10, help="timed rounds, alternating (default 10)")
            q.add_argument("--static", action="store_true", help="static INT8 (QDQ, every Conv/MatMul/Gemm, "
                           "activation ranges calibrated on --data's training images) instead of dynamic")
            q.add_argument("--calibration-images", type=int, default=256,
                           help="--static: calibration images, a seeded sample of --data's train folder (256)")
            q.add_argument("--runtime", choices=["onnxruntime", "openvino"], default="onnxruntime",
                           help="onnxruntime (default: dynamic, or --static QDQ) or openvino (NNCF's static INT8 "
                           "of the OpenVINO IR, calibrated on --data; -o NAME.xml; pip install nncf)")
            q.add_argument("--max-drop", type=float, default=None,
                           help="--runtime openvino: NNCF's accuracy-aware INT8, layers kept FP32 until top-1 on "
                           "--data's val folder is within this many points of FP32's")
            q.add_argument("--qat", action="store_true",
                           help="quantization-aware training (NNCF): fine-tune the run --checkpoint fake-quantized "
                           "with its own training step, write OpenVINO INT8 and onnxruntime QDQ into the folder -o")
            q.add_argument("--epochs", type=int, default=1, help="--qat: fine-tuning epochs (default 1)")
            q.add_argument("--steps", type=int, default=None, help="--qat: at most this many optimizer steps")
            q.add_argument("--lr-scale", type=float, default=0.1,
                           help="--qat: the fine-tune's learning rate as a fraction of the run's (default 0.1)")
            q.set_defaults(func=_cmd_quantize)
