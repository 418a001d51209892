"""``vision-attn predict cls|det|seg --checkpoint RUN IMAGES...`` (or one video, camera or stream URL, or
``--frames``): parsing and printing only; the work is :func:`vision_attn.tasks.predict_images` /
:func:`vision_attn.tasks.predict_detections`, and for videos
:func:`~vision_attn.tasks.predict_classification_video` / :func:`~vision_attn.tasks.predict_detection_video`."""
from __future__ import annotations

import argparse
import json
from typing import TYPE_CHECKING, Any

from vision_attn.commands._runtime import add_runtime_argument, runtime_of
from vision_attn.commands.train import TASK_HELP, TASK_NAMES

if TYPE_CHECKING:
    from rich.console import Console
    from rich.table import Table


def _predict(args: argparse.Namespace) -> list[dict[str, Any]]:
    from vision_attn.tasks import predict_detections, predict_images, predict_segments

    if args.task == "cls":
        return predict_images(args.checkpoint, args.images, top_k=args.top_k, batch_size=args.batch_size or 32,
                              runtime=runtime_of(args))
    if args.task == "seg":
        return predict_segments(args.checkpoint, args.images, output=args.output, conf=args.conf, iou=args.iou,
                                batch_size=args.batch_size or 32, runtime=runtime_of(args))
    return predict_detections(args.checkpoint, args.images, output=args.output, conf=args.conf, iou=args.iou,
                              batch_size=args.batch_size or 32, runtime=runtime_of(args))


CELLS = {"cls": ("top-{k} (probability)", lambda r: ", ".join(f"{t['label']} ({t['prob']:.3f})" for t in r["top"])),
         "det": ("detections (class score)",
                 lambda r: ", ".join(f"{d['class']} {d['score']:.2f}" for d in r["detections"]) or "-")}
CELLS["seg"] = ("instances (class score)", CELLS["det"][1])


def _predict_video(args: argparse.Namespace, console: Console) -> int:
    from vision_attn.data.video import open_frames
    from vision_attn.errors import ConfigError
    from vision_attn.tasks import predict_classification_video, predict_detection_video, predict_segment_video

    if args.output is None:
        raise ConfigError("predict on a video, camera, stream or --frames writes an annotated video and a JSON Lines "
                          "file: give the folder for them with -o OUT")
    reader = open_frames(args.images, as_frames=args.frames, batch_size=args.batch_size or 8, max_frames=args.max_frames,
                         stall_timeout=args.stall_timeout, default_fps=args.fps)
    if args.task == "cls":
        result = predict_classification_video(args.checkpoint, reader, args.output, top_k=args.top_k,
                                              runtime=runtime_of(args))
    elif args.task == "seg":
        result = predict_segment_video(args.checkpoint, reader, args.output, conf=args.conf, iou=args.iou,
                                       runtime=runtime_of(args))
    else:
        result = predict_detection_video(args.checkpoint, reader, args.output, conf=args.conf, iou=args.iou,
                                         runtime=runtime_of(args))
    stopped = " (stopped by Ctrl-C)" if result.stopped else ""
    console.print(f"{result.source}: {result.frames} frames in {result.seconds:.1f} s ({result.fps:.1f} frames/s"
                  f"{'' if args.runtime == 'torch' else ', ' + args.runtime})"
                  f"{stopped}; written {result.video} and {result.jsonl}", soft_wrap=True)
    return 0


def _cmd_predict(args: argparse.Namespace, console: Console) -> int:
    from rich.table import Table

    from vision_attn.data.video import is_video_source

    if args.frames or any(is_video_source(i) for i in args.images):
        return _predict_video(args, console)
    results = _predict(args)
    if args.json:
        print(json.dumps(results, indent=2))
        return 0
    header, cell = CELLS[args.task]
    table = Table()
    table.add_column("image")
    table.add_column(header.format(k=args.top_k))
    for r in results:
        table.add_row(r["image"], cell(r))
    console.print(table)
    if args.output and args.task == "det":
        console.print(f"{len(results)} image(s) with boxes and detections.json written to {args.output}")
    if args.output and args.task == "seg":
        console.print(f"{len(results)} image(s) with masks and segments.json written to {args.output}")
    return 0


def register(sub: "argparse._SubParsersAction[argparse.ArgumentParser]") -> None:
    """Add ``predict``."""
    p = sub.add_parser("predict", help=f"predict for images or a video: `predict {'|'.join(TASK_NAMES)} --checkpoint RUN "
                       "IMAGES...|VIDEO [-o OUT]`",
                       description="cls: top-k labels with probabilities; det: boxes with classes and scores (with "
                       "-o OUT: the images with boxes drawn and detections.json); seg: boxes and masks (COCO RLE; with -o OUT "
                       "the images with masks drawn and segments.json). Folders are searched for images. "
                       "A video file, a camera index (0) or a stream URL (rtsp://, http://, ...), or images with "
                       "--frames, is read in a background thread and predicted in batches: OUT/NAME.mp4 annotated "
                       "and OUT/NAME.jsonl with one line per frame.")
    p.add_argument("task", choices=TASK_NAMES, help=TASK_HELP)
    p.add_argument("images", nargs="+", help="image files or folders; or one video file, camera index or stream URL")
    p.add_argument("--checkpoint", required=True, help="a run folder (runs/NAME) or its best.ckpt / last.ckpt")
    p.add_argument("--top-k", type=int, default=5, help="cls: labels per image (default 5)")
    p.add_argument("-o", "--output", default=None, help="det, seg: folder for the images with boxes (and masks) and detections.json (segments.json)")
    p.add_argument("--conf", type=float, default=0.25, help="det: lowest score of a detection (default 0.25)")
    p.add_argument("--iou", type=float, default=0.7, help="det: IoU of non-maximum suppression (default 0.7)")
    p.add_argument("--batch-size", type=int, default=None, help="images per batch (default 32; video frames: 8)")
    p.add_argument("--json", action="store_true", help="print a JSON list instead of a table")
    add_runtime_argument(p, calibrates=False)
    p.add_argument("--frames", action="store_true", help="the images (files and folders, in name order) are the "
                   "frames of one video: write an annotated video and a JSON Lines file")
    p.add_argument("--fps", type=float, default=30.0, help="video: frame rate of the output where the source has "
                   "none (--frames; default 30)")
    p.add_argument("--max-frames", type=int, default=None, help="video: stop after so many frames (a camera or "
                   "stream runs until then, or Ctrl-C)")
    p.add_argument("--stall-timeout", type=float, default=10.0, help="video: seconds without a frame before the "
                   "source counts as stalled (default 10)")
    p.set_defaults(func=_cmd_predict)
