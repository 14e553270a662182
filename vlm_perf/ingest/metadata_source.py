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

import io
import json
import re
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Iterable, Iterator, Mapping, Union

import polars as pl

from ..errors import ConfigError, InputError, SchemaError
from ..remote import is_url, open_binary
from ..stats import DEFAULT_MERGE_SIZE, BatchStats
from .compressed import compression_of, is_blank, open_maybe_compressed
from .metadata_io import expand_paths, is_parquet, parse_line
from .metadata_media import MediaConverter
from .metadata_schema import SCHEMA, reason_key, row_exprs

if TYPE_CHECKING:  # pragma: no cover
    from ..arch.spec import ModelSpec

__all__ = ["CHUNK_BYTES", "ENGINES", "MAX_LINE_BYTES", "MetadataSource", "ParseEngine", "register_engine",
           "DEFAULT_ENGINE"]

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
_FLAGS = ("_pre_lm", "_pre_vision", "_padded_only")
# rows on the longest-sample text x vision bound, and their sums (counted, shortest sample): RowExprs.cross_bound
_XBOUND = ("_xb_rows", "_xb_hi_patches", "_xb_lo_patches", "_xb_hi_frames", "_xb_lo_frames")
# pre-aggregated LM rows whose sliding-window statistic is unknown, their lm_tokens_sq and least windowed Σ (RowExprs.window_bound)
_WBOUND = ("_wb_rows", "_wb_counted", "_wb_least")
_BOUNDS = (*_XBOUND, *_WBOUND)
_KEY = ("iteration", "microbatch", "dp_rank")
PathsLike = Union[str, Path, Iterable[Union[str, Path]]]
RowColumn = Callable[[pl.DataFrame], pl.Series]


# ---------------------------------------------------------------------------------- engines
@dataclass(frozen=True)
class ParseEngine:
    """Bytes of whole JSON lines -> a frame with exactly `SCHEMA`; raises on anything it cannot
    parse strictly (the caller then locates the line). ``strict`` engines reject floats, strings
    and booleans in integer fields instead of converting them."""

    name: str
    parse: Callable[[bytes], pl.DataFrame]
    description: str


ENGINES: dict[str, ParseEngine] = {}


def register_engine(engine: ParseEngine) -> ParseEngine:
    """Add a parse engine; a second engine of the same name is an error."""
    if engine.name in ENGINES:
        raise ValueError(f"metadata parse engine {engine.name!r} is already registered")
    ENGINES[engine.name] = engine
    return engine


def arrow_schema():
    import pyarrow as pa

    def arrow(dtype: pl.DataType):
        if dtype == pl.Int64:
            return pa.int64()
        if dtype == pl.List(pl.Int64):
            return pa.list_(pa.int64())
        return pa.list_(pa.list_(pa.int64()))

    return pa.schema([(name, arrow(dtype)) for name, dtype in SCHEMA.items()])


_PYARROW_OPTIONS: list = []
#: pyarrow parses a buffer in blocks on its thread pool: blocks of len/8 (256 KiB to 4 MiB) keep a
#: small shard (one chunk of a few MB) on several threads instead of one.
_BLOCK_MIN, _BLOCK_MAX, _BLOCKS_PER_CHUNK = 256 << 10, 4 << 20, 8


