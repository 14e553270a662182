"""Adapter: per-microbatch metadata rows -> the frames the balance analysis reads.

Stop-gap until the single-pass metadata reader exposes them directly: from the lazy per-microbatch
frame of `scan_microbatches` it builds

* ``per_rank``: one row per (iteration, dp_rank), `BatchStats` fields summed + ``microbatches``
  (a streaming group_by: memory is O(iterations x ranks));
* ``per_microbatch``: the same rows, restricted to those with a ``dp_rank``, still LAZY (the balance
  analysis materialises only the five cost columns it needs);
* ``rows_without_rank``: rows with no ``dp_rank`` (they cannot be placed on a rank; counted, not used).

All statistics are additive, so summing microbatches of a rank gives that rank's statistics.
"""

from __future__ import annotations

from dataclasses import dataclass

import polars as pl

from ..stats import BatchStats

STAT_FIELDS = BatchStats.field_names()


@dataclass
class RankFrames:
    per_rank: pl.DataFrame
    per_microbatch: pl.LazyFrame
    rows_without_rank: int


def rank_frames(microbatches: pl.LazyFrame | pl.DataFrame) -> RankFrames:
    """Two streaming passes over the rows: the per-rank sums and the count of rows without a rank."""
    lazy = microbatches.lazy()
    names = lazy.collect_schema().names()
    stats = [c for c in STAT_FIELDS if c in names]
    keyed = lazy.filter(pl.col("dp_rank").is_not_null()).select("iteration", "dp_rank", "microbatch", *stats)
    per_rank = (keyed.group_by("iteration", "dp_rank")
                .agg(pl.len().cast(pl.Int64).alias("microbatches"), *[pl.col(c).sum() for c in stats])
                .collect(engine="streaming").sort("iteration", "dp_rank"))
    missing = int(lazy.select(pl.col("dp_rank").null_count()).collect(engine="streaming").item())
    return RankFrames(per_rank, keyed, missing)
