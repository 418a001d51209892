"""Searches over attention blocks, insertion sites, model scales and the learning rate on Optuna: a
multi-objective study (the task's headline metric up, GFLOPs down) with pruning, on a SQLite file, a
database server or a journal file that any number of workers share, ending in a Pareto front
(docs/ablation.md, "Search")."""
from vision_attn.search.run import SearchResult, run_search
from vision_attn.search.space import SearchSpace, read_space

__all__ = ["SearchResult", "run_search", "SearchSpace", "read_space"]