def _parse_pyarrow(data: bytes) -> pl.DataFrame:
    import pyarrow as pa
    import pyarrow.json as pj

    if not _PYARROW_OPTIONS:
        _PYARROW_OPTIONS.append(pj.ParseOptions(explicit_schema=arrow_schema(), unexpected_field_behavior="ignore"))
    block = min(_BLOCK_MAX, max(_BLOCK_MIN, len(data) // _BLOCKS_PER_CHUNK))

    def read(block_size: int):
        return pj.read_json(pa.BufferReader(data), parse_options=_PYARROW_OPTIONS[0],
                            read_options=pj.ReadOptions(block_size=block_size))

    try:
        table = read(block)
    except pa.ArrowInvalid as exc:
        if "straddl" not in str(exc) or block > len(data):
            raise
        table = read(len(data) + 1)  # a line longer than a block: the whole buffer as one block
    frame = pl.from_arrow(table)
    assert isinstance(frame, pl.DataFrame)
    return frame.cast(SCHEMA)  # type: ignore[arg-type]


def _parse_polars(data: bytes) -> pl.DataFrame:
    return pl.read_ndjson(io.BytesIO(data), schema=SCHEMA)


DEFAULT_ENGINE = "pyarrow"
register_engine(ParseEngine("pyarrow", _parse_pyarrow,
                            "pyarrow.json with the explicit schema (strict integers; rejects invalid surrogates "
                            "and duplicate keys, which then go to the per-line path)"))
register_engine(ParseEngine("polars", _parse_polars,
                            "polars.read_ndjson with the explicit schema (strict integers; accepts a duplicate "
                            "key, first value wins)"))


# ---------------------------------------------------------------------------------- chunks
@dataclass
class _Chunk:
    data: bytes
    first_line: int  # 1-based line number of the first line of ``data``


@dataclass
class _Bad:
    file_index: int
    line: int
    message: str  # "field: reason" (what the user reads after file:line)
    key: str  # the rows_skipped key


def _iter_chunks(path: Path, display: str, chunk_bytes: int, max_line: int,
                 on_long: Callable[[int], None], on_bytes: Callable[[int], None]) -> Iterator[_Chunk]:
    """Whole lines of ``path`` (decompressed, streaming) in chunks; a leading BOM is removed.

    A line longer than ``max_line`` is reported through ``on_long(line)`` and skipped without
    being held in memory. ``on_bytes(n)`` is called with the bytes read so far from ``path``.
    """
    try:
        fh = open_maybe_compressed(path)
    except OSError as exc:
        raise InputError(f"cannot open ({exc.strerror or exc})", source=display) from None
    with fh:
        line = 1
        rest = b""
        skipping = False  # inside an over-long line: drop bytes up to its newline
        first = True
        while True:
            try:
                block = fh.read(chunk_bytes)
            except Exception as exc:  # noqa: BLE001 - gzip: OSError/EOFError; zstandard.ZstdError
                raise InputError(f"cannot decompress ({exc})", source=display) from None
            if first:
                first = False
                if block.startswith(_BOM):
                    block = block[len(_BOM):]
            on_bytes(len(block))
            if not block:
                if rest and not skipping:
                    yield _Chunk(rest, line)
                return
            if skipping:
                cut = block.find(b"\n")
                if cut < 0:
                    continue
                block = block[cut + 1:]
                skipping = False
                line += 1
            cut = block.rfind(b"\n") + 1  # ``rest`` never holds a line end
            if cut == 0:  # no line end in the buffer
                buf = rest + block
                if len(buf) > max_line:
                    on_long(line)
                    skipping, rest = True, b""
                else:
                    rest = buf
                continue
            # one copy: the carried-over start of a line + this block up to its last line end
            whole = b"".join((rest, memoryview(block)[:cut])) if rest or cut < len(block) else block
            rest = block[cut:]
            if len(rest) > max_line:
                on_long(line + whole.count(b"\n"))
                skipping, rest = True, b""
            # lines inside ``whole`` longer than max_line
            if len(whole) > max_line:
                whole, line = _drop_long_lines(whole, line, max_line, on_long)
            if whole:
                yield _Chunk(whole, line)
            line += whole.count(b"\n")


def _may_hold_long_line(whole: bytes, max_line: int) -> bool:
    """False when no line of ``whole`` is longer than ``max_line``, checked in O(len / max_line) finds.

    Every aligned window of ``max_line // 2`` bytes is probed for a newline; a line longer than
    ``max_line`` covers at least one such window entirely, so if every window holds a newline
    there is none (the exact per-line check then never runs on ordinary chunks).
    """
    half = max(1, max_line // 2)
    return any(whole.find(b"\n", k, k + half) < 0 for k in range(0, len(whole), half))


def _drop_long_lines(whole: bytes, line: int, max_line: int, on_long: Callable[[int], None]) -> tuple[bytes, int]:
    """Replace every line longer than ``max_line`` by an empty line (reported); line numbers stay."""
    if not _may_hold_long_line(whole, max_line):
        return whole, line
    parts = whole.split(b"\n")
    if max(len(p) for p in parts) <= max_line:
        return whole, line
    for i, part in enumerate(parts):
        if len(part) > max_line:
            on_long(line + i)
            parts[i] = b""
    return b"\n".join(parts), line


def _nonblank_lines(data: bytes, first_line: int) -> list[int]:
    """Line numbers of the non-blank lines of ``data`` (one per parsed row, in order)."""
    return [first_line + i for i, raw in enumerate(data.split(b"\n")) if raw.strip(b" \t\r\n")]


def _pieces(data: bytes, first_line: int, n: int) -> list[_Chunk]:
    """``data`` cut into about ``n`` pieces at line ends."""
    size = max(1, len(data) // n)
    out, start, line = [], 0, first_line
    while start < len(data):
        end = data.find(b"\n", min(len(data) - 1, start + size))
        end = len(data) if end < 0 else end + 1
        piece = data[start:end]
        out.append(_Chunk(piece, line))
        line += piece.count(b"\n")
        start = end
    return out


# ---------------------------------------------------------------------------------- the source
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
    rows_media_in_pixels: int = 0  # rows whose grids were derived from schema v2 image_sizes / video_sizes
    rows_duplicate: int = 0  # repeated (iteration, microbatch, dp_rank) rows dropped (last one kept)
    decompressed: list[str] = field(default_factory=list)  # compressed shards (streamed, never to disk)
    cleaned: list[str] = field(default_factory=list)  # shards with lines the fast engine could not parse
    # rows with images of several samples of unequal lengths and no images_per_sample: the text x vision sums are the
    # longest sample's bound (counted) and the shortest sample's value (the exact sum lies between); totals of the run
    rows_cross_bound: int = 0
    cross_bound_patches: int = 0
    cross_bound_patches_low: int = 0
    cross_bound_frames: int = 0
    cross_bound_frames_low: int = 0
    cross_total_patches: int = 0
    cross_total_frames: int = 0
    #: vision tokens per frame a cross-attention layer adds (Mllama: T CLS tokens per image); None: the model has no
    #: cross-attention layers (the text x vision sums are then read by nothing and the bound is not noted)
    cross_kv_tokens_per_frame: int | None = None
    #: the sliding window the FLOPs read (None: no windowed attention block). Pre-aggregated LM rows with lm_tokens_sq > W² count
    #: those layers as full causal: their rows, Σ lm_tokens_sq (counted), the least windowed Σ their aggregates allow,
    #: and the run's windowed Σ (lm_tokens_sq - lm_tokens_sq_beyond_window) as counted
    lm_window: int | None = None
    rows_window_bound: int = 0
    window_bound_counted: int = 0
    window_bound_least: int = 0
    window_total: int = 0
    notes: list[str] = field(default_factory=list)

    @property
    def rows_skipped_total(self) -> int:
        return sum(self.rows_skipped.values())

    def to_dict(self) -> dict[str, Any]:
        from dataclasses import asdict

        out = asdict(self)
        out["rows_skipped_total"] = self.rows_skipped_total
        return out


def geometry(spec: "ModelSpec | None") -> tuple[int, int | None]:
    """(spatial merge size, window side in merged tokens) of the model's vision tower."""
    vision = spec.vision if spec is not None else None
    if vision is None:
        return DEFAULT_MERGE_SIZE, None
    return int(vision.spatial_merge_size), vision.window_side_merged


def cls_per_frame(spec: "ModelSpec | None") -> int:
    """CLS tokens the tower prepends to each frame/tile sequence (InternViT: 1; 0 without a tower)."""
    vision = spec.vision if spec is not None else None
    return int(getattr(vision, "cls_per_frame", 0) or 0) if vision is not None else 0


def lm_window(spec: "ModelSpec | None") -> int | None:
    """The LM's sliding window in tokens (None: no sliding-window layers; one window per model, as `LMSpec` holds)."""
    return getattr(getattr(spec, "lm", None), "sliding_window", None) or None


def windowed_attention(spec: "ModelSpec | None") -> int | None:
    """The sliding window the model's FLOPs read (an attention block with a window), else None: PaliGemma 2 has
    sliding layers but is billed as the eager square, so nothing reads the statistic and no bound is noted."""
    from ..arch.blocks import DecoderAttention

    found = [b.window for b in getattr(spec, "blocks", ()) if isinstance(b, DecoderAttention) and b.window]
    return int(found[0]) if found else None


def cross_kv_tokens_per_frame(spec: "ModelSpec | None") -> int | None:
    """Vision tokens per frame of the model's cross-attention layers (Mllama: its tiles' CLS tokens); None without."""
    from ..arch.blocks import CrossAttention

    found = [b for b in getattr(spec, "blocks", ()) if isinstance(b, CrossAttention)]
    return int(found[0].kv_tokens_per_frame) if found else None


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


def replayed_iterations(per_iteration: pl.DataFrame) -> tuple[list[int], str | None]:
    """Iterations whose keyed rows must repeat a (microbatch, dp_rank) key, and a note.

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


def unknown_key_note(unknown: Mapping[str, int]) -> str | None:
    import difflib

    suspects = []
    for key in sorted(unknown):
        close = difflib.get_close_matches(key, list(SCHEMA), n=1, cutoff=0.6)
        if close:  # free-form extras (loss, sample ids, ...) are fine; a near-miss of a schema key is not
            suspects.append(f"{key!r} (did you mean {close[0]!r}?)")
    return f"keys outside schema v1 are ignored: {', '.join(suspects)}" if suspects else None


def finish_notes(diag: MetadataDiagnostics) -> None:
    """The count-based notes (appended after the pass, from the final counts)."""
    if diag.rows_media_in_pixels:
        diag.notes.append(f"{diag.rows_media_in_pixels} row(s) give media in pixels (schema v2): grids derived "
                          "with the model family's processor rule")
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
    for note in (cross_bound_note(diag), window_bound_note(diag)):
        if note:
            diag.notes.append(note)


def cross_bound_note(diag: MetadataDiagnostics) -> str | None:
    """The named longest-sample bound of the cross-attention core (None without such rows or cross-attention)."""
    t = diag.cross_kv_tokens_per_frame
    if not diag.rows_cross_bound or t is None:
        return None
    hi = diag.cross_bound_patches + t * diag.cross_bound_frames
    lo = diag.cross_bound_patches_low + t * diag.cross_bound_frames_low
    total = diag.cross_total_patches + t * diag.cross_total_frames
    share = (hi - lo) / total if total else 0.0
    return (f"upper bound: {diag.rows_cross_bound} row(s) have images in several samples of unequal lengths and no "
            "images_per_sample, so the cross-attention core counts the longest sample's length x the row's vision "
            f"tokens (Σ S·V = {hi:,} there; the shortest sample gives {lo:,}, the exact value lies between): the "
            f"run's cross-attention core may be over-counted by up to {share:.1%}; record images_per_sample for the "
            "exact value")


def window_bound_note(diag: MetadataDiagnostics) -> str | None:
    """The named full-causal bound of the sliding-window layers on pre-aggregated LM rows (None without such rows)."""
    w = diag.lm_window
    if not diag.rows_window_bound or not w:
        return None
    hi, lo = diag.window_bound_counted, diag.window_bound_least
    share = (hi - lo) / diag.window_total if diag.window_total else 0.0
    return (f"upper bound: {diag.rows_window_bound} row(s) carry pre-aggregated LM statistics (no seq_lens), so the "
            f"sliding-window layers (window {w:,}) count them as full causal attention (Σ s² = {hi:,} there; the "
            f"least windowed Σ their lm_tokens / lm_sequences allow is {lo:,}, the exact value lies between): the "
            f"run's sliding-window attention core may be over-counted by up to {share:.1%}; record seq_lens for the "
            "exact value")


#: what a bad-row error adds: the library names no flag (the CLI adds its own, see `vlm_perf.cli`)
BAD_ROW_HINT = "fix the row, or skip bad rows: they are then counted and reported"


def bad_row_error(message: str, source: str | None = None) -> SchemaError:
    """The error for the first bad metadata row; ``skippable`` tells a caller a skip-bad-rows option applies."""
    err = SchemaError(f"{message} ({BAD_ROW_HINT})", source=source)
    err.skippable = True  # type: ignore[attr-defined]
    return err


def grids_exact(spec) -> bool:
    """Whether per-image grids give the model's vision statistics: not for a family whose media rule needs the
    whole call (``one_call``: Phi-4-multimodal's separators and padded crops); its grid rows are refused (code 36)."""
    if getattr(spec, "vision", None) is None:
        return True
    from ..arch.families import FAMILIES

    family = FAMILIES.get(getattr(spec, "family", ""))
    return not (family is not None and hasattr(family.media, "one_call"))


def audio_unmodelled(spec) -> bool:
    """Whether the model has an audio encoder (audio blocks in its inventory) whose geometry is not modelled
    (``spec.audio`` None: Phi-4-multimodal with another time_reduction); a model without one gives False."""
    if spec is None or getattr(spec, "audio", None) is not None:
        return False
    from ..arch.parts import AUDIO

    return any(getattr(b, "part", None) == AUDIO for b in getattr(spec, "blocks", ()))


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
                                audio_unmodelled=audio_unmodelled(spec))
        self._media = MediaConverter(spec)
        self._done = False
        self._total = 0
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
        diag = self._diag
        diag.files = list(self.displays)
        diag.decompressed = [d for p, d in zip(self.files, self.displays) if not is_parquet(p) and compression_of(p)]
        keys = ["iteration", "dp_rank"] if self.want_per_rank else ["iteration"]
        state = _PassState(keys)
        unknown: dict[str, int] = {}
        total = self._total = sum(p.stat().st_size for p in self.files)
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
        self._finish(state, unknown)
        self._done = True
        return self

    def _stream(self, state: "_PassState", unknown: dict[str, int], total: int) -> Iterator[tuple]:
        """Every shard in order as items: ``("chunk", index, display, _Chunk)`` for JSON lines,
        ``("parquet", index, display, path)``, then ``("end", index, display, bytes read so far)``."""
        done_before = 0
        for index, (path, display) in enumerate(zip(self.files, self.displays)):
            if is_parquet(path):
                yield "parquet", index, display, path
            else:
                for chunk in self._chunks(index, path, display, state, unknown if index < 4 else None,
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
                done_before: int, total: int) -> Iterator[_Chunk]:
        """The chunks of one JSON-lines shard; over-long lines reported, the first lines' keys sampled."""
        left = [SAMPLE_LINES] if sample is not None else [0]
        plain = compression_of(path) is None
        read = [0]

        def on_long(line: int) -> None:
            self._bad(state, _Bad(index, line, f"json: line longer than {self.max_line_bytes} bytes (the stated "
                                                 "limit); not read", "json: line longer than the limit"))

        def on_bytes(n: int) -> None:
            read[0] += n
            if self.progress is not None and plain:
                self.progress(done_before + read[0], total)

        for chunk in _iter_chunks(path, display, self.chunk_bytes, self.max_line_bytes, on_long, on_bytes):
            if left[0] > 0 and sample is not None:
                _sample_keys(chunk.data, left, sample)
            yield chunk

    def _parse_chunk(self, index: int, display: str, chunk: _Chunk, parsed: "Future | None",
                     state: "_PassState") -> Iterator[tuple[pl.DataFrame, Callable[[], list[int]] | None]]:
        try:
            frame = parsed.result() if parsed is not None else self.engine.parse(chunk.data)
        except Exception:  # noqa: BLE001 - any engine error: locate it precisely below
            pass
        else:
            yield frame, (lambda: _nonblank_lines(chunk.data, chunk.first_line))
            return
        if display not in self._diag.cleaned:
            self._diag.cleaned.append(display)
        pieces = _pieces(chunk.data, chunk.first_line, _SPLIT_PIECES) if len(chunk.data) > 1 << 16 else [chunk]
        for piece in pieces:
            if len(pieces) > 1:
                try:
                    frame = self.engine.parse(piece.data)
                except Exception:  # noqa: BLE001
                    pass
                else:
                    yield frame, (lambda p=piece: _nonblank_lines(p.data, p.first_line))
                    continue
            yield from self._per_line(index, piece, state)

    def _per_line(self, index: int, piece: _Chunk,
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
            self._bad(state, _Bad(index, piece.first_line + offset, problem, key))
        if rows:
            yield pl.DataFrame(rows, schema=SCHEMA), (lambda ls=lines: ls)

    def _bad(self, state: "_PassState", bad: _Bad) -> None:
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
        cols += [ex.pre_lm.alias(_FLAGS[0]), ex.pre_vision.alias(_FLAGS[1]), ex.padded_only.alias(_FLAGS[2])]
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
                state.bad.append(_Bad(index, where, reason_key(code, self.merge_size), ""))
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
        flags = per_iteration.select(pl.col(f).sum() for f in _FLAGS).row(0) if per_iteration.height else (0, 0, 0)
        diag.rows_preaggregated_lm, diag.rows_preaggregated_vision, diag.rows_padded_tokens_only = map(int, flags)
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
        cols += [ex.pre_lm.alias(_FLAGS[0]), ex.pre_vision.alias(_FLAGS[1]), ex.padded_only.alias(_FLAGS[2])]
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


class _PassState:
    """Partial aggregates of the pass, compacted as they grow (memory O(groups), not O(rows))."""

    COMPACT_EVERY = 16

    def __init__(self, keys: list[str]) -> None:
        self.keys = keys
        self.partials: list[pl.DataFrame] = []
        self.micro: list[pl.DataFrame] = []
        self.values: list[pl.DataFrame] = []
        self.bad: list[_Bad] = []
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
