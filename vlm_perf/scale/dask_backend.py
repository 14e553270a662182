"""Dask backend: per-iteration metadata statistics and log parsing across a cluster.

The work per partition is THE SAME CODE as on one machine:

* metadata: ``MetadataSource(files_of_partition, spec, skip_bad=True)`` (the single-pass source
  the single-machine path uses) produces per-iteration (and, with ``per_rank=True``, per-(iteration,
  dp_rank)) partial sums of the additive `BatchStats` fields (plus diagnostics);
  partials are summed by iteration in a tree (``split_every`` partials per reduction task), so no
  task ever holds more than ``split_every`` partial frames. Integer sums are associative and
  commutative, so the result is bit-identical to one ``iteration_stats`` over all files (same
  Int64 dtypes, sorted by iteration). Bad lines are always counted per partition; the caller's
  ``skip_bad`` is applied once at the end, so the error raised (first bad line in file order) and
  the diagnostics are those of the single-machine path.
* logs: one partition per log file, ``vlm_perf.ingest.logs.parse_logs([file])``; the per-file
  record tables are concatenated in file order and restart segments are assigned over the whole
  run, as ``parse_logs(all_files)`` does (see ``parse_logs_dask`` for the limits).

    >>> from dask.distributed import Client
    >>> client = Client("tcp://scheduler:8786")
    >>> res = aggregate_metadata_dask("/lustre/run42/metadata/", spec=spec, client=client)
    >>> res.frame  # == iteration_stats("/lustre/run42/metadata/", spec).frame

Shards may be local/shared-filesystem paths (files, directories, globs: expanded exactly as
``iteration_stats`` does, on the client) or fsspec URLs (``s3://bucket/run/metadata/*.jsonl``);
a URL shard is streamed to the worker's local temporary directory, read, and deleted, and every
name in the diagnostics is the URL.
"""

from __future__ import annotations

import os
import shutil
import tempfile
import uuid
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, Iterable, Sequence, Union

import polars as pl

from ..ingest import metadata as _md
from ..ingest.metadata import MAX_BAD_LINES, STAT_FIELDS, MetadataDiagnostics, MetadataResult
from ..ingest.compressed import open_maybe_compressed
from ..ingest.metadata_io import SUFFIXES, expand_paths

if TYPE_CHECKING:  # pragma: no cover
    from ..arch.spec import ModelSpec
    from ..ingest.logs import ParseResult

__all__ = ["aggregate_metadata_dask", "parse_logs_dask", "plan_partitions", "DEFAULT_PARTITION_BYTES",
           "DEFAULT_SPLIT_EVERY"]

#: Default input bytes per metadata partition (consecutive shards are grouped up to this size).
DEFAULT_PARTITION_BYTES = 256 << 20
#: Automatic sizing: aim for this many partitions per worker thread, none below MIN_PARTITION_BYTES.
TASKS_PER_THREAD = 4
MIN_PARTITION_BYTES = 16 << 20
#: Partial frames combined per reduction task (tree fan-in).
DEFAULT_SPLIT_EVERY = 8

PathsLike = Union[str, Path, Iterable[Union[str, Path]]]
FRAME_COLUMNS = ("iteration", *STAT_FIELDS, "microbatches")
RANK_COLUMNS = ("iteration", "dp_rank", *STAT_FIELDS, "microbatches")


# ------------------------------------------------------------------------------------ inputs
def _is_url(text: str) -> bool:
    return "://" in text and not text.startswith("file://")


def _expand_url(url: str) -> list[str]:
    import fsspec

    fs, path = fsspec.core.url_to_fs(url)
    if any(ch in path for ch in "*?["):
        found = sorted(fs.glob(path))
    elif fs.isdir(path):
        found = sorted(p for p in fs.ls(path, detail=False) if p.lower().endswith(SUFFIXES))
    elif fs.exists(path):
        found = [path]
    else:
        raise ValueError(f"{url}: no such file or directory")
    if not found:
        raise ValueError(f"{url}: no metadata shards found")
    return [p if "://" in p else fs.unstrip_protocol(p) for p in found]


def _size(name: str) -> int:
    if _is_url(name):
        import fsspec

        fs, path = fsspec.core.url_to_fs(name)
        return int(fs.size(path) or 0)
    return os.path.getsize(name)


