"""The log parse as a map over files plus one combine: ``parse_logs`` and the Dask path share it.

    parse_logs(files) == combine_partials(parse_file_partial(f, i, format) for i, f in enumerate(files))

(``files`` after directory expansion). The map step, `parse_file_partial`, parses ONE file into a
`LogPartial`: its record table sorted in log order (line, then ``\\r``-piece), the rows at which
its restart banners open a segment, its `Diagnostics` and the launcher/run settings it printed.
Nothing in a partial depends on another file (the ordering key is file-local: each file is parsed
as file 0, so keys stay exact integers below 2**53 however many files a run has; file order is
the order of the partials), so partials can be produced anywhere (a Dask worker), in any order.

The combine is two steps:

* `merge_partials` (associative, order-respecting: ``merge([merge(a), merge(b)]) ==
  merge(a + b)`` for consecutive runs ``a``, ``b``): record tables and banner rows are concatenated
  as lists (no data is copied), counters summed, capped location lists (``failed``, ``partial``,
  ``notes``, `MAX_LOCATIONS` each) concatenated and re-capped. Re-capping a concatenation of
  capped lists keeps the same first N entries as capping the whole sequence, and ``notes``
  (distinct, first N) likewise, so a tree of merges equals one merge;
* `finish` (once, over the whole run): concatenate the tables in file order, number the rows
  (the run's ordering key), assign restart segments over all records (a restart is judged
  against the previous record of the same rank label, which may sit in an earlier file: this
  step is global, which is why it is not part of the associative merge) and count duplicates.

``combine_partials(parts) = finish(merge_partials(parts))``. Errors travel as data: a file that
cannot be parsed yields a partial holding its `VlmPerfError`, and the merge keeps the first one in
file order, so every path raises the error the sequential parse raises first.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterable, Sequence

import numpy as np
import polars as pl

from ...remote import as_path
from ...errors import InputError, VlmPerfError
from . import diagnostics as _diagnostics
from .diagnostics import Diagnostics
from .formats import names
from .schema import CORE_COLUMNS, KIND_DTYPE, concat_records, drain_renames, empty_frame, is_train, with_kind
from .segments import ORD, STREAM, aligned_like, assign_segments, strictly_increasing
from .timers import TimingCollector, is_text_log

__all__ = ["LogPartial", "parse_file_partial", "merge_partials", "finish", "combine_partials",
           "merge_diagnostics", "check_format", "tried_formats", "file_bytes"]


@dataclass
class LogPartial:
    """What the parse of one file (or of a consecutive run of files, after `merge_partials`) yields.

    ``first_file``: the run-wide index of the first file. ``files``: the file names, in order
    (every file, with records or not). ``frames``: the record tables of the files with at least
    one record, in file order, each in log order and still carrying the internal file-local
    ``_ord`` / ``_sub`` columns. ``banner_rows``: per frame, the rows (0-based, within that
    frame) at which a restart banner opens a segment: the first record printed after the banner
    (``len(frame)``: after the file's last record, i.e. at the next file's first record). ``diagnostics``: counts over these files (``segments`` and
    ``duplicates`` stay 0: they are properties of the whole run, set by `finish`).
    ``run_config``: launcher/run settings, first value per key in file order. ``empty``: how many
    of ``files`` held no record. ``tried``: the formats the parse tried (for the "no record"
    errors). ``error``: the first error in file order; the other fields are then meaningless.
    """

    first_file: int = 0
    files: list[str] = field(default_factory=list)
    frames: list[pl.DataFrame] = field(default_factory=list)
    banner_rows: list[list[int]] = field(default_factory=list)
    diagnostics: Diagnostics = field(default_factory=Diagnostics)
    run_config: dict = field(default_factory=dict)
    empty: int = 0
    tried: str = ""
    error: VlmPerfError | None = None
    #: per-rank timing lines of these files (`timers.TimingCollector`, fed during the same read; in
    #: file order); None when some partial did not collect them (then they are read again)
    timing: TimingCollector | None = None
    #: per frame: the line counts by reason (`Diagnostics.ignored`) of its file, so that a file read once as a
    #: copy of another (`by_content`) counts its lines once too
    frame_ignored: list[dict] = field(default_factory=list)

    @property
    def records(self) -> int:
        return sum(f.height for f in self.frames)

    # A partial crosses process boundaries (Dask) as a pickle. The record tables travel as Arrow
    # tables: their buffers go out of band under pickle protocol 5 (what Dask uses), uncopied;
    # pickling the polars frames serialises each one into a byte string and back, measured ~4x
    # slower for a 250k-record table (docs/benchmarks.md, Scale). Values and dtypes round-trip.
    def __getstate__(self) -> dict:
        state = self.__dict__.copy()
        state["frames"] = [frame.to_arrow() for frame in self.frames]
        return state

    def __setstate__(self, state: dict) -> None:
        state["frames"] = [pl.from_arrow(table) for table in state["frames"]]
        self.__dict__.update(state)


def check_format(format: str) -> str | None:
    """``format`` -> the one format to keep (None: every format, ``"auto"``); unknown names raise."""
    known = names()
    if format != "auto" and format not in known:
        raise InputError(f"unknown format {format!r}; expected 'auto' or one of: {', '.join(known)}")
    return None if format == "auto" else format


def tried_formats(format: str) -> str:
    return ", ".join(names()) if format == "auto" else format


def file_bytes(path: str | os.PathLike) -> int:
    """Bytes on disk of a log file, or of the files directly inside a (TensorBoard) directory."""
    p = as_path(path)
    try:
        if p.is_dir():
            return sum(q.stat().st_size for q in p.iterdir() if q.is_file())
        return p.stat().st_size
    except OSError:
        return 0


def parse_file_partial(path: str | Path, file_idx: int, format: str = "auto") -> LogPartial:
    """Map step: parse ONE log file (text, compressed, structured or a TensorBoard directory).

    ``file_idx``: the file's position in the whole run (``merge_partials`` checks that partials
    come in file order; the parse itself does not depend on it). Raises `VlmPerfError` for a
    missing file, a directory without event files or an unknown ``format``; a file without
    records is not an error here (`finish` decides: skipped with a note among several files, an
    error alone).
    """
    from .parser import feed_file, file_format, parse_text, sort_ord, take_partial

    only = check_format(format)
    path = as_path(path)
    if not path.exists():
        raise InputError(f"log file not found: {path}")
    diag = Diagnostics()
    diag.files.append(str(path))
    timing = TimingCollector()
    text_log = is_text_log(path)
    if text_log:
        timing.start_file(path)
    part = LogPartial(first_file=file_idx, files=[str(path)], diagnostics=diag, tried=tried_formats(format),
                      timing=timing)
    reader = file_format(path, only)
    banners: list[int] = []
    run_config: dict = {}
    if reader is not None:
        df = take_partial(reader.read(path, LOCAL_FILE, diag), path, diag)
        # a structured record (trainer_state.json, a W&B export, TensorBoard events) has the file's identity like a
        # console line, so the cross-examination sees it as one more log file (its run judged by its values), and
        # its format is its own restart stream (`STREAM`): a second record of the run beside the console log
        # replays the console's iterations without being a restart of it, while two files of one structured
        # format (a restart's second TensorBoard folder) still step back against each other
        df = df.with_columns(pl.lit(str(path)).alias("file"), pl.lit(f"structured:{reader.name}").alias(STREAM))
        if text_log:  # a structured file that is not JSON (a W&B CSV export): its timing lines too
            feed_file(timing, path)
        # a structured reader's renames are this file's: said here, not with the next text file's
        for note in drain_renames():
            diag.note(f"{path}: {note}")
    elif path.is_dir():
        raise InputError(f"{path} is a directory without TensorBoard event files")
    else:
        df, banners, run_config = parse_text(path, LOCAL_FILE, only, diag, timing if text_log else None)
    if df.height == 0:  # counts only; skipped with this note among several files (finish)
        diag.records = 0
        diag.note(f"{path}: skipped, no training-log record ({diag.lines_read} lines read)")
        part.empty = 1
        return part
    diag.records = df.height
    df = sort_ord(with_kind(df))
    part.frames = [df]
    part.frame_ignored = [dict(diag.ignored)]
    part.banner_rows = [banner_rows(df.get_column(ORD), banners)]
    part.run_config = dict(run_config)
    return part


#: Every file is parsed as file 0 of its own: ordering keys are file-local (see the module doc).
LOCAL_FILE = 0


def banner_rows(ords: pl.Series, banners: Sequence[int]) -> list[int]:
    """Rows of a file's records (sorted ordering keys ``ords``) at which each banner (ordering key)
    opens a segment: the first record after it, as ``segments.assign_segments`` places banners."""
    if not banners:
        return []
    keys = ords.cast(pl.Int64).to_numpy()  # file-local keys are exact integers (< 2**53)
    return [int(r) for r in np.searchsorted(keys, np.asarray(sorted(banners), dtype=np.int64), side="right")]


def merge_diagnostics(diags: Iterable[Diagnostics]) -> Diagnostics:
    """Diagnostics of consecutive files -> those of the run (associative; order-respecting).

    Sums and per-key sums are exact; the capped lists keep their first `MAX_LOCATIONS` entries in
    file order (``notes``: the first distinct ones), which is what one sequential pass records."""
    out = Diagnostics()
    for d in diags:
        out.lines_read += d.lines_read
        out.records += d.records
        out.ignore_counts(d.ignored)
        out.failed = (out.failed + d.failed)[:_diagnostics.MAX_LOCATIONS]
        out.failed_count += d.failed_count
        out.partial = (out.partial + d.partial)[:_diagnostics.MAX_LOCATIONS]
        out.partial_count += d.partial_count
        out.duplicates += d.duplicates
        out.decode_errors += d.decode_errors
        for fmt, n in d.formats_seen.items():
            out.saw(fmt, n)
        out.segments += d.segments
        out.files += d.files
        for note in d.notes:
            out.note(note)
    return out


def merge_partials(parts: Sequence[LogPartial]) -> LogPartial:
    """Partials of consecutive files (in file order) -> the partial of all of them (see module doc)."""
    for p in parts:
        if p.error is not None:  # the first error in file order wins, as in a sequential parse
            return p
    out = LogPartial(first_file=parts[0].first_file if parts else 0,
                     diagnostics=merge_diagnostics(p.diagnostics for p in parts),
                     timing=TimingCollector.merged([p.timing for p in parts]))
    for p in parts:
        if p.first_file != out.first_file + len(out.files):
            raise ValueError(f"log partials out of file order: file {p.first_file} after files "
                             f"{out.first_file}..{out.first_file + len(out.files) - 1}")
        out.files += p.files
        out.frames += p.frames
        out.banner_rows += p.banner_rows
        out.frame_ignored += p.frame_ignored if len(p.frame_ignored) == len(p.frames) else [{} for _ in p.frames]
        for k, v in p.run_config.items():
            out.run_config.setdefault(k, v)
        out.empty += p.empty
        out.tried = out.tried or p.tried
    return out


def finish(total: LogPartial, empty_ok: bool = False):
    """The merged partial of a whole run -> `ParseResult` (restart segments, duplicates; once)."""
    from .parser import ParseResult

    if total.error is not None:
        raise total.error
    diag = total.diagnostics
    if not total.frames:
        if empty_ok:
            raw = empty_frame().with_columns(pl.lit(False).alias("first_in_segment"),
                                             pl.lit(None, KIND_DTYPE).alias("kind"))
            return ParseResult(raw=raw, diagnostics=diag, run_config=total.run_config, _timing=total.timing)
        if len(total.files) == 1:
            raise InputError(f"{total.files[0]}: no recognisable training-log record (formats tried: {total.tried})")
        first = total.files[0] if total.files else "?"
        raise InputError(f"none of {len(total.files)} log files holds a recognisable training-log record "
                         f"(formats tried: {total.tried}); first: {first}")
    frames = total.frames
    if len(frames) > 1:
        frames, banner_rows_ = by_content(frames, total.banner_rows, diag, total.frame_ignored)
    else:
        banner_rows_ = total.banner_rows
    raw = concat_records(frames) if len(frames) > 1 else frames[0]
    raw = raw.select([*CORE_COLUMNS, *sorted(c for c in raw.columns if c not in CORE_COLUMNS)])
    # the run's ordering key: files in order, each already in log order -> 2 x row number; a
    # banner opening a segment at row r of its file gets 2 x (rows before the file + r) - 1
    # (chunked like the records: a one-chunk key would make the next drop copy every record)
    raw = raw.with_columns(aligned_like(raw, np.arange(raw.height, dtype=np.int64) * 2, ORD))
    banners: list[int] = []
    offset = 0
    for frame, rows in zip(frames, banner_rows_):
        banners += [2 * (offset + r) - 1 for r in rows]
        offset += frame.height
    if is_train(raw):
        raw = assign_segments(raw, banners)
        keyed = raw.filter(pl.col("iteration").is_not_null()) if raw.get_column("iteration").null_count() else raw
    else:
        # evaluations and summaries are not iterations: they neither open a segment (a validation-only
        # step 0, a summary at the last step) nor take `first_in_segment`; they get the segment of
        # their position in the log
        train = pl.col("kind") == "train"
        its = raw.get_column("iteration")
        raw = assign_segments(raw.with_columns(pl.when(train).then(pl.col("iteration")).alias("iteration")), banners)
        raw = raw.with_columns(its)
        keyed = raw.filter(train & pl.col("iteration").is_not_null())
    diag.segments = int(raw.get_column("segment").max() or 0) + 1 if raw.height else 0
    if strictly_increasing(keyed.get_column("iteration")):
        diag.duplicates = 0  # all (segment, iteration, framework) distinct: skip the hashing
    else:
        diag.duplicates = keyed.height - keyed.select(pl.struct("segment", "iteration", "framework").n_unique()).item()
    raw = raw.drop([c for c in (ORD, "_sub", STREAM) if c in raw.columns])
    raw = raw.select([*CORE_COLUMNS, *sorted(c for c in raw.columns if c not in CORE_COLUMNS)])
    return ParseResult(raw=raw, diagnostics=diag, run_config=total.run_config, _timing=total.timing)


#: the values that make a record's content (a copy of a log repeats every one of them; another rank, another
#: attempt or another run differs in at least one)
CONTENT = ("iteration", "rank_label", "timestamp", "elapsed_s", "loss", "lr", "grad_norm", "consumed_samples",
           "global_batch_size", "tflops_per_gpu_logged", "tokens_per_s")
_VALUES = ("timestamp", "elapsed_s", "loss", "lr", "grad_norm", "consumed_samples", "tflops_per_gpu_logged",
           "tokens_per_s")
#: the reason (`Diagnostics.ignored`) under which a copy's lines are counted
COPY_REASON = "copy_of_another_log_file"


def _content(frame: pl.DataFrame) -> tuple[np.ndarray, object, object, int]:
    """(per row: the record's content hash, 0 for a row without content; first timestamp; first iteration;
    rows with content) of one file. Content: a training record's iteration, rank, time and values; a row carrying
    no value beyond its iteration (or an evaluation) has none and is never judged a repeat."""
    cols = [c for c in CONTENT if c in frame.columns]
    valued = pl.any_horizontal([pl.col(c).is_not_null() for c in _VALUES if c in frame.columns] or [pl.lit(False)])
    keyed = pl.col("iteration").is_not_null() & valued
    if "kind" in frame.columns:
        keyed = keyed & (pl.col("kind") == "train")
    exprs = []
    for c in cols:
        dtype = frame.schema[c]
        if c == "rank_label":
            exprs.append(pl.col(c).cast(pl.Utf8).fill_null(""))
        elif dtype.is_temporal():
            exprs.append(pl.col(c).cast(pl.Int64))
        else:
            exprs.append(pl.col(c).cast(pl.Float64, strict=False))
    # (a real hash of 0 is 1 in 2**64: such a record would only never count as a repeat)
    out = frame.select(pl.when(keyed).then(pl.struct(exprs).hash(seed=0)).otherwise(0).alias("h"),
                       pl.when(keyed).then(pl.col("timestamp") if "timestamp" in cols else pl.lit(None)).alias("t"),
                       pl.when(keyed).then(pl.col("iteration")).alias("i"))
    hashes = out.get_column("h").to_numpy()
    n = int(np.count_nonzero(hashes))
    return hashes, out.get_column("t").min() if n else None, out.get_column("i").min() if n else None, n


def _content_order(frames: list[pl.DataFrame], facts: list[tuple]) -> list[int]:
    """File order by content among the files of one format (a restart split is one format): by first timestamp
    when each of them states one, else by first iteration, given order among equals; the slots the format's files
    take in the given order stay its own (files of other formats keep their places)."""
    fmt = [str(f.get_column("framework")[0]) if "framework" in f.columns and f.height else "" for f in frames]
    order = list(range(len(frames)))
    for name in dict.fromkeys(fmt):
        slots = [i for i in order if fmt[i] == name]
        content = [i for i in slots if facts[i][3]]
        timed = all(facts[i][1] is not None for i in content)
        ranked = sorted(content, key=lambda i: (facts[i][1] if timed else 0, facts[i][2], i))
        ranked += [i for i in slots if not facts[i][3]]  # files without content keep their relative order, last
        for slot, i in zip(slots, ranked):
            order[slot] = i
    return order


def by_content(frames: list[pl.DataFrame], banners: list[list[int]], diag: Diagnostics,
               ignored: Sequence[dict] = ()) -> tuple[list[pl.DataFrame], list[list[int]]]:
    """The files of one run in the order their content says, each record read once (``finish``'s first step).

    * a record (iteration, rank, time and values) that another file of the same stream holds too is the same
      record again, not a restart that replayed it: read once. A file all of whose records another file (or the
      files of a split it spans) holds is a copy (the same log copied, gzipped, with CRLF line ends, or a part of
      it) and is set aside with its lines; a file that repeats some records keeps the others. Files are judged
      fullest first; each is named in a note with the file(s) it repeats. Files of different formats (a
      structured log beside the console's) never repeat each other;
    * order: by first timestamp when every file states one, else by first iteration (a restart's continuation
      starts later), file name order among equals: a continuation whose name sorts first (``train-attempt2.log``
      before ``train.log``) is still read after the attempt it continues."""
    stream = [str(f.get_column(STREAM)[0]) if STREAM in f.columns and f.height else "" for f in frames]
    facts = [_content(f) for f in frames]
    order = _content_order(frames, facts)
    seen: dict[str, np.ndarray] = {}  # per stream: the records of the files read so far (sorted, unique)
    owners: dict[str, list[tuple[int, np.ndarray]]] = {}
    out_frames: dict[int, pl.DataFrame] = {}
    out_banners: dict[int, list[int]] = {}
    for i in sorted(order, key=lambda i: -facts[i][3]):  # the fullest file first: a part is judged against it
        hashes, frame = facts[i][0], frames[i]
        known = seen.get(stream[i])
        repeat = np.isin(hashes, known) & (hashes != 0) if known is not None and facts[i][3] else None
        mine = np.unique(hashes[hashes != 0])
        seen[stream[i]] = mine if known is None else np.union1d(known, mine)
        owners.setdefault(stream[i], []).append((i, mine))
        if repeat is None or not repeat.any():
            out_frames[i], out_banners[i] = frame, banners[i]
            continue
        again = mine[np.isin(mine, known)]
        holders = [k for k, h in owners[stream[i]][:-1] if np.isin(again, h).any()]
        name = frame.get_column("file")[0]
        other = " + ".join(str(frames[k].get_column("file")[0]) for k in holders[:3]) + \
            (f" + {len(holders) - 3} more" if len(holders) > 3 else "")
        if int(repeat.sum()) < facts[i][3]:  # a partial repeat: its own records stay
            keep = np.flatnonzero(~repeat)
            out_frames[i] = frame[keep]
            out_banners[i] = [int(r) for r in np.searchsorted(keep, np.asarray(banners[i], dtype=np.int64))]
            diag.records -= int(repeat.sum())
            diag.ignore(COPY_REASON, int(repeat.sum()))
            diag.note(f"{name}: {int(repeat.sum())} of its {facts[i][3]} record(s) repeat {other}'s: read once, "
                      "not as a restart")
            continue
        # a copy: its lines were counted already, with the file(s) it repeats; every line read stays accounted
        # for, now under one reason (the records and per-reason counts are those of the files read)
        moved = frame.height
        diag.records -= frame.height
        if i < len(ignored):
            for reason, n in ignored[i].items():
                taken = min(n, diag.ignored.get(reason, 0))
                diag.ignored[reason] = diag.ignored.get(reason, 0) - taken
                moved += taken
        diag.ignore(COPY_REASON, moved)
        diag.note(f"{name}: a copy of {other} (its {facts[i][3]} record(s) are all there): read once, not as a "
                  "restart")
    kept = [i for i in order if i in out_frames]
    return [out_frames[i] for i in kept], [out_banners[i] for i in kept]


def combine_partials(parts: Iterable[LogPartial], empty_ok: bool = False):
    """``finish(merge_partials(parts))``: the `ParseResult` of the run the partials make up."""
    return finish(merge_partials(list(parts)), empty_ok=empty_ok)
