"""`vision-attn yaml info`: the per-row table and totals of a detector YAML."""
import json
from pathlib import Path

import pytest

from vision_attn.cli import main

CONFIGS = Path(__file__).resolve().parents[1] / "configs" / "models"


def test_yaml_info_json(capsys):
    assert main(["yaml", "info", str(CONFIGS / "yolov8.yaml"), "--scale", "n", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["parameters"] == 3_157_200 and out["num_layers"] == 23
    assert abs(out["gflops"] - 8.74) < 0.01
    first, last = out["layers"][0], out["layers"][-1]
    assert first == {"index": 0, "from": -1, "repeats": 1, "params": 464, "module": "Conv",
                     "arguments": [3, 16, 3, 2], "output_shape": [1, 16, 320, 320]}
    assert last["module"] == "Detect" and last["from"] == [15, 18, 21] and last["output_shape"] == [1, 84, 8400]


def test_yaml_info_table(capsys):
    assert main(["yaml", "info", str(CONFIGS / "yolov8-cbam.yaml"), "--img-size", "320"]) == 0
    out = capsys.readouterr().out
    assert "CBAM" in out and "3,245,112" in out and "27 layers" in out and "1x32x80x80" in out


def test_yaml_info_errors(capsys, tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text((CONFIGS / "yolov8.yaml").read_text().replace("SPPF", "SPPFF"))
    assert main(["yaml", "info", str(bad)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and "row 9 field 'module'" in err and "did you mean SPPF" in err
    assert main(["yaml", "info", str(CONFIGS / "yolov8.yaml"), "--scale", "q"]) == 2
    assert "scale 'q' is not defined" in capsys.readouterr().err
    assert main(["yaml", "info", str(CONFIGS / "yolov8.yaml"), "--img-size", "100"]) == 2
    assert "multiple of the largest stride, 32" in capsys.readouterr().err


# ------------------------------------------------------------------------------------------------ editing
def _params(path) -> int:
    import torch

    from vision_attn import build_detector

    with torch.device("meta"):
        return sum(p.numel() for p in build_detector(path, scale="n").parameters())


def test_yaml_insert_twice_and_remove(capsys, tmp_path):
    src, out, again, back = (tmp_path / n for n in ("yolov8.yaml", "cbam.yaml", "again.yaml", "back.yaml"))
    src.write_text((CONFIGS / "yolov8.yaml").read_text())
    assert main(["yaml", "insert", str(src), "--block", "CBAM", "--after", "C2f", "-o", str(out)]) == 0
    assert "inserted 4 CBAM row(s) at 3, 6, 9, 12" in capsys.readouterr().out
    assert _params(out) == 3_245_112
    assert main(["yaml", "insert", str(out), "--block", "CBAM", "--after", "C2f", "-o", str(again)]) == 0
    assert "nothing to insert" in capsys.readouterr().out and again.read_text() == out.read_text()
    assert main(["yaml", "remove", str(out), "--block", "CBAM", "-o", str(back)]) == 0
    assert back.read_text() == src.read_text()
    assert main(["yaml", "remove", str(out), "-o", str(back)]) == 0  # every attention block
    assert back.read_text() == src.read_text()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["again.yaml", "back.yaml", "cbam.yaml", "yolov8.yaml"]


def test_yaml_insert_dry_run_writes_nothing(capsys, tmp_path):
    out = tmp_path / "out.yaml"
    assert main(["yaml", "insert", str(CONFIGS / "yolov8.yaml"), "--block", "SE", "--after", "C2f", "--at", "4,6",
                 "--args", "{reduction: 8}", "-o", str(out), "--dry-run", "--img-size", "64"]) == 0
    text = capsys.readouterr().out
    assert "+  - [-1, 1, SE, [{reduction: 8}]] # 5" in text and "-  - [[15, 18, 21], 1, Detect, [nc]] # 22" in text
    assert "3,157,200" in text and all(f"│ {s} " in text for s in "nsmlx") and "dry run" in text
    assert not list(tmp_path.iterdir())


@pytest.mark.parametrize("identity", [True, False])
def test_yaml_insert_checkpoint_remap(capsys, tmp_path, identity):
    import torch

    from vision_attn import build_detector

    old = build_detector(CONFIGS / "yolov8.yaml", scale="n")
    torch.save(old.state_dict(), tmp_path / "old.pt")
    out, new_pt = tmp_path / "cbam.yaml", tmp_path / "new.pt"
    assert main(["yaml", "insert", str(CONFIGS / "yolov8.yaml"), "--block", "CBAM", "--after", "C2f", "-o", str(out),
                 "--checkpoint", str(tmp_path / "old.pt"), "--checkpoint-out", str(new_pt)]
                + ([] if identity else ["--no-identity-init"])) == 0
    text = capsys.readouterr().out
    n = len(old.state_dict())
    # identity start (the default with a checkpoint): each block wrapped, plus its blend scale
    new_keys, first = ("16", "model.3.scale, model.3.block.channel_attention") if identity else \
        ("12", "model.3.channel_attention")
    assert f"{n} of {n} tensors transferred" in text and f"{new_keys} new key(s)" in text and first in text
    assert ("[-1, 1, CBAM, [{zero_init: true}]] # 3" in out.read_text()) == identity
    new = build_detector(out, scale="n")
    report = new.load_state_dict(torch.load(new_pt, weights_only=True), strict=False)
    assert not report.unexpected_keys
    assert {k.split(".")[1] for k in report.missing_keys} == {"3", "6", "9", "12"}  # only the CBAM tensors
    assert torch.equal(new.model[13].cv1.conv.weight, old.model[9].cv1.conv.weight)  # SPPF moved 9 -> 13
    assert sorted(p.name for p in tmp_path.iterdir()) == ["cbam.yaml", "new.pt", "old.pt"]  # no temp files


def test_yaml_insert_errors(capsys, tmp_path):
    src = str(CONFIGS / "yolov8.yaml")
    out = tmp_path / "out.yaml"
    out.write_text("keep me\n")
    assert main(["yaml", "insert", src, "--block", "CBMA", "--after", "C2f", "-o", str(out)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and "not an attention block" in err and "did you mean CBAM" in err
    assert main(["yaml", "insert", src, "--block", "CBAM", "--after", "C3k2", "-o", str(out)]) == 2
    err = capsys.readouterr().err
    assert "no row of that module" in err and "candidates: Conv, C2f, SPPF" in err
    assert main(["yaml", "insert", src, "--block", "CBAM", "--after", "C2f", "--args", "[8]", "-o", str(out)]) == 2
    assert "must be a mapping" in capsys.readouterr().err
    assert out.read_text() == "keep me\n"  # an existing output is only replaced on success
    missing = tmp_path / "no" / "out.yaml"
    assert main(["yaml", "insert", src, "--block", "CBAM", "--after", "C2f", "-o", str(missing)]) == 2
    assert "does not exist" in capsys.readouterr().err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out.yaml"]


def test_insert_attention_dispatches_yaml(tmp_path):
    import yaml

    import vision_attn

    path = tmp_path / "yolov8.yaml"
    path.write_text((CONFIGS / "yolov8.yaml").read_text())
    text = vision_attn.insert_attention(path, "cbam", after="C2f")
    assert isinstance(text, str) and path.read_text() == (CONFIGS / "yolov8.yaml").read_text()
    assert _params(text) == 3_245_112
    data = yaml.safe_load(path.read_text())
    edited = vision_attn.insert_attention(data, "SE", after="C2f", section="head", reduction=8)
    assert isinstance(edited, dict) and edited["head"][3] == [-1, 1, "SE", [{"reduction": 8}]]
    assert data == yaml.safe_load(path.read_text())  # the dict is not changed
