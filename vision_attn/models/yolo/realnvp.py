"""RealNVP (Dinh et al., 2017), the normalising flow of YOLO26's keypoint head (``Pose26.flow_model``).

Six affine coupling layers over a 2-d point, the masks alternating (keep y, change x; keep x, change y):
each changes the other coordinate by ``z = (x - t(kept)) * exp(-s(kept))``, with ``s`` (2 -> 64 -> 64 -> 2,
SiLU, tanh at the end) and ``t`` (the same without the tanh) small MLPs. :meth:`RealNVP.log_prob` maps a
point to the latent space through the layers in reverse order and gives its log-density under a standard
normal plus the log-determinant of the map: the residual log-likelihood term of YOLO26's keypoint loss.
Prediction never runs it; it is part of the head so that the state dict matches ultralytics'.
"""
from __future__ import annotations

import math

import torch
from torch import nn

__all__ = ["RealNVP"]


def _mlp(tanh: bool) -> nn.Sequential:
    layers: list[nn.Module] = [nn.Linear(2, 64), nn.SiLU(), nn.Linear(64, 64), nn.SiLU(), nn.Linear(64, 2)]
    return nn.Sequential(*layers, nn.Tanh()) if tanh else nn.Sequential(*layers)


class RealNVP(nn.Module):
    """The flow: ``s`` and ``t`` (six MLPs each), the coupling ``mask`` (6, 2); ``loc`` (2,) and ``cov``
    (2, 2), the standard normal prior, are kept as buffers for the checkpoints' sake."""

    def __init__(self, layers: int = 6) -> None:
        super().__init__()
        self.register_buffer("loc", torch.zeros(2))
        self.register_buffer("cov", torch.eye(2))
        self.register_buffer("mask", torch.tensor([[0.0, 1.0], [1.0, 0.0]] * (layers // 2)))
        self.s = nn.ModuleList(_mlp(tanh=True) for _ in range(layers))
        self.t = nn.ModuleList(_mlp(tanh=False) for _ in range(layers))
        for m in self.modules():
            if isinstance(m, nn.Linear):
                nn.init.xavier_uniform_(m.weight, gain=0.01)

    def to_latent(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Points (N, 2) -> latent points (N, 2) and the log-determinant of the map (N,)."""
        z, log_det = x, x.new_zeros(x.shape[0])
        for i in reversed(range(len(self.t))):
            keep = self.mask[i]
            kept = keep * z
            s = self.s[i](kept) * (1 - keep)
            t = self.t[i](kept) * (1 - keep)
            z = (1 - keep) * (z - t) * torch.exp(-s) + kept
            log_det = log_det - s.sum(dim=1)
        return z, log_det

    def log_prob(self, x: torch.Tensor) -> torch.Tensor:
        """Log-density of points (N, 2) under the flow, (N,)."""
        z, log_det = self.to_latent(x)
        return -0.5 * (z.float() ** 2).sum(-1) - math.log(2 * math.pi) + log_det

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.log_prob(x)
