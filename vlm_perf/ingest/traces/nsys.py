"""Nsight Systems SQLite exports (``nsys export --type sqlite``), read with the standard library.

Tables used (facts: docs/traces.md, from NVIDIA's export documentation; columns vary by version, so
each table's columns are looked up before it is queried; times are nanoseconds; strings are
interned in ``StringIds(id, value)``):

* ``CUPTI_ACTIVITY_KIND_KERNEL``: ``start, end, deviceId, streamId, correlationId`` and the name in
  ``demangledName`` / ``shortName`` (StringIds ids);
* ``CUPTI_ACTIVITY_KIND_RUNTIME``: ``start, end, globalTid, correlationId, nameId`` (the launch);
* ``CUPTI_ACTIVITY_KIND_MEMCPY`` / ``_MEMSET``: ``start, end, deviceId, streamId, correlationId``;
* ``NVTX_EVENTS``: ``start, end, text`` or ``textId``, ``globalTid`` (ranges only: ``end`` set).

``globalTid`` packs the process and thread: pid = (gTid >> 24) & 0xFFFFFF, tid = gTid & 0xFFFFFF.
Rows are fetched through a cursor in batches, so memory is the compact event table only.
"""

from __future__ import annotations

import sqlite3
from pathlib import Path

from ...remote import is_url, local_copy, open_binary
from ...errors import InputError
from .events import KINDS, EventBuilder, TracePartial, checked_rank, out_of_range
from .kineto import RANK_IN_NAME

__all__ = ["read_nsys", "is_sqlite"]

_K = {k: i for i, k in enumerate(KINDS)}
_SQLITE_MAGIC = b"SQLite format 3\x00"
BATCH = 50_000


def is_sqlite(path: str | Path) -> bool:
    try:
        with open_binary(path) as fh:
            return fh.read(16) == _SQLITE_MAGIC
    except OSError:
        return False


def _columns(db: sqlite3.Connection, table: str) -> set[str]:
    return {row[1] for row in db.execute(f"PRAGMA table_info({table})")}


def _pid_tid(gtid: int | None) -> tuple[int, int]:
    if gtid is None:
        return 0, 0
    return (gtid >> 24) & 0xFFFFFF, gtid & 0xFFFFFF


