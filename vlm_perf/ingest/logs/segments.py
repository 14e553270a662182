"""Restart segments and the deduplicated views.

Rules (docs/log-formats.md):

* Records are ordered by (file order, line, position inside a ``\\r``-split line); the file order is the
  content order `partial.by_content` gives (copies read once).
* A new segment starts at a record whose iteration is *lower* than the previous record printed by
  the same ``rank_label`` in the same stream (`STREAM`: the text logs together, each structured log alone) (a restart from an earlier checkpoint), or at the first record after a
  restart banner (progress.txt ``Starting job``, checkpoint-load messages, HF "Running training").
  Equal iterations are duplicates (every rank printing, tqdm redraws), never a restart.
* After a restart every rank label steps back once; those belong to the same restart. A label's
  step-back opens a new segment only if that label already printed in the current segment.
* Dedup view: one row per (segment, iteration); columns take the first non-null value in order,
  ``copies`` counts merged raw rows and ``rank_labels`` lists the labels seen.
* ``iterations`` view: last write wins per iteration across segments.

Only boundary *candidates* (a handful per restart) go through Python; everything else is polars.
"""

from __future__ import annotations

import numpy as np
import polars as pl

ORD = "_ord"
#: Restart stream of a record (internal column): null for console / text logs (one stream per rank label across
#: every text file, so a restart split into two files is seen), the format for a structured log (trainer_state.json,
#: a W&B export, TensorBoard events): its records step back only against earlier records of that format.
STREAM = "_stream"
#: Ordering key of a record: ``file index * FILE_SCALE + line * SUB_SCALE + \r-piece``.
SUB_SCALE = 1000
FILE_SCALE = 1 << 50


def assign_segments(df: pl.DataFrame, banner_ords: list[int]) -> pl.DataFrame:
    """Add ``segment`` (Int64, 0-based) and ``first_in_segment`` to records sorted by ``_ord``."""
    n = df.height
    if n == 0:
        return df.with_columns(pl.lit(0, pl.Int64).alias("segment"), pl.lit(False).alias("first_in_segment"))
    if not banner_ords:
        one = _one_segment(df)
        if one is not None:
            return one
    idx = pl.int_range(0, pl.len(), dtype=pl.Int64)
    has_it = pl.col("iteration").is_not_null()
    lab = pl.col("rank_label").fill_null("")
    if STREAM in df.columns:
        lab = lab + "\x1f" + pl.col(STREAM).fill_null("")
    work = df.select(
        idx.alias("_i"), pl.col(ORD), pl.col("iteration"), lab.alias("_lab"), has_it.alias("_has")
    ).filter(pl.col("_has"))
    work = work.with_columns(
        pl.col("iteration").shift(1).over("_lab").alias("_prev_it"),
        pl.col("_i").shift(1).over("_lab").alias("_prev_i"),
    )
    cand = work.filter(pl.col("iteration") < pl.col("_prev_it")).select("_i", "_prev_i")
    cand_i = cand.get_column("_i").to_numpy()
    cand_prev = cand.get_column("_prev_i").to_numpy()

    # banner -> boundary at the first record (with an iteration) after the banner
    banner_bounds: set[int] = set()
    if banner_ords:
        ords = work.get_column(ORD).to_numpy()
        rec_i = work.get_column("_i").to_numpy()
        pos = np.searchsorted(ords, np.asarray(sorted(banner_ords), dtype=np.int64), side="right")
        for p in pos:
            if 0 < p < len(ords):  # a banner before the first record opens nothing
                banner_bounds.add(int(rec_i[p]))
    events = sorted({(int(i), int(pv), False) for i, pv in zip(cand_i, cand_prev)} |
                    {(i, -1, True) for i in banner_bounds})
    accepted: list[int] = []
    last = 0
    for i, prev_i, is_banner in events:  # few: one per label per restart
        if is_banner or prev_i >= last:
            if not accepted or accepted[-1] != i:
                accepted.append(i)
            last = i
    bounds = np.asarray(accepted, dtype=np.int64)
    seg = np.searchsorted(bounds, np.arange(n, dtype=np.int64), side="right")
    out = df.with_columns(pl.Series("segment", seg, dtype=pl.Int64))
    has = pl.col("iteration").is_not_null()
    first = has & (has.cast(pl.Int64).cum_sum().over("segment") == 1)
    return out.with_columns(first.alias("first_in_segment"))


