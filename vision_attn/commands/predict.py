"""``vision-attn predict TASK --checkpoint RUN IMAGES...`` (or one video, camera or stream URL, or
``--frames``): parsing and printing only; the work is the task's ``Task.predict`` (e.g.
:func:`vision_attn.tasks.predict_images`), for videos its ``Task.predict_video``, and the table's column
its ``Task.prediction``."""
from __future__ import annotations

import argparse
import json
from typing import TYPE_CHECKING, Any

from vision_attn.commands._runtime import add_runtime_argument, runtime_of
from vision_attn.commands.train import TASK_HELP, TASK_NAMES

if TYPE_CHECKING:
    from rich.console import Console


def _task(args: argparse.Namespace, what: str) -> Any:
    """The task named on the command line, refused when its record lacks ``what`` (a Task field)."""
    from vision_attn.errors import ConfigError
    from vision_attn.tasks import get_task

    task = get_task(args.task)
    if getattr(task, what) is None:
        raise ConfigError(f"predict {task.name}: the {task.name} task does not predict "
                          f"{'videos' if what == 'predict_video' else 'images'}; its record (Task.{what}) must give it")
    return task


def _options(args: argparse.Namespace) -> Any:
    """What the command line asks of the task's predictor (``vision_attn.tasks.task.Options``)."""
    from vision_attn.tasks.task import Options

    return Options(top_k=args.top_k, conf=args.conf, iou=args.iou, output=args.output, batch_size=args.batch_size)


def _predict_video(args: argparse.Namespace, console: Console) -> int:
    from vision_attn.data.video import open_frames
    from vision_attn.errors import ConfigError

    task = _task(args, "predict_video")
    if args.output is None:
        raise ConfigError("predict on a video, camera, stream or --frames writes an annotated video and a JSON Lines "
                          "file: give the folder for them with -o OUT")
    reader = open_frames(args.images, as_frames=args.frames, batch_size=args.batch_size or 8, max_frames=args.max_frames,
                         stall_timeout=args.stall_timeout, default_fps=args.fps)
    result = task.predict_video(args.checkpoint, reader, args.output, _options(args), runtime_of(args))
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
    task = _task(args, "predict")
    results = task.predict(args.checkpoint, args.images, _options(args), runtime_of(args))
    if args.json:
        print(json.dumps(results, indent=2))
        return 0
    table = Table()
    table.add_column("image")
    if task.prediction is not None:
        header, cell = task.prediction
        table.add_column(header.format(k=args.top_k))
    for r in results:
        table.add_row(r["image"], *([cell(r)] if task.prediction is not None else []))
    console.print(table)
    if args.output and task.written:
        console.print(f"{len(results)} image(s) with {task.written} written to {args.output}")
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
    p.add_argument("task", help=TASK_HELP)
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