def expand_inputs(paths: PathsLike) -> list[str]:
    """Shard names, in the order the single-machine reader uses (local part via ``expand_paths``)."""
    items = [paths] if isinstance(paths, (str, Path)) else list(paths)
    out: list[str] = []
    local: list[str | Path] = []

    def flush() -> None:
        if local:
            out.extend(str(p) for p in expand_paths(local))
            local.clear()

    for item in items:
        if _is_url(str(item)):
            flush()
            out.extend(_expand_url(str(item)))
        else:
            local.append(item)
    flush()
    if not out:
        raise ValueError("no metadata files given")
    return out


def plan_partitions(files: Sequence[str], files_per_partition: int | None = None,
                    partition_bytes: int = DEFAULT_PARTITION_BYTES,
                    sizes: Sequence[int] | None = None) -> list[list[str]]:
    """Consecutive groups of shards: ``files_per_partition`` each, or (default) by input size,
    closing a group once it holds ``partition_bytes``. File order is preserved."""
    if files_per_partition is not None:
        if files_per_partition < 1:
            raise ValueError("files_per_partition must be >= 1")
        return [list(files[i:i + files_per_partition]) for i in range(0, len(files), files_per_partition)]
    groups: list[list[str]] = []
    cur: list[str] = []
    size = 0
    for k, name in enumerate(files):
        cur.append(name)
        size += sizes[k] if sizes is not None else _size(name)
        if size >= partition_bytes:
            groups.append(cur)
            cur, size = [], 0
    if cur:
        groups.append(cur)
    return groups


# ------------------------------------------------------------------------- metadata partials
@dataclass
class _Partial:
    """Per-iteration partial sums of a range of shards, or the error that range raised."""

    frame: pl.DataFrame | None
    diag: MetadataDiagnostics | None
    error: str | None = None
    per_rank: pl.DataFrame | None = None


class _Staged:
    """Local copies of URL shards (streamed, 4 MiB chunks) for the duration of one task."""

    def __init__(self, names: Sequence[str]) -> None:
        self.names = list(names)
        self.root: str | None = None
        self.local: list[str] = []

    def __enter__(self) -> "_Staged":
        import fsspec

        for i, name in enumerate(self.names):
            if not _is_url(name):
                self.local.append(name)
                continue
            if self.root is None:
                self.root = tempfile.mkdtemp(prefix="vlm-perf-stage-")
            target = os.path.join(self.root, f"{i:05d}-{name.rstrip('/').rsplit('/', 1)[-1]}")
            with fsspec.open(name, "rb") as src, open(target, "wb") as dst:
                shutil.copyfileobj(src, dst, 4 << 20)
            self.local.append(target)
        return self

    def rename(self, text: str) -> str:
        for local, name in zip(self.local, self.names):
            if local != name:
                text = text.replace(local, name)
        return text

    def __exit__(self, *exc: Any) -> None:
        if self.root is not None:
            shutil.rmtree(self.root, ignore_errors=True)


def _metadata_partial(files: Sequence[str], spec: "ModelSpec | None", per_rank: bool = False) -> _Partial:
    """One partition: the single-machine reader over these shards (always counting bad lines)."""
    with _Staged(files) as staged:
        try:
            source = _md.MetadataSource(staged.local, spec, skip_bad=True, per_rank=per_rank).read()
        except ValueError as exc:
            return _Partial(None, None, staged.rename(str(exc)))
        res = source.result()
        diag = res.diagnostics
        if staged.root is not None:
            ren = staged.rename
            diag = replace(diag, files=[ren(s) for s in diag.files], bad_lines=[ren(s) for s in diag.bad_lines],
                           decompressed=[ren(s) for s in diag.decompressed], cleaned=[ren(s) for s in diag.cleaned])
    # count-based notes are recomputed from the merged counts; the schema-key note is kept as is
    diag.notes = [n for n in diag.notes if n.startswith("keys outside schema v1")]
    return _Partial(res.frame.select(FRAME_COLUMNS), diag,
                    per_rank=source.per_rank.select(RANK_COLUMNS) if per_rank else None)


