"""Adapter: per-microbatch metadata rows -> the frames the balance analysis reads.

Stop-gap until the single-pass metadata reader exposes them directly: from the lazy per-microbatch
frame of `scan_microbatches` it builds

* ``per_microbatch``: ``iteration, dp_rank, microbatch`` + `BatchStats` fields (rows with a ``dp_rank``);
* ``per_rank``: one row per (iteration, dp_rank), `BatchStats` fields summed + ``microbatches``;
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
    per_microbatch: pl.DataFrame
    rows_without_rank: int


def rank_frames(microbatches: pl.LazyFrame | pl.DataFrame) -> RankFrames:
    """One streaming collect of the per-microbatch rows, then an in-memory group_by."""
    lazy = microbatches.lazy()
    names = lazy.collect_schema().names()
    stats = [c for c in STAT_FIELDS if c in names]
    rows = lazy.select("iteration", "dp_rank", "microbatch", *stats).collect(engine="streaming")
    keyed = rows.filter(pl.col("dp_rank").is_not_null())
    per_rank = (keyed.group_by("iteration", "dp_rank")
                .agg(pl.len().cast(pl.Int64).alias("microbatches"), *[pl.col(c).sum() for c in stats])
                .sort("iteration", "dp_rank"))
    return RankFrames(per_rank, keyed, rows.height - keyed.height)
