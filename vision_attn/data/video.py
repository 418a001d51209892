"""Frames from a video file, a folder of frames, a camera or a stream URL, read in a background thread.

:func:`open_frames` names the source (:func:`frame_source` tells what a command-line argument is);
iterating a :class:`FrameReader` gives batches of ``(index, frame)`` with frames as (H, W, 3) uint8
RGB, while a daemon thread decodes the next frames into a bounded queue, so decoding runs ahead of
the model. Video files, cameras and streams are read by OpenCV's FFmpeg backend (``cv2`` ships with
albumentations); a folder of frames by :func:`~vision_attn.data.detection.read_image`, in name order.

How a source can fail, and what the reader says (a :class:`~vision_attn.errors.DataError`, one line):

- it cannot be opened (no such file, not a video, a codec FFmpeg lacks, a URL that does not answer);
- no frame arrives for ``stall_timeout`` seconds (a stream that stalls, a file that blocks):
  :class:`StreamStalled`, after the frames already given;
- a camera or a stream ends before ``max_frames`` (live sources do not end on their own):
  :class:`StreamEnded`, after the frames already given. A video file or a folder simply ends.
"""
from __future__ import annotations

import os
import queue
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator, Sequence

import cv2
import numpy as np

from vision_attn.data.detection import read_image
from vision_attn.data.faults import IMAGE_EXTENSIONS
from vision_attn.data.folder import image_paths
from vision_attn.errors import ConfigError, DataError
from vision_attn.io.video import VideoWriter

__all__ = ["VIDEO_EXTENSIONS", "STREAM_SCHEMES", "FrameSource", "FrameReader", "StreamEnded", "StreamStalled",
           "frame_source", "is_video_source", "open_frames", "write_synthetic_video"]

VIDEO_EXTENSIONS = frozenset({".mp4", ".avi", ".mov", ".mkv", ".webm", ".m4v", ".mpg", ".mpeg", ".wmv", ".flv",
                              ".ts", ".mjpeg"})
STREAM_SCHEMES = ("rtsp://", "rtsps://", "rtmp://", "http://", "https://", "udp://", "tcp://", "srt://")


class StreamStalled(DataError):
    """No frame arrived for the stall timeout."""


class StreamEnded(DataError):
    """A camera or a stream ended before the frames asked for."""


@dataclass(frozen=True)
class FrameSource:
    """What to read: ``kind`` is ``"video"`` (a file), ``"frames"`` (image files in order), ``"camera"``
    (a device index) or ``"stream"`` (a URL); ``name`` is what messages call it and ``stem`` the name of
    its outputs."""

    kind: str
    target: str | int | tuple[Path, ...]
    name: str
    stem: str

    @property
    def live(self) -> bool:
        """A camera or a stream: it does not end on its own."""
        return self.kind in ("camera", "stream")


def is_video_source(item: str | os.PathLike) -> bool:
    """A video file (by its extension), a stream URL or a camera index (``"0"``)."""
    text = os.fspath(item)
    return text.isdigit() or text.lower().startswith(STREAM_SCHEMES) or Path(text).suffix.lower() in VIDEO_EXTENSIONS


def frame_source(item: str | os.PathLike) -> FrameSource:
    """The :class:`FrameSource` of a command-line argument: a camera index, a URL or a video file."""
    text = os.fspath(item)
    if text.isdigit():
        return FrameSource("camera", int(text), f"camera {text}", f"camera{text}")
    if text.lower().startswith(STREAM_SCHEMES):
        stem = Path(text.split("?", 1)[0].rstrip("/").rsplit("/", 1)[-1]).stem
        return FrameSource("stream", text, f"stream {text}", stem if stem and "." not in stem else "stream")
    path = Path(text)
    if not path.exists():
        raise DataError(f"video {path}: no such file")
    if path.is_dir():
        raise DataError(f"video {path}: a folder; give a video file, or the folder's images with --frames")
    return FrameSource("video", text, f"video {path}", path.stem)


def frames_source(paths: Sequence[Path], name: str) -> FrameSource:
    """Image files, in the order given, as the frames of one video called ``name``."""
    if not paths:
        raise DataError(f"{name}: no frames")
    return FrameSource("frames", tuple(paths), f"frames {name}", Path(name).stem or "frames")


