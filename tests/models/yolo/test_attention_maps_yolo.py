"""`attn-map` on detectors: the attention each position receives in every area-attention and PSA
block, computed from the weights the explicit path keeps (equal to the fused output)."""
import numpy as np
import torch
from PIL import Image

from vision_attn.analysis.attention_maps import attention_maps
from vision_attn.cli import main
from vision_attn.layers import record_attention
from vision_attn.models.yolo import build_detector, insert_attention_text
from vision_attn.models.yolo.area_attention import AAttn

from .conftest import CONFIGS


def test_yolo12_maps_per_block_sum_to_one_per_area():
    model = build_detector(CONFIGS / "yolo12.yaml", scale="n")
    maps = attention_maps(model, torch.rand(1, 3, 160, 160))
    assert maps.kind == "yolo" and len(maps.maps) == 8  # 4 blocks at P4 (area 4), 4 at P5
    p4 = maps.maps["model.6.m.0.0.attn (10x10, area 4)"]
    assert p4.shape == (10, 10)
    torch.testing.assert_close(p4.reshape(4, 25).sum(1), torch.ones(4))  # each strip of 25 positions
    torch.testing.assert_close(maps.maps["model.8.m.1.1.attn (5x5)"].sum(), torch.tensor(1.0))


def test_kept_weights_give_the_fused_output():
    block = AAttn(64, 2, area=2).eval()
    x = torch.randn(1, 64, 4, 6)
    with torch.no_grad():
        fused = block(x)
        with record_attention(block) as weights:
            explicit = block(x)
    assert weights[0].shape == (2, 2, 12, 12)
    torch.testing.assert_close(explicit, fused)


def test_cli_on_a_yaml_with_inserted_area_attention(tmp_path, capsys):
    text = insert_attention_text((CONFIGS / "yolov8.yaml").read_text(), "AreaAttention", at=[9]).text
    (tmp_path / "v8-area.yaml").write_text(text)
    photo = tmp_path / "photo.png"
    Image.fromarray(np.random.default_rng(0).integers(0, 255, (60, 80, 3), dtype=np.uint8)).save(photo)
    out = tmp_path / "maps.png"
    assert main(["attn-map", "--model", str(tmp_path / "v8-area.yaml"), "--scale", "n", "--img-size", "128",
                 "--image", str(photo), "-o", str(out)]) == 0
    assert "1 map(s)" in capsys.readouterr().out
    with Image.open(out) as img:
        assert img.format == "PNG"
