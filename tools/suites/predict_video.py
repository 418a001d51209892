"""Frames per second of ``predict det`` on a video against ultralytics' ``predict`` on the same video
and weights (ultralytics: a test-only peer, installed by ``make test`` without its dependencies).

Writes a synthetic 640x480 video (``vision_attn.data.video.write_synthetic_video``, 300 frames) and
one ultralytics checkpoint of ``--model`` (random weights, ultralytics' own ``YOLO(yaml).save``),
then times, alternating for ``--rounds`` rounds in separate processes (each process as a user starts
it; the seconds counted are the prediction loop's, not the imports):

- ours: ``predict_detection_video`` on that ``.pt`` (read by our safe reader), frames decoded in a
  background thread, batches of ``--batch`` frames, letterboxed to 640 on the long side and padded to
  a multiple of 32, the annotated video and the JSON Lines file written;
- ultralytics: ``YOLO(pt).predict(video, stream=True, imgsz=640)`` one frame at a time (its video
  default), with ``save=True`` (its annotated video) and without.

    python tools/bench.py predict-video --rounds 2
"""
from __future__ import annotations

import os
import statistics
import tempfile
import time
from pathlib import Path

from tools.suites.harness import Param, Suite, in_fresh_process, log


def ours(pt: str, video: str, out: str, batch: int, conf: float) -> dict:
    from vision_attn.data.video import open_frames
    from vision_attn.tasks import predict_detection_video

    result = predict_detection_video(pt, open_frames([video], batch_size=batch), out, conf=conf)
    return {"frames": result.frames, "seconds": result.seconds}


def peer(pt: str, video: str, out: str, save: bool, conf: float, size: int) -> dict:
    from tools.ultralytics_env import quiet_ultralytics_environment

    quiet_ultralytics_environment()
    from ultralytics import YOLO

    model = YOLO(pt)
    start, frames = time.perf_counter(), 0
    for _ in model.predict(video, stream=True, imgsz=size, conf=conf, save=save, project=out, name="pred",
                           verbose=False, device="cpu"):
        frames += 1
    return {"frames": frames, "seconds": time.perf_counter() - start}


def run(p, record) -> None:
    from tools.ultralytics_env import quiet_ultralytics_environment
    from vision_attn.data.video import write_synthetic_video

    with tempfile.TemporaryDirectory(prefix="bench_predict_video-") as tmp:
        work = Path(tmp)
        video = str(write_synthetic_video(work / "clip.mp4", p.frames))
        quiet_ultralytics_environment()
        from ultralytics import YOLO

        pt = str(work / "model.pt")
        YOLO(p.model).save(pt)
        sides = ["ours", "ultralytics", "ultralytics-save"]
        fps: dict[str, list[float]] = {s: [] for s in sides}
        for r in range(p.rounds):
            for side in sides:
                out = str(work / f"{side}-{r}")
                m = (in_fresh_process(ours, pt, video, out, p.batch, p.conf, env=dict(os.environ)) if side == "ours"
                     else in_fresh_process(peer, pt, video, out, side == "ultralytics-save", p.conf, 640,
                                           env=dict(os.environ)))
                fps[side].append(m["frames"] / m["seconds"])
                log(str(record.add("runs", {"round": r, "side": side, **m, "fps": round(fps[side][-1], 2)})))
    record.results.update({"model": p.model, "frames": p.frames, "size": "640x480", "batch": p.batch,
                           **{f"{s}_fps": round(statistics.median(v), 2) for s, v in fps.items()}})
    record.table(["side", "frames/s (median)"], [[s, f"{statistics.median(v):.2f}"] for s, v in fps.items()],
                 f"{p.model}, {p.frames} frames of 640x480, our batch {p.batch}, {p.rounds} alternating rounds")


SUITE = Suite("predict-video", "predict det on a video against ultralytics' predict: frames/s", run, (
    Param("model", "yolov8n.yaml", "an ultralytics detection YAML"),
    Param("frames", 300, "frames of the synthetic video", quick=4),
    Param("batch", 8, "our frames per batch (predict's default)", quick=2),
    Param("conf", 0.25, "confidence threshold"),
    Param("rounds", 2, "alternating rounds", quick=1),
), requires=("ultralytics",), doc=__doc__)
