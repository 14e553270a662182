"""The ONE selection of logging windows every mean of a report is taken over.

A window counts (is ``reliable``) when it is

* not the first window after a (re)start (``first_in_segment``: its length is assumed, not logged),
* complete: every iteration of it has statistics (``covered_iterations == window_iterations``), and
* timed: its step time is usable (``step_time_excluded`` is null: not NaN, inf, non-positive or an
  outlier, see `vlm_perf.analysis.windows.step_time_exclusions`).

`reliable_expr` is the rule, written once; `analyze_run` stores it as the ``reliable`` column of the
windows frame, and `WindowSelection` is what every analysis reads: the headline TFLOP/s and MFU,
the HFU block, the DP load balance, the step facts of `compare`, the vision share and the figures.
An analysis that re-typed the rule would silently keep a window the headline drops (issue 17: one
step time 100x longer gave MFU 22.1% in the headline and 6.2% in the HFU block).

The vision share is defined here too, once: ``VISION_SHARE`` = Σ exact vision FLOPs / Σ exact
training FLOPs over the selected windows (a ratio of totals, i.e. FLOPs-weighted).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import polars as pl

__all__ = ["RULE", "VISION_SHARE", "WindowSelection", "reliable_expr", "select_windows"]

#: the rule in words (report text, summary schema)
RULE = ("windows that are not the first after a (re)start, have statistics for every iteration, and have a usable "
        "step time")
#: the one definition of "vision share" every place shows
VISION_SHARE = ("vision share of exact training FLOPs: Σ exact vision FLOPs / Σ exact training FLOPs over the "
                "windows the means use")


def reliable_expr(columns: list[str] | None = None) -> pl.Expr:
    """The rule as a polars expression over a windows frame. ``columns``: the frame's columns, for
    frames without ``step_time_excluded`` (a hand-built test frame: every step time usable)."""
    complete = pl.col("covered_iterations") == pl.col("window_iterations")
    expr = ~pl.col("first_in_segment") & complete
    if columns is None or "step_time_excluded" in columns:
        expr = expr & pl.col("step_time_excluded").is_null()
    return expr


@dataclass(frozen=True)
class WindowSelection:
    """The windows every mean uses, and the iterations inside them (computed once, then shared)."""

    windows: pl.DataFrame  # the selected rows of the run's windows frame
    logged_windows: int  # all windows, selected or not
    _iterations: list = field(default_factory=list, repr=False)  # cache cell for `iterations`

    @property
    def height(self) -> int:
        return self.windows.height

    @property
    def excluded(self) -> int:
        return self.logged_windows - self.windows.height

    def iterations(self) -> pl.Series:
        """Iterations inside the selected windows (ascending, unique, Int64)."""
        if not self._iterations:
            good = self.windows
            if good.height == 0:
                its = pl.Series("iteration", [], dtype=pl.Int64)
            else:
                its = (good.select(pl.int_ranges(pl.col("window_start").cast(pl.Int64) + 1,
                                                 pl.col("iteration").cast(pl.Int64) + 1).alias("iteration"))
                       .explode("iteration")["iteration"].drop_nulls().unique().sort())
            self._iterations.append(its)
        return self._iterations[0]

    def seconds(self) -> float:
        return float(self.windows["window_seconds"].sum()) if self.windows.height else 0.0

    def total(self, column: str) -> float | None:
        """Σ of a windows column over the selection (None when the column is absent or nothing is selected)."""
        if column not in self.windows.columns or not self.windows.height:
            return None
        return float(self.windows[column].sum())

    def vision_share(self) -> float | None:
        """`VISION_SHARE` (None when nothing is selected or there are no exact FLOPs)."""
        vision, total = self.total("exact_vision"), self.total("exact_total")
        if vision is None or not total:
            return None
        return vision / total


def select_windows(windows: pl.DataFrame) -> WindowSelection:
    """The selection of a windows frame: its ``reliable`` column when present, else `reliable_expr`."""
    mask = pl.col("reliable") if "reliable" in windows.columns else reliable_expr(windows.columns)
    return WindowSelection(windows.filter(mask), windows.height)
