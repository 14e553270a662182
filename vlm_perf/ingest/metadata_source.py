"""Open a run's per-microbatch metadata ONCE: every statistic the analysis needs from one pass.

`MetadataSource` expands the paths, streams every shard once (plain, ``.gz`` / ``.zst`` streamed
through `open_maybe_compressed`, never decompressed to disk; or Parquet), validates every line and
yields, from that single pass:

* ``per_iteration``   one row per iteration: ``iteration``, the additive `BatchStats` columns,
                      ``microbatches`` (identical to what `iteration_stats` returned before);
* ``per_rank``        (``per_rank=True``) one row per (iteration, dp_rank): the same columns plus
                      ``dp_rank``; summing it over ``dp_rank`` gives ``per_iteration`` exactly;
* ``per_microbatch``  (``per_microbatch=True``) one row per valid microbatch line: ``iteration,
                      microbatch, dp_rank`` + `BatchStats` columns (O(rows) memory: opt-in);
* ``row_values``      per-microbatch columns computed by caller-supplied functions during the
                      same pass (``row_columns={"vision_share": fn}``; ``fn(frame) -> Series`` on
                      each batch of valid rows), e.g. the per-microbatch vision-share distribution
                      without a second read; 8 bytes per row and value;
* ``diagnostics``     `MetadataDiagnostics`: rows read/used/skipped by reason, the first bad
                      ``file:line``, notes, replayed rows dropped.

Reading: each shard is cut into chunks of about `CHUNK_BYTES` at line ends. A chunk is parsed by
the fast engine (`ENGINES`, default ``pyarrow``: strict, so ``1.5``, ``"1"``, ``true``, ``NaN`` or
an out-of-range integer in a schema field make it fail). A chunk that fails is split into pieces
and only failing pieces go through the precise per-line path (`metadata_io.parse_line`), which
names ``file:line`` and the field. Integer statistics are exact Int64 sums; chunk partials are
merged by summation, so chunking (and the Dask partitioning) cannot change a result.
The engine parses chunk k+1 in a worker thread while chunk k is aggregated (``prefetch``; both
engines and polars release the GIL, so parse and aggregation share the cores).

Rows a resumed job recorded twice (the same (iteration, microbatch, dp_rank)) are detected from
per-iteration key spans in the same pass; only when some are found are the shards read a second
time, for those iterations only (the last copy of a key is kept).
"""

from __future__ import annotations

import json
import re
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Iterable, Iterator, Mapping, Union

import polars as pl

from ..errors import ConfigError, InputError, SchemaError
from ..remote import is_url, open_binary
from ..stats import BatchStats
from .compressed import compression_of, is_blank
from .metadata_chunks import BadLine, Chunk, iter_chunks, nonblank_lines, pieces
from .metadata_engines import DEFAULT_ENGINE, ENGINES, ParseEngine, arrow_schema, register_engine
from .metadata_geometry import (
    audio_unmodelled,
    cls_per_frame,
    cross_kv_tokens_per_frame,
    geometry,
    grids_exact,
    lm_window,
    windowed_attention,
)
from .metadata_io import expand_paths, is_parquet, parse_line
from .metadata_media import MediaConverter
from .metadata_notes import (
    BAD_ROW_HINT,
    MetadataDiagnostics,
    bad_row_error,
    finish_notes,
    replayed_iterations,
    unknown_key_note,
)
from .metadata_schema import SCHEMA, reason_key, row_exprs

if TYPE_CHECKING:  # pragma: no cover
    from ..arch.spec import ModelSpec

__all__ = ["CHUNK_BYTES", "ENGINES", "MAX_LINE_BYTES", "MetadataPartition", "MetadataSource", "ParseEngine",
           "register_engine",
           "DEFAULT_ENGINE",
           # re-exported from the modules they moved to (metadata_engines, metadata_notes, metadata_geometry)
           "arrow_schema", "BAD_ROW_HINT", "MetadataDiagnostics", "bad_row_error", "finish_notes", "grids_exact",
           "cross_kv_tokens_per_frame"]

STAT_FIELDS: tuple[str, ...] = BatchStats.field_names()
#: Bytes of (decompressed) text per chunk handed to the parse engine.
CHUNK_BYTES = 32 << 20
#: A line longer than this is counted as bad (``json: line longer than ...``) without being held
#: in memory: the reader's memory stays O(CHUNK_BYTES + MAX_LINE_BYTES) per shard whatever the input.
MAX_LINE_BYTES = 16 << 20
#: Pieces a failing chunk is split into before falling back to the per-line path.
_SPLIT_PIECES = 64
MAX_BAD_LINES = 20
SAMPLE_LINES = 200  # lines per shard (first 4 shards) checked for keys outside schema v1
_BOM = b"\xef\xbb\xbf"
_CODE = "_code"
_FLAGS = ("_pre_lm", "_pre_vision", "_padded_only", "_dec_assumed")
# rows on the longest-sample text x vision bound, and their sums (counted, shortest sample): RowExprs.cross_bound
_XBOUND = ("_xb_rows", "_xb_hi_patches", "_xb_lo_patches", "_xb_hi_frames", "_xb_lo_frames")
# pre-aggregated LM rows whose sliding-window statistic is unknown, their lm_tokens_sq and least windowed Σ (RowExprs.window_bound)
_WBOUND = ("_wb_rows", "_wb_counted", "_wb_least")
_BOUNDS = (*_XBOUND, *_WBOUND)
_KEY = ("iteration", "microbatch", "dp_rank")
PathsLike = Union[str, Path, Iterable[Union[str, Path]]]
RowColumn = Callable[[pl.DataFrame], pl.Series]




