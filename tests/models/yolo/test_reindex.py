"""Inserting rows re-indexes every `from`; the topology check catches a stale index."""
import pytest
import torch
import yaml

from vision_attn.errors import ConfigError
from vision_attn.models.yolo import all_rows, build_detector, check_topology, insert_row, remove_row

from .conftest import CONFIGS


def load(name):
    return yaml.safe_load((CONFIGS / name).read_text())


def n_params(data, scale="n"):
    with torch.device("meta"):
        model = build_detector(data, scale=scale)
    return sum(p.numel() for p in model.parameters()), model


def test_four_cbams_give_the_shipped_config():
    base = load("yolov8.yaml")
    edited = base
    for k in (8, 6, 4, 2):
        edited = insert_row(edited, k, "CBAM")
    shipped = load("yolov8-cbam.yaml")
    assert edited["backbone"] == shipped["backbone"] and edited["head"] == shipped["head"]
    check_topology(base, edited, [3, 6, 9, 12])
    # the re-indexing that ultralytics users do by hand
    head = edited["head"]
    assert [head[1][0], head[4][0], head[7][0], head[10][0], head[12][0]] == [[-1, 9], [-1, 6], [-1, 16], [-1, 13],
                                                                             [19, 22, 25]]
    for k in (12, 9, 6, 3):
        edited = remove_row(edited, k)
    assert edited == base


def test_stale_index_is_caught():
    base = load("yolov8.yaml")
    stale = insert_row(base, 9, "CBAM")  # after SPPF
    stale["head"][-1][0] = [15, 18, 21]  # Detect left as it was: reads the wrong rows
    with pytest.raises(ConfigError, match=r"row 23 \(was 22\) reads rows .* a 'from' index was not re-indexed"):
        check_topology(base, stale, [10])


@pytest.mark.parametrize("name,step", [("yolov8.yaml", 1), ("yolo11.yaml", 3)])
def test_insertion_after_every_row(name, step):
    # every position (every third for yolo11; the editor's property test draws the rest), each a valid
    # graph: builds, keeps the topology, and comes out again
    base = load(name)
    before, _ = n_params(base)
    for k in range(0, len(all_rows(base)) - 1, step):  # not after Detect
        edited = insert_row(base, k, "SE")
        check_topology(base, edited, [k + 1])
        after, model = n_params(edited)
        se = model.model[k + 1]
        assert after == before + sum(p.numel() for p in se.parameters())
        assert remove_row(edited, k + 1) == base


def test_bad_positions():
    base = load("yolov8.yaml")
    with pytest.raises(ConfigError, match="out of range"):
        insert_row(base, 40, "CBAM")
    with pytest.raises(ConfigError, match="several inputs"):
        remove_row(base, 11)


def test_weights_move_through_the_edit():
    from vision_attn.models.yolo import insertion_map, remap_state_dict

    plain = build_detector(CONFIGS / "yolov8.yaml", scale="n")
    cbam = build_detector(CONFIGS / "yolov8-cbam.yaml", scale="n")
    state = remap_state_dict(plain.state_dict(), insertion_map(23, [3, 6, 9, 12]))
    result = cbam.load_state_dict(state, strict=False)
    assert result.unexpected_keys == []
    assert result.missing_keys and all(k.split(".")[1] in {"3", "6", "9", "12"} for k in result.missing_keys)
    assert len(state) == len(plain.state_dict()) == 355  # every tensor of yolov8n moved
    plain.eval(), cbam.eval()
    torch.testing.assert_close(cbam.model[13].cv2.conv.weight, plain.model[9].cv2.conv.weight)
