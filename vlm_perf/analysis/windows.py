"""Logging windows: TFLOP/s/GPU and MFU the way frameworks compute them, but with our FLOPs.

A framework logs one line every ``log_interval`` iterations with the mean time per iteration
over the interval. Window k covers iterations (previous logged iteration, this iteration] of the
same segment; its TFLOP/s/GPU = sum of those iterations' FLOPs / (window seconds x GPUs x 1e12),
as Megatron-Bridge does. The first window of each segment (after a (re)start) has no previous
line: it is assumed to span ``log_interval`` iterations and flagged ``first_in_segment``.

Step-time values that cannot be averaged are kept as windows but flagged in
``step_time_excluded`` (``nan``, ``inf``, ``non_positive`` or ``outlier``) and left out of every
mean, so one bad value cannot poison a headline. An outlier is a window whose seconds per
iteration are more than ``OUTLIER_FACTOR`` times the run's median (or less than the median
divided by it), the median taken over the finite, positive, non-first windows: a hang, a clock
jump or a logging glitch, not a slow batch.
"""

from __future__ import annotations

import numpy as np
import polars as pl

#: a window more than this many times slower (or faster) than the median window is an outlier
OUTLIER_FACTOR = 5.0
EXCLUSION_REASONS = ("nan", "inf", "non_positive", "outlier")


def infer_log_interval(iterations: pl.DataFrame) -> int:
    """Most common step between consecutive logged iterations of a segment (1 if unknown)."""
    diffs = (iterations.sort("segment", "iteration")
             .with_columns(pl.col("iteration").diff().over("segment").alias("d"))
             .filter(pl.col("d") > 0)["d"])
    return int(diffs.mode().sort()[0]) if len(diffs) else 1


def build_windows(iterations: pl.DataFrame, log_interval: int | None = None) -> pl.DataFrame:
    """Windows from the (deduplicated) iteration table: start (exclusive), end, seconds.

    Needs columns ``segment``, ``iteration``, ``elapsed_s`` (seconds per iteration, window mean).
    Rows without a step time are not windows; rows with an unusable one are windows flagged in
    ``step_time_excluded`` (null when the value is usable).
    """
    interval = log_interval or infer_log_interval(iterations)
    # (no filter / sort when they would change nothing: each copies every column of a long run)
    frame = iterations.filter(pl.col("elapsed_s").is_not_null()) if iterations["elapsed_s"].null_count() else iterations
    frame = _sorted_by_segment(frame)
    # previous logged iteration of the same segment (segments are contiguous once sorted: the same as
    # ``shift(1).over("segment")`` without grouping)
    same = pl.col("segment") == pl.col("segment").shift(1)
    frame = frame.with_columns(pl.when(same).then(pl.col("iteration").shift(1)).alias("_prev"))
    frame = frame.with_columns(
        pl.col("_prev").is_null().alias("first_in_segment"),
        pl.coalesce(pl.col("_prev"), pl.col("iteration") - interval).clip(lower_bound=0).alias("window_start"),
    ).with_columns(
        (pl.col("iteration") - pl.col("window_start")).alias("window_iterations"),
    ).with_columns(
        (pl.col("elapsed_s") * pl.col("window_iterations")).alias("window_seconds"),
    ).drop("_prev")
    return constants_as_scalars(frame.with_columns(step_time_exclusions(frame)))


def _sorted_by_segment(frame: pl.DataFrame) -> pl.DataFrame:
    """``frame.sort("segment", "iteration")``, without the copy when the rows are already in that order
    with no ties (then the sort is the identity)."""
    if frame.height > 1 and not (frame["segment"].null_count() or frame["iteration"].null_count()):
        step = frame.select(pl.col("segment").diff().slice(1).alias("s"), pl.col("iteration").diff().slice(1).alias("i"))
        if step.select(((pl.col("s") > 0) | ((pl.col("s") == 0) & (pl.col("i") > 0))).all()).item():
            return frame
    elif frame.height <= 1:
        return frame
    return frame.sort("segment", "iteration")


def step_time_exclusions(windows: pl.DataFrame) -> pl.Expr:
    """``step_time_excluded`` reason per window (see the module docstring), null when usable."""
    step = pl.col("elapsed_s")
    finite = step.is_finite() & (step > 0)
    usable = windows.filter(finite & ~pl.col("first_in_segment"))["elapsed_s"]
    if usable.len() == 0:
        usable = windows.filter(finite)["elapsed_s"]
    median = float(usable.median()) if usable.len() else None
    reason = (pl.when(step.is_nan()).then(pl.lit("nan"))
              .when(step.is_infinite()).then(pl.lit("inf"))
              .when(step <= 0).then(pl.lit("non_positive")))
    if median:
        far = (step > median * OUTLIER_FACTOR) | (step < median / OUTLIER_FACTOR)
        reason = reason.when(far & ~pl.col("first_in_segment")).then(
            pl.lit("outlier"))
    return reason.otherwise(pl.lit(None, pl.Utf8)).alias("step_time_excluded")


