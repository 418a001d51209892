"""DeviceDecodeAugment (decode, crop, flip and normalise on the device) on the CPU, against torchvision."""
import io
import math

import numpy as np
import pytest
import torch
from PIL import Image
from torchvision.io import decode_jpeg
from torchvision.transforms.v2 import functional as TF

from vision_attn.data.device_decode import DeviceDecodeAugment, crop_box
from vision_attn.data.transforms import IMAGENET_MEAN, IMAGENET_STD
from vision_attn.errors import ConfigError


def jpeg(h, w, seed):
    rgb = np.random.default_rng(seed).integers(0, 256, (h, w, 3), dtype=np.uint8)
    buf = io.BytesIO()
    Image.fromarray(rgb).save(buf, format="JPEG", quality=95)
    return torch.frombuffer(bytearray(buf.getvalue()), dtype=torch.uint8)


def test_crop_boxes_stay_in_the_image_and_in_the_ranges():
    g = torch.Generator().manual_seed(0)
    for _ in range(200):
        top, left, h, w = crop_box(60, 90, (0.08, 1.0), (3 / 4, 4 / 3), g)
        assert 0 <= top and top + h <= 60 and 0 <= left and left + w <= 90
        assert 0.08 * 0.9 <= h * w / (60 * 90) <= 1.0
        assert math.log(3 / 4) - 0.1 <= math.log(w / h) <= math.log(4 / 3) + 0.1
    # no try fits (a long strip, crops of the whole area at ratio 1): the central crop at the clamped ratio
    assert crop_box(10, 100, (1.0, 1.0), (1.0, 1.0), g) == (0, 45, 10, 10)


def test_whole_image_batch_equals_torchvision_resize_and_normalise():
    files = [jpeg(40, 40, 0), jpeg(32, 32, 1)]
    aug = DeviceDecodeAugment(24, "cpu", scale=(1.0, 1.0), ratio=(1.0, 1.0), hflip=0.0)
    out = aug(files)
    assert out.shape == (2, 3, 24, 24) and out.dtype == torch.float32
    for i, data in enumerate(files):
        ref = TF.resize(decode_jpeg(data).float(), [24, 24], antialias=True)
        ref = TF.normalize(ref / 255, IMAGENET_MEAN, IMAGENET_STD)
        torch.testing.assert_close(out[i], ref, atol=1e-4, rtol=1e-4)
    flipped = DeviceDecodeAugment(24, "cpu", scale=(1.0, 1.0), ratio=(1.0, 1.0), hflip=1.0)(files)
    torch.testing.assert_close(flipped, out.flip(-1))


def test_the_same_seed_draws_the_same_batch_and_bad_ranges_are_refused():
    files = [jpeg(50, 70, s) for s in range(3)]
    a, b = DeviceDecodeAugment(16, "cpu", seed=3)(files), DeviceDecodeAugment(16, "cpu", seed=3)(files)
    torch.testing.assert_close(a, b)
    with pytest.raises(ConfigError, match=r"scale=\[0.5, 0.2\]"):
        DeviceDecodeAugment(16, "cpu", scale=(0.5, 0.2))
