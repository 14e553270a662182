"""Whole lines of a metadata shard in chunks (decompressed while streaming), with lines longer than the stated limit
reported and skipped without being held, and the split of a failing chunk into pieces for the per-line path.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterator

from ..errors import InputError
from .compressed import open_maybe_compressed

_BOM = b"\xef\xbb\xbf"


@dataclass
class Chunk:
    data: bytes
    first_line: int  # 1-based line number of the first line of ``data``


@dataclass
class BadLine:
    file_index: int
    line: int
    message: str  # "field: reason" (what the user reads after file:line)
    key: str  # the rows_skipped key


def iter_chunks(path: Path, display: str, chunk_bytes: int, max_line: int,
                 on_long: Callable[[int], None], on_bytes: Callable[[int], None]) -> Iterator[Chunk]:
    """Whole lines of ``path`` (decompressed, streaming) in chunks; a leading BOM is removed.

    A line longer than ``max_line`` is reported through ``on_long(line)`` and skipped without
    being held in memory. ``on_bytes(n)`` is called with the bytes read so far from ``path``.
    """
    try:
        fh = open_maybe_compressed(path)
    except OSError as exc:
        raise InputError(f"cannot open ({exc.strerror or exc})", source=display) from None
    with fh:
        line = 1
        rest = b""
        skipping = False  # inside an over-long line: drop bytes up to its newline
        first = True
        while True:
            try:
                block = fh.read(chunk_bytes)
            except Exception as exc:  # noqa: BLE001 - gzip: OSError/EOFError; zstandard.ZstdError
                raise InputError(f"cannot decompress ({exc})", source=display) from None
            if first:
                first = False
                if block.startswith(_BOM):
                    block = block[len(_BOM):]
            on_bytes(len(block))
            if not block:
                if rest and not skipping:
                    yield Chunk(rest, line)
                return
            if skipping:
                cut = block.find(b"\n")
                if cut < 0:
                    continue
                block = block[cut + 1:]
                skipping = False
                line += 1
            cut = block.rfind(b"\n") + 1  # ``rest`` never holds a line end
            if cut == 0:  # no line end in the buffer
                buf = rest + block
                if len(buf) > max_line:
                    on_long(line)
                    skipping, rest = True, b""
                else:
                    rest = buf
                continue
            # one copy: the carried-over start of a line + this block up to its last line end
            whole = b"".join((rest, memoryview(block)[:cut])) if rest or cut < len(block) else block
            rest = block[cut:]
            if len(rest) > max_line:
                on_long(line + whole.count(b"\n"))
                skipping, rest = True, b""
            # lines inside ``whole`` longer than max_line
            if len(whole) > max_line:
                whole, line = drop_long_lines(whole, line, max_line, on_long)
            if whole:
                yield Chunk(whole, line)
            line += whole.count(b"\n")


def may_hold_long_line(whole: bytes, max_line: int) -> bool:
    """False when no line of ``whole`` is longer than ``max_line``, checked in O(len / max_line) finds.

    Every aligned window of ``max_line // 2`` bytes is probed for a newline; a line longer than
    ``max_line`` covers at least one such window entirely, so if every window holds a newline
    there is none (the exact per-line check then never runs on ordinary chunks).
    """
    half = max(1, max_line // 2)
    return any(whole.find(b"\n", k, k + half) < 0 for k in range(0, len(whole), half))


def drop_long_lines(whole: bytes, line: int, max_line: int, on_long: Callable[[int], None]) -> tuple[bytes, int]:
    """Replace every line longer than ``max_line`` by an empty line (reported); line numbers stay."""
    if not may_hold_long_line(whole, max_line):
        return whole, line
    parts = whole.split(b"\n")
    if max(len(p) for p in parts) <= max_line:
        return whole, line
    for i, part in enumerate(parts):
        if len(part) > max_line:
            on_long(line + i)
            parts[i] = b""
    return b"\n".join(parts), line


def nonblank_lines(data: bytes, first_line: int) -> list[int]:
    """Line numbers of the non-blank lines of ``data`` (one per parsed row, in order)."""
    return [first_line + i for i, raw in enumerate(data.split(b"\n")) if raw.strip(b" \t\r\n")]


def pieces(data: bytes, first_line: int, n: int) -> list[Chunk]:
    """``data`` cut into about ``n`` pieces at line ends."""
    size = max(1, len(data) // n)
    out, start, line = [], 0, first_line
    while start < len(data):
        end = data.find(b"\n", min(len(data) - 1, start + size))
        end = len(data) if end < 0 else end + 1
        piece = data[start:end]
        out.append(Chunk(piece, line))
        line += piece.count(b"\n")
        start = end
    return out
