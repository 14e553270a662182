"""PyTorch profiler / Kineto Chrome-trace JSON (``.json``, ``.json.gz``, ``.json.zst``), streamed.

The file is one JSON object whose ``traceEvents`` array holds the events (facts:
docs/traces.md, from pytorch/kineto ``output_json.cpp``). It is read in fixed-size chunks and each
event object is decoded on its own (``json.JSONDecoder.raw_decode``, the C scanner), so memory is
one chunk plus the compact event table (`events.EventBuilder`), whatever the file size. Top-level
keys other than ``traceEvents`` (``distributedInfo``, ``deviceProperties``, ...) are small and are
decoded whole, before or after the events.

Kept: complete (``ph: X``) events of the categories the attribution uses. ``python_function``
frames other than ``nn.Module: ...`` are skipped (they only name Python frames), as are flow,
counter, instant and metadata events (the ids the flows carry are also in the events' ``args``).
"""

from __future__ import annotations

import codecs
import json
import re
from array import array
from pathlib import Path
from typing import List, Optional, Union

from ...remote import as_path
from ...errors import InputError
from ..compressed import open_maybe_compressed
from .events import KINDS, MATMUL_OPS, EventBuilder, TracePartial, checked_rank, matmul_flops, out_of_range

__all__ = ["read_kineto", "CHUNK", "MAX_PENDING"]

CHUNK = 1 << 20
#: the largest |ts| / |dur| (ns) rounded with numpy; beyond it (never in a real trace) the event-by-event path
#: rounds and range-checks exactly as the standard-library path does
_VECTOR_NS = float(1 << 62)
MAX_PENDING = 64 << 20  # an event longer than this is taken as bad JSON, not as incomplete
_K = {k: i for i, k in enumerate(KINDS)}
_CATEGORY = {"cpu_op": _K["cpu_op"], "user_annotation": _K["annotation"], "cuda_runtime": _K["runtime"],
             "cuda_driver": _K["runtime"], "kernel": _K["kernel"], "gpu_memcpy": _K["memcpy"],
             "gpu_memset": _K["memset"], "gpu_user_annotation": _K["gpu_annotation"],
             "python_function": _K["module"], "Kernel": _K["kernel"], "Memcpy": _K["memcpy"],
             "Memset": _K["memset"], "Runtime": _K["runtime"], "Operator": _K["cpu_op"]}
RANK_IN_NAME = re.compile(r"rank[-_.]?(\d+)", re.IGNORECASE)
_WS = " \t\r\n"


