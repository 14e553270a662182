"""The normalised event table every trace reader produces, and the per-file partial / merge.

One row per timed event (times in integer nanoseconds on the trace's own clock):

========== ===================================================================================
column     meaning
========== ===================================================================================
rank       the trainer rank the file belongs to (``distributedInfo.rank``, else the file name)
kind       ``cpu_op``, ``annotation`` (record_function / NVTX range), ``module`` (``nn.Module:``),
           ``runtime`` (a launch call), ``kernel``, ``memcpy``, ``memset``, ``gpu_annotation``
name       the event name (kernel names as the profiler wrote them)
pid, tid   host process/thread, or device id / stream for device events
start, end nanoseconds
ext        ``External id`` (op -> kernel link), -1 when absent
corr       ``correlation`` (launch -> kernel link), -1 when absent
seq        autograd ``Sequence number`` (forward op <-> backward node), -1 when absent
fwd_tid    ``Fwd thread id`` (> 0 on backward nodes), -1 when absent
flops      matmul FLOPs of ``aten::mm/addmm/bmm/baddbmm`` ops from their recorded ``Input Dims``
           (``record_shapes=True``; 2 per multiply-add), else 0 (`matmul_flops`)
========== ===================================================================================

Columns are accumulated in ``array('q')`` buffers (8 bytes a value) and names are interned, so a
reader holds roughly 80 bytes per kept event, far below the JSON text of the event.

Per-rank files are read independently (`TracePartial`, one per file: the map step) and merged with
`merge_partials` (concatenation in file order; associative), so a Dask map over files and a
sequential loop run the same code.
"""

from __future__ import annotations

from array import array
from dataclasses import dataclass, field

import polars as pl

from ...errors import InputError

__all__ = ["KINDS", "MATMUL_OPS", "matmul_flops", "EventBuilder", "TracePartial", "merge_partials", "HOST_KINDS", "DEVICE_KINDS",
           "MAX_NS", "MAX_RANK", "checked_rank", "out_of_range"]

#: the largest |start| / |end| in nanoseconds an event may have (2^62 ns: 146 years from the clock's zero; every
#: difference of two such times fits Int64). Kineto writes µs since the epoch (~1.8e18 ns today).
MAX_NS = 1 << 62
#: the largest trainer rank a trace may name (2^24 GPUs)
MAX_RANK = 1 << 24


def out_of_range(path, where: str = "") -> InputError:
    """The one error of every trace reader for a number it cannot hold: ts / dur beyond `MAX_NS` (or not
    finite: Infinity, 1e300), an id beyond 64 bits."""
    return InputError(f"{where + ': ' if where else ''}a time or id out of range (ts/dur must be finite and within "
                      f"±{MAX_NS} ns, i.e. ±{MAX_NS // 1000:.3e} µs; ids 64-bit integers)", str(path))


def checked_rank(value, path, where: str) -> int:
    """A rank read from ``where`` (the file name, ``distributedInfo.rank``): an integer in [0, `MAX_RANK`)."""
    if type(value) is not int or not 0 <= value < MAX_RANK:
        text = str(value)
        raise InputError(f"{where}: rank {text if len(text) <= 30 else text[:20] + '...'} is not a rank (an integer "
                         f"from 0 to {MAX_RANK - 1})", str(path))
    return value

KINDS = ("cpu_op", "annotation", "module", "runtime", "kernel", "memcpy", "memset", "gpu_annotation")
HOST_KINDS = ("cpu_op", "annotation", "module", "runtime")
DEVICE_KINDS = ("kernel", "memcpy", "memset")
_INT_COLUMNS = ("pid", "tid", "start", "end", "ext", "corr", "seq", "fwd_tid", "flops")


MATMUL_OPS = frozenset({"aten::mm", "aten::addmm", "aten::bmm", "aten::baddbmm"})


def matmul_flops(name: str, dims) -> int:
    """2·m·k·n (times the batch for bmm) from an op's ``Input Dims``; 0 when the shapes do not fit.

    ``aten::mm(a[m,k], b[k,n])``, ``aten::addmm(bias, a[m,k], b[k,n])``, ``aten::bmm(a[b,m,k], b[b,k,n])``,
    ``aten::baddbmm(bias, a[b,m,k], b[b,k,n])`` (ATen's signatures; the bias add is not a matmul).
    """
    if not isinstance(dims, list):
        return 0
    if name in ("aten::addmm", "aten::baddbmm"):
        dims = dims[1:]
    if len(dims) < 2 or not all(isinstance(d, list) and all(type(x) is int for x in d) for d in dims[:2]):
        return 0
    a, b = dims[0], dims[1]
    if name in ("aten::mm", "aten::addmm") and len(a) == 2 and len(b) == 2 and a[1] == b[0]:
        return 2 * a[0] * a[1] * b[1]
    if name in ("aten::bmm", "aten::baddbmm") and len(a) == 3 and len(b) == 3 and a[0] == b[0] and a[2] == b[1]:
        return 2 * a[0] * a[1] * a[2] * b[2]
    return 0