def _merge_diag(diags: Sequence[MetadataDiagnostics]) -> MetadataDiagnostics:
    out = MetadataDiagnostics(merge_size=diags[0].merge_size, window_side=diags[0].window_side)
    for d in diags:
        out.files += d.files
        out.rows_read += d.rows_read
        out.rows_used += d.rows_used
        for key, n in d.rows_skipped.items():
            out.rows_skipped[key] = out.rows_skipped.get(key, 0) + n
        if len(out.bad_lines) < MAX_BAD_LINES:  # partials are in file order: the first N overall
            out.bad_lines += d.bad_lines[: MAX_BAD_LINES - len(out.bad_lines)]
        out.rows_preaggregated_lm += d.rows_preaggregated_lm
        out.rows_preaggregated_vision += d.rows_preaggregated_vision
        out.rows_padded_tokens_only += d.rows_padded_tokens_only
        out.rows_media_in_pixels += d.rows_media_in_pixels
        out.rows_duplicate += d.rows_duplicate
        out.decompressed += d.decompressed
        out.cleaned += d.cleaned
        if d.notes and not out.notes:  # the first partition's shards are the ones the single path samples
            out.notes = list(d.notes)
        if d.extra_keys and not out.extra_keys:
            out.extra_keys = list(d.extra_keys)
    return out


def _sum_by_iteration(frames: Sequence[pl.DataFrame], columns: Sequence[str] = FRAME_COLUMNS) -> pl.DataFrame:
    """Sum partial frames by their key columns (``iteration``, or ``iteration, dp_rank``)."""
    keys = [c for c in ("iteration", "dp_rank") if c in columns]
    frames = [f for f in frames if f.height]
    if not frames:
        return pl.DataFrame(schema={c: pl.Int64 for c in columns})
    if len(frames) == 1:
        return frames[0]
    schema = frames[0].schema
    summed = (pl.concat(frames, how="vertical").group_by(keys)
              .agg(pl.col(c).sum() for c in columns if c not in keys))
    return summed.select(pl.col(c).cast(schema[c]) for c in columns)  # dtypes as the partials


def _combine(parts: Sequence[_Partial]) -> _Partial:
    """Reduction step (associative; keeps the order of ``parts``): sum frames by iteration."""
    for p in parts:
        if p.error is not None:  # the first error in file order wins, as on one machine
            return p
    per_rank = None
    if parts and parts[0].per_rank is not None:
        per_rank = _sum_by_iteration([p.per_rank for p in parts], RANK_COLUMNS)
    return _Partial(_sum_by_iteration([p.frame for p in parts]), _merge_diag([p.diag for p in parts]),
                    per_rank=per_rank)


def _finish(total: _Partial, skip_bad: bool) -> MetadataResult:
    if total.error is not None:
        raise ValueError(total.error)
    diag = total.diag
    if diag.bad_lines and not skip_bad:
        raise ValueError(diag.bad_lines[0])
    frame = total.frame.sort("iteration")
    diag.iterations = frame.height
    _md._finish_notes(diag)
    result = MetadataResult(frame=frame, diagnostics=diag)
    if total.per_rank is not None:
        result.per_rank = total.per_rank.sort(["iteration", "dp_rank"], nulls_last=True)
    return result


# ------------------------------------------------------------------------------ scheduling
def _tree(leaves: list, combine, split_every: int, tag: str):
    """Delayed tree reduction: groups of ``split_every`` consecutive nodes, level by level."""
    import dask

    if split_every < 2:
        raise ValueError("split_every must be >= 2")
    level = leaves
    depth = 0
    while len(level) > 1:
        depth += 1
        level = [dask.delayed(combine, pure=True)(level[i:i + split_every],
                                                  dask_key_name=f"vlm-perf-combine-{tag}-{depth}-{i // split_every}")
                 for i in range(0, len(level), split_every)]
    return level[0]


def _compute(obj, client):
    import dask

    if client is not None:
        return client.compute(obj, sync=True)
    return dask.compute(obj)[0]


def _worker_threads(client: Any) -> int:
    if client is None:
        try:
            from distributed import default_client

            client = default_client()
        except (ImportError, ValueError):
            return os.cpu_count() or 1
    try:
        return max(1, sum(client.nthreads().values()))
    except Exception:  # noqa: BLE001 - any client-like object without nthreads
        return 1


