"""``parse_logs``: files -> one tidy iteration table + diagnostics.

Per text file, ONE pass: the reader hands over bounded frames of lines (``reader.line_frames``:
16 MiB blocks of the plain or decompressed text), the per-rank timing collector sees each frame
(``ParseResult.rank_timing``), and the fast-line mask is computed once per batch of at most
``BATCH_ROWS`` lines (a possibly hard-wrapped record at a batch's end moves to the next batch). Each
batch is split:

1. clean, complete Megatron iteration lines (``_fast_mask``: the bulk of big logs) go through
   ``megatron.canonical_plan`` (``fast_plan`` / ``extract`` for the rows it cannot vouch for);
   only records are kept;
2. candidates for another format or needing cleaning (``{``, ``step:``, ``\r``, ANSI,
   non-ASCII, ...) go to the per-line Python ``Router``;
3. the rest are counted by ignore reason, vectorised.

Memory is bounded by the block size and the records, not by the file size (measured peak about 0.9x
the file on the benchmark logs, docs/benchmarks.md "Log parsing"): records are rechunked per batch
and no whole-frame copy is made after the loop when it would change nothing.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import numpy as np
import polars as pl

from ...remote import as_path
from ...errors import InputError
from ..prefetch import prefetched
from . import generic, generic_lane, megatron
from .diagnostics import Diagnostics
from .discover import LOG_SUBDIRS, expand_dir
from .formats import GENERIC_PREFILTERS, candidate_regex, file_formats, line_formats
from .reader import MAX_LINE_BYTES, line_frames
from .router import MAX_PIECES, REASON_RULES, Router
from .schema import (
    KIND_DTYPE,
    PARTIAL_FLAG,
    check_int_columns,
    concat_records,
    drain_renames,
    empty_frame,
    extra_name,
    note_text,
    records_frame,
    snake_case,
)
from .timers import RankTiming, TimingCollector
from .segments import (
    FILE_SCALE,
    ORD,
    SUB_SCALE,
    dedup_view,
    last_write_wins,
)

#: Rows per streaming batch handed back to Python (slow path / ignored lines only).
BATCH_ROWS = 1 << 20
#: Fast-path lines used to probe which Megatron keys a file uses.
PROBE_ROWS = 5000

#: Candidate pre-filter for the slow path (raw text, before cleaning): the union of every registered
#: line format's ``prefilter`` and the generic rules (``formats.candidate_regex``). Deliberately broad:
#: a false positive costs one Python call, a false negative loses a record.
CANDIDATE_RE = candidate_regex()  # as built at import; parsing calls candidate_regex() (late formats)
_FAST_EXCLUDE_RE = r"[\x1b\r]|" + megatron.NEMO2_COLLISION_RE
#: Every pre-filter but the generic extractor's own (and its declared nanochat / mmengine shapes): a
#: line matching it may be another format's, so it never takes the vectorised generic lane.
_LANE_OTHER_RE = "|".join(f"(?:{p})" for p in [*GENERIC_PREFILTERS, *(
    f.prefilter for f in line_formats() if f.prefilter and f.name not in ("nanochat", "mmengine"))])
_SUB_SCALE = SUB_SCALE    # ordering key: (file, line, \r-piece)
_FILE_SCALE = FILE_SCALE


@dataclass
class ParseResult:
    """``raw``: every record (core columns first). ``iterations``: one row per iteration, latest
    segment wins. ``deduplicated``: one row per (segment, iteration)."""

    raw: pl.DataFrame
    diagnostics: Diagnostics
    run_config: dict = field(default_factory=dict)
    _dedup: pl.DataFrame | None = None
    _iterations: pl.DataFrame | None = None
    #: per-rank timing lines gathered during the same read (`timers.TimingCollector`); None when the
    #: result was not built by `parse_logs` (then `timers.read_rank_timing` reads them)
    _timing: TimingCollector | None = None
    _rank_timing: RankTiming | None = None

    @property
    def rank_timing(self) -> RankTiming | None:
        """`timers.RankTiming` of the text logs parsed (the same as ``read_rank_timing`` of those
        files), built on first access; None when not collected."""
        if self._rank_timing is None and self._timing is not None:
            self._rank_timing = self._timing.result()
            self._timing = None
        return self._rank_timing

    @property
    def deduplicated(self) -> pl.DataFrame:
        if self._dedup is None:
            self._dedup = dedup_view(self.raw)
        return self._dedup

    @property
    def iterations(self) -> pl.DataFrame:
        if self._iterations is None:
            self._iterations = last_write_wins(self.deduplicated)
        return self._iterations


# ---- text files ---------------------------------------------------------------------------------

def _fast_mask() -> pl.Expr:
    """Clean, complete Megatron iteration line: handled entirely by the vectorised fast path."""
    text = pl.col("text")
    return (
        text.str.contains(megatron.DETECT_RE)
        & text.str.ends_with("|")  # complete line; truncated ones take the checked slow path
        & (text.str.len_bytes() == text.str.len_chars())  # ASCII: byte (find) == char (slice) offsets
        # == ~contains(_FAST_EXCLUDE_RE); Aho-Corasick for the bytes is cheaper than the alternation
        & ~(text.str.contains_any(["\x1b", "\r"]) | text.str.contains(megatron.NEMO2_COLLISION_RE))
    )


def _continuation_expr() -> pl.Expr:
    """A line that may continue a hard-wrapped Megatron record (``megatron.CONTINUATION_RE``)."""
    text = pl.col("text")
    return (text.str.contains(megatron.CONTINUATION_RE) & ~text.str.contains(megatron.DETECT_RE)
            & ~text.str.contains("time (ms)", literal=True))


def _route_wrapped(batch: pl.DataFrame) -> pl.DataFrame:
    """A Megatron line directly followed by continuation lines (a record wrapped at a paste or
    terminal width, even right after a ``|``) leaves the fast path, so the router joins the pieces;
    the continuations are routed too (``_cont`` -> candidates)."""
    cont = batch.get_column("_cont").fill_null(False).to_numpy()
    det = batch.get_column("text").str.contains(megatron.DETECT_RE).fill_null(False).to_numpy()
    chained = np.zeros(len(cont), dtype=bool)
    for i in np.flatnonzero(cont):  # few: only lines shaped like a wrapped piece
        if i and (det[i - 1] or chained[i - 1]):
            chained[i] = True
    heads = det & np.concatenate([chained[1:], [False]])
    if not heads.any():
        return batch.with_columns(pl.lit(False).alias("_cont"))
    fast = batch.get_column("_fast").to_numpy() & ~heads
    return batch.with_columns(pl.Series("_fast", fast), pl.Series("_cont", chained | heads))


def _candidate_expr() -> pl.Expr:
    """Rows NOT on the fast path that go to the per-line Python router (the rest are ignored)."""
    text = pl.col("text")
    return ((text.str.len_bytes() != text.str.len_chars()) | text.str.contains(candidate_regex())
            | (text.str.contains(generic.PREFILTER) & text.str.contains(generic.METRIC_PREFILTER)))


#: Lines after an unterminated Megatron iteration line that are routed as possible continuations.
_WRAP_FOLLOW = 8
#: Lines after a line that opens more ``{`` than it closes (a metrics dict wrapped or pretty-printed over lines,
#: ``dicts.DICT_MAX_LINES``) that are routed as possible continuations.
_DICT_FOLLOW = 64
#: A line that is one ``key:value`` item (a launcher prefix allowed): the line after it is routed too.
_ITEM_LINE_RE = r"^(?:\([^()]{0,80}\) ?)?[^\s{}\[\]:]{1,300}:[^\s{}\[\]]{1,300}\s*$"


def _wrapped_followers(rest: pl.DataFrame, kinds: pl.Series, until: int) -> tuple[pl.Series, int]:
    """Also route the ``_WRAP_FOLLOW`` physical lines after a Megatron iteration line that does not
    end in ``|`` and the ``_DICT_FOLLOW`` lines after a line that leaves a ``{`` open (a record
    continues there; the router's record assembler joins the pieces). ``until``: last physical line
    still due from the previous batch (0: none). Returns the widened mask and the new ``until``.
    Linear in the batch: each line's reach is the running maximum of the earlier open lines' reach."""
    text = rest.get_column("text")
    flags = rest.select(
        (pl.col("text").str.contains(megatron.DETECT_RE)
         & ~pl.col("text").str.strip_chars_end().str.ends_with("|")).fill_null(False).alias("m"),
        (pl.col("text").str.contains("{", literal=True)
         & (pl.col("text").str.count_matches("{", literal=True)
            > pl.col("text").str.count_matches("}", literal=True))).fill_null(False).alias("d"),
        # a `key:value` line of a step dump (veRL `step:N` then one item per line): its value may wrap
        pl.col("text").str.contains(_ITEM_LINE_RE).fill_null(False).alias("k"))
    mega, dic, item = (flags.get_column(c).to_numpy() for c in ("m", "d", "k"))
    lines = rest.get_column("line").to_numpy()
    if not (mega.any() or dic.any() or item.any()) and (not until or not len(lines) or lines[0] > until):
        return kinds, 0
    del text
    reach = np.where(mega, lines + _WRAP_FOLLOW, 0)
    reach = np.maximum(reach, np.where(dic, lines + _DICT_FOLLOW, 0))
    reach = np.maximum(reach, np.where(item, lines + 1, 0))
    running = np.maximum.accumulate(np.concatenate([[until], reach]))  # reach of the lines before each line
    mask = kinds.fill_null(False).to_numpy() | (lines <= running[:-1])
    return pl.Series(mask), int(running[-1])


def _reasons_expr(text: pl.Expr) -> pl.Expr:
    # blank includes a bare `srun -l` label such as " 3: "
    expr = pl.when(text.str.contains(_BLANK_RE)).then(pl.lit("blank"))
    for name, rx in REASON_RULES:
        expr = expr.when(text.str.contains(rx)).then(pl.lit(name))
    return expr.otherwise(pl.lit("other"))


@dataclass
class _Probe:
    """Layout of a file's Megatron lines, probed on its first ``PROBE_ROWS`` fast-path lines."""
    keys: dict
    with_label: bool
    fraction: bool

    def plan(self, lf: pl.LazyFrame) -> pl.LazyFrame:
        if self.with_label:
            return megatron.fast_plan(lf, self.keys, label=True, fraction=self.fraction)
        return megatron.canonical_plan(lf, self.keys, fraction=self.fraction)


#: Per-batch extraction: polars' in-memory engine runs the ~15 independent column expressions of
#: the Megatron plan in parallel and, measured, with ~25% less CPU than the streaming engine;
#: common-subexpression elimination only adds overhead here.
_EXTRACT_OPTS = {"engine": "in-memory", "optimizations": pl.QueryOptFlags(comm_subexpr_elim=False)}


def _probe(sample: pl.DataFrame) -> _Probe:
    """``sample``: the file's first ``PROBE_ROWS`` fast-path lines."""
    texts = sample.get_column("text")
    keys = megatron.key_order(texts, megatron.probe_keys(texts))
    # prefix extraction costs a regex per row: only in the plan if the sample shows prefixes
    with_label = not sample.select(megatron._is_plain(pl.col("text")).all()).item()
    return _Probe(keys, with_label, megatron.has_fraction(texts))


_BLANK_RE = r"^(?:\s*\d+:)?\s*$"  # includes a bare `srun -l` label such as " 3: "


def _count_reasons(texts: pl.Series) -> dict[str, int]:
    """Ignore reason -> count (a line's reason is the first rule of ``_reasons_expr`` matching it).
    Measured: one ``when/then`` chain + ``value_counts`` beats filtering the lines rule by rule."""
    if not texts.len():
        return {}
    reasons = texts.to_frame("text").select(_reasons_expr(pl.col("text")).alias("r")).get_column("r")
    return {r: int(n) for r, n in reasons.value_counts().iter_rows()}


def _finish_fast(out: pl.DataFrame, probe: _Probe) -> pl.DataFrame:
    """Fast-path output -> records: rows the canonical plan did not vouch for go through
    ``fast_plan``; rows ``fast_plan`` flags go through the checked ``extract``."""
    if not out.get_column("line").is_sorted():
        out = out.sort("line")
    if "_canon" in out.columns:
        canon = out.get_column("_canon")
        out = out.drop("_canon")
        if not canon.all():
            other = megatron.fast_plan(out.filter(~canon).select("line", "text").lazy(), probe.keys,
                                       label=False, fraction=probe.fraction).collect()
            out = pl.concat([out.filter(canon), other], how="diagonal_relaxed").sort("line")
    redo_mask = (out.get_column("_unknown_keys") | out.get_column("_partial") | out.get_column("_prefixed")).fill_null(True)
    if redo_mask.any():
        # keys outside the probed set, an unusual key order, a garbled value or a launcher prefix:
        # redo those rows with the checked extraction over every known key (unknown keys are
        # discovered later from the kept text)
        redo = megatron.extract(out.filter(redo_mask).select("line", "text"))
        out = pl.concat([out.filter(~redo_mask), redo], how="diagonal_relaxed").sort("line")
    return out.drop("_prefixed").with_columns(pl.lit(0, pl.Int64).alias("_sub"))


def _megatron_frame(rows: pl.DataFrame) -> pl.DataFrame:
    """Vectorised extraction for (already cleaned) rows from the slow path: columns line, _sub,
    rank_label, text. Non-ASCII characters are masked so byte and char offsets agree; values must
    be terminated by ``|`` (these rows may be truncated)."""
    masked = rows.with_columns(pl.col("text").str.replace_all(r"[^\x00-\x7F]", "?").str.strip_chars_end())
    out = megatron.extract(masked.rename({"rank_label": "_label"}))
    return out.with_columns(pl.coalesce("_label", "rank_label").alias("rank_label")).drop("_label")


#: Unknown Megatron keys (MoE / MTP losses, new fields) are extracted batch by batch, so the text of
#: their lines is not kept to the end of the file (it was: a log with such a key on every line held
#: its whole text); the keys are named once at the end from the counts over the whole file, as
#: ``megatron.discover_unknown`` names them. False: the previous whole-file path (the tests'
#: reference, tests/ingest/logs/test_unknown_keys_early.py).
EARLY_UNKNOWN = True
_TMP, _LOST = "\x00unknown\x00", "\x00lost\x00"  # per-key columns until the keys are named


class _UnknownKeys:
    """Per-file state of the batch-by-batch unknown-key extraction (see ``EARLY_UNKNOWN``)."""

    def __init__(self) -> None:
        self.counts: dict[str, list[int]] = {}  # key spelling as matched -> [lines, first line]
        self.samples: dict[str, str] = {}  # key -> its first value text (for the "not a number" note)
        self.columns: dict[str, None] = {}  # every column the frames had (``discover_unknown``'s ``taken``)

    def take(self, frame: pl.DataFrame) -> pl.DataFrame:
        """``frame`` (extracted rows of a batch, in order) with the unknown keys of its
        ``_unknown_keys`` rows as per-key value / lost columns, and without ``text``."""
        self.columns.update(dict.fromkeys(frame.columns))
        if "text" not in frame.columns:
            return frame
        flag = frame.get_column("_unknown_keys").fill_null(False) if "_unknown_keys" in frame.columns else None
        if flag is None or not flag.any():
            return frame.drop("text")
        unk = frame.filter(flag)
        found = (unk.select(pl.col("line"), pl.col("text").str.extract_all(megatron._KEY_DISCOVERY_RE).alias("k"))
                 .explode("k").drop_nulls("k"))
        for raw, n, first in found.group_by("k").agg(pl.len(), pl.col("line").min()).iter_rows():
            entry = self.counts.setdefault(raw, [0, first])
            entry[0] += n
            entry[1] = min(entry[1], first)
        keys = {}
        for raw in found.get_column("k").unique().to_list():
            key = _key_of(raw)
            if key:
                keys[key] = (_TMP + key, 1.0)
        if not keys:
            return frame.drop("text")
        out = megatron.extract(frame.select("text", "line"), "text", keys)
        text = pl.col("text")
        cols = []
        for key, (tmp, _) in keys.items():
            if tmp not in out.columns:
                continue
            value = pl.when(flag).then(out.get_column(tmp))
            cols.append(value.alias(tmp))
            cols.append(pl.when(flag).then(text.str.contains(f"| {key}:", literal=True) & value.is_null())
                        .alias(_LOST + key))
            if key not in self.samples:
                sample = unk.get_column("text").str.extract(re.escape(f"| {key}:") + r"\s*([^|]{0,40})", 1).drop_nulls()
                if len(sample):
                    self.samples[key] = sample[0]
        return frame.with_columns(cols).drop("text")

    def name(self, df: pl.DataFrame) -> pl.DataFrame:
        """The concatenated frames -> the columns ``megatron.discover_unknown`` would have added."""
        tmp_cols = [c for c in df.columns if c.startswith((_TMP, _LOST))]
        if not self.counts:
            return df.drop(tmp_cols)
        counts = (pl.DataFrame({"k": list(self.counts), "n": [v[0] for v in self.counts.values()],
                                "first": [v[1] for v in self.counts.values()]},
                               schema={"k": pl.Utf8, "n": pl.UInt32, "first": pl.Int64})
                  .with_columns((~pl.col("k").str.contains(r"^\|\s*[A-Za-z0-9 _/().-]+:$")).alias("odd"))
                  .sort(["n", "odd", "first", "k"], descending=[True, False, False, False]))
        unknown: dict[str, str] = {}
        taken = ({c for c in self.columns if not c.startswith((_TMP, _LOST))}
                 | {name for name, _ in megatron.KNOWN_KEYS.values()} | set(megatron._COALESCE))
        for raw in counts.get_column("k").to_list():
            key = _key_of(raw)
            if not key or key in unknown:
                continue
            name = extra_name(snake_case(key), taken)
            if name in taken:  # one more repeat of an over-used spelling: dropped (and noted)
                continue
            taken.add(name)
            unknown[key] = name
        if not unknown:
            return df.drop(tmp_cols)
        renames, lost = {}, []
        for key, name in unknown.items():
            tmp = _TMP + key
            if tmp not in df.columns:
                continue
            if df.get_column(tmp).null_count() == df.height:
                sample = self.samples.get(key)
                note_text(f"Megatron field {key!r} is not a number (e.g. {sample.strip()!r}); not kept"
                          if sample is not None else f"Megatron field {key!r} is not a number; not kept")
                continue
            renames[tmp] = name
            lost.append(pl.col(_LOST + key).fill_null(False))
        if lost:
            partial = pl.col(PARTIAL_FLAG)
            unk = pl.col("_unknown_keys").fill_null(False)
            df = df.with_columns(pl.when(unk).then(partial | pl.any_horizontal(*lost)).otherwise(partial)
                                 .alias(PARTIAL_FLAG))
        return df.drop([c for c in tmp_cols if c not in renames]).rename(renames)


def _key_of(raw: str) -> str | None:
    """A matched ``| key:`` spelling -> the key ``discover_unknown`` would extract, or None (no key,
    a known key, an iteration)."""
    m = re.match(megatron._KEY_DISCOVERY_RE, raw)
    key = m.group(1).strip() if m else None
    if not key or key in megatron.KNOWN_KEYS or key.startswith("iteration"):
        return None
    return key


def _finish_mega(df: pl.DataFrame, early: _UnknownKeys | None = None) -> pl.DataFrame:
    if early is not None:
        df = early.name(df)
    elif df.height and df.get_column("_unknown_keys").any():
        unk = megatron.discover_unknown(df.filter(pl.col("_unknown_keys")))
        df = pl.concat([df.filter(~pl.col("_unknown_keys")), unk], how="diagonal_relaxed")
    df = df.drop([c for c in ("text", "_unknown_keys", "_kind") if c in df.columns])
    return megatron.finish(df)


def _batches(path: Path, timing: TimingCollector | None, omitted: list[int] | None = None):
    """The file's lines in batches of at most ``BATCH_ROWS`` (plus a held-back tail), from the
    reader's bounded frames; ``timing`` is fed every frame. A batch never ends on a Megatron line
    followed only by continuation-shaped lines: that tail (a possibly hard-wrapped record, at most
    ``MAX_PIECES`` lines) starts the next batch, so its pieces are routed together."""
    carry: pl.DataFrame | None = None
    for frame in prefetched(line_frames(path, omitted)):  # the next frame is read while this one is parsed
        if timing is not None:
            timing.feed(frame)
        for batch in frame.iter_slices(BATCH_ROWS):
            if carry is not None:
                batch, carry = pl.concat([carry, batch]), None
            batch, carry = _split_wrap_tail(batch)
            if batch.height:
                yield batch
    if carry is not None:
        yield carry


def _split_wrap_tail(batch: pl.DataFrame) -> tuple[pl.DataFrame, pl.DataFrame | None]:
    """(batch without its tail, tail) where the tail is a Megatron line and the continuation-shaped
    lines after it (`_route_wrapped`'s chain), None when the batch does not end so."""
    tail = batch.tail(MAX_PIECES + 1)
    flags = tail.select(pl.col("text").str.contains(megatron.DETECT_RE).alias("det"),
                        _continuation_expr().alias("cont"))
    det, cont = flags.get_column("det").to_list(), flags.get_column("cont").to_list()
    j = len(det) - 1
    while j >= 0 and cont[j]:
        j -= 1
    if j < 0 or not det[j]:
        return batch, None
    keep = batch.height - (len(det) - j)
    return (batch, None) if keep <= 0 else (batch.slice(0, keep), batch.slice(keep))


class _TextPass:
    """The state of ONE pass over a text log's line frames (``parse_text``): every batch is split three ways
    (Megatron-style fast lines extracted by the probed plan, lines only the generic extractor reads, the rest
    routed line by line); `finish` returns the record frames."""

    def __init__(self, path: Path, only: str | None, diag: Diagnostics) -> None:
        self.diag = diag
        self.router = Router(file=str(path), only=only)
        self.mega_frames: list[pl.DataFrame] = []
        self.want_mega = only in (None, "megatron")
        self.probe: _Probe | None = None
        self.pending: list[pl.DataFrame] = []  # fast-path rows seen before the probe sample is complete
        self.early = _UnknownKeys() if EARLY_UNKNOWN else None
        self.lane = generic_lane.Lane() if generic_lane.ENABLED and only is None else None
        self.wrap_carry = 0  # last line to route after an unterminated Megatron line of an earlier batch

    def extract(self, rows: pl.DataFrame) -> None:
        """Fast lines -> records through the probed plan (one chunk per column per batch: misaligned chunks make
        the first whole-frame operation after the pass copy every record)."""
        assert self.probe is not None
        out = self.probe.plan(rows.lazy()).collect(**_EXTRACT_OPTS)
        out = _finish_fast(out, self.probe)
        out = out.with_columns(pl.lit("train", KIND_DTYPE).alias("kind"))  # per batch: chunked like the rest
        if self.early is not None:  # unknown keys extracted now; the text is not kept
            out = self.early.take(out)
        elif out.get_column("text").null_count() < out.height:
            # rows kept for the checked redo hold their text as views into the whole batch's buffers:
            # copy those strings, or one such row per batch keeps every batch's text alive
            out = out.with_columns(pl.concat_str([pl.col("text"), pl.lit("")]).alias("text"))
        self.mega_frames.append(out.rechunk())

    def batch(self, batch: pl.DataFrame) -> None:
        """One bounded line frame: the fast-line mask is computed once, then each kind of line goes its way."""
        too_long = pl.col("text").str.len_bytes() > MAX_LINE_BYTES
        batch = batch.with_columns((_fast_mask() & ~too_long).alias("_fast"), too_long.alias("_long"),
                                   _continuation_expr().alias("_cont"))
        self.diag.lines_read += batch.height
        if batch.get_column("_long").any():  # over the line-size limit: failed, never scanned
            self.router.failed.extend(batch.filter(pl.col("_long")).get_column("line").to_list())
            batch = batch.filter(~pl.col("_long"))
        if batch.get_column("_cont").any():  # hard-wrapped records: route them whole
            batch = _route_wrapped(batch)
        is_fast = batch.get_column("_fast")
        n_fast = int(is_fast.sum())
        if n_fast and not self.want_mega:
            self.diag.ignore("other_format", n_fast)
        elif n_fast:
            self._fast(batch.filter(is_fast).select("line", "text"))
        rest = batch.filter(~is_fast).select("line", "text", "_cont") if n_fast else batch.select("line", "text", "_cont")
        if rest.height:
            self._other(rest)

    def _fast(self, fast: pl.DataFrame) -> None:
        """Fast lines: held until the file's first PROBE_ROWS of them have probed the layout, then extracted."""
        if self.probe is None:
            self.pending.append(fast)
            if sum(f.height for f in self.pending) < PROBE_ROWS:
                return
            fast = pl.concat(self.pending)
            self.pending.clear()
            self.probe = _probe(fast.head(PROBE_ROWS))
        self.extract(fast)

    def _other(self, rest: pl.DataFrame) -> None:
        """Lines that are not fast lines: candidates go to the generic lane, then to the router; the rest are
        counted by the reason they were ignored."""
        kinds = rest.select(_candidate_expr() | pl.col("_cont")).to_series()
        kinds, self.wrap_carry = _wrapped_followers(rest, kinds, self.wrap_carry)
        cand = rest.filter(kinds).select("line", "text", "_cont")
        if self.lane is not None and cand.height:
            # lines only the generic extractor reads: one Python extraction per line shape, polars for
            # the lines (generic_lane); what it does not take goes to the router below
            elig = cand.select(generic_lane.lane_mask(pl.col("text"), _LANE_OTHER_RE)
                               & ~pl.col("_cont").fill_null(False)).to_series()
            if elig.any():
                sub = cand.filter(elig)
                taken = self.lane.take(sub.select("line", "text"))
                if taken.any():
                    cand = cand.filter(~pl.col("line").is_in(sub.filter(taken).get_column("line").implode()))
        for line, t in cand.select("line", "text").iter_rows():
            if "\ufffd" in t:  # only non-ASCII rows can hold replacement characters
                self.diag.decode_errors += t.count("\ufffd")
            self.router.feed(line, t)
        self.diag.ignore_counts(_count_reasons(rest.get_column("text").filter(~kinds)))

    def finish(self, path: Path) -> list[pl.DataFrame]:
        """The record frames of the pass (Megatron records checked, router records, generic-lane records)."""
        if self.pending:  # fewer than PROBE_ROWS fast lines in the whole file
            fast = pl.concat(self.pending)
            self.probe = _probe(fast)
            self.extract(fast)
        if self.lane is not None:
            for fw, n in self.lane.seen.items():
                self.router.seen[fw] += n  # counted like the router's records (and the generic note)
        self.router.close()
        if self.router.mega_rows:
            slow = pl.DataFrame(self.router.mega_rows, schema={"line": pl.Int64, "_sub": pl.Int64,
                                                               "rank_label": pl.Utf8, "text": pl.Utf8}, orient="row")
            slow = _megatron_frame(slow)
            self.mega_frames.append(self.early.take(slow) if self.early is not None else slow)
        frames: list[pl.DataFrame] = []
        if self.mega_frames:
            frames.append(self._megatron_records(path))
        if self.router.records:
            frames.append(_records_frame(self.router.records))
        if self.lane is not None and self.lane.frames:
            frames.append(pl.concat(self.lane.frames, how="diagonal_relaxed"))
        return frames

    def _megatron_records(self, path: Path) -> pl.DataFrame:
        """The Megatron-style records in one frame; lines without an iteration failed, partial records marked."""
        frames = self.mega_frames
        mega = pl.concat(frames, how="diagonal_relaxed") if len(frames) > 1 else frames[0]
        frames.clear()  # the batches' frames are not needed twice (memory: docs/benchmarks.md)
        mega = check_int_columns(_finish_mega(mega, self.early))
        if mega.get_column("iteration").null_count():  # (a filter copies every column: only when needed)
            self.router.failed.extend(mega.filter(pl.col("iteration").is_null()).get_column("line").to_list())
            mega = mega.filter(pl.col("iteration").is_not_null())
        if mega.get_column(PARTIAL_FLAG).any():
            for line in sorted(mega.filter(pl.col(PARTIAL_FLAG)).get_column("line").to_list()):
                self.diag.mark_partial(f"{path}:{line}")
        self.diag.saw("megatron", mega.height)
        return mega.drop(PARTIAL_FLAG)


def parse_text(path: Path, file_idx: int, only: str | None, diag: Diagnostics,
               timing: TimingCollector | None = None) -> tuple[pl.DataFrame, list[int], dict]:
    """One text log -> (records, restart-banner ordering keys, run configuration); ``timing`` (when
    given) is fed the same line frames, so per-rank timing lines need no second read. ONE pass over bounded
    frames (``reader.line_frames``), each split three ways (see the module docstring and `_TextPass`)."""
    text_pass = _TextPass(path, only, diag)
    omitted = [0]  # blank lines the reader stood in for by one (a blank stretch is never parsed line by line)
    for batch in _batches(path, timing, omitted):
        text_pass.batch(batch)
    frames = text_pass.finish(path)
    router = text_pass.router
    for fmt, n in router.seen.items():
        diag.saw(fmt, n)
    diag.ignore_counts(router.ignored)
    if omitted[0]:
        diag.lines_read += omitted[0]
        diag.ignore("blank", omitted[0])
    for line in sorted(router.failed):
        diag.fail(f"{path}:{line}")
    df = concat_records(frames) if frames else empty_frame()
    df = take_partial(df, path, diag)
    for note in drain_renames():
        diag.note(f"{path}: {note}")
    df = df.with_columns(pl.lit(str(path)).alias("file"))
    sub = pl.col("_sub") if "_sub" in df.columns else pl.lit(0, pl.Int64)
    df = df.with_columns(
        (pl.lit(file_idx * _FILE_SCALE, pl.Int64) + pl.col("line") * _SUB_SCALE + sub.fill_null(0)).alias(ORD)
    )
    df = _attach_step_time(df)
    banners = [file_idx * _FILE_SCALE + line * _SUB_SCALE + sub for line, sub in router.banners]
    return df, banners, router.run_config


def feed_file(timing: TimingCollector, path: Path) -> None:
    for frame in line_frames(path):
        timing.feed(frame)


_records_frame = records_frame  # (kept for callers of the old private name)


def take_partial(df: pl.DataFrame, path: Path, diag: Diagnostics) -> pl.DataFrame:
    """Report rows flagged ``_partial`` (a field lost: not an exact integer, truncated) and drop the flag."""
    if PARTIAL_FLAG not in df.columns:
        return df
    flagged = df.filter(pl.col(PARTIAL_FLAG).fill_null(False)).get_column("line")
    for line in sorted(flagged.to_list()):
        diag.mark_partial(f"{path}:{line}")
    return df.drop(PARTIAL_FLAG)


def sort_ord(df: pl.DataFrame) -> pl.DataFrame:
    """Sort by the ordering key unless already sorted (the usual case: a cheap O(n) check)."""
    return df if df.get_column(ORD).is_sorted() else df.sort(ORD)


def _attach_step_time(df: pl.DataFrame) -> pl.DataFrame:
    """Megatron-Bridge Step Time lines carry no iteration: use the next Megatron iteration line of
    the same file (rank 0 prints it just before the last rank's line), else the previous one."""
    is_st = (pl.col("framework") == "megatron-bridge") & pl.col("iteration").is_null()
    df = sort_ord(df)
    if not df.height or not df.select(is_st.any()).item():
        return df
    mega_it = pl.when(pl.col("framework") == "megatron").then(pl.col("iteration"))
    guess = pl.coalesce(mega_it.backward_fill(), mega_it.forward_fill())
    return df.with_columns(pl.when(is_st).then(guess).otherwise(pl.col("iteration")).alias("iteration"))


def diag_lines(diag: Diagnostics, before: int) -> int:
    return diag.lines_read - before


def expand_log_paths(paths) -> list[Path]:
    """Directories without event files of their own -> their log files (``discover.expand_dir``)."""
    out: list[Path] = []
    for p in paths:
        path = as_path(p)
        if path.is_dir() and not any(q.name.startswith("events.out.tfevents") for q in path.iterdir()):
            found = expand_dir(path)
            if not found:
                raise InputError(f"{path}: no training log found (looked for *.log[.gz|.zst], *.txt, *.jsonl, "
                                 f"trainer_state.json, W&B history exports and TensorBoard events in it and in "
                                 f"its sub-folders {', '.join(LOG_SUBDIRS)})")
            out += found
        else:
            out.append(path)
    return out


# ---- structured files ----------------------------------------------------------------------------

def file_format(path: Path, only: str | None):
    """The registered file format that recognises ``path`` (and is allowed by ``only``), or None."""
    for fmt in file_formats():
        if only is not None and only != fmt.name and only not in fmt.emits:
            continue
        if fmt.sniff(path):
            return fmt
    return None


# ---- public entry point ---------------------------------------------------------------------------

def parse_logs(paths: list[str | Path] | str | Path, format: str = "auto", *, empty_ok: bool = False,
               progress: Callable[[int, int], None] | None = None) -> ParseResult:
    """Parse training logs into one iteration table.

    ``paths``: log files (plain, .gz, .zst), ``trainer_state.json``, JSONL sidecars, or TensorBoard
    event files/directories. ``format``: ``"auto"`` (detect per line) or one of ``FORMATS`` (lines
    of other formats are counted as ignored ``other_format``).
    Raises ``InputError`` (a ValueError) for a missing file, or when no file holds a recognisable
    record. Among several files, one without records (an NCCL or launcher log) is skipped with a
    note. ``empty_ok``: return an empty result (with that note) instead of raising.
    ``progress``: called as ``progress(done_bytes, total_bytes)`` before the first file and after
    each file (bytes on disk of the files parsed so far).

    This is a map over files and one combine (``partial.py``): ``combine_partials(
    parse_file_partial(f, i, format) for i, f in enumerate(files))``; the Dask path
    (``scale.parse_logs_dask``) runs the same map on workers and the same combine.
    """
    from .partial import check_format, combine_partials, file_bytes, parse_file_partial

    if isinstance(paths, (str, Path)):
        paths = [paths]
    paths = expand_log_paths(paths)
    check_format(format)
    total = sum(file_bytes(p) for p in paths) if progress is not None else 0
    done = 0
    if progress is not None:
        progress(0, total)
    parts = []
    for file_idx, path in enumerate(paths):  # sequential: the first bad file raises before the next is read
        parts.append(parse_file_partial(path, file_idx, format))
        if progress is not None:
            done += file_bytes(path)
            progress(done, total)
    return combine_partials(parts, empty_ok=empty_ok)