# per-iteration facts for finding rows a resumed job recorded twice: min / max / count only
_KEYED = pl.col("microbatch").is_not_null() & pl.col("dp_rank").is_not_null()
_KEY_CHECK = [_KEYED.sum().alias("_keyed"),
              pl.col("microbatch").filter(_KEYED).min().alias("_mb_min"),
              pl.col("microbatch").filter(_KEYED).max().alias("_mb_max"),
              pl.col("dp_rank").filter(_KEYED).min().alias("_rank_min"),
              pl.col("dp_rank").filter(_KEYED).max().alias("_rank_max")]
# Float64 shadows of the squared sums: an Int64 sum that wrapped around differs from its shadow by ~2^64
_SHADOWED = ("lm_tokens_sq", "vision_patches_sq_frame", "vision_patches_sq_item", "vision_window_sq")
_SHADOW = tuple(f"_f_{c}" for c in _SHADOWED)
_SUMMED = (*STAT_FIELDS, "microbatches", *_FLAGS, *_BOUNDS, "_keyed", *_SHADOW)
_ROW_AGGS = ([pl.col(c).sum() for c in (*STAT_FIELDS, *_FLAGS, *_BOUNDS)] + [pl.len().alias("microbatches")] + _KEY_CHECK
             + [pl.col(c).cast(pl.Float64).sum().alias(f) for c, f in zip(_SHADOWED, _SHADOW)])
_MERGE = ([pl.col(c).sum() for c in _SUMMED]
          + [pl.col(c).min() for c in ("_mb_min", "_rank_min")] + [pl.col(c).max() for c in ("_mb_max", "_rank_max")])