def window_sums(windows: pl.DataFrame, per_iteration: pl.DataFrame, value_columns: list[str]) -> pl.DataFrame:
    """Sum per-iteration values over each window (cumulative sums read at the window bounds).

    Adds ``<col>`` sums and ``covered_iterations`` (iterations of the window present in
    ``per_iteration``); a window with coverage below its length has a gap. A window (start, end]
    sums the rows with start < iteration <= end as ``cumsum[end] - cumsum[start]`` (nulls count as
    0), each column's running sum taken in iteration order. One column is materialised at a time
    (numpy ``cumsum``, the same left-to-right float additions as polars' ``cum_sum``), so memory is
    O(windows x columns + iterations), not O(iterations x columns): a long estimate-mode run keeps its
    constant per-iteration columns unexpanded (``tests/analysis/test_window_sums.py`` checks the
    result against the join-based formulation, ``window_sums_reference``).
    """
    per = per_iteration.select("iteration", *value_columns).sort("iteration")
    its = per["iteration"].cast(pl.Int64).to_numpy()
    out = _sorted_by_segment(windows.with_columns(pl.col("iteration").cast(pl.Int64),
                                                  pl.col("window_start").cast(pl.Int64)))
    # rows at or before a bound = the running count there (a backward as-of match), 0 before the first row
    upto_end = np.searchsorted(its, out["iteration"].to_numpy(), side="right")
    upto_start = np.searchsorted(its, out["window_start"].to_numpy(), side="right")
    at_end, at_start = _as_slice(upto_end), _as_slice(upto_start)  # one window per iteration: no gather
    sums = []
    for c in value_columns:
        column = per[c]
        if column.null_count():
            column = column.fill_null(0)
        if column.dtype.is_integer():  # polars' cum_sum of an integer column is Int64
            column = column.cast(pl.Int64)
        values = column.to_numpy()
        running = np.concatenate([np.zeros(1, dtype=values.dtype), np.cumsum(values)])  # (out= is 5x slower)
        sums.append(_scalar_if_constant(pl.Series(c, running[at_end] - running[at_start], dtype=column.dtype)))
    covered = pl.Series("covered_iterations", (upto_end - upto_start).astype(np.int64), dtype=pl.Int64)
    return out.drop([c for c in value_columns if c in out.columns]).with_columns(*sums, _scalar_if_constant(covered))


def _scalar_if_constant(column: pl.Series) -> pl.Series | pl.Expr:
    """``column`` as a literal (a polars scalar column: one value, whatever the height) when every
    row holds the same bits (nulls: all null), else the Series. Estimate mode's constant statistics
    make most columns of a long run's windows constant; as scalars every later copy of the frame
    (filters, sorts) skips them. Bit equality, so ``-0.0`` / ``0.0`` and NaN payloads stay as they were."""
    n = column.len()
    if n < 2:
        return column
    nulls = column.null_count()
    if nulls == n:
        return pl.lit(None, dtype=column.dtype).alias(column.name)
    if nulls:
        return column
    dtype = column.dtype
    if dtype in (pl.Float64, pl.Float32):
        bits = column.to_numpy().view(np.int64 if dtype == pl.Float64 else np.int32)
        same = bool((bits == bits[0]).all())
    elif dtype.is_integer() or dtype in (pl.Boolean, pl.Utf8, pl.Date) or isinstance(dtype, pl.Datetime):
        same = bool((column == column[0]).all())
    else:
        return column
    return pl.lit(column[0], dtype=dtype).alias(column.name) if same else column


def constants_as_scalars(frame: pl.DataFrame) -> pl.DataFrame:
    """`frame` with every constant column (`_scalar_if_constant`) held as a scalar column: equal
    values, dtypes and column order."""
    if frame.height < 2:
        return frame
    return frame.with_columns([_scalar_if_constant(frame.get_column(c)) for c in frame.columns])


def _as_slice(index: np.ndarray) -> np.ndarray | slice:
    """``index`` as a slice when it is a run of consecutive integers (a view instead of a gather)."""
    if index.size and index[-1] - index[0] == index.size - 1 and (index.size == 1 or bool(
            (np.diff(index) == 1).all())):
        return slice(int(index[0]), int(index[-1]) + 1)
    return index


def window_sums_reference(windows: pl.DataFrame, per_iteration: pl.DataFrame,
                          value_columns: list[str]) -> pl.DataFrame:
    """The straightforward formulation of `window_sums` (cumulative sums of the whole frame + as-of
    joins), kept as the test reference; O(iterations x columns) memory."""
    cum = (per_iteration.select("iteration", *value_columns).sort("iteration")
           .with_columns([pl.col(c).fill_null(0).cum_sum().alias(c) for c in value_columns])
           .with_columns(pl.int_range(1, pl.len() + 1).alias("_count"))
           .with_columns(pl.col("iteration").cast(pl.Int64)))
    keep = ["iteration", *value_columns, "_count"]
    end = windows.with_columns(pl.col("iteration").cast(pl.Int64), pl.col("window_start").cast(pl.Int64)).sort(
        "iteration").join_asof(cum.select(keep), on="iteration", strategy="backward", suffix="_end")
    start_keys = cum.select(keep).rename({c: f"{c}_start" for c in keep if c != "iteration"}).rename(
        {"iteration": "window_start"})
    both = end.sort("window_start").join_asof(start_keys, on="window_start", strategy="backward")
    out = both.with_columns(
        [(pl.col(c).fill_null(0) - pl.col(f"{c}_start").fill_null(0)).alias(c) for c in value_columns]
        + [(pl.col("_count").fill_null(0) - pl.col("_count_start").fill_null(0)).alias("covered_iterations")]
    )
    drop = [c for c in out.columns if c.endswith("_start") and c != "window_start"] + ["_count"]
    return out.drop(drop).sort("segment", "iteration")
