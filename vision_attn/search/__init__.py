"""Searches over attention blocks, insertion sites, model scales and the learning rate on Optuna: a
multi-objective study (the task's primary metric up, GFLOPs down) with pruning, on a SQLite file, a
database server or a journal file that any number of workers share, ending in a Pareto front
(docs/ablation.md, "Search"). The names resolve on first use (PEP 562), so that the study machinery
(:mod:`vision_attn.search.study`) loads without torch."""
from __future__ import annotations

import importlib
from typing import Any

__all__ = ["SearchResult", "run_search", "SearchSpace", "read_space"]

_LAZY = {"SearchResult": "vision_attn.search.run", "run_search": "vision_attn.search.run",
         "SearchSpace": "vision_attn.search.space", "read_space": "vision_attn.search.space"}


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
