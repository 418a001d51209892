"""Frames per second of ``predict det`` on a video against ultralytics' ``predict`` on the same video
and weights (benchmark-only peer; ultralytics is installed by ``make test``, without its dependencies).

Writes a synthetic 640x480 video (``vision_attn.data.video.write_synthetic_video``, 300 frames) and
one ultralytics checkpoint of ``--model`` (random weights, ultralytics' own ``YOLO(yaml).save``),
then times, alternating for ``--rounds`` rounds in separate processes (each process as a user starts
it; the seconds counted are the prediction loop's, not the imports):

- ours: ``predict_detection_video`` on that ``.pt`` (read by our safe reader), frames decoded in a
  background thread, batches of ``--batch`` frames, letterboxed to 640 on the long side and padded to
  a multiple of 32, the annotated video and the JSON Lines file written;
- ultralytics: ``YOLO(pt).predict(video, stream=True, imgsz=640)`` one frame at a time (its video
  default), with ``save=True`` (its annotated video) and without.

Prints one JSON line per measurement and a summary of the medians:

    .venv/bin/python tools/bench_predict_video.py --rounds 2
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

TOOLS = Path(__file__).resolve().parent


def _ours(pt: str, video: str, out: str, batch: int, conf: float) -> dict:
    from vision_attn.data.video import open_frames
    from vision_attn.tasks import predict_detection_video

    result = predict_detection_video(pt, open_frames([video], batch_size=batch), out, conf=conf)
    return {"frames": result.frames, "seconds": result.seconds}


def _peer(pt: str, video: str, out: str, save: bool, conf: float) -> dict:
    sys.path.insert(0, str(TOOLS))
    from ultralytics_env import quiet_ultralytics_environment

    quiet_ultralytics_environment()
    from ultralytics import YOLO

    model = YOLO(pt)
    start, frames = time.perf_counter(), 0
    for _ in model.predict(video, stream=True, imgsz=640, conf=conf, save=save, project=out, name="pred",
                           verbose=False, device="cpu"):
        frames += 1
    return {"frames": frames, "seconds": time.perf_counter() - start}


def _one(args: argparse.Namespace) -> None:
    if args.side == "ours":
        r = _ours(args.pt, args.video, args.out, args.batch, args.conf)
    else:
        r = _peer(args.pt, args.video, args.out, args.side == "ultralytics-save", args.conf)
    print(json.dumps(r))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="yolov8n.yaml", help="an ultralytics detection YAML (default yolov8n.yaml)")
    ap.add_argument("--frames", type=int, default=300)
    ap.add_argument("--batch", type=int, default=8, help="our frames per batch (default 8, predict's default)")
    ap.add_argument("--conf", type=float, default=0.25)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--side", default=None, help=argparse.SUPPRESS)
    ap.add_argument("--pt", default=None, help=argparse.SUPPRESS)
    ap.add_argument("--video", default=None, help=argparse.SUPPRESS)
    ap.add_argument("--out", default=None, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.side:
        return _one(args)

    from vision_attn.data.video import write_synthetic_video

    work = Path(tempfile.mkdtemp(prefix="bench_predict_video-"))
    video = write_synthetic_video(work / "clip.mp4", args.frames)
    sys.path.insert(0, str(TOOLS))
    from ultralytics_env import quiet_ultralytics_environment

    quiet_ultralytics_environment()
    from ultralytics import YOLO

    pt = work / "model.pt"
    YOLO(args.model).save(str(pt))
    sides = ["ours", "ultralytics", "ultralytics-save"]
    fps: dict[str, list[float]] = {s: [] for s in sides}
    for r in range(args.rounds):
        for side in sides:
            out = work / f"{side}-{r}"
            cmd = [sys.executable, __file__, "--side", side, "--pt", str(pt), "--video", str(video), "--out", str(out),
                   "--batch", str(args.batch), "--conf", str(args.conf)]
            line = subprocess.run(cmd, check=True, capture_output=True, text=True, env=os.environ).stdout.splitlines()[-1]
            m = json.loads(line)
            fps[side].append(m["frames"] / m["seconds"])
            print(json.dumps({"round": r, "side": side, **m, "fps": round(fps[side][-1], 2)}), flush=True)
    print(json.dumps({"model": args.model, "frames": args.frames, "size": "640x480", "batch": args.batch,
                      "threads": os.cpu_count(), **{f"{s}_fps": round(statistics.median(v), 2) for s, v in fps.items()}}))


if __name__ == "__main__":
    main()
