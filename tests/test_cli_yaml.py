"""`vision-attn yaml info`: the per-row table and totals of a detector YAML."""
import json
from pathlib import Path

from vision_attn.cli import main

CONFIGS = Path(__file__).resolve().parents[1] / "configs" / "detect"


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
