"""Profiler traces: PyTorch profiler / Kineto Chrome JSON and Nsight Systems SQLite exports.

    read_traces(paths) == merge_partials(read_trace(f, i) for i, f in enumerate(trace_files(paths)))

``read_trace`` is the map step (one file, any worker); ``merge_partials`` concatenates in file
order. The result is one event table (`events`) with a ``rank`` column.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable, Union

from ...remote import as_path
from ...errors import InputError
from .events import DEVICE_KINDS, HOST_KINDS, KINDS, TracePartial, merge_partials
from .kineto import read_kineto
from .nsys import is_sqlite, read_nsys

__all__ = ["DEVICE_KINDS", "HOST_KINDS", "KINDS", "TracePartial", "TraceMetadata", "merge_partials", "read_trace",
           "read_traces", "trace_metadata", "trace_files", "is_trace_file"]

PathsLike = Union[str, Path, Iterable[Union[str, Path]]]
_SUFFIXES = (".json", ".json.gz", ".json.zst", ".sqlite", ".db")


def is_trace_file(path: Path) -> bool:
    name = path.name.lower()
    return path.is_file() and name.endswith(_SUFFIXES)


def trace_files(paths: PathsLike) -> list[Path]:
    """Files, folders (their trace files, sorted, non-recursive then one level down) and globs -> files."""
    items = [paths] if isinstance(paths, (str, Path)) else list(paths)
    out: list[Path] = []
    for item in items:
        p = as_path(item)
        if p.is_dir():
            found = sorted(f for f in p.iterdir() if is_trace_file(f))
            if not found:
                found = sorted(f for f in p.glob("*/*") if is_trace_file(f))
            if not found:
                raise InputError("no trace files (*.json[.gz|.zst], *.sqlite) in this folder", str(p))
            out += found
        elif p.exists():
            out.append(p)
        else:
            matches = sorted(Path().glob(str(item))) if any(c in str(item) for c in "*?[") else []
            if not matches:
                raise InputError("no such trace file", str(item))
            out += matches
    return list(dict.fromkeys(out))


def read_trace(path: str | Path, file_index: int = 0) -> TracePartial:
    """One trace file -> a `TracePartial`; the format is sniffed (SQLite magic, else JSON)."""
    return read_nsys(path, file_index) if is_sqlite(path) else read_kineto(path, file_index)


def read_traces(paths: PathsLike) -> TracePartial:
    """Every trace file of ``paths``, merged; raises the first file's error."""
    merged = merge_partials(read_trace(f, i) for i, f in enumerate(trace_files(paths)))
    merged.raise_error()
    return merged


@dataclass(frozen=True)
class TraceMetadata:
    """The run's per-microbatch metadata as the trace join needs it (`vlm_perf.analysis.trace_parts`): the
    per-iteration statistics and the per-(iteration, dp_rank) statistics, from one pass."""

    per_iteration: Any  # pl.DataFrame: iteration + BatchStats fields
    per_rank: Any  # pl.DataFrame: iteration, dp_rank + BatchStats fields


def trace_metadata(metadata: Any, spec: Any) -> TraceMetadata:
    """``metadata``: a `MetadataSource` already read with ``per_rank=True`` (e.g. on a cluster), or the paths of the
    run's per-microbatch metadata (read here for ``spec``, the run's `ModelSpec`)."""
    from ..metadata_source import MetadataSource

    source = metadata if isinstance(metadata, MetadataSource) else MetadataSource(metadata, spec, per_rank=True)
    return TraceMetadata(source.result().frame, source.per_rank)