def read_nsys(path: str | Path, file_index: int = 0) -> TracePartial:
    if is_url(path):  # SQLite needs a local file: a URL is copied for the read, and named in what comes back
        with local_copy(path) as local:
            part = read_nsys(local, file_index)
        return part.renamed(str(local), str(path))
    path = Path(path)
    try:
        db = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    except sqlite3.Error as exc:
        return TracePartial(files=[str(path)], error=InputError(f"cannot open SQLite export: {exc}", str(path)))
    notes: list[str] = []
    b = EventBuilder()
    try:
        tables = {r[0] for r in db.execute("SELECT name FROM sqlite_master WHERE type='table'")}
        if "CUPTI_ACTIVITY_KIND_KERNEL" not in tables and "NVTX_EVENTS" not in tables:
            raise InputError("not an Nsight Systems export: no CUPTI_ACTIVITY_KIND_KERNEL or NVTX_EVENTS table",
                             str(path))
        strings = dict(db.execute("SELECT id, value FROM StringIds")) if "StringIds" in tables else {}
        for table, kind in (("CUPTI_ACTIVITY_KIND_KERNEL", "kernel"), ("CUPTI_ACTIVITY_KIND_MEMCPY", "memcpy"),
                            ("CUPTI_ACTIVITY_KIND_MEMSET", "memset")):
            if table in tables:
                _device(db, table, kind, strings, b, path, notes)
        if "CUPTI_ACTIVITY_KIND_RUNTIME" in tables:
            cols = _columns(db, "CUPTI_ACTIVITY_KIND_RUNTIME")
            _need(cols, ("start", "end", "globalTid", "correlationId"), "CUPTI_ACTIVITY_KIND_RUNTIME", path)
            name = "nameId" if "nameId" in cols else "NULL"
            for start, end, gtid, corr, name_id in _rows(db, f"SELECT start, end, globalTid, correlationId, {name} "
                                                             "FROM CUPTI_ACTIVITY_KIND_RUNTIME"):
                pid, tid = _pid_tid(gtid)
                b.add(_K["runtime"], strings.get(name_id, "cudaLaunch") if name_id is not None else "cudaLaunch",
                      pid, tid, int(start), int(end), corr=int(corr) if corr is not None else -1)
        if "NVTX_EVENTS" in tables:
            cols = _columns(db, "NVTX_EVENTS")
            _need(cols, ("start", "end", "globalTid"), "NVTX_EVENTS", path)
            text = "text" if "text" in cols else "NULL"
            text_id = "textId" if "textId" in cols else "NULL"
            for start, end, gtid, txt, tid_ in _rows(db, f"SELECT start, end, globalTid, {text}, {text_id} "
                                                         "FROM NVTX_EVENTS WHERE end IS NOT NULL AND end >= start"):
                label = txt if txt is not None else strings.get(tid_)
                if label is None:
                    continue
                pid, tid = _pid_tid(gtid)
                b.add(_K["annotation"], str(label), pid, tid, int(start), int(end))
    except sqlite3.Error as exc:
        return TracePartial(files=[str(path)], error=InputError(f"cannot read SQLite export: {exc}", str(path)))
    except InputError as exc:
        return TracePartial(files=[str(path)], error=exc)
    except (OverflowError, TypeError, ValueError):  # a REAL 1e300 / Infinity time, a text where a number belongs
        return TracePartial(files=[str(path)], error=out_of_range(
            path, "a row of a CUPTI / NVTX table holds a NULL, text or out-of-range number"))
    finally:
        db.close()
    m = RANK_IN_NAME.search(path.name)
    try:
        if not b.times_in_range():
            raise out_of_range(path)
        rank = checked_rank(int(m.group(1)) if len(m.group(1)) < 12 else m.group(1), path,
                            f"file name {path.name[:80]!r}") if m else file_index
    except InputError as exc:
        return TracePartial(files=[str(path)], error=exc)
    except (OverflowError, TypeError, ValueError):  # a REAL 1e300 / Infinity time, a text where a number belongs
        return TracePartial(files=[str(path)], error=out_of_range(
            path, "a row of a CUPTI / NVTX table holds a NULL, text or out-of-range number"))
    if not m:
        notes.append(f"{path.name}: no rank in the file name; rank {file_index} (its position among the files) "
                     "assumed")
    return TracePartial(files=[str(path)], frames=[b.frame(rank)], meta=[{"rank": rank, "format": "nsys"}],
                        notes=notes)


def _need(cols: set[str], needed: tuple[str, ...], table: str, path: Path) -> None:
    missing = [c for c in needed if c not in cols]
    if missing:
        raise InputError(f"table {table} lacks column(s) {', '.join(missing)} (an unsupported nsys export version)",
                         str(path))


def _rows(db: sqlite3.Connection, sql: str):
    cur = db.execute(sql)
    while True:
        rows = cur.fetchmany(BATCH)
        if not rows:
            return
        yield from rows


def _device(db, table: str, kind: str, strings: dict, b: EventBuilder, path: Path, notes: list[str]) -> None:
    cols = _columns(db, table)
    _need(cols, ("start", "end", "deviceId", "streamId", "correlationId"), table, path)
    name_col: str | None
    if kind == "kernel":
        name_col = next((c for c in ("demangledName", "shortName", "mangledName") if c in cols), None)
        if name_col is None:
            raise InputError(f"table {table} has no kernel name column (demangledName/shortName)", str(path))
    else:
        name_col = "NULL"
    label = {"memcpy": "Memcpy", "memset": "Memset"}.get(kind, "kernel")
    null = 0
    for start, end, dev, stream, corr, name_id in _rows(
            db, f"SELECT start, end, deviceId, streamId, correlationId, {name_col} FROM {table}"):
        if start is None or end is None or dev is None or stream is None:
            null += 1  # no time or no device / stream: nowhere to place it (named in a note, with the count)
            continue
        name = strings.get(name_id, str(name_id)) if kind == "kernel" else label
        b.add(_K[kind], name, int(dev), int(stream), int(start), int(end), corr=int(corr) if corr is not None else -1)
    if null:
        notes.append(f"{path.name}: {null} row(s) of {table} with a NULL start, end, deviceId or streamId skipped "
                     "(their time is not attributed)")
