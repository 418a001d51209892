"""NaFlex's per-batch token budget (vision_attn/data/naflex_budget.py) against timm's NaFlex loader
(``calculate_naflex_batch_size``, ``NaFlexMapDatasetWrapper``) run by itself on the same settings."""
from __future__ import annotations

import contextlib
import io

import pytest
import torch
from timm.data.naflex_dataset import NaFlexMapDatasetWrapper, calculate_naflex_batch_size

from vision_attn.data.naflex import NaFlexCollate, naflex_size, to_patches
from vision_attn.data.naflex_budget import NaFlexBatchSampler, TokenBudget, budget_batch_size
from vision_attn.data.sampler import EpochSampler
from vision_attn.errors import ConfigError

SETTINGS = {"max_tokens_per_batch": 64, "train_seq_lens": [16, 4, 9], "batch_divisor": 2}


class Numbered:
    """Items whose label is their index (timm's wrapper yields the labels of each batch it loads)."""

    def __init__(self, n: int) -> None:
        self.n = n

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int):
        return torch.zeros(3, 4, 4), i


def test_batch_sizes_are_timms_calculation():
    for tokens in (64, 100, 4096, 16384):
        for seq_len in (4, 9, 16, 128, 576, 1024):
            for divisor in (1, 2, 8):
                for max_size in (None, 3, 1000):
                    expected = calculate_naflex_batch_size(tokens, seq_len, max_size=max_size, divisor=divisor,
                                                           rounding="floor")
                    assert budget_batch_size(tokens, seq_len, divisor, max_size) == expected, \
                        (tokens, seq_len, divisor, max_size)


@pytest.mark.parametrize("world", [1, 3])
def test_each_process_draws_timms_batches(world):
    n, seed = 53, 7
    budget = TokenBudget.from_config(SETTINGS, batch_size=4)
    seen = []
    for rank in range(world):
        with contextlib.redirect_stdout(io.StringIO()):  # the wrapper prints its schedule
            peer = NaFlexMapDatasetWrapper(Numbered(n), patch_size=4, seq_lens=(16, 4, 9), max_tokens_per_batch=64,
                                           seed=seed, distributed=world > 1, rank=rank, world_size=world,
                                           batch_divisor=2)
        ours = NaFlexBatchSampler(EpochSampler(n, shuffle=True, seed=seed, num_replicas=world, rank=rank,
                                               with_epoch=True), budget)
        assert len(ours) == len(peer)
        for epoch in (0, 1):
            peer.set_epoch(epoch)
            ours.sampler.set_epoch(epoch)
            theirs = [(x["seq_len"], y.tolist()) for x, y in peer]
            batches = list(ours)
            assert [(keys[0][2], [k[0] for k in keys]) for keys in batches] == theirs
            assert all(k[1] == epoch for keys in batches for k in keys)
            for seq_len, indices in theirs:  # the budget rule: padded tokens within the budget
                assert len(indices) * seq_len <= 64
            if epoch == 0:
                seen += [i for _, indices in theirs for i in indices]
    # every item once per epoch (the processes' shares padded to equal length, as DistributedSampler)
    assert sorted(set(seen)) == list(range(n)) and len(seen) == -(-n // world) * world
    if world == 1:  # batches of every length and size
        assert len(ours) > 5 and {s for s, _ in ours.batches(0)} == {4, 9, 16}


def test_a_resumed_epoch_goes_on_with_its_next_batch():
    budget = TokenBudget.from_config(SETTINGS, batch_size=4)
    sampler = NaFlexBatchSampler(EpochSampler(40, shuffle=True, seed=3, with_epoch=True), budget)
    sampler.sampler.set_epoch(2)
    whole = list(sampler)
    fresh = NaFlexBatchSampler(EpochSampler(40, shuffle=True, seed=3, with_epoch=True), budget)
    fresh.resume_at(2, 3)
    assert list(fresh) == whole[3:]
    assert list(fresh) == list(sampler) == whole  # the skip applies to one pass
    sampler.sampler.set_epoch(3)
    assert list(sampler) != whole


def test_the_collate_pads_each_batch_to_its_sequence_length_with_a_mask_of_the_real_patches():
    g = torch.Generator().manual_seed(0)
    items = [(torch.rand(3, 20, 60, generator=g), 1, 9), (torch.rand(3, 50, 10, generator=g), 0, 9),
             (torch.rand(3, 8, 8, generator=g), 2, 9)]
    batch, labels = NaFlexCollate(patch=4, max_patches=100)(items)
    assert labels.tolist() == [1, 0, 2] and batch.patches.shape == (3, 9, 48)
    for i, (image, _, seq_len) in enumerate(items):  # each image within the batch's 9 patches, at its aspect ratio
        patches, (h, w) = to_patches(image, 4, seq_len)
        assert naflex_size(image.shape[1], image.shape[2], 4, 9) == (4 * h, 4 * w)
        assert batch.shapes[i].tolist() == [h, w] and batch.mask[i].tolist() == [True] * (h * w) + [False] * (9 - h * w)
        assert torch.equal(batch.patches[i, : h * w], patches)
    assert batch.shapes.tolist() == [[2, 4], [5, 1], [3, 3]]  # 1:3 as 2x4, 5:1 as 5x1, square as 3x3
    assert not batch.patches[~batch.mask].any()


@pytest.mark.parametrize("naflex, message", [
    ({"max_tokens_per_batch": 64, "seq_lens": [4]}, r"unknown config key 'data.naflex.seq_lens': did you mean "
                                                    r"data.naflex.train_seq_lens\?"),
    ({"max_tokens_per_batch": 64, "train_seq_lens": [4, 16]}, r"train_seq_lens: 16 patches x batch_divisor 8 = "
                                                              r"128 tokens exceed max_tokens_per_batch 64"),
    ({"max_token_per_batch": 64}, r"unknown config key 'data.naflex.max_token_per_batch': did you mean "
                                  r"data.naflex.max_tokens_per_batch\?"),
    ({"max_tokens_per_batch": 0, "train_seq_lens": [4]}, r"data.naflex.max_tokens_per_batch=0: give a positive"),
    ({"train_seq_lens": "4, 9"}, r"data.naflex.train_seq_lens='4, 9': give a list"),
    ({}, r"data.naflex: an empty mapping"),
])
def test_a_bad_budget_is_refused_in_one_line(naflex, message):
    with pytest.raises(ConfigError, match=message) as e:
        TokenBudget.from_config(naflex, batch_size=4)
    assert "\n" not in str(e.value)


def test_defaults_are_timms_loader_defaults():
    budget = TokenBudget.from_config({"max_seq_len": 576}, batch_size=32)
    # create_naflex_loader: train_seq_lens (128, 256, 576, 784, 1024), tokens batch_size * max(train_seq_lens)
    assert budget == TokenBudget(32 * 1024, (128, 256, 576, 784, 1024), 576, 8)
    assert [budget.batch_size(s) for s in budget.train_seq_lens] == [256, 128, 56, 40, 32]
