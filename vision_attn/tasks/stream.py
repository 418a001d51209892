"""Prediction over the frames of a video, a folder of frames, a camera or a stream: the loop every
task shares (``predict cls|det`` on a video source).

:func:`predict_stream` reads batches from a :class:`~vision_attn.data.video.FrameReader` (decoded
ahead in its thread), asks the task's ``infer`` for one result per frame, and writes the frames with
the task's ``draw`` as ``OUT/STEM.mp4`` and one JSON line per frame (``{"frame", "time", **record}``)
as ``OUT/STEM.jsonl``. Both files are written beside their targets and renamed when the loop ends:

- the source ends (a file or folder), ``max_frames`` are done, or Ctrl-C stops a camera or stream:
  both files are finished and the :class:`StreamResult` returned;
- a live source ends early or any source stalls: both files are finished with the frames before it,
  then its :class:`~vision_attn.errors.DataError` is raised, naming them;
- anything else (a source that cannot be opened, a bad frame, Ctrl-C on a file): nothing is left.
"""
from __future__ import annotations

import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Sequence

import numpy as np

from vision_attn.data.video import FrameReader, StreamEnded, StreamStalled
from vision_attn.errors import DataError
from vision_attn.io.video import JsonLinesWriter, VideoWriter

__all__ = ["StreamResult", "predict_stream"]


@dataclass(frozen=True)
class StreamResult:
    """What a stream prediction did: frames predicted, wall-clock seconds (reading, model, drawing and
    writing together), frames per second, and the files written."""

    source: str
    frames: int
    seconds: float
    video: Path
    jsonl: Path
    stopped: bool = False  # Ctrl-C ended a live source

    @property
    def fps(self) -> float:
        return self.frames / self.seconds if self.seconds > 0 else 0.0


def predict_stream(reader: FrameReader, output: str | os.PathLike, *,
                   infer: Callable[[Sequence[np.ndarray]], Sequence[Any]],
                   draw: Callable[[np.ndarray, Any], np.ndarray],
                   record: Callable[[Any], dict[str, Any]], video_suffix: str = ".mp4") -> StreamResult:
    """Predict every frame of ``reader`` (closed at the end) into the folder ``output``: ``infer`` maps a
    batch of (H, W, 3) uint8 RGB frames to one result per frame, ``draw(frame, result)`` gives the
    annotated frame and ``record(result)`` its JSON line's fields."""
    out = Path(output)
    stem = reader.source.stem
    video: VideoWriter | None = None
    lines: JsonLinesWriter | None = None
    failure: DataError | None = None
    stopped = False
    start = time.perf_counter()
    try:
        for batch in reader:
            if video is None:
                video, lines = VideoWriter(out / f"{stem}{video_suffix}", reader.fps), JsonLinesWriter(out / f"{stem}.jsonl")
            assert lines is not None
            results = infer([frame for _, frame in batch])
            for (index, frame), result in zip(batch, results):
                lines.write({"frame": index, "time": round(index / reader.fps, 4), **record(result)})
                video.write(draw(frame, result))
    except (StreamStalled, StreamEnded) as e:
        failure = e
    except KeyboardInterrupt:
        if not reader.source.live:
            _abort(video, lines)
            raise
        stopped = True
    except BaseException:
        _abort(video, lines)
        raise
    finally:
        reader.close()
    seconds = time.perf_counter() - start
    if video is None or lines is None:
        raise failure or DataError(f"{reader.source.name}: no frames to predict")
    frames = lines.records
    jsonl = lines.commit()
    written = video.commit()
    if failure is not None:
        raise type(failure)(f"{failure}; the {frames} frame(s) before it are in {written} and {jsonl}")
    return StreamResult(reader.source.name, frames, seconds, written, jsonl, stopped)


def _abort(*writers: VideoWriter | JsonLinesWriter | None) -> None:
    for w in writers:
        if w is not None:
            w.abort()
