"""The attention inside YOLO blocks (YOLOv10's PSA, YOLO11's C2PSA, YOLO12's area attention) equals
ultralytics 8.4.190's explicit matrix products on the same weights, runs on
``scaled_dot_product_attention``, and YOLO12's area attention is a row ``yaml insert`` can add."""
import pytest
import torch

from vision_attn.errors import ConfigError
from vision_attn.models.yolo import build_detector, insert_attention_text
from vision_attn.models.yolo.area_attention import A2C2f, AAttn, AreaAttention
from vision_attn.models.yolo.psa import PSA, C2PSA

from .conftest import CONFIGS
from .peer_zoo import import_ultralytics

peer_blocks = import_ultralytics("ultralytics.nn.modules.block")
peer_torch_utils = import_ultralytics("ultralytics.utils.torch_utils")


def randomise(module: torch.nn.Module) -> torch.nn.Module:
    peer_torch_utils.initialize_weights(module)  # batch-norm eps 1e-3, as in every model it builds
    with torch.no_grad():
        for key, value in module.state_dict().items():
            if value.is_floating_point():
                high = "running_var" in key or "bn.weight" in key or "gamma" in key
                value.copy_(torch.rand_like(value) * 0.2 + (0.9 if high else -0.1))
    return module.eval()


@pytest.mark.parametrize("ours,theirs,shape", [
    (lambda: AAttn(64, 2, area=4), lambda: peer_blocks.AAttn(64, 2, area=4), (2, 64, 8, 6)),
    (lambda: AAttn(64, 2, area=1), lambda: peer_blocks.AAttn(64, 2, area=1), (1, 64, 5, 7)),
    (lambda: A2C2f(64, 64, 1, True, 4, True, 1.2), lambda: peer_blocks.A2C2f(64, 64, 1, True, 4, True, 1.2),
     (1, 64, 8, 8)),
    (lambda: A2C2f(48, 64, 2, False), lambda: peer_blocks.A2C2f(48, 64, 2, False), (1, 48, 8, 8)),
    (lambda: PSA(128, 128), lambda: peer_blocks.PSA(128, 128), (2, 128, 6, 5)),
    (lambda: C2PSA(256, 256, 2), lambda: peer_blocks.C2PSA(256, 256, 2), (1, 256, 4, 4)),
])
def test_block_equals_ultralytics(ours, theirs, shape):
    peer = randomise(theirs())
    mine = ours().eval()
    mine.load_state_dict(peer.state_dict(), strict=True)
    x = torch.randn(shape)
    with torch.no_grad():
        torch.testing.assert_close(mine(x), peer(x), rtol=1e-5, atol=1e-5)


def test_attention_runs_fused():
    calls = []
    sdpa = torch.nn.functional.scaled_dot_product_attention

    def spy(*args, **kwargs):
        calls.append(args[0].shape)
        return sdpa(*args, **kwargs)

    torch.nn.functional.scaled_dot_product_attention = spy
    try:
        with torch.no_grad():
            AAttn(64, 2, area=4).eval()(torch.randn(1, 64, 8, 8))
            PSA(128, 128).eval()(torch.randn(1, 128, 4, 4))
    finally:
        torch.nn.functional.scaled_dot_product_attention = sdpa
    assert calls == [(4, 2, 16, 32), (1, 1, 16, 32)]  # (B * areas, heads, N / areas, head_dim); PSA key_dim 32


def test_a2c2f_hidden_width_must_be_a_multiple_of_32():
    with pytest.raises(ConfigError, match="A2C2f: hidden width 40 .* must be a multiple of 32"):
        A2C2f(64, 80, 1)


def test_area_must_divide_the_positions():
    with pytest.raises(ValueError, match="5x5 = 25 positions do not split into 4 areas"):
        AAttn(64, 2, area=4)(torch.randn(1, 64, 5, 5))


def test_yolo12_scale_rules():
    with torch.device("meta"):
        from .peer_zoo import peer_yaml
        n = build_detector(peer_yaml("12/yolo12.yaml"), scale="n")
        large = build_detector(peer_yaml("12/yolo12.yaml"), scale="l")
    assert n.model[6].gamma is None and n.model[6].m[0][0].mlp[0].conv.out_channels == 64 * 2
    assert large.model[6].gamma.shape == (512,)  # residual at l and x
    assert large.model[6].m[0][0].mlp[0].conv.out_channels == int(256 * 1.2)
    assert large.model[11].gamma is None  # residual only with area attention (a2)


def test_yolov8_plus_area_attention_is_one_insertion():
    text = (CONFIGS / "yolov8.yaml").read_text()
    result = insert_attention_text(text, "AreaAttention", after="C2f", section="backbone", args=[{"area": 4}])
    assert result.inserted == [3, 6, 9, 12]
    assert "[[-1, 9], 1, Concat, [1]]" in result.text and "[[19, 22, 25], 1, Detect, [nc]]" in result.text
    with torch.device("meta"):
        model = build_detector(result.text, scale="n")
    assert [type(model.model[i]).__name__ for i in result.inserted] == ["AreaAttention"] * 4
    assert model.model[3].attn.num_heads == 1 and model.model[12].attn.num_heads == 8  # 32, 256 channels
    assert model.stride == [8.0, 16.0, 32.0]


def test_zero_init_area_attention_starts_as_the_identity():
    block = AreaAttention(64, area=2, zero_init=True).eval()
    x = torch.randn(1, 64, 4, 4)
    with torch.no_grad():
        assert torch.equal(block(x), x)
    block.train()
    block(x).square().sum().backward()
    assert block.mlp[-1].bn.weight.grad.abs().sum() > 0  # it learns from there
