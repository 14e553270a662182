"""Read a text log (plain, .gz or .zst) as lazy polars frames of ``(line, text)``.

Lines are read by the polars CSV reader with a separator byte that practically never occurs in
logs (0x1F), no quoting, and ``utf8-lossy`` decoding, so the work happens in Rust and in bounded
chunks (the streaming engine for plain files, fixed-size decompressed chunks for .gz/.zst).
``line`` is the 1-based physical line number (``\\n``-separated; a trailing ``\\r`` of CRLF is
dropped by the reader, inner ``\\r`` stay in ``text`` and are split later).

Known limitation: text after a literal 0x1F byte in a line is dropped (polars treats it as a
second field). Invalid UTF-8 bytes become U+FFFD and are counted by the caller.
"""

from __future__ import annotations

import gzip
import io
from collections.abc import Iterator
from pathlib import Path

import polars as pl

from ...errors import InputError

_SEP = "\x1f"
#: Decompressed bytes per chunk for compressed inputs; bounds memory independent of file size.
#: A chunk is handed on in frames of at most FRAME_LINES lines, so even a stream of nothing but
#: newlines keeps the parse near 2 x CHUNK_BYTES plus one frame (measured: docs/log-formats.md).
CHUNK_BYTES = 16 << 20
#: Most lines per frame handed to the parser (a chunk of short lines is split further).
FRAME_LINES = 1 << 20
#: Longest line the parser reads (bytes). A longer line is counted as failed with its line number;
#: compressed inputs keep only its first MAX_LINE_BYTES + 1 bytes in memory while skipping the rest.
MAX_LINE_BYTES = 1 << 20


def _csv_kwargs() -> dict:
    return dict(
        has_header=False,
        separator=_SEP,
        quote_char=None,
        schema={"text": pl.Utf8},
        encoding="utf8-lossy",
        truncate_ragged_lines=True,
        empty_string_is_null=False,
        missing_columns="insert",
    )


def compression_of(path: Path) -> str | None:
    """Sniff the magic bytes (not the suffix) so renamed files still work."""
    with open(path, "rb") as fh:
        head = fh.read(4)
    if head[:2] == b"\x1f\x8b":
        return "gzip"
    if head == b"\x28\xb5\x2f\xfd":
        return "zstd"
    return None


def _open_decompressed(path: Path, kind: str) -> io.BufferedIOBase:
    if kind == "gzip":
        return gzip.open(path, "rb")  # type: ignore[return-value]
    import zstandard  # a core dependency; imported here to keep import time low

    return zstandard.ZstdDecompressor().stream_reader(open(path, "rb"), read_across_frames=True)


def lazy_line_frames(path: Path) -> Iterator[pl.LazyFrame]:
    """Yield LazyFrames with columns ``line`` (Int64) and ``text`` (Utf8) covering the whole file.

    A plain file is one lazy scan (polars streams it); a compressed file yields one frame per
    ~64 MB of decompressed text, cut at a newline so no line is split across frames.
    """
    kind = compression_of(path)
    if kind is None:
        yield (
            pl.scan_csv(path, **_csv_kwargs())
            .with_row_index("line", offset=1)
            .with_columns(pl.col("line").cast(pl.Int64))
        )
        return
    offset = 1
    with _open_decompressed(path, kind) as fh:
        rest = b""
        skipping = False  # inside a line longer than MAX_LINE_BYTES: drop bytes up to its newline
        while True:
            try:
                block = fh.read(CHUNK_BYTES)
            except (OSError, EOFError, ValueError) as exc:  # truncated or corrupt stream
                raise InputError(f"cannot decompress ({kind}): {exc}", source=f"{path}:{offset}") from None
            except Exception as exc:  # zstandard.ZstdError is not an OSError
                raise InputError(f"cannot decompress ({kind}): {exc}", source=f"{path}:{offset}") from None
            if not block:
                break
            if skipping:
                nl = block.find(b"\n")
                if nl < 0:
                    continue
                block = block[nl:]  # keep the newline: it ends the over-long (kept-truncated) line
                skipping = False
            block = rest + block
            cut = block.rfind(b"\n")
            if cut < 0:  # a single line longer than the chunk: keep at most MAX_LINE_BYTES + 1 of it
                if len(block) > MAX_LINE_BYTES:
                    rest = block[: MAX_LINE_BYTES + 1]
                    skipping = True
                else:
                    rest = block
                continue
            rest = block[cut + 1:]
            for piece in _split_lines(block[: cut + 1]):
                frame = _frame_from_bytes(piece, offset)
                offset += frame.height
                yield frame.lazy()
        if rest:
            yield _frame_from_bytes(rest, offset).lazy()


def _split_lines(data: bytes) -> Iterator[bytes]:
    """``data`` (whole lines) in pieces of at most ``FRAME_LINES`` lines, so a chunk of nothing but
    newlines does not become a 16-million-row frame."""
    if data.count(b"\n") <= FRAME_LINES:
        yield data
        return
    import numpy as np

    ends = np.flatnonzero(np.frombuffer(data, dtype=np.uint8) == 10)[FRAME_LINES - 1::FRAME_LINES] + 1
    start = 0
    for end in ends.tolist():
        yield data[start:end]
        start = end
    if start < len(data):
        yield data[start:]


def _frame_from_bytes(data: bytes, offset: int) -> pl.DataFrame:
    frame = pl.read_csv(io.BytesIO(data), **{k: v for k, v in _csv_kwargs().items() if k != "missing_columns"})
    return frame.with_row_index("line", offset=offset).with_columns(pl.col("line").cast(pl.Int64))


def read_text(path: Path) -> tuple[str, int]:
    """Whole file as text (for small structured files: JSON, JSONL). Returns (text, decode errors)."""
    kind = compression_of(path)
    if kind is None:
        data = path.read_bytes()
    else:
        with _open_decompressed(path, kind) as fh:
            data = fh.read()
    text = data.decode("utf-8", errors="replace")
    bad = text.count("\ufffd") - data.count("\ufffd".encode()) if "\ufffd" in text else 0
    return text, max(bad, 0)


def head_text(path: Path, n_bytes: int = 4096) -> str:
    """First bytes of the (decompressed) file, for format sniffing."""
    kind = compression_of(path)
    if kind is None:
        with open(path, "rb") as fh:
            data = fh.read(n_bytes)
    else:
        data = b""
        try:  # small reads, so a truncated or corrupt stream still yields its readable head
            with _open_decompressed(path, kind) as fh:
                while len(data) < n_bytes:
                    block = fh.read(min(4096, n_bytes - len(data)))
                    if not block:
                        break
                    data += block
        except Exception:  # noqa: BLE001 - the full read reports the stream error with file:line
            pass
    return data.decode("utf-8", errors="replace")