class MetadataSource:
    """One run's metadata shards, read once (see the module docstring for the outputs).

    ``paths``: files (``.jsonl``/``.ndjson`` optionally ``.gz``/``.zst``, or ``.parquet``),
    directories of shards or glob patterns. ``spec``: the model (merge and window sizes; the
    default merge size 2 without). ``skip_bad``: count and skip invalid lines instead of raising
    `SchemaError` on the first one (in file order). ``engine``: a name in `ENGINES`.
    ``progress(done_bytes, total_bytes)``: called after every chunk (input bytes on disk).
    ``raw_sink(frame)``: receives the schema v1 columns of every batch of valid rows, in file
    order (before replay deduplication), e.g. to convert the metadata to Parquet in the same pass.
    ``prefetch``: parse the next chunk in a worker thread while the current one is aggregated
    (outputs, errors and their order are the same either way; it costs one chunk's memory).

    The pass runs on first access to an output (or `read()`); outputs are then plain frames.
    """

    def __init__(self, paths: PathsLike, spec: "ModelSpec | None" = None, *, skip_bad: bool = False,
                 per_rank: bool = False, per_microbatch: bool = False,
                 row_columns: Mapping[str, RowColumn] | None = None, engine: str = DEFAULT_ENGINE,
                 chunk_bytes: int = CHUNK_BYTES, max_line_bytes: int = MAX_LINE_BYTES,
                 progress: Callable[[int, int], None] | None = None,
                 raw_sink: Callable[[pl.DataFrame], None] | None = None, prefetch: bool = True) -> None:
        if engine not in ENGINES:
            raise ConfigError(f"unknown metadata engine {engine!r}; known: {', '.join(sorted(ENGINES))}")
        self.files = expand_paths(paths)
        self.displays = [str(p) for p in self.files]
        self.spec = spec
        self.skip_bad = skip_bad
        self.want_per_rank = per_rank
        self.want_per_microbatch = per_microbatch
        self.row_columns = dict(row_columns or {})
        self.engine = ENGINES[engine]
        self.chunk_bytes = int(chunk_bytes)
        self.max_line_bytes = int(max_line_bytes)
        self.progress = progress
        self.raw_sink = raw_sink
        self.prefetch = bool(prefetch)
        self.merge_size, self.window_side = geometry(spec)
        self.cls_per_frame = cls_per_frame(spec)
        self._exprs = row_exprs(self.merge_size, self.window_side, self.cls_per_frame,
                                text_only=spec is not None and spec.vision is None, with_model=spec is not None,
                                audio=getattr(spec, "audio", None),
                                lm_chunk=getattr(getattr(spec, "lm", None), "attention_chunk", None),
                                lm_window=lm_window(spec),
                                temporal_chunk=int(getattr(getattr(spec, "vision", None), "temporal_chunk", 0) or 0),
                                grids_exact=grids_exact(spec),
                                fixed_side=int((getattr(spec, "extra", None) or {}).get("fixed_grid_side") or 0),
                                fixed_height=int((getattr(spec, "extra", None) or {}).get("fixed_grid_height") or 0),
                                audio_unmodelled=audio_unmodelled(spec),
                                encoder_decoder=bool((getattr(spec, "extra", None) or {}).get("encoder_decoder")))
        self._media = MediaConverter(spec)
        self._done = False
        self._total = 0
        self._offset = 0  # the run-wide index of this source's first shard (a partition of the run: read_partition)
        self._per_iteration: pl.DataFrame | None = None
        self._per_rank: pl.DataFrame | None = None
        self._per_microbatch: pl.DataFrame | None = None
        self._row_values: dict[str, pl.Series] | None = {}
        self._diag = MetadataDiagnostics(merge_size=self.merge_size, window_side=self.window_side,
                                         cross_kv_tokens_per_frame=cross_kv_tokens_per_frame(spec),
                                         lm_window=windowed_attention(spec))

    # ----------------------------------------------------------------------------- outputs
    @property
    def per_iteration(self) -> pl.DataFrame:
        self.read()
        assert self._per_iteration is not None
        return self._per_iteration

    @property
    def per_rank(self) -> pl.DataFrame:
        if not self.want_per_rank:
            raise ValueError("per-rank statistics were not requested: MetadataSource(..., per_rank=True)")
        self.read()
        assert self._per_rank is not None
        return self._per_rank

    @property
    def per_microbatch(self) -> pl.DataFrame:
        if not self.want_per_microbatch:
            raise ValueError("per-microbatch rows were not requested: MetadataSource(..., per_microbatch=True)")
        self.read()
        assert self._per_microbatch is not None
        return self._per_microbatch

    @property
    def row_values(self) -> dict[str, pl.Series]:
        self.read()
        if self._row_values is None:
            raise ValueError("the row values were handed over by take_row_values()")
        return self._row_values

    def take_row_values(self) -> dict[str, pl.Series]:
        """`row_values`, handed over: the source drops its reference (O(rows) memory is freed as soon
        as the caller is done with them); `row_values` raises afterwards."""
        values = self.row_values
        self._row_values = None
        return values

    @property
    def diagnostics(self) -> MetadataDiagnostics:
        self.read()
        return self._diag

    # ----------------------------------------------------------------------------- the pass
    def read(self) -> "MetadataSource":
        if self._done:
            return self
        state, unknown = self._pass()
        self._finish(state, unknown)
        self._done = True
        return self

    def _start(self, total_bytes: int | None = None) -> tuple["_PassState", dict[str, int]]:
        """The diagnostics' file lists and the input size (``total_bytes``, else one stat per shard), and an empty
        pass state."""
        diag = self._diag
        diag.files = list(self.displays)
        diag.decompressed = [d for p, d in zip(self.files, self.displays) if not is_parquet(p) and compression_of(p)]
        self._total = total_bytes if total_bytes is not None else sum(p.stat().st_size for p in self.files)
        return _PassState(["iteration", "dp_rank"] if self.want_per_rank else ["iteration"]), {}

    def _pass(self) -> tuple["_PassState", dict[str, int]]:
        """The pass over every shard, without the finish: (state, keys outside the schema with their counts)."""
        state, unknown = self._start()
        total = self._total
        # One pipeline over all shards: the engine parses the next chunk (possibly the next
        # shard's first) in a worker thread while this one is aggregated; reading, callbacks and
        # aggregation stay on this thread, in file order. At most two chunks are held at once.
        pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="vlm-perf-parse") if self.prefetch else None
        pending: tuple[tuple, Future | None] | None = None
        try:
            for item in self._stream(state, unknown, total):
                ahead = pool.submit(self.engine.parse, item[3].data) if pool is not None and item[0] == "chunk" else None
                if pending is not None:
                    self._handle(*pending, state)
                pending = (item, ahead)
            if pending is not None:
                self._handle(*pending, state)
        finally:
            if pool is not None:
                pool.shutdown(wait=True, cancel_futures=True)
        return state, unknown

    # ----------------------------------------------------------------------------- partitions of a run
    def read_partition(self, offset: int) -> "MetadataPartition":
        """The pass over this source's shards as shards ``offset``.. of a run (keys outside the schema sampled from
        the run's first shards, bad lines numbered run-wide), without the finish: one map task of a cluster's read,
        merged by the whole run's `finish_partitions`. Raises what the pass raises (a bad line without
        ``skip_bad``)."""
        self._offset = offset
        state, unknown = self._pass()
        bad = sorted(state.bad, key=lambda b: (b.file_index, b.line))[:MAX_BAD_LINES]
        for b in bad:
            b.file_index += offset
        diag = self._diag
        return MetadataPartition(grouped=state.merged(), values=pl.concat(state.values) if state.values else None,
                                 bad=bad, unknown=unknown, rows_read=diag.rows_read,
                                 rows_skipped=dict(diag.rows_skipped), cleaned=list(diag.cleaned),
                                 rows_media_in_pixels=diag.rows_media_in_pixels)

    def finish_partitions(self, parts: Iterable["MetadataPartition"],
                          total_bytes: int | None = None) -> "MetadataSource":
        """This source (the whole run) finished from its partitions' `read_partition` states, in file order: the
        single pass's own finish over the merged state, so every output and diagnostic equals `read`'s. The first
        partition's error (file order) is raised, as the single pass raises it. ``total_bytes``: the shards' size
        when the caller has it (else one stat per shard)."""
        parts = list(parts)
        for part in parts:
            if part.error is not None:
                raise part.error
        state, unknown = self._start(total_bytes)
        diag = self._diag
        for part in parts:
            if part.grouped is not None and part.grouped.height:
                state.partials.append(part.grouped)
            if part.values is not None:
                state.values.append(part.values)
            state.bad.extend(part.bad)
            for key, n in part.unknown.items():
                unknown[key] = unknown.get(key, 0) + n
            diag.rows_read += part.rows_read
            for key, n in part.rows_skipped.items():
                diag.rows_skipped[key] = diag.rows_skipped.get(key, 0) + n
            diag.cleaned += part.cleaned
            diag.rows_media_in_pixels += part.rows_media_in_pixels
        self._finish(state, unknown)
        self._done = True
        return self

    def _stream(self, state: "_PassState", unknown: dict[str, int], total: int) -> Iterator[tuple]:
        """Every shard in order as items: ``("chunk", index, display, Chunk)`` for JSON lines,
        ``("parquet", index, display, path)``, then ``("end", index, display, bytes read so far)``."""
        done_before = 0
        for index, (path, display) in enumerate(zip(self.files, self.displays)):
            if is_parquet(path):
                yield "parquet", index, display, path
            else:
                for chunk in self._chunks(index, path, display, state, unknown if index + self._offset < 4 else None,
                                          done_before, total):
                    yield "chunk", index, display, chunk
            done_before += path.stat().st_size
            yield "end", index, display, done_before

    def _handle(self, item: tuple, parsed: "Future | None", state: "_PassState") -> None:
        kind, index, display, payload = item
        if kind == "chunk":
            for frame, lines in self._parse_chunk(index, display, payload, parsed, state):
                self._consume(index, display, frame, lines, state)
        elif kind == "parquet":
            for frame, lines in _parquet_frames(payload, display):
                self._consume(index, display, frame, lines, state)
        else:  # "end" of shard ``index``: its first bad line is known now
            if state.pending_error:
                self._raise_first(state)
            if self.progress is not None:
                self.progress(payload, self._total)

    def _frames(self, index: int, path: Path, display: str, state: "_PassState", sample: dict[str, int] | None,
                done_before: int, total: int) -> Iterator[tuple[pl.DataFrame, Callable[[], list[int]] | None]]:
        """(frame with SCHEMA, lazily computed line number per row) for every batch of ``path``
        (sequentially; the main pass pipelines `_stream` instead)."""
        if is_parquet(path):
            yield from _parquet_frames(path, display)
            return
        for chunk in self._chunks(index, path, display, state, sample, done_before, total):
            yield from self._parse_chunk(index, display, chunk, None, state)

    def _chunks(self, index: int, path: Path, display: str, state: "_PassState", sample: dict[str, int] | None,
                done_before: int, total: int) -> Iterator[Chunk]:
        """The chunks of one JSON-lines shard; over-long lines reported, the first lines' keys sampled."""
        left = [SAMPLE_LINES] if sample is not None else [0]
        plain = compression_of(path) is None
        read = [0]

        def on_long(line: int) -> None:
            self._bad(state, BadLine(index, line, f"json: line longer than {self.max_line_bytes} bytes (the stated "
                                                 "limit); not read", "json: line longer than the limit"))

        def on_bytes(n: int) -> None:
            read[0] += n
            if self.progress is not None and plain:
                self.progress(done_before + read[0], total)

        for chunk in iter_chunks(path, display, self.chunk_bytes, self.max_line_bytes, on_long, on_bytes):
            if left[0] > 0 and sample is not None:
                _sample_keys(chunk.data, left, sample)
            yield chunk

    def _parse_chunk(self, index: int, display: str, chunk: Chunk, parsed: "Future | None",
                     state: "_PassState") -> Iterator[tuple[pl.DataFrame, Callable[[], list[int]] | None]]:
        try:
            frame = parsed.result() if parsed is not None else self.engine.parse(chunk.data)
        except Exception:  # noqa: BLE001 - any engine error: locate it precisely below
            pass
        else:
            yield frame, (lambda: nonblank_lines(chunk.data, chunk.first_line))
            return
        if display not in self._diag.cleaned:
            self._diag.cleaned.append(display)
        parts = pieces(chunk.data, chunk.first_line, _SPLIT_PIECES) if len(chunk.data) > 1 << 16 else [chunk]
        for piece in parts:
            if len(parts) > 1:
                try:
                    frame = self.engine.parse(piece.data)
                except Exception:  # noqa: BLE001
                    pass
                else:
                    yield frame, (lambda p=piece: nonblank_lines(p.data, p.first_line))
                    continue
            yield from self._per_line(index, piece, state)

    def _per_line(self, index: int, piece: Chunk,
                  state: "_PassState") -> Iterator[tuple[pl.DataFrame, Callable[[], list[int]] | None]]:
        """The precise path, in file order: Python's strict check of the schema fields; a line
        Python cannot read at all (deep nesting, invalid UTF-8 in an ignored string) is accepted
        exactly when the engine accepts it on its own, so a verdict never depends on chunking."""
        rows: list[dict] = []
        lines: list[int] = []
        for offset, raw in enumerate(piece.data.split(b"\n")):
            if not raw.strip(b" \t\r\n"):
                continue
            obj, problem = parse_line(raw)
            if problem is None:
                rows.append(obj)  # type: ignore[arg-type]
                lines.append(piece.first_line + offset)
                continue
            if problem.startswith("json:"):
                try:
                    alone = self.engine.parse(raw)
                except Exception:  # noqa: BLE001 - rejected by both: the line is bad
                    pass
                else:
                    if rows:
                        yield pl.DataFrame(rows, schema=SCHEMA), (lambda ls=lines: ls)
                        rows, lines = [], []
                    yield alone, (lambda n=piece.first_line + offset: [n])
                    continue
            key = problem.split(":", 1)[0]
            key = "json: not a JSON object matching schema v1 types" if key == "json" else f"{key}: wrong type"
            self._bad(state, BadLine(index, piece.first_line + offset, problem, key))
        if rows:
            yield pl.DataFrame(rows, schema=SCHEMA), (lambda ls=lines: ls)

    def _bad(self, state: "_PassState", bad: BadLine) -> None:
        """Count one bad line; raise on it unless skip_bad (lines arrive in file order per shard)."""
        self._diag.rows_read += 1
        self._diag.rows_skipped[bad.key] = self._diag.rows_skipped.get(bad.key, 0) + 1
        state.bad.append(bad)
        if not self.skip_bad:
            state.pending_error = True

    def _consume(self, index: int, display: str, frame: pl.DataFrame, lines: Callable[[], list[int]] | None,
                 state: "_PassState") -> None:
        ex = self._exprs
        cols = [pl.col("iteration"), pl.col("microbatch"), pl.col("dp_rank"), ex.code.alias(_CODE)]
        cols += [(expr if isinstance(expr, pl.Expr) else pl.lit(expr, pl.Int64)).alias(name)  # 0: a statistic metadata cannot give
                 for name, expr in ex.stats.as_dict().items()]
        cols += [ex.pre_lm.alias(_FLAGS[0]), ex.pre_vision.alias(_FLAGS[1]), ex.padded_only.alias(_FLAGS[2]),
                 ex.decoder_assumed.alias(_FLAGS[3])]
        cols += [expr.cast(pl.Int64).alias(name) for name, expr in zip(_BOUNDS, (*ex.cross_bound, *ex.window_bound))]
        raw = frame  # as read (v2 sizes, no derived grids): what raw_sink receives
        frame, media_code = self._convert_media(frame, count=True)
        rows = ex.apply(frame.lazy()).select(cols).collect()
        if media_code is not None:  # the v1 rules first, then the v2 media ones
            rows = rows.with_columns(pl.when(pl.col(_CODE) != 0).then(pl.col(_CODE)).otherwise(media_code).alias(_CODE))
        self._diag.rows_read += rows.height
        bad_mask = rows[_CODE] != 0
        n_bad = int(bad_mask.sum())
        if n_bad:
            bad_rows = rows.with_row_index("_row").filter(bad_mask).select("_row", _CODE)
            for code, n in bad_rows.group_by(_CODE).len().iter_rows():
                key = reason_key(code, self.merge_size)
                self._diag.rows_skipped[key] = self._diag.rows_skipped.get(key, 0) + n
            want = MAX_BAD_LINES if self.skip_bad else 1
            first = bad_rows.head(want)
            numbers = lines() if lines is not None else None
            for row, code in first.iter_rows():
                where = numbers[row] if numbers is not None else row + 1
                state.bad.append(BadLine(index, where, reason_key(code, self.merge_size), ""))
            if not self.skip_bad:
                state.pending_error = True
            rows = rows.filter(~bad_mask)
            raw = raw.filter(~bad_mask)
        if state.pending_error:
            self._raise_first(state)
        if self.raw_sink is not None and raw.height:
            self.raw_sink(raw)
        if rows.height == 0:
            return
        state.add(rows.group_by(state.keys).agg(_ROW_AGGS))
        if self.want_per_microbatch:
            state.micro.append(rows.select(*_KEY, *STAT_FIELDS))
        if self.row_columns:
            stats = rows.select("iteration", "dp_rank", *STAT_FIELDS)
            state.values.append(stats.select("iteration").with_columns(
                fn(stats).alias(name) for name, fn in self.row_columns.items()))

    def _convert_media(self, frame: pl.DataFrame, count: bool = False) -> tuple[pl.DataFrame, pl.Series | None]:
        """Schema v2 pixel sizes -> grids (see `metadata_media`); v1-only batches pass unchanged."""
        if not MediaConverter.needed(frame):
            return frame, None
        if count:
            has = pl.col("image_sizes").is_not_null() | pl.col("video_sizes").is_not_null()
            self._diag.rows_media_in_pixels += int(frame.select(has.sum()).item())
        return self._media.apply(frame)

    def _raise_first(self, state: "_PassState") -> None:
        first = min(state.bad, key=lambda b: (b.file_index, b.line))
        raise bad_row_error(first.message, source=f"{self.displays[first.file_index]}:{first.line}")

    def _finish(self, state: "_PassState", unknown: dict[str, int]) -> None:
        diag = self._diag
        diag.extra_keys = sorted(unknown)
        note = unknown_key_note(unknown)
        if note:
            diag.notes.append(note)
        if state.bad:
            state.bad.sort(key=lambda b: (b.file_index, b.line))
            diag.bad_lines = [f"{self.displays[b.file_index]}:{b.line}: {b.message}" for b in state.bad[:MAX_BAD_LINES]]
        grouped = state.merged()
        per_iteration = grouped if state.keys == ["iteration"] else (
            grouped.group_by("iteration").agg(_MERGE) if grouped.height else grouped.drop("dp_rank"))
        replayed, note = replayed_iterations(per_iteration)
        if note:
            diag.notes.append(note)
        micro = pl.concat(state.micro) if state.micro else None
        values = pl.concat(state.values) if state.values else None
        if replayed:
            grouped, micro, values = self._redo(replayed, grouped, micro, values, state.keys)
            before = int(per_iteration["microbatches"].sum())
            per_iteration = grouped if state.keys == ["iteration"] else grouped.group_by("iteration").agg(_MERGE)
            diag.rows_duplicate = before - int(per_iteration["microbatches"].sum())
        _check_overflow(per_iteration)
        flags = per_iteration.select(pl.col(f).sum() for f in _FLAGS).row(0) if per_iteration.height else (0,) * 4
        (diag.rows_preaggregated_lm, diag.rows_preaggregated_vision, diag.rows_padded_tokens_only,
         diag.rows_decoder_assumed) = map(int, flags)
        if per_iteration.height:
            bound = per_iteration.select(pl.col(f).sum() for f in _XBOUND).row(0)
            (diag.rows_cross_bound, diag.cross_bound_patches, diag.cross_bound_patches_low, diag.cross_bound_frames,
             diag.cross_bound_frames_low) = map(int, bound)
            totals = per_iteration.select(pl.col(f).sum() for f in ("lm_x_vision_patches", "lm_x_vision_frames"))
            diag.cross_total_patches, diag.cross_total_frames = map(int, totals.row(0))
            window = per_iteration.select(*(pl.col(f).sum() for f in _WBOUND),
                                          (pl.col("lm_tokens_sq") - pl.col("lm_tokens_sq_beyond_window")).sum())
            (diag.rows_window_bound, diag.window_bound_counted, diag.window_bound_least,
             diag.window_total) = map(int, window.row(0))
        self._per_iteration = _public(per_iteration, ["iteration"])
        if self.want_per_rank:
            self._per_rank = _public(grouped, ["iteration", "dp_rank"])
        if self.want_per_microbatch:
            self._per_microbatch = micro if micro is not None else pl.DataFrame(
                schema={**{k: pl.Int64 for k in _KEY}, **{k: pl.Int64 for k in STAT_FIELDS}})
        for name in self.row_columns:
            self._row_values[name] = (values[name] if values is not None else pl.Series(name, [], pl.Float64))
        diag.rows_used = int(self._per_iteration["microbatches"].sum()) if self._per_iteration.height else 0
        diag.iterations = self._per_iteration.height
        finish_notes(diag)

    def _redo(self, replayed: list[int], grouped: pl.DataFrame, micro: pl.DataFrame | None,
              values: pl.DataFrame | None, keys: list[str]):
        """Second read, of the replayed iterations only: keep the last row of every repeated key."""
        again = MetadataSource(self.files, self.spec, skip_bad=True, engine=self.engine.name,
                               chunk_bytes=self.chunk_bytes, max_line_bytes=self.max_line_bytes)
        ex = self._exprs
        cols = [pl.col("iteration"), pl.col("microbatch"), pl.col("dp_rank"), ex.code.alias(_CODE)]
        cols += [(expr if isinstance(expr, pl.Expr) else pl.lit(expr, pl.Int64)).alias(name)  # 0: a statistic metadata cannot give
                 for name, expr in ex.stats.as_dict().items()]
        cols += [ex.pre_lm.alias(_FLAGS[0]), ex.pre_vision.alias(_FLAGS[1]), ex.padded_only.alias(_FLAGS[2]),
                 ex.decoder_assumed.alias(_FLAGS[3])]
        cols += [expr.cast(pl.Int64).alias(name) for name, expr in zip(_BOUNDS, (*ex.cross_bound, *ex.window_bound))]
        wanted = pl.Series(replayed, dtype=pl.Int64).implode()
        parts = []
        scratch = _PassState(keys)
        for index, (path, display) in enumerate(zip(again.files, again.displays)):
            for frame, _ in again._frames(index, path, display, scratch, None, 0, 1):
                frame = frame.filter(pl.col("iteration").is_in(wanted))
                if frame.height:
                    frame, media_code = self._convert_media(frame)
                    rows = ex.apply(frame.lazy()).select(cols).collect()
                    if media_code is not None:
                        rows = rows.with_columns(pl.when(pl.col(_CODE) != 0).then(pl.col(_CODE))
                                                 .otherwise(media_code).alias(_CODE))
                    parts.append(rows.filter(pl.col(_CODE) == 0))
        rows = pl.concat(parts)
        keyed = rows.filter(_KEYED).unique(subset=list(_KEY), keep="last", maintain_order=True)
        rows = pl.concat([keyed, rows.filter(~_KEYED)])
        redone = rows.group_by(keys).agg(_ROW_AGGS)
        keep = ~pl.col("iteration").is_in(wanted)
        grouped = pl.concat([grouped.filter(keep), redone.select(grouped.columns)], how="vertical_relaxed")
        if micro is not None:
            micro = pl.concat([micro.filter(keep), rows.select(micro.columns)])
        if values is not None:
            stats = rows.select("iteration", "dp_rank", *STAT_FIELDS)
            fresh = stats.select("iteration").with_columns(fn(stats).alias(n) for n, fn in self.row_columns.items())
            values = pl.concat([values.filter(keep), fresh])
        return grouped, micro, values

    # ----------------------------------------------------------------------------- legacy shapes
    def result(self):
        """The `MetadataResult` (per-iteration frame + diagnostics) `iteration_stats` returns."""
        from .metadata import MetadataResult

        return MetadataResult(frame=self.per_iteration, diagnostics=self.diagnostics)


