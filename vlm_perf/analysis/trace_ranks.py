"""Per-rank trace files analysed in parallel: each file read AND attributed by a worker, the results combined here.

    analyze_trace_files(paths, workers=N, **kw) == analyze_traces(read_traces(paths), **kw)

(tested equal, table for table). A worker (a process of a `concurrent.futures.ProcessPoolExecutor`, or a Dask
worker of ``client``) runs `file_parts`: the file read (`vlm_perf.ingest.traces.read_trace`), its ProfilerStep table
and negative durations for the cross-file checks, its rank attributed (`trace_attribute.rank_parts`); only those
small results travel back, so the parent never holds an event table and the workers hold one file's each.

The parallel path needs one rank per file, each rank in one file (the layout torch.profiler writes). When a rank's
events are spread over several files (or a file holds several ranks) the attribution of a rank needs all its
events together: those inputs are analysed by the sequential path, the same result, one process.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Any

from ..errors import InputError
from .trace_parts import TraceParts

__all__ = ["FileParts", "file_parts", "analyze_trace_files", "PARALLEL_BYTES", "worth_parallel"]

#: Trace bytes (all files together) from which `vlm-perf trace` analyses per-rank files in worker processes: below
#: it, starting the processes (about 1-2 s each: Python, polars) costs more than the parallel read and attribution
#: saves (about 15 s per GB, measured: docs/benchmarks.md#traces-at-production-size).
PARALLEL_BYTES = 256 << 20


def worth_parallel(paths: Any) -> bool:
    """Whether ``paths`` (trace files, folders, globs) are two or more local files of `PARALLEL_BYTES` or more
    together: the case where worker processes pay for themselves."""
    from ..ingest.traces import trace_files

    files = trace_files(paths)
    if len(files) < 2 or not all(hasattr(f, "stat") for f in files):
        return False
    try:
        return sum(f.stat().st_size for f in files) >= PARALLEL_BYTES
    except Exception:  # noqa: BLE001 - a size that cannot be read (a remote store): the one-process path
        return False


@dataclass
class FileParts:
    """What a worker returns for one trace file: the partial without its events (file, meta, notes, error), the
    ProfilerStep table, the count of negative-duration events dropped, and the attribution of its rank."""

    partial: Any
    steps: Any = None
    rank: int | None = None
    ranks: int = 0           # distinct ranks in the file (the parallel path needs at most one)
    dropped: int = 0
    parts: Any = None        # trace_attribute.RankParts
    events: int = 0
    notes: list = field(default_factory=list)


def file_parts(path: Any, index: int) -> FileParts:
    """Read one trace file and attribute its rank (the map step; runs in a worker)."""
    import polars as pl

    from ..ingest.traces import TracePartial, read_trace
    from .trace_attribute import rank_parts
    from .trace_checks import profiler_steps

    partial = read_trace(path, index)
    frames = partial.frames
    bare = TracePartial(list(partial.files), [], list(partial.meta), list(partial.notes), partial.error)
    out = FileParts(bare)
    if partial.error is not None or not frames or not frames[0].height:
        return out
    frame = frames[0]
    out.steps = profiler_steps(frame, partial.files[0])
    out.ranks = frame["rank"].n_unique()
    if out.ranks != 1 or len(frames) != 1:
        out.events = frame.height
        return out
    out.rank = int(frame["rank"][0])
    out.dropped = int((frame["end"] < frame["start"]).sum())
    if out.dropped:
        frame = frame.filter(pl.col("end") >= pl.col("start"))
    out.events = frame.height
    if frame.height:
        out.parts = rank_parts(out.rank, frame)
    return out


def _map(files: list, workers: int | None, client: Any) -> list[FileParts]:
    if client is not None:
        from ..scale.cluster import gather_in_order

        futures = [client.submit(file_parts, f, i, key=f"vlm-perf-trace-parts-{os.getpid()}-{id(files)}-{i}",
                                 pure=False) for i, f in enumerate(files)]
        return gather_in_order(client, futures, lambda i: f"trace {files[i]}")
    n = min(len(files), workers or os.cpu_count() or 1)
    if n <= 1:
        return [file_parts(f, i) for i, f in enumerate(files)]
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor

    # spawn: a forked child of a process whose polars thread pool is running can deadlock
    with ProcessPoolExecutor(n, mp_context=multiprocessing.get_context("spawn")) as pool:
        return list(pool.map(file_parts, files, range(len(files))))


def analyze_trace_files(paths: Any, *, workers: int | None = None, client: Any = None, **kwargs) -> TraceParts:
    """`analyze_traces` of the trace files of ``paths`` (files, folders, globs: `trace_files`), each file read and
    attributed by a worker: ``workers`` processes (default: one per CPU, at most one per file; 1: in this process) or
    the Dask ``client``'s workers. ``kwargs``: those of `analyze_traces` (spec, metadata, first_iteration, causal,
    frozen, peak_flops, world_size). The result equals the sequential one; the first file's error is raised."""
    from ..ingest.traces import merge_partials, read_traces, trace_files
    from .trace_attribute import combine
    from .trace_checks import checked_steps, negative_notes
    from .trace_parts import analyze_traces, complete, first_iteration_of

    files = trace_files(paths)
    results = _map(files, workers, client)
    partial = merge_partials(r.partial for r in results)
    partial.raise_error()
    with_events = [r for r in results if r.events or r.ranks]
    if not with_events:
        raise InputError("no timed events (complete 'X' events of profiler categories) in the trace",
                         ", ".join(partial.files[:3]) + (" ..." if len(partial.files) > 3 else ""))
    ranks = [r.rank for r in with_events]
    if any(r.rank is None for r in with_events) or len(set(ranks)) != len(ranks):
        # a rank over several files (or several ranks in a file): its events must be attributed together
        return analyze_traces(read_traces(files), **kwargs)
    notes = checked_steps([r.steps for r in results if r.steps is not None])
    dropped = {r.rank: r.dropped for r in with_events if r.dropped}
    notes = list(partial.notes) + notes + negative_notes(dropped)
    first_iteration, notes = first_iteration_of(partial, kwargs.pop("first_iteration", None), notes)
    parts = [r.parts for r in with_events if r.parts is not None]
    if not parts:
        raise InputError("the trace holds no timed events")
    return complete(combine(parts, first_iteration), notes, spec=kwargs.pop("spec", None),
                    metadata=kwargs.pop("metadata", None), causal=kwargs.pop("causal", "half"),
                    frozen=kwargs.pop("frozen", ()), peak_flops=kwargs.pop("peak_flops", None),
                    world_size=kwargs.pop("world_size", None), **kwargs)
