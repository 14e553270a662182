"""Per-microbatch metadata (schema v1) -> per-iteration `BatchStats` sufficient statistics.

Input: JSON lines, one object per (iteration, microbatch, dp_rank), written by
`vlm_perf.capture.MetadataWriter` or any other tool (schema: ``docs/metadata-schema.md``).
Files may be ``.jsonl`` / ``.ndjson`` (optionally ``.gz`` / ``.zst``), ``.parquet``, directories
of per-rank shards or glob patterns.

Both functions here are thin views of `vlm_perf.ingest.metadata_source.MetadataSource`, which
reads every shard once and yields all outputs (per iteration, per rank, per microbatch,
diagnostics) from that single pass; use it directly when more than one output is needed.

    >>> res = iteration_stats("run/metadata/", spec=load_model("qwen2.5-vl-7b"))
    >>> res.frame            # one row per iteration, BatchStats columns + iteration, microbatches
    >>> res.stats_for(120)   # BatchStats of iteration 120
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Iterable, Union

import polars as pl

from ..errors import InputError

from ..stats import BatchStats
from .metadata_schema import SCHEMA, SCHEMA_VERSION
from .metadata_source import MAX_BAD_LINES, STAT_FIELDS, MetadataDiagnostics, MetadataSource

if TYPE_CHECKING:  # pragma: no cover
    from ..arch.spec import ModelSpec

__all__ = ["MAX_BAD_LINES", "MetadataDiagnostics", "MetadataResult", "MetadataSource", "SCHEMA", "SCHEMA_VERSION",
           "STAT_FIELDS", "iteration_stats", "scan_microbatches"]

PathsLike = Union[str, Path, Iterable[Union[str, Path]]]


@dataclass
class MetadataResult:
    """Per-iteration statistics (``frame``, sorted by iteration) and diagnostics."""

    frame: pl.DataFrame
    diagnostics: MetadataDiagnostics
    per_rank: pl.DataFrame | None = None  # per-(iteration, dp_rank) statistics, when asked for

    def stats_for(self, iteration: int) -> BatchStats:
        row = self.frame.filter(pl.col("iteration") == iteration)
        if row.height == 0:
            raise InputError(f"iteration {iteration} is not in the metadata "
                             f"({self.frame.height} iterations, "
                             f"{self._range()})")
        values = row.select(STAT_FIELDS).row(0, named=True)
        return BatchStats(**{k: int(v) for k, v in values.items()})

    def _range(self) -> str:
        if self.frame.height == 0:
            return "none"
        its = self.frame["iteration"]
        return f"{its.min()}..{its.max()}"


def scan_microbatches(paths: PathsLike, spec: "ModelSpec | None" = None, skip_bad: bool = False) -> pl.LazyFrame:
    """Per-microbatch statistics: ``iteration, microbatch, dp_rank`` + the `BatchStats` fields.

    Validates as `iteration_stats` does (raises naming ``file:line`` and the field unless
    ``skip_bad``); repeated (iteration, microbatch, dp_rank) rows of a resumed job are dropped
    (the last kept). The rows are materialised (O(rows) memory); returned lazy for composition.
    """
    return MetadataSource(paths, spec, skip_bad=skip_bad, per_microbatch=True).per_microbatch.lazy()


def iteration_stats(paths: PathsLike, spec: "ModelSpec | None" = None, skip_bad: bool = False) -> MetadataResult:
    """Per-iteration sufficient statistics (one streaming pass over all shards)."""
    return MetadataSource(paths, spec, skip_bad=skip_bad).result()
