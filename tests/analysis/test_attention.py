"""Attention statistics and the demo's pieces: entropy, the sample photo, one recorded forward pass."""
import math

import pytest
import torch

from vision_attn.analysis import attention_entropy, uniform_entropy
from vision_attn.analysis.demo import attention_forward, sample_photo
from vision_attn.errors import DataError
from vision_attn.models import VisionTransformer


def test_entropy_of_uniform_and_one_hot_attention():
    n = 7
    uniform = torch.full((2, 3, n, n), 1 / n)
    one_hot = torch.eye(n).expand(2, 3, n, n)
    assert attention_entropy(uniform).shape == (2, 3)
    assert torch.allclose(attention_entropy(uniform), torch.full((2, 3), math.log(n)))
    assert uniform_entropy(n) == pytest.approx(math.log(n))
    assert torch.equal(attention_entropy(one_hot, query=4), torch.zeros(2, 3))


def test_entropy_rejects_bad_shapes():
    with pytest.raises(DataError, match="batch, heads, N, N"):
        attention_entropy(torch.rand(3, 5, 5))
    with pytest.raises(DataError, match="out of range"):
        attention_entropy(torch.rand(1, 1, 5, 5), query=5)


@pytest.mark.parametrize("size", [224, (224, 320)])
def test_sample_photo(size):
    x = sample_photo(size)
    h, w = (size, size) if isinstance(size, int) else size
    assert x.shape == (1, 3, h, w) and x.dtype == torch.float32
    assert -3 < x.mean() < 3 and x.std() > 0.3  # normalised, not a blank image
    with pytest.raises(DataError, match="china.jpg"):
        sample_photo(32, name="missing.jpg")


def test_attention_forward_records_every_layer():
    model = VisionTransformer(img_size=32, patch_size=8, embed_dim=64, depth=3, num_heads=4, num_classes=10,
                              distilled=True)
    run = attention_forward(model, torch.randn(2, 3, 32, 48), repeats=1)
    assert run.grid == (4, 6)
    assert run.tokens_shape == (2, 2 + 24, 64) and run.logits_shape == (2, 10)
    assert len(run.cls_entropy) == 3 and run.max_entropy == pytest.approx(math.log(26))
    assert all(0 < h <= run.max_entropy + 1e-5 for h in run.cls_entropy)
    assert run.seconds_per_image > 0
