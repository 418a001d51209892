"""`predict det|cls` on a video, a folder of frames and an HTTP stream: one output frame and one JSON
line per input frame, the same detections as predicting the frames as images, and one-line errors
(exit 2) for sources that cannot be opened, end early or stall, with no half-written file."""
from __future__ import annotations

import http.server
import json
import os
import threading
from pathlib import Path

import cv2
import numpy as np
import pytest

from tests.checkpoints import classifier_checkpoint, yolo_checkpoint
from vision_attn.cli import main
from vision_attn.data.video import write_synthetic_video


def count_frames(path: Path) -> int:
    capture = cv2.VideoCapture(str(path))
    n = 0
    while capture.read()[0]:
        n += 1
    capture.release()
    return n


def read_lines(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()]


@pytest.fixture(scope="module")
def det_ckpt(tmp_path_factory) -> Path:
    return yolo_checkpoint(tmp_path_factory.mktemp("det") / "best.ckpt")


def same_detections(a: list[dict], b: list[dict]) -> None:
    assert [d["class"] for d in a] == [d["class"] for d in b]
    np.testing.assert_allclose([d["box"] for d in a], [d["box"] for d in b], atol=0.02)
    np.testing.assert_allclose([d["score"] for d in a], [d["score"] for d in b], atol=1e-4)


def test_video_predict_det_gives_every_frame_and_the_detections_of_its_frames_as_images(det_ckpt, tmp_path, capsys):
    video = write_synthetic_video(tmp_path / "clip.mp4", 300)
    out = tmp_path / "out"
    assert main(["predict", "det", "--checkpoint", str(det_ckpt), str(video), "-o", str(out), "--conf", "0.001"]) == 0
    printed = " ".join(capsys.readouterr().out.split())
    assert f"video {video}: 300 frames in" in printed and "frames/s" in printed
    assert sorted(p.name for p in out.iterdir()) == ["clip.jsonl", "clip.mp4"]  # no temporary file left
    assert count_frames(out / "clip.mp4") == 300
    lines = read_lines(out / "clip.jsonl")
    assert [r["frame"] for r in lines] == list(range(300))
    assert lines[30]["time"] == pytest.approx(1.0)
    assert sum(len(r["detections"]) for r in lines) > 0  # the comparison below is not of empty lists

    frames = tmp_path / "frames"  # the same frames as lossless images, predicted one by one
    frames.mkdir()
    capture = cv2.VideoCapture(str(video))
    for i in range(300):
        ok, bgr = capture.read()
        assert ok
        cv2.imwrite(str(frames / f"f{i:03d}.png"), bgr)
    assert main(["predict", "det", "--checkpoint", str(det_ckpt), str(frames), "--conf", "0.001", "--json"]) == 0
    as_images = json.loads(capsys.readouterr().out)
    assert [Path(r["image"]).name for r in as_images] == [f"f{i:03d}.png" for i in range(300)]
    for record, image in zip(lines, as_images):
        same_detections(record["detections"], image["detections"])

    # the folder as the frames of one video (--frames): the same lines
    assert main(["predict", "det", "--checkpoint", str(det_ckpt), str(frames), "--frames", "-o", str(out),
                 "--conf", "0.001", "--fps", "30"]) == 0
    capsys.readouterr()
    again = read_lines(out / "frames.jsonl")
    assert len(again) == 300 and count_frames(out / "frames.mp4") == 300
    for a, b in zip(again, lines):
        same_detections(a["detections"], b["detections"])


@pytest.mark.parametrize("runtime", ["onnxruntime", "openvino"])
def test_video_predict_in_another_runtime_gives_the_detections_of_pytorch(det_ckpt, tmp_path, capsys, runtime):
    """``--runtime``: the run's network exported and run there; square frames, so that PyTorch's
    rectangular letterbox and the export's square input are the same 96x96 images."""
    video = write_synthetic_video(tmp_path / "square.mp4", 16, size=(160, 160))
    for name, extra in (("torch", []), (runtime, ["--runtime", runtime])):
        assert main(["predict", "det", "--checkpoint", str(det_ckpt), str(video), "-o", str(tmp_path / name),
                     "--conf", "0.001", *extra]) == 0
    assert f"frames/s, {runtime})" in " ".join(capsys.readouterr().out.split())
    ours, theirs = read_lines(tmp_path / "torch" / "square.jsonl"), read_lines(tmp_path / runtime / "square.jsonl")
    assert len(ours) == len(theirs) == 16 and sum(len(r["detections"]) for r in ours) > 0
    for a, b in zip(ours, theirs):
        assert [d["class"] for d in a["detections"]] == [d["class"] for d in b["detections"]]
        np.testing.assert_allclose([d["box"] for d in a["detections"]], [d["box"] for d in b["detections"]], atol=0.1)


def test_video_predict_cls_writes_top_labels_per_frame(tmp_path, capsys):
    ckpt = classifier_checkpoint(tmp_path / "best.ckpt")
    video = write_synthetic_video(tmp_path / "clip.avi", 20, size=(160, 120))
    out = tmp_path / "out"
    assert main(["predict", "cls", "--checkpoint", str(ckpt), str(video), "-o", str(out), "--top-k", "2",
                 "--batch-size", "8"]) == 0
    assert "20 frames in" in capsys.readouterr().out
    lines = read_lines(out / "clip.jsonl")
    assert len(lines) == 20 and count_frames(out / "clip.mp4") == 20
    assert all(len(r["top"]) == 2 and r["top"][0]["prob"] >= r["top"][1]["prob"] for r in lines)
    assert main(["predict", "cls", "--checkpoint", str(ckpt), str(video), "-o", str(out), "--max-frames", "5"]) == 0
    assert len(read_lines(out / "clip.jsonl")) == 5


