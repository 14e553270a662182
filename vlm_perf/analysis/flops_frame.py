"""Per-iteration FLOPs under several conventions, vectorised over a frame of statistics."""

from __future__ import annotations

from typing import Iterable

import polars as pl

from ..arch.spec import ModelSpec
from ..flops import compute_flops
from ..flops.regime import exact_flops
from ..stats import BatchStats

STAT_COLUMNS = BatchStats.field_names()


def flops_columns(spec: ModelSpec, conventions: Iterable[str], frozen: Iterable[str] = (),
                  components_of: str = "exact", causal: str = "half") -> list[pl.Expr]:
    """Expressions adding ``<conv>_total|vision|language`` per convention, and
    ``flops.<component>`` for ``components_of`` (training FLOPs, FLOPs units, Float64).
    ``frozen`` (frozen parts, or a `Trainability`) and ``causal`` apply to ``exact`` only; named conventions fix
    their own rules."""
    cols = BatchStats.columns()
    exprs: list[pl.Expr] = []
    for name in dict.fromkeys(conventions):
        # exact under the run's regime (frozen parts, or a Trainability: `vlm_perf.flops.regime.exact_flops`)
        b = exact_flops(spec, cols, frozen, causal=causal) if name == "exact" else compute_flops(spec, cols, name)
        for part, value in (("total", b.total), ("vision", b.vision), ("language", b.language)):
            exprs.append(as_expr(value).cast(pl.Float64).alias(f"{name}_{part}"))
        if name == components_of:
            exprs += [as_expr(v).cast(pl.Float64).alias(f"flops.{k}") for k, v in b.components.items()]
    return exprs


def as_expr(value) -> pl.Expr:
    # a Python number (a component the formula does not use) as a Float64 literal of any size
    return value if isinstance(value, pl.Expr) else pl.lit(float(value), dtype=pl.Float64)


def with_flops(stats: pl.DataFrame | pl.LazyFrame, spec: ModelSpec, conventions: Iterable[str],
               frozen: Iterable[str] = (), causal: str = "half") -> pl.DataFrame | pl.LazyFrame:
    """``stats`` (columns = BatchStats fields, missing ones taken as 0) plus FLOPs columns."""
    names = stats.collect_schema().names() if isinstance(stats, pl.LazyFrame) else stats.columns
    missing = [c for c in STAT_COLUMNS if c not in names]
    frame = stats.with_columns([pl.lit(0).alias(c) for c in missing]) if missing else stats
    frame = frame.with_columns([pl.col(c).cast(pl.Float64) for c in STAT_COLUMNS])
    return frame.with_columns(flops_columns(spec, conventions, frozen, causal=causal))


def vision_share(stats: pl.DataFrame | pl.LazyFrame, spec: ModelSpec, frozen: Iterable[str] = (),
                 causal: str = "half") -> pl.Series:
    """Exact vision share of training FLOPs per row (microbatch or iteration); empty rows are null.

    A LazyFrame is evaluated by the streaming engine and only the share column is materialised
    (8 bytes per row), so millions of microbatches fit.
    """
    share = with_flops(stats, spec, ["exact"], frozen, causal=causal).select(
        pl.when(pl.col("exact_total") > 0).then(pl.col("exact_vision") / pl.col("exact_total")).alias("vision_share"))
    if isinstance(share, pl.LazyFrame):
        share = share.collect(engine="streaming")
    return share["vision_share"]
