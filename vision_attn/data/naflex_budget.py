"""NaFlex's per-batch token budget (``data.naflex`` as a mapping): timm's NaFlex loader's training batches.

Each training batch has a sequence length drawn from ``train_seq_lens`` and as many images as the
budget holds: ``batch_size * seq_len <= max_tokens_per_batch``, the batch size a multiple of
``batch_divisor`` (:func:`budget_batch_size`); every image of the batch is resized at its own aspect
ratio to at most ``seq_len`` patches and the batch padded to ``seq_len`` with a mask
(:class:`~vision_attn.data.naflex.NaFlexCollate`). The batches of an epoch are timm's
(``NaFlexMapDatasetWrapper``), drawn the same way from the same seed:

- a schedule of (seq_len, batch size) pairs covering one process's share of the items, drawn once from
  ``seed`` (:meth:`TokenBudget.schedule`); every process gets the same schedule, so the same number of
  steps at the same sequence lengths;
- each epoch, one generator seeded ``seed + epoch`` permutes the items (the order of
  :class:`~vision_attn.data.sampler.EpochSampler`, whose share of each process is
  ``DistributedSampler``'s) and then the schedule's order; the items are dealt to the batches in turn.

So a batch is a function of (seed, epoch, batch index): :class:`NaFlexBatchSampler` starts a resumed
epoch at its next batch, and any DataLoader worker loads any batch. Every image of a process's share
appears once per epoch (no batch is dropped).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Iterator, Mapping

import torch
from torch.utils.data import Sampler

from vision_attn.data.sampler import EpochSampler
from vision_attn.errors import ConfigError
from vision_attn.io.config_keys import closest

__all__ = ["TokenBudget", "budget_batch_size", "NaFlexBatchSampler", "naflex_eval_len", "BUDGET_KEYS"]

BUDGET_KEYS = ("max_tokens_per_batch", "train_seq_lens", "max_seq_len", "batch_divisor")
"""The keys of ``data.naflex`` as a mapping, named as timm's ``create_naflex_loader`` names them."""
DEFAULT_SEQ_LENS = (128, 256, 576, 784, 1024)  # timm's train_seq_lens


