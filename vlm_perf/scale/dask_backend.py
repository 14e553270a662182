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
* logs: one task per log file, ``ingest.logs.partial.parse_file_partial`` (the map step of
  ``parse_logs`` itself); the partials are merged and finished by ``combine_partials``'s two steps,
  as ``parse_logs(all_files)`` does: no second implementation of restart detection or diagnostics.

    >>> from dask.distributed import Client
    >>> client = Client("tcp://scheduler:8786")
    >>> res = aggregate_metadata_dask("/lustre/run42/metadata/", spec=spec, client=client)
    >>> res.frame  # == iteration_stats("/lustre/run42/metadata/", spec).frame

Shards may be local/shared-filesystem paths (files, directories, globs: expanded exactly as
``iteration_stats`` does, on the client) or fsspec URLs (``s3://bucket/run/metadata/*.jsonl``,
expanded by the same rule, `vlm_perf.remote`); a worker streams a URL shard from its store, and
every name in the diagnostics is the URL.
"""

from __future__ import annotations

import os
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Iterable, Sequence, Union

import polars as pl

from ..errors import ConfigError, InputError
from ..ingest import metadata as _md
from ..ingest.metadata import MAX_BAD_LINES, STAT_FIELDS, MetadataDiagnostics, MetadataResult
from ..ingest.metadata_io import expand_paths
from ..remote import as_path

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
def _size(name: str) -> int:
    return as_path(name).stat().st_size  # a URL: the store's size (one HEAD request or listing entry)


def expand_inputs(paths: PathsLike) -> list[str]:
    """Shard names, in the order the single-machine reader uses: ``expand_paths`` itself, which expands local
    paths and URLs (``s3://bucket/run/metadata/*.jsonl.gz``) by one rule (`vlm_perf.remote`)."""
    return [str(p) for p in expand_paths(paths if isinstance(paths, (str, Path)) else list(paths))]


def plan_partitions(files: Sequence[str], files_per_partition: int | None = None,
                    partition_bytes: int = DEFAULT_PARTITION_BYTES,
                    sizes: Sequence[int] | None = None) -> list[list[str]]:
    """Consecutive groups of shards: ``files_per_partition`` each, or (default) by input size,
    closing a group once it holds ``partition_bytes``. File order is preserved."""
    if files_per_partition is not None:
        if files_per_partition < 1:
            raise ConfigError("files_per_partition must be >= 1")
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


def _metadata_partial(files: Sequence[str], spec: "ModelSpec | None", per_rank: bool = False) -> _Partial:
    """One partition: the single-machine reader over these shards (always counting bad lines); a URL shard is
    streamed from its store by the worker (`vlm_perf.remote`), so every name in the diagnostics is the URL."""
    try:
        source = _md.MetadataSource(list(files), spec, skip_bad=True, per_rank=per_rank).read()
    except ValueError as exc:
        return _Partial(None, None, str(exc))
    res = source.result()
    diag = res.diagnostics
    # count-based notes are recomputed from the merged counts; the schema-key note is kept as is
    diag.notes = [n for n in diag.notes if n.startswith("keys outside schema v1")]
    return _Partial(res.frame.select(FRAME_COLUMNS), diag,
                    per_rank=source.per_rank.select(RANK_COLUMNS) if per_rank else None)


def _merge_diag(diags: Sequence[MetadataDiagnostics]) -> MetadataDiagnostics:
    out = MetadataDiagnostics(merge_size=diags[0].merge_size, window_side=diags[0].window_side,
                              cross_kv_tokens_per_frame=diags[0].cross_kv_tokens_per_frame,
                              lm_window=diags[0].lm_window)
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
        for name in ("rows_cross_bound", "cross_bound_patches", "cross_bound_patches_low", "cross_bound_frames",
                     "cross_bound_frames_low", "cross_total_patches", "cross_total_frames", "rows_window_bound",
                     "window_bound_counted", "window_bound_least", "window_total"):
            setattr(out, name, getattr(out, name) + getattr(d, name))
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
        raise InputError(total.error)
    diag = total.diag
    if diag.bad_lines and not skip_bad:
        from ..ingest.metadata_source import bad_row_error  # a SchemaError (InputError) marked skippable

        raise bad_row_error(diag.bad_lines[0])
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
        raise ConfigError("split_every must be >= 2")
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

    if client is not None:  # awaited with the no-live-worker bound of `vlm_perf.scale.cluster.done_in_turn`
        from .cluster import done_in_turn

        return next(result for _, result in done_in_turn(client, [client.compute(obj)]))
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
def _file_partial(path: str, file_idx: int, format: str):
    """Map task: ``parse_file_partial``, with a bad file's error returned as data (so the combine
    raises the FIRST error in file order, as ``parse_logs`` does, whichever task failed first)."""
    from ..errors import VlmPerfError
    from ..ingest.logs.partial import LogPartial, parse_file_partial

    try:
        return parse_file_partial(path, file_idx, format)
    except VlmPerfError as exc:
        return LogPartial(first_file=file_idx, files=[path], error=exc)


def _results_as_done(leaves: list, client: Any) -> list:
    """Compute ``leaves``, results in leaf order. With a distributed client each result is fetched
    as soon as its task is done, so the transfer of one file's partial overlaps the parse of the
    next (measured: gathering all partials at the end added 3-6 s to an 8-file, 2M-record run)."""
    import dask

    if client is None:
        try:
            from distributed import default_client

            client = default_client()
        except (ImportError, ValueError):  # no distributed client: the local scheduler
            return list(dask.compute(*leaves))
    from .cluster import done_in_turn  # bounded: a cluster with no live worker fails instead of waiting forever

    futures = client.compute(leaves)
    results: list = [None] * len(futures)
    for i, result in done_in_turn(client, futures):
        results[i] = result
    return results


def parse_logs_dask(paths: Sequence[str | Path] | str | Path, format: str = "auto", client: Any = None,
                    split_every: int | None = None, empty_ok: bool = False) -> "ParseResult":
    """``parse_logs(paths, format)`` with one Dask task per log file: the same map
    (``ingest.logs.partial.parse_file_partial``, file index = the file's position in the run) and
    the same combine (``combine_partials``), so the result is bit-identical to ``parse_logs``:
    the same raw table, views, diagnostics, notes and the same error for bad input.

    ``split_every=None`` (default): the per-file partials come back to the caller as each task
    finishes (the transfers overlap the remaining parses), and the caller merges and finishes
    them once. An integer: partials are merged in a tree on the workers
    (``split_every`` per task) and only the finish (restart segments over the whole run, which
    needs every record) runs here. Both give the same result: the merge is associative and keeps
    file order (lists are concatenated, counters summed; tested), the finish runs once either
    way. The tree moves the same bytes plus worker-to-worker copies, so it is not the default.
    """
    import dask

    from ..ingest.logs.parser import expand_log_paths
    from ..ingest.logs.partial import check_format, finish, merge_partials

    if isinstance(paths, (str, Path)):
        paths = [paths]
    files = [str(p) for p in expand_log_paths(paths)]  # directories -> their log files, as parse_logs
    check_format(format)
    tag = uuid.uuid4().hex[:12]  # unique keys per call: a long-lived client may run many
    leaves = [dask.delayed(_file_partial, pure=True)(f, i, format, dask_key_name=f"vlm-perf-log-{tag}-{i}")
              for i, f in enumerate(files)]
    if split_every is None or not leaves:
        total = merge_partials(_results_as_done(leaves, client) if leaves else [])
    else:
        total = _compute(_tree(leaves, merge_partials, split_every, f"log-{tag}"), client)
    return finish(total, empty_ok=empty_ok)