class EventBuilder:
    """Append-only columnar buffer of events (bounded memory per event)."""

    def __init__(self) -> None:
        self.cols = {c: array("q") for c in _INT_COLUMNS}
        self.kind = array("b")
        self.name = array("l")
        self._names: dict[str, int] = {}

    def add(self, kind: int, name: str, pid: int, tid: int, start: int, end: int,
            ext: int = -1, corr: int = -1, seq: int = -1, fwd_tid: int = -1, flops: int = 0) -> None:
        code = self._names.get(name)
        if code is None:
            code = self._names[name] = len(self._names)
        c = self.cols
        self.kind.append(kind)
        self.name.append(code)
        c["pid"].append(pid)
        c["tid"].append(tid)
        c["start"].append(start)
        c["end"].append(end)
        c["ext"].append(ext)
        c["corr"].append(corr)
        c["seq"].append(seq)
        c["fwd_tid"].append(fwd_tid)
        c["flops"].append(flops)

    def extend(self, kind: array, names: list[str], pid: array, tid: array, start: array, end: array, ext: array,
               corr: array, seq: array, fwd_tid: array, flops: array) -> None:
        """Append many events at once (columns of equal length; the same values as ``add`` one by one)."""
        get = self._names.get
        codes = list(map(get, names))
        if None in codes:
            for i, name in enumerate(names):
                if codes[i] is None:
                    code = get(name)
                    if code is None:
                        code = self._names[name] = len(self._names)
                    codes[i] = code
        self.kind.extend(kind)
        self.name.extend(codes)
        c = self.cols
        for col, values in (("pid", pid), ("tid", tid), ("start", start), ("end", end), ("ext", ext), ("corr", corr),
                            ("seq", seq), ("fwd_tid", fwd_tid), ("flops", flops)):
            c[col].extend(values)

    def __len__(self) -> int:
        return len(self.kind)

    def times_in_range(self) -> bool:
        """Every start / end within ±`MAX_NS` (checked once per file, vectorised)."""
        import numpy as np

        for col in ("start", "end"):
            values = np.frombuffer(self.cols[col], dtype=np.int64) if len(self) else None
            if values is not None and (values.max() > MAX_NS or values.min() < -MAX_NS):
                return False
        return True

    def frame(self, rank: int) -> pl.DataFrame:
        names = list(self._names)
        lut = pl.Series("name", names, dtype=pl.String)
        codes = pl.Series("code", self.name, dtype=pl.Int64)
        frame = pl.DataFrame({
            "rank": pl.Series("rank", [rank] * len(self), dtype=pl.Int64),
            "kind": pl.Series("kind", self.kind, dtype=pl.Int8),
            "name": lut.gather(codes) if len(self) else pl.Series("name", [], dtype=pl.String),
            **{c: pl.Series(c, self.cols[c], dtype=pl.Int64) for c in _INT_COLUMNS},
        })
        kinds = pl.Enum(list(KINDS))
        return frame.with_columns(pl.col("kind").replace_strict(list(range(len(KINDS))), list(KINDS),
                                                                return_dtype=kinds))


@dataclass
class TracePartial:
    """What reading one trace file (or merging consecutive ones) yields.

    ``files``: file names in order; ``frames``: per file, its event table; ``meta``: per file, the
    top-level metadata kept (rank, world size, device names, ...); ``notes``: things the reader had
    to assume (capped); ``error``: the first error in file order (the rest is then meaningless).
    """

    files: list[str] = field(default_factory=list)
    frames: list[pl.DataFrame] = field(default_factory=list)
    meta: list[dict] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    error: InputError | None = None

    @property
    def events(self) -> pl.DataFrame:
        if not self.frames:
            return empty_events()
        return pl.concat(self.frames, how="vertical")

    def raise_error(self) -> None:
        if self.error is not None:
            raise self.error

    def renamed(self, old: str, new: str) -> "TracePartial":
        """The same partial with the file name ``old`` (a temporary local copy) written ``new`` (its URL)."""
        error = self.error
        if error is not None:
            error = type(error)(str(error).replace(old, new))
        return TracePartial([f.replace(old, new) for f in self.files], self.frames, self.meta,
                            [n.replace(old, new) for n in self.notes], error)


def empty_events() -> pl.DataFrame:
    return EventBuilder().frame(0)


MAX_NOTES = 20


def merge_partials(parts) -> TracePartial:
    """Concatenate partials in order (associative: a tree of merges equals one merge)."""
    out = TracePartial()
    for p in parts:
        out.files += p.files
        out.frames += p.frames
        out.meta += p.meta
        out.notes = list(dict.fromkeys(out.notes + p.notes))[:MAX_NOTES]
        if out.error is None and p.error is not None:
            out.error = p.error
    return out
