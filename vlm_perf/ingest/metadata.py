"""Per-microbatch metadata (schema v1) -> per-iteration `BatchStats` sufficient statistics.

Input: JSON lines, one object per (iteration, microbatch, dp_rank), written by
`vlm_perf.capture.MetadataWriter` or any other tool (schema: ``docs/metadata-schema.md``).
Files may be ``.jsonl`` / ``.ndjson`` (optionally ``.gz`` / ``.zst``), directories of per-rank
shards or glob patterns.

Fast path: one lazy ``pl.scan_ndjson`` over all shards with the explicit schema v1, every rule
checked by vectorised expressions, aggregated by the streaming engine in ONE pass (the validity code
of a row is a group key, so bad rows are separated without a second pass). Only when the fast path
reports a problem does the reader go back to the files line by line, to name ``file:line``.

    >>> res = iteration_stats("run/metadata/", spec=load_model("qwen2.5-vl-7b"))
    >>> res.frame            # one row per iteration, BatchStats columns + iteration, microbatches
    >>> res.stats_for(120)   # BatchStats of iteration 120
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Iterable, Union

import polars as pl

from ..stats import DEFAULT_MERGE_SIZE, BatchStats
from .metadata_io import (Source, TempArea, clean_source, expand_paths, iter_nonblank_lines, line_numbers,
                          prepare_sources)
from .metadata_schema import SCHEMA, SCHEMA_VERSION, reason_key, row_exprs

if TYPE_CHECKING:  # pragma: no cover
    from ..arch.spec import ModelSpec

__all__ = ["MetadataDiagnostics", "MetadataResult", "SCHEMA", "SCHEMA_VERSION", "STAT_FIELDS", "iteration_stats",
           "scan_microbatches"]

STAT_FIELDS: tuple[str, ...] = BatchStats.field_names()
MAX_BAD_LINES = 20
_CODE = "_code"
_FLAGS = ("_pre_lm", "_pre_vision", "_padded_only")
PathsLike = Union[str, Path, Iterable[Union[str, Path]]]


@dataclass
class MetadataDiagnostics:
    """What the reader saw; `to_dict()` is JSON-serialisable."""

    files: list[str] = field(default_factory=list)
    merge_size: int = DEFAULT_MERGE_SIZE
    window_side: int | None = None
    rows_read: int = 0
    rows_used: int = 0
    rows_skipped: dict[str, int] = field(default_factory=dict)  # "field: reason" -> rows
    bad_lines: list[str] = field(default_factory=list)  # first MAX_BAD_LINES "file:line: field: reason"
    iterations: int = 0
    rows_preaggregated_lm: int = 0
    rows_preaggregated_vision: int = 0
    rows_padded_tokens_only: int = 0
    extra_keys: list[str] = field(default_factory=list)  # top-level keys outside schema v1 (first lines)
    rows_duplicate: int = 0  # repeated (iteration, microbatch, dp_rank) rows dropped (last one kept)
    decompressed: list[str] = field(default_factory=list)
    cleaned: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    @property
    def rows_skipped_total(self) -> int:
        return sum(self.rows_skipped.values())

    def to_dict(self) -> dict[str, Any]:
        out = asdict(self)
        out["rows_skipped_total"] = self.rows_skipped_total
        return out


@dataclass
class MetadataResult:
    """Per-iteration statistics (``frame``, sorted by iteration) and diagnostics."""

    frame: pl.DataFrame
    diagnostics: MetadataDiagnostics

    def stats_for(self, iteration: int) -> BatchStats:
        row = self.frame.filter(pl.col("iteration") == iteration)
        if row.height == 0:
            raise ValueError(f"iteration {iteration} is not in the metadata "
                             f"({self.frame.height} iterations, "
                             f"{self._range()})")
        values = row.select(STAT_FIELDS).row(0, named=True)
        return BatchStats(**{k: int(v) for k, v in values.items()})

    def _range(self) -> str:
        if self.frame.height == 0:
            return "none"
        its = self.frame["iteration"]
        return f"{its.min()}..{its.max()}"


# ------------------------------------------------------------------------------------------------
def _geometry(spec: "ModelSpec | None") -> tuple[int, int | None]:
    vision = spec.vision if spec is not None else None
    if vision is None:
        return DEFAULT_MERGE_SIZE, None
    if getattr(vision, "cls_per_frame", 0):
        from ..errors import UnsupportedModelError

        raise UnsupportedModelError(f"{spec.name}: metadata for a tower with CLS tokens per tile ({spec.family}) "
                                    "is not read yet; use vlm-perf flops with --image-size")
    return int(vision.spatial_merge_size), vision.window_side_merged


def _scan(sources: list[Source], row_index: str | None = None) -> pl.LazyFrame:
    paths = [str(s.path) for s in sources]
    return pl.scan_ndjson(paths if len(paths) > 1 else paths[0], schema=SCHEMA, row_index_name=row_index)


def _rows(lf: pl.LazyFrame, merge_size: int, window_side: int | None, flags: bool = False) -> pl.LazyFrame:
    ex = row_exprs(merge_size, window_side)
    cols = [pl.col("iteration"), pl.col("microbatch"), pl.col("dp_rank"), ex.code.alias(_CODE)]
    cols += [(expr if isinstance(expr, pl.Expr) else pl.lit(expr, pl.Int64)).alias(name)
             for name, expr in ex.stats.as_dict().items()]
    if flags:
        cols += [ex.pre_lm.alias(_FLAGS[0]), ex.pre_vision.alias(_FLAGS[1]), ex.padded_only.alias(_FLAGS[2])]
    return ex.apply(lf).select(cols)


_KEY = ("iteration", "microbatch", "dp_rank")


# Per-iteration facts for finding rows a resumed job recorded twice, over rows carrying both keys.
# Only min / max / count: O(iterations) memory whatever the number of ranks and rows.
_KEYED = pl.col("microbatch").is_not_null() & pl.col("dp_rank").is_not_null()
_KEY_CHECK = [_KEYED.sum().alias("_keyed"),
              pl.col("microbatch").filter(_KEYED).min().alias("_mb_min"),
              pl.col("microbatch").filter(_KEYED).max().alias("_mb_max"),
              pl.col("dp_rank").filter(_KEYED).min().alias("_rank_min"),
              pl.col("dp_rank").filter(_KEYED).max().alias("_rank_max")]


def _replayed_iterations(per_iteration: pl.DataFrame) -> tuple[list[int], str | None]:
    """Iterations whose keyed rows must repeat an (microbatch, dp_rank) key, and a note.

    Pigeonhole: an iteration with more keyed rows than (rank span) x (microbatch-index span) holds a
    key twice, which is what re-recording a replayed iteration does. When ``microbatch`` does not
    number the microbatches (one value for several rows per rank in most iterations), nothing is
    flagged and the note says so. Rows missing either key are never dropped.
    """
    keyed = per_iteration.filter(pl.col("_keyed") > 0)
    if keyed.height == 0:
        return [], None
    ranks = keyed["_rank_max"] - keyed["_rank_min"] + 1
    indexes = keyed["_mb_max"] - keyed["_mb_min"] + 1
    several_per_rank = keyed["_keyed"].cast(pl.Int64) > ranks
    constant_index = several_per_rank & (indexes == 1)
    if several_per_rank.sum() * 2 > keyed.height and constant_index.sum() * 2 > several_per_rank.sum():
        return [], ("microbatch does not number the microbatches of an iteration (one value for several rows), so "
                    "rows a resumed job recorded twice cannot be told apart: none dropped")
    flagged = keyed.filter(keyed["_keyed"].cast(pl.Int64) > ranks * indexes)["iteration"]
    return sorted(flagged.unique().to_list()), None


def _dedup(rows: pl.LazyFrame) -> pl.LazyFrame:
    """Keep the LAST row (file order) of every repeated (iteration, microbatch, dp_rank) key;
    rows without both keys cannot be told apart and are all kept."""
    return pl.concat([rows.filter(_KEYED).unique(subset=list(_KEY), keep="last", maintain_order=True),
                      rows.filter(~_KEYED)])


def _collect(lf: pl.LazyFrame) -> pl.DataFrame:
    return lf.collect(engine="streaming")


def _parse_ok(source: Source) -> bool:
    try:
        _collect(_scan([source]).select(pl.all().null_count()))
    except (pl.exceptions.ComputeError, pl.exceptions.SchemaError, pl.exceptions.InvalidOperationError):
        return False
    return True


Bad = tuple[int, int, str]  # (source index, line, "field: reason") -- sorts in file order


def _repair(sources: list[Source], temp: TempArea, diag: MetadataDiagnostics, bad: list[Bad]) -> list[Source]:
    """After polars failed to parse the shards: find the shard(s) and line(s) (slow path) and
    replace each failing shard by a cleaned copy holding its parsable lines."""
    repaired = []
    for index, src in enumerate(sources):
        if _parse_ok(src):
            repaired.append(src)
            continue
        found: list[tuple[int, str]] = []
        new, counts = clean_source(src, temp, found, MAX_BAD_LINES)
        if not _parse_ok(new):  # our per-line check missed what polars rejects: give up with its message
            try:
                _collect(_scan([new]).select(pl.all().null_count()))
            except Exception as exc:  # noqa: BLE001 - re-raised as a one-line ValueError
                raise ValueError(f"{src.display}: cannot read metadata: {str(exc).splitlines()[0]}") from None
        repaired.append(new)
        diag.cleaned.append(src.display)
        bad.extend((index, line, msg) for line, msg in found)
        for key, n in counts.items():
            diag.rows_skipped[key] = diag.rows_skipped.get(key, 0) + n
            diag.rows_read += n
    return repaired


def _locate(sources: list[Source], merge_size: int, window_side: int | None, limit: int) -> list[Bad]:
    """The first ``limit`` rows of each shard with a non-zero code (slow path)."""
    found: list[Bad] = []
    ex = row_exprs(merge_size, window_side)
    for index, src in enumerate(sources):
        bad = _collect(ex.apply(_scan([src], row_index="_row")).with_columns(ex.code.alias(_CODE))
                       .filter(pl.col(_CODE) != 0).select("_row", _CODE).head(limit))
        if bad.height == 0:
            continue
        lines = line_numbers(src, bad["_row"].to_list())
        found.extend((index, lines[r], reason_key(c, merge_size)) for r, c in bad.iter_rows())
        if len(found) >= limit:
            break
    return found


def _prepare(paths, temp: TempArea, diag: MetadataDiagnostics, bad: list[Bad],
             probe: Callable[[list[Source]], Any]) -> tuple[list[Source], Any]:
    """Expand/decompress; run ``probe`` (the fast-path query); on a parse failure repair and rerun."""
    files = expand_paths(paths)
    diag.files = [str(p) for p in files]
    sources = prepare_sources(files, temp)
    diag.decompressed = [s.display for s in sources if s.path != Path(s.display)]
    try:
        return sources, probe(sources)
    except (pl.exceptions.ComputeError, pl.exceptions.SchemaError, pl.exceptions.InvalidOperationError):
        pass
    sources = _repair(sources, temp, diag, bad)
    return sources, probe(sources)


def _report_bad(sources: list[Source], codes: dict[int, int], skip_bad: bool, merge_size: int,
                window_side: int | None, diag: MetadataDiagnostics, bad: list[Bad]) -> None:
    """Locate rule violations (only if there are any); raise on the first bad line unless skip_bad."""
    bad_codes = {c: n for c, n in codes.items() if c not in (0, None)}
    if bad_codes:
        bad.extend(_locate(sources, merge_size, window_side, MAX_BAD_LINES))
        for c, n in bad_codes.items():
            key = reason_key(c, merge_size)
            diag.rows_skipped[key] = diag.rows_skipped.get(key, 0) + n
    if not bad:
        return
    bad.sort()
    lines = [f"{sources[i].display}:{line}: {msg}" for i, line, msg in bad[:MAX_BAD_LINES]]
    if not skip_bad:
        raise ValueError(lines[0])
    diag.bad_lines = lines


SAMPLE_LINES = 200  # lines per shard (first 4 shards) checked for keys outside schema v1


def _unknown_keys(sources: list[Source]) -> dict[str, int]:
    """Top-level keys outside schema v1 in the first lines of the first shards (free-form extras are
    allowed, but a misspelled key such as ``image_grids`` would otherwise drop data silently)."""
    import json

    seen: dict[str, int] = {}
    for source in sources[:4]:
        for count, (_, raw) in enumerate(iter_nonblank_lines(source)):
            if count >= SAMPLE_LINES:
                break
            try:
                row = json.loads(raw)
            except ValueError:
                continue
            for key in row if isinstance(row, dict) else ():
                if key not in SCHEMA:
                    seen[key] = seen.get(key, 0) + 1
    return seen


def _unknown_key_note(unknown: dict[str, int]) -> str | None:
    import difflib

    suspects = []
    for key in sorted(unknown):
        close = difflib.get_close_matches(key, list(SCHEMA), n=1, cutoff=0.6)
        if close:  # free-form extras (loss, sample ids, ...) are fine; a near-miss of a schema key is not
            suspects.append(f"{key!r} (did you mean {close[0]!r}?)")
    return f"keys outside schema v1 are ignored: {', '.join(suspects)}" if suspects else None


def _finish_notes(diag: MetadataDiagnostics) -> None:
    if diag.rows_preaggregated_vision:
        diag.notes.append(
            f"{diag.rows_preaggregated_vision} row(s) carry pre-aggregated vision statistics: per-item sums are "
            "taken equal to per-frame sums (a lower bound for video), the image/video split is unknown (counted "
            "as images)"
            + (", and the window statistic falls back to the per-frame sum (an upper bound)"
               if diag.window_side else ""))
    if diag.rows_padded_tokens_only:
        diag.notes.append(
            f"{diag.rows_padded_tokens_only} row(s) give padded_tokens only: each is taken as `samples` (default 1) "
            "unpacked sequences of equal length (real-token and per-document statistics unknown)")
    if diag.rows_duplicate:
        diag.notes.append(
            f"{diag.rows_duplicate} repeated (iteration, microbatch, dp_rank) row(s) dropped, the last one kept "
            "(a resumed job re-recording replayed iterations); they are not counted twice")
    if diag.rows_preaggregated_lm:
        diag.notes.append(f"{diag.rows_preaggregated_lm} row(s) carry pre-aggregated LM statistics")


# ------------------------------------------------------------------------------------------------
def scan_microbatches(paths: PathsLike, spec: "ModelSpec | None" = None, skip_bad: bool = False) -> pl.LazyFrame:
    """Lazy per-microbatch statistics: ``iteration, microbatch, dp_rank`` + the `BatchStats` fields.

    The files are validated first (one streaming pass computing only the row codes; raises
    ``ValueError`` naming ``file:line`` and the field unless ``skip_bad``), then a lazy frame over
    the valid rows is returned. Decompressed/cleaned temporary copies live until interpreter exit.
    """
    merge_size, window_side = _geometry(spec)
    temp = TempArea()
    diag = MetadataDiagnostics(merge_size=merge_size, window_side=window_side)

    def probe(sources: list[Source]) -> pl.DataFrame:
        ex = row_exprs(merge_size, window_side)
        return _collect(ex.apply(_scan(sources)).select("iteration", "dp_rank", "microbatch", ex.code.alias(_CODE))
                        .group_by("iteration", _CODE).agg(pl.len().alias("_rows"), *_KEY_CHECK))

    try:
        bad: list[Bad] = []
        sources, grouped = _prepare(paths, temp, diag, bad, probe)
        codes = dict(grouped.group_by(_CODE).agg(pl.col("_rows").sum()).iter_rows())
        _report_bad(sources, codes, skip_bad, merge_size, window_side, diag, bad)
    except BaseException:
        temp.cleanup()
        raise
    temp.keep_until_exit()
    good = grouped.filter(pl.col(_CODE) == 0)
    rows = _rows(_scan(sources), merge_size, window_side).filter(pl.col(_CODE) == 0).drop(_CODE)
    replayed, _ = _replayed_iterations(good)
    if not replayed:
        return rows
    in_replayed = pl.col("iteration").is_in(replayed)
    return pl.concat([rows.filter(~in_replayed), _dedup(rows.filter(in_replayed))])


def iteration_stats(paths: PathsLike, spec: "ModelSpec | None" = None, skip_bad: bool = False) -> MetadataResult:
    """Per-iteration sufficient statistics (one streaming pass over all shards)."""
    merge_size, window_side = _geometry(spec)
    temp = TempArea()
    diag = MetadataDiagnostics(merge_size=merge_size, window_side=window_side)
    sums = [pl.col(name).sum() for name in STAT_FIELDS]
    sums += [pl.len().alias("microbatches")] + [pl.col(f).sum() for f in _FLAGS]

    def probe(sources: list[Source]) -> pl.DataFrame:
        return _collect(_rows(_scan(sources), merge_size, window_side, flags=True)
                        .group_by("iteration", _CODE).agg(sums + _KEY_CHECK))

    try:
        bad: list[Bad] = []
        sources, grouped = _prepare(paths, temp, diag, bad, probe)
        unknown = _unknown_keys(sources)
        diag.extra_keys = sorted(unknown)
        note = _unknown_key_note(unknown)
        if note:
            diag.notes.append(note)
        codes = dict(grouped.group_by(_CODE).agg(pl.col("microbatches").sum()).iter_rows())
        _report_bad(sources, codes, skip_bad, merge_size, window_side, diag, bad)
        good = grouped.filter(pl.col(_CODE) == 0)
        replayed, note = _replayed_iterations(good)
        if note:
            diag.notes.append(note)
        if replayed:  # rare: redo only the replayed iterations, deduplicated
            in_replayed = pl.col("iteration").is_in(replayed)
            rows = _rows(_scan(sources), merge_size, window_side, flags=True).filter((pl.col(_CODE) == 0) & in_replayed)
            redone = _dedup(rows).group_by("iteration", _CODE).agg(sums).collect()
            before = int(good.filter(in_replayed)["microbatches"].sum())
            diag.rows_duplicate = before - int(redone["microbatches"].sum())
            good = pl.concat([good.filter(~in_replayed).select(redone.columns), redone], how="vertical_relaxed")
    finally:
        temp.cleanup()
    flag_totals = good.select(pl.col(f).sum() for f in _FLAGS).row(0) if good.height else (0, 0, 0)
    diag.rows_preaggregated_lm, diag.rows_preaggregated_vision, diag.rows_padded_tokens_only = map(int, flag_totals)
    frame = (good.select("iteration", *STAT_FIELDS, "microbatches")
             .with_columns(pl.col("microbatches").cast(pl.Int64))
             .sort("iteration"))
    diag.rows_used = int(frame["microbatches"].sum()) if frame.height else 0
    diag.rows_read += int(sum(codes.values()))
    diag.iterations = frame.height
    _finish_notes(diag)
    return MetadataResult(frame=frame, diagnostics=diag)