def aligned_like(frame: pl.DataFrame, values: np.ndarray, name: str, like: str = "line") -> pl.Series:
    """``values`` (one per row of ``frame``) as a Series chunked like ``frame``'s column ``like``
    (its first column when it has none; a literal column has one chunk, so ``line`` by default).

    A one-chunk column added to a many-chunk frame (the parse's records are one chunk per batch)
    makes polars' next whole-frame operation (``drop``, ``filter``, ``select``) re-align, i.e. copy,
    every column; a column with the same chunk boundaries does not."""
    series = pl.Series(name, values)
    if not frame.width or frame.height != series.len():
        return series
    chunks = frame.get_column(like if like in frame.columns else frame.columns[0]).get_chunks()
    if len(chunks) <= 1:
        return series
    parts, start = [], 0
    for chunk in chunks:
        parts.append(series.slice(start, chunk.len()))
        start += chunk.len()
    return pl.concat(parts, rechunk=False)


def _one_segment(df: pl.DataFrame) -> pl.DataFrame | None:
    """`assign_segments` without banners when no record steps back (iterations non-decreasing in
    record order, so no label steps back either): one segment, and ``first_in_segment`` is the first
    record with an iteration. Computed with element-wise expressions only, so the columns keep the
    frame's chunk layout (a 1-chunk column added to a many-chunk frame makes polars' next whole-frame
    operation copy every column). None when the shortcut does not apply (the general path decides)."""
    its = df.get_column("iteration")
    keyed = its.drop_nulls() if its.null_count() else its
    if keyed.len() > 1 and not bool((keyed.diff().slice(1) >= 0).all()):
        return None
    ords = df.get_column(ORD)
    if not strictly_increasing(ords):  # the first record is found by its (then unique) key
        return None
    has = pl.col("iteration").is_not_null()
    if keyed.len() == 0:
        first = pl.lit(False)
    else:
        first = has & (pl.col(ORD) == ords.gather(its.is_not_null().arg_max()).item())
    return df.with_columns(pl.lit(0, pl.Int64).alias("segment"), first.alias("first_in_segment"))


def strictly_increasing(s: pl.Series) -> bool:
    """No nulls and each value greater than the previous one (O(n), no hashing)."""
    return s.null_count() == 0 and (s.len() < 2 or bool((s.diff().slice(1) > 0).all()))


def dedup_view(raw: pl.DataFrame) -> pl.DataFrame:
    """One row per (segment, iteration): first non-null per column, plus ``copies``/``rank_labels``."""
    rows = raw.filter(pl.col("iteration").is_not_null()) if raw.get_column("iteration").null_count() else raw
    if "kind" in rows.columns and rows.height and bool((rows.get_column("kind").to_physical() != 0).any()):
        rows = rows.filter(pl.col("kind") == "train")  # evaluations and summaries are never iterations
    if strictly_increasing(rows.get_column("iteration")):
        # the common case (one line per iteration, no restart): every group is one row, so the
        # group-by below is the identity; same values and dtypes without hashing
        return rows.with_columns(
            pl.lit(1, pl.Int64).alias("copies"),
            pl.col("rank_label").fill_null("").alias("rank_labels"),
        ).select(raw.columns + ["copies", "rank_labels"])
    keys = ["segment", "iteration"]
    others = [c for c in rows.columns if c not in keys]
    return (
        rows.group_by(keys, maintain_order=True)
        .agg(
            *[pl.col(c).drop_nulls().first().alias(c) for c in others],
            pl.len().cast(pl.Int64).alias("copies"),
            pl.col("rank_label").drop_nulls().unique(maintain_order=True).str.join(",").alias("rank_labels"),
        )
        .select(raw.columns + ["copies", "rank_labels"])
    )


def last_write_wins(dedup: pl.DataFrame) -> pl.DataFrame:
    """One row per iteration, from the latest segment that logged it, sorted by iteration."""
    # dedup rows are in log order and segments only grow along it, so "last" = latest segment
    if strictly_increasing(dedup.get_column("iteration")):
        return dedup.clone()  # already unique and sorted
    return dedup.unique(subset=["iteration"], keep="last", maintain_order=True).sort("iteration")