def _check_overflow(per_iteration: pl.DataFrame) -> None:
    """Raise if an Int64 sum wrapped around (pre-aggregated squares near 2^63 summed over rows)."""
    for exact, shadow in zip(_SHADOWED, _SHADOW):
        wrapped = per_iteration.filter((pl.col(exact).cast(pl.Float64) - pl.col(shadow)).abs()
                                       > pl.col(shadow).abs() * 1e-6 + 1.0)
        if wrapped.height:
            it = wrapped["iteration"][0]
            raise SchemaError(f"the sum of {exact} over the rows of iteration {it} exceeds Int64 (about "
                              f"{float(wrapped[shadow][0]):.3g}); the metadata values are implausibly large",
                              source="metadata")


def _public(grouped: pl.DataFrame, keys: list[str]) -> pl.DataFrame:
    """Group keys + BatchStats columns + microbatches (Int64), sorted by the keys."""
    return (grouped.select(*keys, *STAT_FIELDS, "microbatches")
            .with_columns(pl.col("microbatches").cast(pl.Int64))
            .sort(keys, nulls_last=True))


@dataclass
class MetadataPartition:
    """What `MetadataSource.read_partition` hands to the whole run's `MetadataSource.finish_partitions`: one
    partition's pass state (file indices run-wide), or the error its pass raised."""

    grouped: pl.DataFrame | None = None
    values: pl.DataFrame | None = None
    bad: list = field(default_factory=list)
    unknown: dict = field(default_factory=dict)
    rows_read: int = 0
    rows_skipped: dict = field(default_factory=dict)
    cleaned: list = field(default_factory=list)
    rows_media_in_pixels: int = 0
    error: BaseException | None = None


