"""edit_detector_yaml: a YAML insert with a checkpoint, through the API the `yaml insert` command calls."""
from pathlib import Path

import torch

from vision_attn import build_detector
from vision_attn.tasks.detect.edit import edit_detector_yaml

CONFIGS = Path(__file__).resolve().parents[2] / "configs" / "models"


def test_insert_with_a_checkpoint_writes_both_files_and_returns_the_counts(tmp_path):
    old = build_detector(CONFIGS / "yolov8.yaml", scale="n")
    torch.save(old.state_dict(), tmp_path / "old.pt")
    out, new_pt = tmp_path / "cbam.yaml", tmp_path / "new.pt"
    edit = edit_detector_yaml(CONFIGS / "yolov8.yaml", "insert", block="CBAM", after="C2f", output=out,
                              checkpoint=tmp_path / "old.pt", checkpoint_out=new_pt, scale="n")
    n = len(old.state_dict())
    assert edit.inserted == [3, 6, 9, 12] and edit.summary == "inserted 4 CBAM row(s) at 3, 6, 9, 12"
    assert edit.index_map[9] == 13 and not edit.dry_run and edit.comparison == []
    assert (len(edit.weights.transferred), edit.weights.total, len(edit.weights.new_keys)) == (n, n, 16)
    assert edit.weights.new_keys[0] == "model.3.scale"  # identity start: each block wrapped, plus its blend scale
    assert out.read_text() == edit.text and "[-1, 1, CBAM, [{zero_init: true}]] # 3" in edit.text
    new = build_detector(out, scale="n")
    report = new.load_state_dict(torch.load(new_pt, weights_only=True), strict=False)
    assert not report.unexpected_keys and sorted(report.missing_keys) == sorted(edit.weights.new_keys)
    assert torch.equal(new.model[13].cv1.conv.weight, old.model[9].cv1.conv.weight)  # SPPF moved 9 -> 13
    assert sorted(p.name for p in tmp_path.iterdir()) == ["cbam.yaml", "new.pt", "old.pt"]  # no temp files
