"""Dask backend: per-iteration metadata statistics and log parsing across a cluster.

The work per partition is THE SAME CODE as on one machine:

* metadata: `aggregate_metadata_dask` is `vlm_perf.scale.cluster.read_metadata` (the one partitioned reader, the
  one ``--scheduler`` uses) returning `iteration_stats`' shape: each partition of consecutive shards is read by
  `MetadataSource.read_partition` (the single-machine pass without its finish) on a worker, and the client runs the
  source's own finish over the merged states in file order (`MetadataSource.finish_partitions`), so the frame, the
  per-rank frame, the diagnostics and the error raised (the first bad line in file order) are the single pass's.
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

import uuid
from pathlib import Path
from typing import TYPE_CHECKING, Any, Iterable, Sequence, Union

from ..errors import ConfigError
from ..ingest.metadata import MetadataResult
from .cluster import DEFAULT_PARTITION_BYTES, plan_partitions, read_metadata

if TYPE_CHECKING:  # pragma: no cover
    from ..arch.spec import ModelSpec
    from ..ingest.logs import ParseResult

__all__ = ["aggregate_metadata_dask", "parse_logs_dask", "plan_partitions", "DEFAULT_PARTITION_BYTES",
           "DEFAULT_SPLIT_EVERY"]

#: Partial log results combined per reduction task (tree fan-in) when ``parse_logs_dask`` is asked for a tree.
DEFAULT_SPLIT_EVERY = 8

PathsLike = Union[str, Path, Iterable[Union[str, Path]]]


# ------------------------------------------------------------------------------------ metadata
def aggregate_metadata_dask(paths: PathsLike, spec: "ModelSpec | None" = None, client: Any = None,
                            skip_bad: bool = False, files_per_partition: int | None = None,
                            partition_bytes: int | None = None, per_rank: bool = False) -> MetadataResult:
    """``iteration_stats(paths, spec, skip_bad)`` read by `vlm_perf.scale.cluster.read_metadata` on ``client`` (a
    ``distributed.Client``; None: the default client if one exists, else the partitions in this process):
    identical frame (``frame.equals``), diagnostics and error; ``per_rank=True`` also sets ``result.per_rank``,
    identical to ``MetadataSource(paths, spec, per_rank=True).per_rank``. Partitions as `read_metadata`'s."""
    source = read_metadata(client, paths, spec, skip_bad=skip_bad, per_rank=per_rank,
                           files_per_partition=files_per_partition, partition_bytes=partition_bytes)
    return MetadataResult(frame=source.per_iteration, diagnostics=source.diagnostics,
                          per_rank=source.per_rank if per_rank else None)


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