class _PassState:
    """Partial aggregates of the pass, compacted as they grow (memory O(groups), not O(rows))."""

    COMPACT_EVERY = 16

    def __init__(self, keys: list[str]) -> None:
        self.keys = keys
        self.partials: list[pl.DataFrame] = []
        self.micro: list[pl.DataFrame] = []
        self.values: list[pl.DataFrame] = []
        self.bad: list[BadLine] = []
        self.pending_error = False

    def add(self, partial: pl.DataFrame) -> None:
        self.partials.append(partial)
        if len(self.partials) >= self.COMPACT_EVERY:
            self.partials = [self.merged()]

    def merged(self) -> pl.DataFrame:
        if not self.partials:
            return _empty_partial(self.keys)
        if len(self.partials) == 1:
            return self.partials[0]
        schema = self.partials[0].schema
        out = pl.concat(self.partials, how="vertical_relaxed").group_by(self.keys).agg(_MERGE)
        return out.select(pl.col(c).cast(schema[c]) for c in schema)


def _empty_partial(keys: list[str]) -> pl.DataFrame:
    schema: dict[str, Any] = {k: pl.Int64 for k in keys}
    schema.update({c: pl.Int64 for c in STAT_FIELDS})
    schema.update({c: pl.UInt32 for c in _FLAGS})
    schema.update({c: pl.Int64 for c in _BOUNDS})
    schema.update({"microbatches": pl.UInt32, "_keyed": pl.UInt32})
    schema.update({c: pl.Int64 for c in ("_mb_min", "_mb_max", "_rank_min", "_rank_max")})
    schema.update({c: pl.Float64 for c in _SHADOW})
    return pl.DataFrame(schema=schema)


