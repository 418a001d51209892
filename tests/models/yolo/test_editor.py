"""Editing YAML text: every `from` re-indexed, nothing else changed, insert-then-remove is identity."""
import pytest
import torch
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from vision_attn.errors import ConfigError
from vision_attn.models.yolo import all_rows, build_detector, check_topology
from vision_attn.models.yolo.editor import insert_attention_text, remove_rows_text

from .conftest import CONFIGS

TEXTS = {name: (CONFIGS / name).read_text() for name in ("yolov8.yaml", "yolo11.yaml", "yolov8-se.yaml")}
BLOCKS = ["CBAM", "SE", "ECA", "CoordAtt", "CBAMPaper"]


def test_cbam_after_backbone_c2f_is_the_shipped_file_rows():
    text = TEXTS["yolov8.yaml"]
    result = insert_attention_text(text, "CBAM", after="C2f")
    assert result.inserted == [3, 6, 9, 12]
    shipped = yaml.safe_load((CONFIGS / "yolov8-cbam.yaml").read_text())
    edited = yaml.safe_load(result.text)
    assert edited["backbone"] == shipped["backbone"] and edited["head"] == shipped["head"]
    assert "  - [[-1, 9], 1, Concat, [1]] # 15 with P4\n" in result.text  # comment kept, index refreshed
    assert result.text.startswith(text.split("backbone:")[0])  # header and comments untouched
    assert insert_attention_text(result.text, "CBAM", after="C2f").text == result.text  # twice: once
    assert remove_rows_text(result.text, "CBAM").text == text
    with torch.device("meta"):
        model = build_detector(result.text, scale="n")
    assert sum(p.numel() for p in model.parameters()) == 3_245_112


def test_head_section_and_arguments():
    text = TEXTS["yolov8.yaml"]
    result = insert_attention_text(text, "SE", after="C2f", section="head", args=[{"reduction": 8}])
    assert result.inserted == [13, 17, 21, 25]
    assert "[-1, 1, SE, [{reduction: 8}]] # 13\n" in result.text
    assert yaml.safe_load(result.text)["head"][-1][0] == [17, 21, 25]


@settings(max_examples=10, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(name=st.sampled_from(sorted(TEXTS)), block=st.sampled_from(BLOCKS), data=st.data())
def test_random_insertions_build_keep_topology_and_come_out(name, block, data):
    text = TEXTS[name]
    base = yaml.safe_load(text)
    n = len(all_rows(base))
    at = data.draw(st.lists(st.integers(0, n - 2), min_size=1, max_size=4, unique=True))
    result = insert_attention_text(text, block, at=at)
    edited = yaml.safe_load(result.text)
    check_topology(base, edited, result.inserted)
    with torch.device("meta"):
        build_detector(result.text, scale="n")
    if block != "SE" or name != "yolov8-se.yaml":
        assert remove_rows_text(result.text, block).text == text


def test_editor_errors():
    text = TEXTS["yolov8.yaml"]
    with pytest.raises(ConfigError, match="not an attention block"):
        insert_attention_text(text, "Conv", after="C2f")
    with pytest.raises(ConfigError, match="no row of that module"):
        insert_attention_text(text, "CBAM", after="C3k2")
    with pytest.raises(ConfigError, match="--at 22"):
        insert_attention_text(text, "CBAM", at=[22])
    multi_line = text.replace("  - [-1, 1, Conv, [64, 3, 2]] # 0 stride 2", "  - - -1\n    - 1\n    - Conv\n    - [64, 3, 2]")
    with pytest.raises(ConfigError, match="write each row on one line"):
        insert_attention_text(multi_line, "CBAM", after="C2f")


def test_file_edit_with_checkpoint_and_comparison(tmp_path):
    from vision_attn.analysis.yaml_info import compare_yaml
    from vision_attn.models.yolo import insert_attention_file, remap_state_dict

    src, dst = tmp_path / "yolov8.yaml", tmp_path / "yolov8-cbam.yaml"
    src.write_text(TEXTS["yolov8.yaml"])
    result = insert_attention_file(src, dst, "CBAM", after="C2f")
    assert dst.read_text() == result.text and src.read_text() == TEXTS["yolov8.yaml"]
    old = build_detector(src, scale="n")
    new = build_detector(dst, scale="n")
    report = new.load_state_dict(remap_state_dict(old.state_dict(), result.index_map), strict=False)
    assert not report.unexpected_keys
    assert {k.split(".")[1] for k in report.missing_keys} == {"3", "6", "9", "12"}  # only the new blocks
    table = compare_yaml(src, dst, img_size=320)
    assert [r["scale"] for r in table] == list("nsmlx")
    assert table[0]["params_before"] == 3_157_200 and table[0]["params_after"] == 3_245_112
    assert all(r["gflops_after"] > r["gflops_before"] for r in table)