def budget_batch_size(max_tokens: int, seq_len: int, divisor: int = 1, max_size: int | None = None) -> int:
    """Images in a batch of ``seq_len`` tokens each: the most whose tokens fit ``max_tokens``, rounded
    down to a multiple of ``divisor``, at least 1 and at most ``max_size`` (timm's
    ``calculate_naflex_batch_size`` with ``rounding='floor'``)."""
    fits = max_tokens // seq_len
    size = max(1, fits // divisor * divisor)
    return size if max_size is None else min(size, max_size)


def _positive(key: str, value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ConfigError(f"data.naflex.{key}={value!r}: give a positive integer")
    return value


@dataclass(frozen=True)
class TokenBudget:
    """``data.naflex`` as a mapping. ``max_tokens_per_batch``: patches per training batch, padding
    included; ``train_seq_lens``: the sequence lengths the batches draw from; ``max_seq_len``: the
    sequence length of validation, eval and predict batches (of ``eval_batch_size`` images);
    ``batch_divisor``: training batch sizes are multiples of it."""

    max_tokens_per_batch: int
    train_seq_lens: tuple[int, ...]
    max_seq_len: int
    batch_divisor: int = 8

    @classmethod
    def from_config(cls, value: Mapping[str, Any], batch_size: int) -> "TokenBudget":
        """The budget of a ``data.naflex`` mapping, refused in one line when a key is unknown, a value is
        not a positive integer, or a sequence length does not fit the budget. Defaults as timm's
        ``create_naflex_loader``: ``train_seq_lens`` (128, 256, 576, 784, 1024), ``max_tokens_per_batch``
        ``batch_size * max(train_seq_lens)``, ``max_seq_len`` 576 (here: the longest training length),
        ``batch_divisor`` 8."""
        if not value:
            raise ConfigError("data.naflex: an empty mapping; give max_tokens_per_batch and train_seq_lens (a token "
                              "budget), an integer (patches per image), or 0 (off)")
        for key in value:
            if key not in BUDGET_KEYS:
                keys = [f"data.naflex.{k}" for k in BUDGET_KEYS]
                hint = "did you mean data.naflex.train_seq_lens? (timm's NaFlexMapDatasetWrapper calls it seq_lens)" \
                    if key == "seq_lens" else closest(f"data.naflex.{key}", keys)
                raise ConfigError(f"unknown config key 'data.naflex.{key}': {hint} (data.naflex takes "
                                  f"{', '.join(BUDGET_KEYS)})")
        lens = value.get("train_seq_lens", DEFAULT_SEQ_LENS)
        if isinstance(lens, (str, bytes)) or not hasattr(lens, "__iter__") or not list(lens):
            raise ConfigError(f"data.naflex.train_seq_lens={lens!r}: give a list of sequence lengths (patches), "
                              "e.g. [128, 256, 576]")
        seq_lens = tuple(sorted({_positive("train_seq_lens", n) for n in lens}))
        tokens = _positive("max_tokens_per_batch", value.get("max_tokens_per_batch", batch_size * seq_lens[-1]))
        divisor = _positive("batch_divisor", value.get("batch_divisor", 8))
        eval_len = _positive("max_seq_len", value.get("max_seq_len", seq_lens[-1]))
        for n in seq_lens:
            if n * divisor > tokens:
                raise ConfigError(f"data.naflex.train_seq_lens: {n} patches x batch_divisor {divisor} = {n * divisor} "
                                  f"tokens exceed max_tokens_per_batch {tokens}; raise the budget, lower batch_divisor "
                                  f"or drop that length")
        return cls(tokens, seq_lens, eval_len, divisor)

    def describe(self, patch: int) -> str:
        """The budget in words, for the training log."""
        lens = ", ".join(map(str, self.train_seq_lens))
        return (f"NaFlex batches of at most {self.max_tokens_per_batch} tokens at sequence lengths {lens} (batch sizes "
                f"{', '.join(str(self.batch_size(n)) for n in self.train_seq_lens)}), {patch} px patches; "
                f"validation at {self.max_seq_len}")

    def batch_size(self, seq_len: int, max_size: int | None = None) -> int:
        """Images in a training batch of ``seq_len`` (:func:`budget_batch_size`)."""
        return budget_batch_size(self.max_tokens_per_batch, seq_len, self.batch_divisor, max_size)

    def schedule(self, items: int, seed: int) -> list[tuple[int, int]]:
        """(seq_len, batch size) of each batch of an epoch of ``items`` (one process's share), in the
        order drawn from ``seed`` (each epoch permutes it): a length drawn uniformly from
        ``train_seq_lens``, then as many of the remaining items as its batch holds."""
        g = torch.Generator()
        g.manual_seed(int(seed))
        out, left = [], int(items)
        while left > 0:
            seq_len = self.train_seq_lens[int(torch.randint(len(self.train_seq_lens), (1,), generator=g))]
            size = self.batch_size(seq_len, left)
            out.append((seq_len, size))
            left -= size
        return out

    def record(self, patch: int, schedule: list[tuple[int, int]]) -> dict[str, Any]:
        """What a run records (``metrics.json``'s ``naflex``): the budget, the patch size, and the
        training batches of an epoch at each sequence length."""
        batches: dict[str, int] = {}
        for seq_len, _ in schedule:
            batches[str(seq_len)] = batches.get(str(seq_len), 0) + 1
        return {"max_tokens_per_batch": self.max_tokens_per_batch, "train_seq_lens": list(self.train_seq_lens),
                "max_seq_len": self.max_seq_len, "batch_divisor": self.batch_divisor, "patch": patch,
                "batches_per_seq_len": dict(sorted(batches.items(), key=lambda kv: int(kv[0])))}


def naflex_eval_len(value: int | Mapping[str, Any] | None) -> int:
    """The patches per image of evaluation and prediction for a run's ``data.naflex`` (0: off): the
    integer itself, or a budget's ``max_seq_len`` (its longest training length unless given)."""
    if not value:
        return 0
    if isinstance(value, Mapping):  # validated when the run trained
        return int(value.get("max_seq_len") or max(value.get("train_seq_lens") or DEFAULT_SEQ_LENS))
    return int(value)


class NaFlexBatchSampler(Sampler):
    """The training batches of a :class:`TokenBudget`: lists of ``(index, epoch, seq_len)`` keys
    (:class:`~vision_attn.data.sampler.EpochItems` reads them; the collate resizes and pads each batch to
    its ``seq_len``). ``sampler``: the process's :class:`~vision_attn.data.sampler.EpochSampler` (its
    share and epoch; Lightning calls its ``set_epoch``)."""

    def __init__(self, sampler: EpochSampler, budget: TokenBudget) -> None:
        self.sampler, self.budget = sampler, budget
        self.plan = budget.schedule(len(sampler), sampler.seed)
        self.skip: tuple[int, int] | None = None  # (epoch, batches of it done): a resumed epoch

    def __len__(self) -> int:
        return len(self.plan)

    def resume_at(self, epoch: int, batches: int) -> None:
        """Continue ``epoch`` after its first ``batches`` batches."""
        self.sampler.resume_at(epoch, 0)
        self.skip = (int(epoch), max(int(batches), 0))

    def batches(self, epoch: int) -> list[tuple[int, list[int]]]:
        """(seq_len, item indices) of each batch of ``epoch`` for this process, in order."""
        sampler = self.sampler
        order = sampler.order(epoch)
        plan = self.plan
        if sampler.shuffle:  # the schedule permuted by the generator that permuted the items, after them
            g = torch.Generator()
            g.manual_seed(sampler.seed + epoch)
            torch.randperm(sampler.size, generator=g)
            plan = [plan[i] for i in torch.randperm(len(plan), generator=g).tolist()]
        out, at = [], 0
        for seq_len, size in plan:
            out.append((seq_len, order[at:at + size]))
            at += size
        return out

    def __iter__(self) -> Iterator[list[tuple[int, int, int]]]:
        epoch, skip = self.sampler.epoch, self.skip
        self.skip = None  # the skip applies to one pass, of its epoch
        start = skip[1] if skip is not None and skip[0] == epoch else 0
        for seq_len, indices in self.batches(epoch)[start:]:
            yield [(i, epoch, seq_len) for i in indices]
