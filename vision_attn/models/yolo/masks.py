"""Instance masks of a segmentation model's detections, from prototypes and mask coefficients.

An instance's mask logits are its coefficients times the prototypes (``coeffs @ protos``, at a quarter
of the input's side); :func:`instance_masks` upsamples them to the network input (bilinear), keeps
the pixels where the sigmoid is above 0.5 (logit > 0) and zeroes everything outside the instance's box
(cropping after the upsampling, so that no bilinear edge leaks past the box). :func:`masks_to_original`
maps such masks back to the original image: the letterbox padding cut away, the content resized
(bilinear) to the original size and thresholded at 0.5.
"""
from __future__ import annotations

from typing import Sequence

import torch
import torch.nn.functional as F

__all__ = ["crop_to_boxes", "instance_masks", "mask_logits", "masks_to_original"]


def mask_logits(protos: torch.Tensor, coeffs: torch.Tensor) -> torch.Tensor:
    """Prototypes (nm, Hp, Wp) and coefficients (n, nm) -> mask logits (n, Hp, Wp)."""
    nm, hp, wp = protos.shape
    return (coeffs.float() @ protos.float().reshape(nm, -1)).view(-1, hp, wp)


def crop_to_boxes(masks: torch.Tensor, boxes: torch.Tensor) -> torch.Tensor:
    """Masks (n, H, W) with everything outside each box (n, 4) xyxy, in the masks' pixels, set to zero: a
    pixel (column j, row i) stays when ``x1 <= j < x2`` and ``y1 <= i < y2``. A new tensor."""
    n, h, w = masks.shape
    x1, y1, x2, y2 = boxes.to(masks.device, torch.float32).view(n, 4, 1).unbind(1)  # each (n, 1)
    cols = torch.arange(w, device=masks.device, dtype=torch.float32).view(1, w)
    rows = torch.arange(h, device=masks.device, dtype=torch.float32).view(1, h)
    inside_x = (cols >= x1) & (cols < x2)  # (n, W)
    inside_y = (rows >= y1) & (rows < y2)  # (n, H)
    return masks * (inside_y.unsqueeze(2) & inside_x.unsqueeze(1)).to(masks.dtype)


def instance_masks(protos: torch.Tensor, coeffs: torch.Tensor, boxes: torch.Tensor,
                   input_size: Sequence[int]) -> torch.Tensor:
    """One image's binary masks in network-input pixels: uint8 (n, H, W), ``input_size`` (H, W).

    ``protos`` (nm, Hp, Wp) (one image of the head's protos), ``coeffs`` (n, nm) and ``boxes`` (n, 4) xyxy
    in input pixels (a :class:`~vision_attn.models.yolo.postprocess.Detections`' ``coeffs`` and ``boxes``).
    """
    h, w = int(input_size[0]), int(input_size[1])
    if coeffs.shape[0] == 0:
        return torch.zeros((0, h, w), dtype=torch.uint8, device=protos.device)
    logits = F.interpolate(mask_logits(protos, coeffs).unsqueeze(0), (h, w), mode="bilinear", align_corners=False)[0]
    return crop_to_boxes((logits > 0).to(torch.uint8), boxes)


def masks_to_original(masks: torch.Tensor, *, scale: float | Sequence[float] | torch.Tensor, pad: Sequence[float],
                      orig_size: Sequence[int]) -> torch.Tensor:
    """Binary masks (n, H, W) in network-input pixels -> uint8 (n, h, w) in original image pixels.

    The letterbox geometry of :func:`~vision_attn.models.yolo.postprocess.to_original`: ``scale`` (one
    factor or (sx, sy), input / original), ``pad`` (left, top), ``orig_size`` (h, w). The content region
    (its first row ``round(top - 0.1)``, its height ``round(h * sy)``; the same across) is resized to
    (h, w) bilinearly and thresholded at 0.5.
    """
    h0, w0 = int(orig_size[0]), int(orig_size[1])
    n, h1, w1 = masks.shape
    if n == 0:
        return torch.zeros((0, h0, w0), dtype=torch.uint8, device=masks.device)
    if (h1, w1) == (h0, w0):
        return (masks > 0.5).to(torch.uint8) if masks.is_floating_point() else masks.to(torch.uint8)
    factors = torch.as_tensor(scale, dtype=torch.float64).flatten().tolist()
    sx, sy = factors[0], factors[-1]
    top, left = round(float(pad[1]) - 0.1), round(float(pad[0]) - 0.1)
    bottom, right = top + max(round(h0 * sy), 1), left + max(round(w0 * sx), 1)
    content = masks[:, top:bottom, left:right].float().unsqueeze(1)  # (n, 1, h', w')
    resized = F.interpolate(content, (h0, w0), mode="bilinear", align_corners=False)[:, 0]
    return (resized > 0.5).to(torch.uint8)
