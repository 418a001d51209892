"""Position embeddings: timm's resampling rule, the 2D sine-cosine table, and 2D RoPE."""
from __future__ import annotations

import math

import pytest
import torch
from timm.layers import resample_abs_pos_embed as timm_resample

from vision_attn import ConfigError
from vision_attn.layers import Rope2D, apply_rope, resample_abs_pos_embed, sincos_2d


@pytest.mark.parametrize("old_grid, new_grid, n_prefix", [
    ((14, 14), (12, 16), 1),   # square -> non-square (dynamic image size)
    ((4, 6), (7, 5), 2),       # non-square -> non-square, two prefix tokens (DeiT distilled)
    ((8, 8), (5, 5), 0),       # downsampling (antialiased), no prefix
])
def test_resample_equals_timm(old_grid, new_grid, n_prefix):
    pos = torch.randn(1, n_prefix + old_grid[0] * old_grid[1], 16)
    ours = resample_abs_pos_embed(pos, new_grid, old_grid, num_prefix_tokens=n_prefix)
    peer = timm_resample(pos, new_size=list(new_grid), old_size=list(old_grid), num_prefix_tokens=n_prefix)
    assert ours.shape == (1, n_prefix + new_grid[0] * new_grid[1], 16)
    torch.testing.assert_close(ours, peer, atol=1e-6, rtol=1e-6)
    torch.testing.assert_close(ours[:, :n_prefix], pos[:, :n_prefix], atol=0, rtol=0)


def test_resample_infers_square_grid_and_refuses_others():
    pos = torch.randn(1, 1 + 36, 8)
    torch.testing.assert_close(resample_abs_pos_embed(pos, (3, 4)),
                               timm_resample(pos, new_size=[3, 4], num_prefix_tokens=1), atol=1e-6, rtol=1e-6)
    assert resample_abs_pos_embed(pos, (6, 6)) is pos
    with pytest.raises(ConfigError, match="old_grid"):
        resample_abs_pos_embed(torch.randn(1, 1 + 24, 8), (5, 5))


def _sincos_reference(h: int, w: int, dim: int, temperature: float = 10000.0) -> torch.Tensor:
    """big_vision's posemb_sincos_2d written out element by element, in float64."""
    quarter = dim // 4
    table = torch.empty(h * w, dim, dtype=torch.float64)
    for i in range(h):
        for j in range(w):
            for c in range(dim):
                part, k = divmod(c, quarter)
                omega = 1.0 / temperature ** (k / (quarter - 1))
                coord = j if part < 2 else i  # x (column) first, then y (row)
                table[i * w + j, c] = (math.sin, math.cos)[part % 2](coord * omega)
    return table


@pytest.mark.parametrize("grid, dim", [((3, 5), 16), ((4, 4), 8)])
def test_sincos_2d_matches_reference(grid, dim):
    table = sincos_2d(grid, dim)
    assert table.shape == (grid[0] * grid[1], dim) and table.dtype == torch.float32
    torch.testing.assert_close(table.double(), _sincos_reference(*grid, dim), atol=1e-5, rtol=0)
    with pytest.raises(ConfigError, match="divisible by 4"):
        sincos_2d(grid, 10)


def _rotated(vec: torch.Tensor, grid: tuple[int, int], n_prefix: int = 0) -> torch.Tensor:
    """``vec`` (d,) placed at every position of ``grid`` (after ``n_prefix`` copies) and rotated: (N, d)."""
    d = vec.shape[0]
    cos, sin = Rope2D(d)(grid, torch.device("cpu"), torch.float64)
    t = vec.double().expand(1, 1, n_prefix + grid[0] * grid[1], d)
    return apply_rope(t, cos, sin)[0, 0]


def test_rope_scores_depend_only_on_the_offset():
    h, w, d = 4, 5, 16
    q, k = torch.randn(d), torch.randn(d)
    scores = _rotated(q, (h, w)) @ _rotated(k, (h, w)).T  # (h*w, h*w): q at p1 . k at p2
    def s(p1, p2):
        return scores[p1[0] * w + p1[1], p2[0] * w + p2[1]].item()

    # equal offsets (1, 2) from different places: equal scores
    assert s((0, 0), (1, 2)) == pytest.approx(s((2, 2), (3, 4)), abs=1e-5)
    assert s((1, 3), (0, 0)) == pytest.approx(s((3, 4), (2, 1)), abs=1e-5)
    # exhaustively: every pair with the same (dy, dx) gives the same score
    by_offset: dict[tuple[int, int], list[float]] = {}
    for i1 in range(h):
        for j1 in range(w):
            for i2 in range(h):
                for j2 in range(w):
                    by_offset.setdefault((i1 - i2, j1 - j2), []).append(s((i1, j1), (i2, j2)))
    for values in by_offset.values():
        assert max(values) - min(values) < 1e-5  # the tables are computed in float32
    # and the score does change with the offset, along both axes
    assert abs(s((0, 0), (0, 0)) - s((0, 0), (1, 0))) > 1e-3
    assert abs(s((0, 0), (0, 0)) - s((0, 0), (0, 1))) > 1e-3


def test_rope_rotates_without_changing_norms_and_skips_prefix():
    d, grid = 8, (3, 3)
    t = torch.randn(2, 3, 2 + 9, d, dtype=torch.float64)
    cos, sin = Rope2D(d)(grid, torch.device("cpu"), torch.float64)
    assert cos.shape == sin.shape == (9, d)
    out = apply_rope(t, cos, sin)
    assert torch.equal(out[:, :, :2], t[:, :, :2])  # class / distillation tokens pass unchanged
    torch.testing.assert_close(out[:, :, 2], t[:, :, 2])  # position (0, 0): angle 0
    torch.testing.assert_close(out.norm(dim=-1), t.norm(dim=-1))
    assert (out[:, :, 3:] - t[:, :, 3:]).abs().max() > 1e-3


def test_rope_needs_head_dim_divisible_by_4():
    with pytest.raises(ConfigError, match="divisible by 4"):
        Rope2D(6)
