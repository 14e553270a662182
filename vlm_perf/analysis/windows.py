"""Logging windows: TFLOP/s/GPU and MFU the way frameworks compute them, but with our FLOPs.

A framework logs one line every ``log_interval`` iterations with the mean time per iteration
over the interval. Window k covers iterations (previous logged iteration, this iteration] of the
same segment; its TFLOP/s/GPU = sum of those iterations' FLOPs / (window seconds x GPUs x 1e12),
as Megatron-Bridge does. The first window of each segment (after a (re)start) has no previous
line: it is assumed to span ``log_interval`` iterations and flagged ``first_in_segment``.
"""

from __future__ import annotations

import polars as pl


def infer_log_interval(iterations: pl.DataFrame) -> int:
    """Most common step between consecutive logged iterations of a segment (1 if unknown)."""
    diffs = (iterations.sort("segment", "iteration")
             .with_columns(pl.col("iteration").diff().over("segment").alias("d"))
             .filter(pl.col("d") > 0)["d"])
    return int(diffs.mode().sort()[0]) if len(diffs) else 1


def build_windows(iterations: pl.DataFrame, log_interval: int | None = None) -> pl.DataFrame:
    """Windows from the (deduplicated) iteration table: start (exclusive), end, seconds.

    Needs columns ``segment``, ``iteration``, ``elapsed_s`` (seconds per iteration, window mean).
    """
    interval = log_interval or infer_log_interval(iterations)
    frame = iterations.filter(pl.col("elapsed_s").is_not_null() & (pl.col("elapsed_s") > 0))
    frame = frame.sort("segment", "iteration").with_columns(
        pl.col("iteration").shift(1).over("segment").alias("_prev"))
    return frame.with_columns(
        pl.col("_prev").is_null().alias("first_in_segment"),
        pl.coalesce(pl.col("_prev"), pl.col("iteration") - interval).clip(lower_bound=0).alias("window_start"),
    ).with_columns(
        (pl.col("iteration") - pl.col("window_start")).alias("window_iterations"),
    ).with_columns(
        (pl.col("elapsed_s") * pl.col("window_iterations")).alias("window_seconds"),
    ).drop("_prev")


def window_sums(windows: pl.DataFrame, per_iteration: pl.DataFrame, value_columns: list[str]) -> pl.DataFrame:
    """Sum per-iteration values over each window (vectorised via cumulative sums + as-of joins).

    Adds ``<col>`` sums and ``covered_iterations`` (iterations of the window present in
    ``per_iteration``); a window with coverage below its length has a gap.
    """
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