_END = object()


class FrameReader:
    """Batches of ``(index, frame)`` from ``source``, decoded ahead in a daemon thread.

    ``batch_size``: frames per batch (the last may be shorter); ``max_frames``: stop after so many;
    ``stall_timeout``: seconds without a frame before :class:`StreamStalled`; ``prefetch``: frames
    decoded ahead (default two batches). ``fps`` and ``size`` (width, height) are known once the first
    batch is out (``fps`` is the source's, or ``default_fps`` where it has none). Use as a context
    manager (or call :meth:`close`): the thread stops and the source is released.
    """

    def __init__(self, source: FrameSource, *, batch_size: int = 16, max_frames: int | None = None,
                 stall_timeout: float = 10.0, prefetch: int | None = None, default_fps: float = 30.0) -> None:
        if batch_size < 1 or (max_frames is not None and max_frames < 1) or stall_timeout <= 0:
            raise ConfigError(f"batch_size={batch_size}, max_frames={max_frames}, stall_timeout={stall_timeout}: "
                              "give a batch size >= 1, max_frames >= 1 (or none) and a timeout > 0 seconds")
        self.source, self.batch_size, self.max_frames = source, batch_size, max_frames
        self.stall_timeout = float(stall_timeout)
        self.fps, self.size = float(default_fps), (0, 0)
        self.frames_read = 0
        self._queue: queue.Queue = queue.Queue(maxsize=prefetch or 2 * batch_size)
        self._stop = threading.Event()
        self._opened = threading.Event()
        self._thread = threading.Thread(target=self._read, name=f"vision_attn-frames-{source.stem}", daemon=True)
        self._thread.start()

    # -- the reading thread ------------------------------------------------------------------------
    def _put(self, item: object) -> bool:
        while not self._stop.is_set():
            try:
                self._queue.put(item, timeout=0.1)
                return True
            except queue.Full:
                continue
        return False

    def _read(self) -> None:
        try:
            frames = self._frames_of_folder() if self.source.kind == "frames" else self._frames_of_capture()
            for i, frame in enumerate(frames):
                if (self.max_frames is not None and i >= self.max_frames) or not self._put((i, frame)):
                    break
            self._put(_END)
        except DataError as e:
            self._put(e)
        except Exception as e:  # noqa: BLE001 - anything else is reported in the reading thread's words
            self._put(DataError(f"{self.source.name}: reading failed ({type(e).__name__}: {e})"))

    def _frames_of_folder(self) -> Iterator[np.ndarray]:
        paths = self.source.target
        assert isinstance(paths, tuple)
        for path in paths:
            if path.suffix.lower() not in IMAGE_EXTENSIONS:
                raise DataError(f"frame {path}: not an image file ({', '.join(sorted(IMAGE_EXTENSIONS))})")
            frame = read_image(path)
            if not self._opened.is_set():
                self.size = (frame.shape[1], frame.shape[0])
                self._opened.set()
            elif (frame.shape[1], frame.shape[0]) != self.size:
                raise DataError(f"frame {path} is {frame.shape[1]}x{frame.shape[0]} but the first frame is "
                                f"{self.size[0]}x{self.size[1]}; the frames of one video share a size (resize them)")
            yield frame

    def _frames_of_capture(self) -> Iterator[np.ndarray]:
        os.environ.setdefault("OPENCV_FFMPEG_LOGLEVEL", "-8")  # FFmpeg's own lines would break one-line errors
        if self.source.kind == "camera":
            capture = cv2.VideoCapture(self.source.target)
        else:  # FFmpeg gives up a little after the reader does, so that this thread ends too
            ms = int(self.stall_timeout * 1000) + 500
            capture = cv2.VideoCapture(self.source.target, cv2.CAP_FFMPEG,
                                       [cv2.CAP_PROP_OPEN_TIMEOUT_MSEC, ms, cv2.CAP_PROP_READ_TIMEOUT_MSEC, ms])
        try:
            if not capture.isOpened():
                hint = {"video": "not a video, damaged (an MP4 cut short has no index), or a codec OpenCV's FFmpeg "
                                 "lacks; try re-encoding it: ffmpeg -i IN -c:v libx264 OUT.mp4",
                        "camera": "no such camera, or it is in use",
                        "stream": "the address does not answer or is not a video stream"}[self.source.kind]
                raise DataError(f"{self.source.name}: cannot be opened ({hint})")
            fps = capture.get(cv2.CAP_PROP_FPS)
            if fps and 0 < fps < 1000:
                self.fps = float(fps)
            self.size = (int(capture.get(cv2.CAP_PROP_FRAME_WIDTH)), int(capture.get(cv2.CAP_PROP_FRAME_HEIGHT)))
            self._opened.set()
            while not self._stop.is_set():
                ok, frame = capture.read()
                if not ok:
                    return
                yield cv2.cvtColor(frame, cv2.COLOR_BGR2RGB)
        finally:
            capture.release()

    # -- the consumer ------------------------------------------------------------------------------
    def _next(self) -> tuple[int, np.ndarray] | None:
        try:
            item = self._queue.get(timeout=self.stall_timeout)
        except queue.Empty:
            what = "could not be opened" if not self._opened.is_set() else "sent no frame"
            raise StreamStalled(f"{self.source.name}: {what} within {self.stall_timeout:g} s (after "
                                f"{self.frames_read} frame(s)); the source stalled (raise --stall-timeout for a slow "
                                "source)") from None
        if item is _END:
            if self.source.live and (self.max_frames is None or self.frames_read < self.max_frames):
                raise StreamEnded(f"{self.source.name}: ended after {self.frames_read} frame(s)"
                                  + (f" of the {self.max_frames} asked for" if self.max_frames else "")
                                  + " (the source closed)")
            return None
        if isinstance(item, DataError):
            raise item
        self.frames_read += 1
        return item

    def __iter__(self) -> Iterator[list[tuple[int, np.ndarray]]]:
        batch: list[tuple[int, np.ndarray]] = []
        while True:
            try:
                item = self._next()
            except (StreamStalled, StreamEnded):
                if batch:  # the frames before the failure are predicted first
                    yield batch
                raise
            if item is None:
                break
            batch.append(item)
            if len(batch) == self.batch_size:
                yield batch
                batch = []
        if batch:
            yield batch

    def close(self) -> None:
        """Stop the reading thread (it releases the source); a thread stuck in the decoder is left to exit
        with the process (it is a daemon)."""
        self._stop.set()
        self._thread.join(timeout=1.0)

    def __enter__(self) -> FrameReader:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def open_frames(items: Sequence[str | os.PathLike], *, as_frames: bool = False, **options: object) -> FrameReader:
    """A :class:`FrameReader` of one video file, camera index or stream URL (``items`` of one), or with
    ``as_frames`` of the image files among ``items`` (folders searched, in name order) as one video's
    frames; ``options`` go to the reader."""
    if as_frames:
        paths = image_paths(items)
        first = Path(os.fspath(items[0]))
        source = frames_source(paths, first.name if len(items) == 1 else "frames")
    else:
        if len(items) != 1:
            raise DataError(f"{len(items)} sources given ({', '.join(map(os.fspath, items))}); a video, camera or "
                            "stream is predicted alone: give one per command")
        source = frame_source(items[0])
    return FrameReader(source, **options)  # type: ignore[arg-type]



def write_synthetic_video(path: str | os.PathLike, frames: int = 300, size: tuple[int, int] = (640, 480),
                          fps: float = 30.0) -> Path:
    """A test video (``.mp4``: MPEG-4 Part 2, ``.avi``: Motion JPEG) of ``frames`` frames of ``size``
    (width, height): three coloured boxes moving across a grey background."""
    w, h = size
    with VideoWriter(path, fps) as writer:
        for i in range(frames):
            frame = np.full((h, w, 3), 40, np.uint8)
            for k in range(3):
                x, y = (50 + 3 * i + w // 4 * k) % max(1, w - 60), h // 5 * (k + 1)
                cv2.rectangle(frame, (x, y), (x + 60, y + 80), (255 - 60 * k, 200, 60 * k + 80), -1)
            writer.write(frame)
        return writer.commit()
