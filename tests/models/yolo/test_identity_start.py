"""Attention inserted into a trained detector with ``zero_init`` (what ``yaml insert --checkpoint`` writes)
leaves its outputs unchanged until training moves the new rows, for every attention row type."""
import pytest
import torch

from vision_attn.errors import ConfigError
from vision_attn.layers.plugins import IdentityBlend
from vision_attn.models.yolo import build_detector, insert_attention_text, remap_state_dict
from vision_attn.models.yolo.modules import ATTENTION_ROWS

from .conftest import CONFIGS


@pytest.fixture(scope="module")
def trained():
    """yolov8n (5 classes) with random weights and batch-norm statistics, in eval mode."""
    torch.manual_seed(0)
    model = build_detector(CONFIGS / "yolov8.yaml", scale="n", num_classes=5)
    with torch.no_grad():
        for key, value in model.state_dict().items():
            if value.is_floating_point() and "dfl" not in key:
                value.copy_(torch.rand_like(value) * 0.2 + (0.9 if "running_var" in key or "bn.weight" in key else -0.1))
    return model.eval()


def _inserted(block: str, zero_init: bool, base):
    text = (CONFIGS / "yolov8.yaml").read_text()
    edit = insert_attention_text(text, block, after="C2f", args=[{"zero_init": True}] if zero_init else None)
    model = build_detector(edit.text, scale="n", num_classes=5)
    missing, unexpected = model.load_state_dict(remap_state_dict(base.state_dict(), edit.index_map), strict=False)
    assert not unexpected and {k.split(".")[1] for k in missing} == {str(i) for i in edit.inserted}
    return model.eval(), edit


@pytest.mark.parametrize("block", ATTENTION_ROWS)
def test_identity_start_leaves_outputs_unchanged_until_training(block, trained):
    model, edit = _inserted(block, True, trained)
    # a block that cannot start as the identity by itself is wrapped (AreaAttention zeroes its last norms)
    assert all(isinstance(model.model[i], IdentityBlend) for i in edit.inserted) == (block != "AreaAttention")
    x = torch.rand(2, 3, 64, 64)
    with torch.no_grad():
        expected = trained(x)
        assert torch.equal(model(x), expected)
    # the new rows get gradients (they learn from the first step), and a step on them moves the outputs
    model.train()
    sum(m.sum() for m in model(x)).backward()
    new = [p for i in edit.inserted for p in model.model[i].parameters()]
    assert all(any(p.grad is not None and p.grad.abs().sum() > 0 for p in model.model[i].parameters())
               for i in edit.inserted)
    with torch.no_grad():
        for p in new:
            if p.grad is not None:
                p.sub_(p.grad.sign() * 0.1)
        assert not torch.allclose(model.eval()(x), expected)


def test_without_identity_start_the_outputs_change(trained):
    model, _ = _inserted("CBAM", False, trained)
    x = torch.rand(1, 3, 64, 64)
    with torch.no_grad():
        assert not torch.allclose(model(x), trained(x))


def test_zero_init_must_be_a_boolean():
    text = (CONFIGS / "yolov8.yaml").read_text()
    edit = insert_attention_text(text, "SE", after="C2f", args=[{"zero_init": "yes"}])
    with pytest.raises(ConfigError, match=r"row 3 field 'args': zero_init: 'yes' must be true or false"):
        with torch.device("meta"):
            build_detector(edit.text, scale="n")