_NONBLANK = re.compile(rb"[^ \t\r\n]")


def _sample_keys(data: bytes, left: list[int], seen: dict[str, int]) -> None:
    """Count top-level keys outside schema v1 in the first lines of a shard (free-form extras are
    allowed, but a misspelled key such as ``image_grids`` would otherwise drop data silently)."""
    start = 0
    while left[0] > 0:
        # jump over blank lines in C: a shard of blank lines costs one regex scan, not a Python loop per line
        found = _NONBLANK.search(data, start, start + (1 << 16))
        if found is None:  # a long blank stretch: is the rest of the chunk blank? (translate runs at memory speed)
            if is_blank(data[start:] if start else data):
                return
            found = _NONBLANK.search(data, start)
            if found is None:  # pragma: no cover - the translate above says there is a non-blank byte
                return
        end = data.find(b"\n", found.start())
        end = len(data) if end < 0 else end
        raw, start = data[found.start():end], end + 1
        left[0] -= 1
        try:
            row = json.loads(raw)
        except (ValueError, RecursionError):
            continue
        for key in row if isinstance(row, dict) else ():
            if key not in SCHEMA:
                seen[key] = seen.get(key, 0) + 1


def _parquet_frames(path: Path, display: str) -> Iterator[tuple[pl.DataFrame, Callable[[], list[int]] | None]]:
    """Batches of a Parquet metadata file as SCHEMA frames; row numbers (1-based) stand for lines."""
    import pyarrow.parquet as pq

    try:
        pf = pq.ParquetFile(open_binary(path) if is_url(path) else path)  # a URL: its fsspec stream
    except Exception as exc:  # noqa: BLE001 - pyarrow raises ArrowInvalid / OSError
        raise InputError(f"cannot read Parquet ({str(exc).splitlines()[0]})", source=display) from None
    present = [name for name in SCHEMA if name in pf.schema_arrow.names]
    for name in present:
        got = pl.from_arrow(pf.schema_arrow.empty_table().select([name])).schema[name]  # type: ignore[union-attr]
        want = SCHEMA[name]
        if not _integer_like(got, want):
            raise SchemaError(f"column {name!r} has type {got}; schema v1 wants {want} (integers, never floats)",
                              source=display)
    row = 0
    for batch in pf.iter_batches(batch_size=1 << 18, columns=present):
        frame = pl.from_arrow(batch)
        assert isinstance(frame, pl.DataFrame)
        try:
            frame = frame.cast({k: SCHEMA[k] for k in present}, strict=True)  # type: ignore[arg-type]
        except pl.exceptions.InvalidOperationError as exc:
            raise SchemaError(f"a value does not fit Int64 ({str(exc).splitlines()[0]})", source=display) from None
        frame = frame.with_columns(pl.lit(None, SCHEMA[k]).alias(k) for k in SCHEMA if k not in present)
        start = row
        row += frame.height
        yield frame.select(list(SCHEMA)), (lambda s=start, n=frame.height: list(range(s + 1, s + n + 1)))


def _integer_like(got: pl.DataType, want: pl.DataType) -> bool:
    if want == pl.Int64:
        return got.is_integer()
    if isinstance(got, pl.List) and isinstance(want, pl.List):
        return _integer_like(got.inner, want.inner)
    return False
