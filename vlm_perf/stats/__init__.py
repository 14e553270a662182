"""Additive per-batch / per-iteration sufficient statistics (no I/O)."""

from .batch import DEFAULT_MERGE_SIZE, DEFAULT_WINDOW_SIDE, BatchStats
from .lm import seq_len_stats, uniform_stats
from .vision import grid_row_stats, sum_sq_of_window_sides, validate_grid

__all__ = ["BatchStats", "DEFAULT_MERGE_SIZE", "DEFAULT_WINDOW_SIDE", "grid_row_stats", "seq_len_stats",
           "sum_sq_of_window_sides", "uniform_stats", "validate_grid"]