def one_line_error(capsys) -> str:
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1, err
    return err


def test_a_video_that_cannot_be_opened_is_one_line_and_writes_nothing(det_ckpt, tmp_path, capsys):
    bad = tmp_path / "bad.mp4"
    bad.write_bytes(b"not a video")
    cut = tmp_path / "cut.mp4"  # an MP4 cut in half has no index (its moov atom is at the end)
    data = write_synthetic_video(tmp_path / "whole.mp4", 30).read_bytes()
    cut.write_bytes(data[: len(data) // 2])
    out = tmp_path / "out"
    for source in (bad, cut):
        assert main(["predict", "det", "--checkpoint", str(det_ckpt), str(source), "-o", str(out)]) == 2
        err = one_line_error(capsys)
        assert f"video {source}: cannot be opened" in err and "ffmpeg -i" in err
    assert main(["predict", "det", "--checkpoint", str(det_ckpt), str(tmp_path / "gone.mp4"), "-o", str(out)]) == 2
    assert "gone.mp4: no such file" in one_line_error(capsys)
    assert main(["predict", "det", "--checkpoint", str(det_ckpt), str(bad)]) == 2
    assert "give the folder for them with -o OUT" in one_line_error(capsys)
    assert not out.exists() or not any(out.iterdir())


class _Server(http.server.ThreadingHTTPServer):
    daemon_threads = True


@pytest.fixture
def stream_server(tmp_path):
    """An HTTP server of ``tmp_path``: ``/NAME`` sends the file, ``/stall/NAME`` its first third and
    then nothing until the test ends."""
    release = threading.Event()

    class Handler(http.server.SimpleHTTPRequestHandler):
        def __init__(self, *a, **kw):
            super().__init__(*a, directory=str(tmp_path), **kw)

        def do_GET(self):  # noqa: N802 - the handler's protocol
            if not self.path.startswith("/stall/"):
                return super().do_GET()
            data = (tmp_path / self.path.removeprefix("/stall/")).read_bytes()
            self.send_response(200)
            self.send_header("Content-Type", "video/x-msvideo")
            self.end_headers()
            self.wfile.write(data[: len(data) // 3])
            self.wfile.flush()
            release.wait(30)

        def log_message(self, *args):
            pass

    server = _Server(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    release.set()
    server.shutdown()


def test_a_stream_that_ends_or_stalls_keeps_the_frames_before_it(det_ckpt, tmp_path, capsys, stream_server):
    write_synthetic_video(tmp_path / "live.avi", 60, size=(320, 240))
    out = tmp_path / "out"
    url = f"{stream_server}/live.avi"
    assert main(["predict", "det", "--checkpoint", str(det_ckpt), url, "-o", str(out), "--batch-size", "8"]) == 2
    err = one_line_error(capsys)
    assert f"stream {url}: ended after 60 frame(s) (the source closed)" in err and str(out / "live.mp4") in err
    assert len(read_lines(out / "live.jsonl")) == 60 and count_frames(out / "live.mp4") == 60
    # a stream stopped at --max-frames ends as asked
    assert main(["predict", "det", "--checkpoint", str(det_ckpt), url, "-o", str(out / "max"), "--max-frames", "25"]) == 0
    assert len(read_lines(out / "max" / "live.jsonl")) == 25
    capsys.readouterr()

    stalled = tmp_path / "stalled"
    url = f"{stream_server}/stall/live.avi"
    assert main(["predict", "det", "--checkpoint", str(det_ckpt), url, "-o", str(stalled), "--batch-size", "4",
                 "--stall-timeout", "1.5"]) == 2
    err = one_line_error(capsys)
    assert f"stream {url}: sent no frame within 1.5 s" in err and "--stall-timeout" in err
    lines = read_lines(stalled / "live.jsonl")
    assert 0 < len(lines) < 60 and count_frames(stalled / "live.mp4") == len(lines)
    assert sorted(p.name for p in stalled.iterdir()) == ["live.jsonl", "live.mp4"]


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="named pipes are POSIX")
def test_a_source_that_never_opens_is_a_stall_and_writes_nothing(det_ckpt, tmp_path, capsys):
    fifo = tmp_path / "pipe.avi"
    os.mkfifo(fifo)  # opening it blocks until a writer comes: a source that never answers
    out = tmp_path / "out"
    try:
        assert main(["predict", "det", "--checkpoint", str(det_ckpt), str(fifo), "-o", str(out),
                     "--stall-timeout", "1"]) == 2
        assert f"video {fifo}: could not be opened within 1 s (after 0 frame(s))" in one_line_error(capsys)
        assert not out.exists()
    finally:  # a writer that comes and goes lets the reading thread's open() return
        try:
            os.close(os.open(fifo, os.O_WRONLY | os.O_NONBLOCK))
        except OSError:  # ENXIO: nobody has it open for reading any more
            pass