def _auto_partition_bytes(sizes: Sequence[int], client: Any) -> int:
    """`DEFAULT_PARTITION_BYTES`, or less so that each worker thread gets ~`TASKS_PER_THREAD` tasks
    (a run split into as many partitions as workers leaves workers idle while the last ones finish)."""
    total = sum(sizes)
    per_task = total // (TASKS_PER_THREAD * _worker_threads(client))
    return int(min(DEFAULT_PARTITION_BYTES, max(MIN_PARTITION_BYTES, per_task)))


def aggregate_metadata_dask(paths: PathsLike, spec: "ModelSpec | None" = None, client: Any = None,
                            skip_bad: bool = False, files_per_partition: int | None = None,
                            partition_bytes: int | None = None,
                            split_every: int = DEFAULT_SPLIT_EVERY, per_rank: bool = False) -> MetadataResult:
    """`iteration_stats` computed with Dask: one task per partition of shards, tree-summed.

    ``client``: a ``dask.distributed.Client`` (``Client("tcp://scheduler:8786")``); ``None`` uses
    the current default scheduler (a global distributed client if one exists, else threads).
    Partitions are consecutive shards (``files_per_partition`` each, or grouped up to
    ``partition_bytes`` of input; by default `DEFAULT_PARTITION_BYTES`, lowered so that every
    worker thread of ``client`` gets about `TASKS_PER_THREAD` tasks, which keeps all workers busy
    until the end); ``split_every`` partials are combined per reduction task.
    Returns the same `MetadataResult` as ``iteration_stats(paths, spec, skip_bad)``: identical
    frame (``frame.equals``), diagnostics merged across partitions, the same ``ValueError`` (the
    first bad line in file order) without ``skip_bad``. ``per_rank=True`` also sets
    ``result.per_rank``, identical to ``MetadataSource(paths, spec, per_rank=True).per_rank``.
    """
    import dask

    files = expand_inputs(paths)
    sizes = None
    if files_per_partition is None:
        sizes = [_size(f) for f in files]  # once: a HEAD request each for URLs
        if partition_bytes is None:
            partition_bytes = _auto_partition_bytes(sizes, client)
    groups = plan_partitions(files, files_per_partition, partition_bytes or DEFAULT_PARTITION_BYTES, sizes)
    tag = uuid.uuid4().hex[:12]  # unique keys per call: a long-lived client may run many
    leaves = [dask.delayed(_metadata_partial, pure=True)(group, spec, per_rank,
                                                         dask_key_name=f"vlm-perf-metadata-{tag}-{i}")
              for i, group in enumerate(groups)]
    total = _compute(_tree(leaves, _combine, split_every, tag), client)
    return _finish(total, skip_bad)


# ------------------------------------------------------------------------------------ logs
@dataclass
class _LogPart:
    raw: pl.DataFrame | None = None
    diag: Any = None
    run_config: dict = field(default_factory=dict)
    forced: list[int] = field(default_factory=list)  # rows (within the file) opened by a restart banner
    head_banner: bool = False   # a banner before the file's first record with an iteration
    tail_banner: bool = False   # a banner after its last one
    error: str | None = None


def _step_backs(raw: pl.DataFrame) -> dict[int, int]:
    """Restart candidates of a record table in log order: row -> previous row of the same label
    (a record whose iteration is lower than the label's previous one), as the segment rule."""
    work = (raw.with_row_index("_i").filter(pl.col("iteration").is_not_null())
            .with_columns(pl.col("rank_label").fill_null("").alias("_lab"))
            .with_columns(pl.col("iteration").shift(1).over("_lab").alias("_prev_it"),
                          pl.col("_i").shift(1).over("_lab").alias("_prev_i")))
    cand = work.filter(pl.col("iteration") < pl.col("_prev_it"))
    return dict(zip(cand["_i"].cast(pl.Int64).to_list(), cand["_prev_i"].cast(pl.Int64).to_list()))