class _Stream:
    """Decoded text of a (compressed) file, consumed from the front; tracks the byte position."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.fh = open_maybe_compressed(path)
        self.dec = codecs.getincrementaldecoder("utf-8")(errors="replace")
        self.buf = ""
        self.pos = 0           # index into buf
        self.consumed = 0      # characters dropped before buf
        self.eof = False

    def more(self) -> bool:
        if self.eof:
            return False
        try:
            raw = self.fh.read(CHUNK)
        except OSError:
            raise
        except Exception as exc:  # noqa: BLE001 - EOFError (a truncated .gz), zlib.error, zstandard.ZstdError
            raise self.error(f"cannot decompress ({type(exc).__name__}: {str(exc)[:120]}; truncated?)") from None
        if self.consumed == 0 and self.pos == 0 and not self.buf and raw.startswith(b"\xef\xbb\xbf"):
            raw = raw[3:]  # a UTF-8 byte-order mark before the JSON is not part of it
        if not raw:
            self.eof = True
            self.buf = self.buf[self.pos:] + self.dec.decode(b"", final=True)
        else:
            self.buf = self.buf[self.pos:] + self.dec.decode(raw)
        self.consumed += self.pos
        self.pos = 0
        return True

    def peek(self) -> str:
        """The next non-blank character ('' at end of input)."""
        while True:
            buf, n = self.buf, len(self.buf)
            i = self.pos
            while i < n and buf[i] in _WS:
                i += 1
            self.pos = i
            if i < n:
                return buf[i]
            if not self.more():
                return ""

    def take(self, char: str) -> None:
        got = self.peek()
        if got != char:
            raise self.error(f"expected {char!r}, found {got!r}" if got else f"expected {char!r}, found end of file")
        self.pos += 1

    def value(self, decoder: json.JSONDecoder):
        """Decode one JSON value at the current position (reading more input while it is incomplete)."""
        self.peek()
        while True:
            try:
                obj, end = decoder.raw_decode(self.buf, self.pos)
            except json.JSONDecodeError as exc:
                self.retry_or_raise(exc)
                continue
            if end >= len(self.buf) and not self.eof:  # a number or literal may go on in the next chunk
                self.more()
                continue
            self.pos = end
            return obj

    def retry_or_raise(self, exc: json.JSONDecodeError) -> None:
        """A value failed to decode: read more input if it may just be incomplete, else raise."""
        pending = len(self.buf) - self.pos
        if not self.eof and pending < MAX_PENDING:
            self.more()
            return
        if not self.buf[self.pos:].strip():
            raise self.error("file ends inside the trace (truncated?)")
        if self.eof and exc.pos >= len(self.buf) - 1:
            raise self.error(f"file ends inside an event (truncated?): {exc.msg}")
        raise self.error(f"invalid JSON ({exc.msg})")

    def error(self, message: str) -> InputError:
        return InputError(f"{message} at character {self.consumed + self.pos}", str(self.path))


def read_kineto(path: str | Path, file_index: int = 0) -> TracePartial:
    """One Kineto trace file -> a `TracePartial` (errors are returned in it, not raised)."""
    path = as_path(path)
    try:
        builder, meta, notes = _scan(path)
        if not builder.times_in_range():
            raise out_of_range(path)
        rank = _rank_of(path, meta, file_index, notes)
    except InputError as exc:
        return TracePartial(files=[str(path)], error=exc)
    except OSError as exc:  # a gzip file with a bad header (BadGzipFile) included
        return TracePartial(files=[str(path)], error=InputError(f"cannot read trace: {exc}", str(path)))
    meta["rank"] = rank
    meta["format"] = "kineto"
    return TracePartial(files=[str(path)], frames=[builder.frame(rank)], meta=[meta], notes=notes)


def _rank_of(path: Path, meta: dict, file_index: int, notes: list[str]) -> int:
    info = meta.get("distributedInfo")
    if isinstance(info, dict) and isinstance(info.get("rank"), int):
        return checked_rank(info["rank"], path, "distributedInfo.rank")
    m = RANK_IN_NAME.search(path.name)
    if m:
        return checked_rank(int(m.group(1)) if len(m.group(1)) < 12 else m.group(1), path, f"file name {path.name[:80]!r}")
    notes.append(f"{path.name}: no distributedInfo.rank and no rank in the file name; rank {file_index} "
                 "(its position among the files) assumed")
    return file_index


def _scan(path: Path) -> tuple[EventBuilder, dict, list[str]]:
    s = _Stream(path)
    decoder = json.JSONDecoder()
    builder = EventBuilder()
    meta: dict = {}
    notes: list[str] = []
    try:
        if s.peek() == "":
            raise s.error("empty file")
        s.take("{")
        seen_events = False
        while True:
            c = s.peek()
            if c == ",":
                s.pos += 1
                continue
            if c == "}":
                break
            key = s.value(decoder)
            if not isinstance(key, str):
                raise s.error("expected a key")
            s.take(":")
            if key == "traceEvents":
                seen_events = True
                try:
                    _events(s, decoder, builder)
                except OverflowError:  # Infinity / 1e300 ts or dur, a > 64-bit id: one error, the file named
                    raise out_of_range(path, f"event near character {s.consumed + s.pos}") from None
            else:
                value = s.value(decoder)
                if key in ("distributedInfo", "deviceProperties", "schemaVersion", "baseTimeNanoseconds",
                           "displayTimeUnit", "with_stack", "record_shapes", "traceName") or key.startswith("vlm_perf"):
                    meta[key] = value
    finally:
        s.fh.close()
    if not seen_events:
        raise InputError("no traceEvents array: not a PyTorch profiler / Chrome trace", str(path))
    if not len(builder):
        notes.append(f"{path.name}: no timed events kept")
    return builder, meta, notes


def _events(s: _Stream, decoder: json.JSONDecoder, b: EventBuilder) -> None:
    s.take("[")
    category = _CATEGORY
    module_kind = _K["module"]
    add = b.add
    raw_decode = decoder.raw_decode
    ws = _WS
    fast = _fast_decoder()
    while True:
        # decode the complete events of the buffer; stop at its end or at an incomplete event
        buf, n, i = s.buf, len(s.buf), s.pos
        failure = None
        if fast is not None:
            i = _fast_batch(fast, buf, i, b)
        while True:
            while i < n and (buf[i] in ws or buf[i] == ","):
                i += 1
            if i >= n:
                break
            if buf[i] == "]":
                s.pos = i + 1
                return
            try:
                e, i = raw_decode(buf, i)
            except json.JSONDecodeError as exc:
                failure = exc
                break
            if type(e) is not dict or e.get("ph") != "X":
                continue
            kind = category.get(e.get("cat"))  # type: ignore[arg-type]
            if kind is None:
                continue
            name = e.get("name", "")
            if kind == module_kind and not name.startswith("nn.Module: "):
                continue
            ts, dur = e.get("ts"), e.get("dur")
            if ts is None:
                continue
            try:
                start = round(float(ts) * 1000)
                length = 0 if dur is None else round(float(dur) * 1000)
            except (TypeError, ValueError):
                s.pos = i
                raise s.error(f"event {str(name)[:60]!r}: ts/dur is not a number") from None
            args = e.get("args")
            if type(args) is not dict:
                args = {}
            add(kind, str(name), _int(e.get("pid")), _int(e.get("tid")), start, start + length,
                _int(args.get("External id"), -1), _int(args.get("correlation"), -1),
                _int(args.get("Sequence number"), -1), _int(args.get("Fwd thread id"), -1),
                matmul_flops(name, args.get("Input Dims")) if name in MATMUL_OPS else 0)
        s.pos = i
        if failure is not None:
            s.retry_or_raise(failure)
        elif not s.more():
            raise s.error("file ends inside traceEvents (truncated?)")


# ------------------------------------------------------------------------------------------------
# Optional fast path (extra ``traces``: msgspec). The complete events at the front of the buffer (up
# to its last "}," ) are decoded in one call into small typed records that hold only the fields
# used; a batch that does not decode or validate (a "}," inside a string or a nested list, a field
# of another type) is left to the stdlib path above, which then reads it event by event, so both
# paths keep exactly the same events with the same values (tested with and without msgspec).
_FAST: list = []


def _fast_decoder():
    if not _FAST:
        try:
            import msgspec
        except ImportError:
            _FAST.append(None)
        else:
            # defstruct (not class syntax): this module's annotations are strings (PEP 563)
            opt_int = Optional[int]
            args = msgspec.defstruct("Args", [
                ("ext", opt_int, msgspec.field(name="External id", default=-1)),
                ("corr", opt_int, msgspec.field(name="correlation", default=-1)),
                ("seq", opt_int, msgspec.field(name="Sequence number", default=-1)),
                ("fwd", opt_int, msgspec.field(name="Fwd thread id", default=-1)),
                # left undecoded (a slice of the text) unless the op is a matmul
                ("dims", msgspec.Raw, msgspec.field(name="Input Dims", default=msgspec.Raw()))])
            event = msgspec.defstruct("Event", [
                ("ph", Optional[str], None), ("cat", Optional[str], None), ("name", str, ""),
                ("pid", Union[int, str, None], None), ("tid", Union[int, str, None], None),
                ("ts", Optional[float], None), ("dur", Optional[float], None), ("args", Optional[args], None)])
            _FAST.append((msgspec.json.Decoder(List[event]), (msgspec.DecodeError, msgspec.ValidationError)))
    return _FAST[0]


def _fast_batch(fast, buf: str, i: int, b: EventBuilder) -> int:
    """Decode the complete events of ``buf`` from ``i`` in one call; the new position (``i`` on failure)."""
    decoder, errors = fast
    n = len(buf)
    while i < n and buf[i] in " \t\r\n,":
        i += 1
    j = _last_boundary(buf, i)
    if j < 0 or i >= n or buf[i] != "{":
        return i
    try:
        events = decoder.decode("[" + buf[i:j + 1] + "]")
    except errors:
        return i
    category = _CATEGORY
    module_kind = _K["module"]
    kept = [(k, e) for e in events if e.ph == "X" and e.ts is not None and (k := category.get(e.cat)) is not None
            and (k != module_kind or e.name.startswith("nn.Module: "))]
    if kept and not _columns(kept, b):
        _rows(kept, b)
    return j + 1


def _last_boundary(buf: str, i: int) -> int:
    """The position of the last ``}`` of ``buf`` (from ``i``) followed by ``,`` and the ``{`` of another object (or by
    the end of the text read so far): the end of the last complete event, as far as the text shows (a ``},`` inside a kernel name such as
    ``{lambda(float)#1}, at::...`` is passed over; one that still fools it fails the batch, which the stdlib path then
    reads); -1 when there is none."""
    end = len(buf)
    while True:
        j = buf.rfind("},", i, end)
        if j < 0:
            return -1
        k = j + 2
        while k < len(buf) and buf[k] in " \t\r\n":
            k += 1
        if k == len(buf) or buf[k] == "{":  # the next event, or the end of the text read so far
            return j
        end = j + 1


def _columns(kept: list, b: EventBuilder) -> bool:
    """Append the kept events column by column (numpy for the times); False, appending nothing, when a value needs
    the event-by-event path (a string pid, a null id, a time too large for the vectorised rounding)."""
    import numpy as np

    ts = np.array([e.ts for _, e in kept], dtype=np.float64) * 1000
    dur = np.array([0.0 if e.dur is None else e.dur for _, e in kept], dtype=np.float64) * 1000
    if not (np.isfinite(ts).all() and np.isfinite(dur).all()) or max(np.abs(ts).max(), np.abs(dur).max()) >= _VECTOR_NS:
        return False
    start = np.rint(ts).astype(np.int64)  # round-half-even, as Python's round()
    end = start + np.rint(dur).astype(np.int64)
    no_args = (-1, -1, -1, -1, None)
    args = [no_args if e.args is None else e.args for _, e in kept]
    try:
        pid = array("q", [e.pid for _, e in kept])
        tid = array("q", [e.tid for _, e in kept])
        ext = array("q", [-1 if a is no_args else a.ext for a in args])
        corr = array("q", [-1 if a is no_args else a.corr for a in args])
        seq = array("q", [-1 if a is no_args else a.seq for a in args])
        fwd = array("q", [-1 if a is no_args else a.fwd for a in args])
    except TypeError:  # a string / null pid or tid, a null id
        return False
    names = [e.name for _, e in kept]
    flops = array("q", [0 if name not in MATMUL_OPS or a is no_args else matmul_flops(name, _raw_json(a.dims))
                        for name, a in zip(names, args)])
    b.extend(array("b", [k for k, _ in kept]), names, pid, tid, array("q", start.tobytes()), array("q", end.tobytes()),
             ext, corr, seq, fwd, flops)
    return True


def _rows(kept: list, b: EventBuilder) -> None:
    """Append the kept events one by one (any value the decoder accepted)."""
    add = b.add
    for kind, e in kept:
        name = e.name
        start = round(e.ts * 1000)
        a = e.args
        pid, tid = e.pid, e.tid
        add(kind, name, pid if type(pid) is int else _int(pid), tid if type(tid) is int else _int(tid), start,
            start + (0 if e.dur is None else round(e.dur * 1000)),
            *((-1, -1, -1, -1, 0) if a is None else
              (-1 if a.ext is None else a.ext, -1 if a.corr is None else a.corr, -1 if a.seq is None else a.seq,
               -1 if a.fwd is None else a.fwd,
               matmul_flops(name, _raw_json(a.dims)) if name in MATMUL_OPS else 0)))


def _raw_json(raw):
    import msgspec

    try:
        return msgspec.json.decode(raw) if raw else None
    except msgspec.DecodeError:
        return None


def _int(value, default: int = 0) -> int:
    if value is None:
        return default
    if type(value) is int:
        return value
    try:
        return int(value)
    except (TypeError, ValueError):
        return default  # e.g. a thread named by a string