def _banner_rows(raw: pl.DataFrame) -> list[int]:
    """Rows where the file's own segmentation opened a segment because of a restart banner.

    Segment boundaries of the per-file result are either accepted step-backs or banners; replaying
    the step-back rule over the file tells them apart: a boundary that the rule would not open is
    a banner (``parse_logs`` does not expose banner positions). A boundary that is both is kept as
    a step-back, which the global replay accepts as well unless an earlier file's restart moved
    the rule's reference point (see ``parse_logs_dask``)."""
    if raw.height == 0:
        return []
    seg = raw["segment"].to_numpy()
    bound_set = {int(i) for i in range(1, len(seg)) if seg[i] != seg[i - 1]}
    cands = _step_backs(raw)
    forced: list[int] = []
    last = 0
    for i in sorted(bound_set | set(cands)):
        if i in bound_set:
            if not (i in cands and cands[i] >= last):
                forced.append(i)
            last = i
    return forced


# A Megatron iteration line (no launcher prefix): the probes' sentinel records.
def _sentinel(iteration: int) -> bytes:
    return (f"[vlmperfprobe0]: iteration {iteration:8d}/ 99999999 | consumed samples: {iteration:12d} | "
            f"elapsed time per iteration (ms): 1.0 | lm loss: 1.000000E+00 |\n").encode()


def _copy_lines(path: str, first: int, last: int | None, out) -> None:
    """Write physical lines ``first..last`` (1-based, inclusive; ``last=None``: to the end) of a
    (possibly compressed) file to ``out``; whole blocks are skipped by counting newlines."""
    line = 1  # number of the line the current block starts in
    with open_maybe_compressed(path) as fh:
        while True:
            block = fh.read(16 << 20)
            if not block:
                break
            n = block.count(b"\n")
            if line + n < first:
                line += n
                continue
            start, k = 0, line
            while k < first:
                start = block.index(b"\n", start) + 1
                k += 1
            if last is not None and line + n > last:  # line `last` ends inside this block
                end = start
                while k <= last:
                    end = block.index(b"\n", end) + 1
                    k += 1
                out.write(block[start:end])
                break
            out.write(block[start:])
            line += n
    out.write(b"\n")


def _banner_between(path: str, first: int, last: int | None) -> bool:
    """Is there a restart banner in lines ``first..last``? Asks ``parse_logs`` itself: those lines
    between two sentinel records that do not step back; the second opens a segment iff a banner
    sits between them. For the head of a file the router sees exactly the lines it saw in the file
    (sentinels take the vectorised Megatron path, not the router)."""
    from ..ingest.logs import parse_logs

    if last is not None and last < first:
        return False
    fd, probe = tempfile.mkstemp(prefix="vlm-perf-probe-", suffix=".log")
    try:
        with os.fdopen(fd, "wb") as out:
            out.write(_sentinel(1))
            _copy_lines(path, first, last, out)
            out.write(_sentinel(2))
        raw = parse_logs([probe]).raw.filter(pl.col("rank_label") == "vlmperfprobe0")
        return raw.height == 2 and raw["segment"][1] != raw["segment"][0]
    finally:
        os.unlink(probe)


def _log_partial(path: str, format: str, probe_head: bool, probe_tail: bool, empty_ok: bool = False) -> _LogPart:
    from ..ingest.logs import parse_logs

    try:
        res = parse_logs([path], format=format, empty_ok=empty_ok)
    except ValueError as exc:
        return _LogPart(error=str(exc))
    raw = res.raw
    part = _LogPart(raw=raw, diag=res.diagnostics, run_config=res.run_config, forced=_banner_rows(raw))
    if raw.height == 0:  # a record-less file among several: skipped (its counts and note are kept)
        return part
    if format in ("auto", "megatron") and not Path(path).is_dir() and (probe_head or probe_tail):
        lines = raw.filter(pl.col("iteration").is_not_null())["line"]
        first_rec, last_rec = (int(lines.min()), int(lines.max())) if len(lines) else (None, None)
        if probe_head:
            part.head_banner = _banner_between(path, 1, (first_rec - 1) if first_rec else None)
        if probe_tail and last_rec is not None:
            part.tail_banner = _banner_between(path, last_rec + 1, None)
    return part


def _combine_logs(parts: Sequence[_LogPart], files: Sequence[str] = (), format: str = "auto") -> "ParseResult":
    from ..ingest.logs import CORE_COLUMNS, Diagnostics, ParseResult
    from ..ingest.logs.diagnostics import MAX_LOCATIONS
    from ..ingest.logs.segments import ORD, assign_segments

    for p in parts:
        if p.error is not None:  # the first failing file in order, as parse_logs raises
            raise ValueError(p.error)
    diag = Diagnostics()
    run_config: dict = {}
    banners: list[int] = []
    offset = 0
    for p in parts:
        d = p.diag
        diag.lines_read += d.lines_read
        diag.records += d.records
        diag.ignore_counts(d.ignored)
        diag.failed = (diag.failed + d.failed)[:MAX_LOCATIONS]
        diag.failed_count += d.failed_count
        diag.partial = (diag.partial + d.partial)[:MAX_LOCATIONS]
        diag.partial_count += d.partial_count
        diag.decode_errors += d.decode_errors
        for fmt, n in d.formats_seen.items():
            diag.saw(fmt, n)
        diag.files += d.files
        for note in d.notes:
            diag.note(note)
        for k, v in p.run_config.items():
            run_config.setdefault(k, v)
        # ord of a record = 2 * its global row; a banner just before row r gets ord 2r - 1 and so
        # opens a segment at the first record with an iteration from row r on (as in parse_logs)
        if p.head_banner:
            banners.append(2 * offset - 1)
        banners += [2 * (offset + r) - 1 for r in p.forced]
        offset += p.raw.height
        if p.tail_banner:
            banners.append(2 * offset - 1)
    if not any(p.raw.height for p in parts):  # as parse_logs: every file was record-less
        from ..errors import InputError
        from ..ingest.logs import FORMATS

        tried = ", ".join(FORMATS) if format == "auto" else format
        raise InputError(f"none of {len(parts)} log files holds a recognisable training-log record "
                         f"(formats tried: {tried}); first: {files[0] if files else '?'}")
    frames = [p.raw.drop("first_in_segment", strict=False) for p in parts if p.raw.height]
    raw = pl.concat(frames, how="diagonal_relaxed") if len(frames) > 1 else frames[0]
    raw = raw.with_columns((pl.int_range(0, pl.len(), dtype=pl.Int64) * 2).alias(ORD))
    raw = assign_segments(raw, banners)
    diag.segments = int(raw.get_column("segment").max() or 0) + 1 if raw.height else 0
    keyed = raw.filter(pl.col("iteration").is_not_null())
    diag.duplicates = keyed.height - keyed.select(pl.struct("segment", "iteration", "framework").n_unique()).item()
    raw = raw.drop(ORD)
    raw = raw.select([*CORE_COLUMNS, *sorted(c for c in raw.columns if c not in CORE_COLUMNS)])
    return ParseResult(raw=raw, diagnostics=diag, run_config=run_config)


def parse_logs_dask(paths: Sequence[str | Path] | str | Path, format: str = "auto",
                    client: Any = None) -> "ParseResult":
    """``parse_logs(paths, format)`` with one Dask task per log file (each parsed by
    ``parse_logs([file])``, streaming), concatenated in file order with restart segments, dedup
    view and diagnostics computed over the whole run as the single-machine path does.

    ``parse_logs`` does not expose where restart banners are, so each task recovers them: banners
    between records from the file's own segments, banners before the first / after the last record
    (a restarted job's new log usually starts with one) by re-parsing only those lines between two
    sentinel records. Known limits (then a segment number can differ from ``parse_logs(all)``;
    iterations and values only if the same iteration is logged on both sides): a banner that
    coincides with a step-back record right after a cross-file restart; the tail probe for
    ``format`` other than auto/megatron (not run); a banner inside a ``\\r``-split first/last line.
    """
    import dask

    if isinstance(paths, (str, Path)):
        paths = [paths]
    files = [str(p) for p in paths]
    for f in files:
        if not Path(f).exists():
            raise ValueError(f"log file not found: {f}")
    n = len(files)
    tag = uuid.uuid4().hex[:12]
    tasks = [dask.delayed(_log_partial, pure=True)(f, format, i > 0, i < n - 1, n > 1,
                                                    dask_key_name=f"vlm-perf-log-{tag}-{i}")
             for i, f in enumerate(files)]
    parts = _compute(tasks, client)
    return _combine_logs(parts, files, format)
