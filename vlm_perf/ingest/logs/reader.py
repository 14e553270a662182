"""Read a text log (plain, .gz or .zst) as polars frames of ``(line, text)``, in bounded chunks.

Every input goes through the package's one decompressor (`vlm_perf.ingest.compressed`,
``open_maybe_compressed``: a plain file is read as is; a UTF-16 / UTF-32 file, by its BOM, as UTF-8 through
`vlm_perf.ingest.textcodec.open_text_stream`) in blocks of ``CHUNK_BYTES``, cut at the
last newline, and each block's lines are read by the polars CSV reader with a separator byte that
practically never occurs in logs (0x1F), no quoting, and ``utf8-lossy`` decoding, so the line
splitting happens in Rust. Memory is bounded by the block and one frame, never by the file: a
streaming ``scan_csv`` of the whole file would be simpler, but its batches are produced ahead of a
slower consumer and were measured to buffer the whole 726 MB benchmark log (docs/benchmarks.md,
"Log parsing").
``line`` is the 1-based physical line number (``\\n``-separated; a trailing ``\\r`` of CRLF is
dropped by the reader, inner ``\\r`` stay in ``text`` and are split later).

Known limitation: text after a literal 0x1F byte in a line is dropped (polars treats it as a
second field). Invalid UTF-8 bytes become U+FFFD and are counted by the caller.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import polars as pl

from ...errors import InputError
from ..compressed import compression_of, is_blank
from ..textcodec import open_text_stream

__all__ = ["CHUNK_BYTES", "FRAME_LINES", "MAX_LINE_BYTES", "compression_of", "head_text", "lazy_line_frames",
           "line_frames", "read_text"]

_SEP = "\x1f"
#: Bytes read (after decompression) per block; bounds memory independent of file size. A block is
#: handed on in frames of at most FRAME_LINES lines, so even a stream of nothing but newlines keeps
#: the parse near 2 x CHUNK_BYTES plus one frame (measured: docs/log-formats.md).
CHUNK_BYTES = 16 << 20
#: Most lines per frame handed to the parser (a chunk of short lines is split further).
FRAME_LINES = 1 << 20
#: Longest line the parser reads (bytes). A longer line is counted as failed with its line number;
#: only its first MAX_LINE_BYTES + 1 bytes are kept in memory while the rest is skipped.
MAX_LINE_BYTES = 1 << 20


def _csv_kwargs() -> dict:
    return dict(
        has_header=False,
        separator=_SEP,
        quote_char=None,
        schema={"text": pl.Utf8},
        encoding="utf8-lossy",
        truncate_ragged_lines=True,
        # a 0x1F in the first line of a block: without this polars takes it for a second column of
        # the whole block and raises (a traceback before; every block can start with such a line)
        extra_columns="ignore",
        empty_string_is_null=False,
    )


def line_frames(path: Path, omitted: list[int] | None = None) -> Iterator[pl.DataFrame]:
    """Yield DataFrames with columns ``line`` (Int64) and ``text`` (Utf8) covering every non-blank line
    of the file, each of at most ``FRAME_LINES`` lines from at most ``CHUNK_BYTES`` of (decompressed)
    input, cut at a newline so no line is split across frames. A piece of nothing but blank lines is
    handed on as ONE empty line (at its first line number; later line numbers stay exact) and the
    blank lines it stands for besides are added to ``omitted[0]``: a 32 KB ``.zst`` can expand to
    1 GiB of newlines, which would otherwise be parsed as a thousand frames of empty lines. A truncated or corrupt compressed stream is an
    `InputError` naming the file and the first line not read."""
    try:
        kind = compression_of(path)
        fh = open_text_stream(path)  # UTF-16 / UTF-32 (by their BOM) as UTF-8
    except OSError as exc:  # unreadable (permissions, vanished): one line naming the file
        raise InputError(f"cannot read: {exc.strerror or exc}", source=str(path)) from None
    offset = 1
    with fh:
        rest = b""
        skipping = False  # inside a line longer than MAX_LINE_BYTES: drop bytes up to its newline
        while True:
            try:
                block = fh.read(CHUNK_BYTES)
            except Exception as exc:  # noqa: BLE001 - OSError/EOFError (gzip), zstandard.ZstdError, ...
                raise InputError(f"cannot decompress ({kind}): {exc}" if kind else f"cannot read: {exc}",
                                 source=f"{path}:{offset}") from None
            if not block:
                break
            if skipping:
                nl = block.find(b"\n")
                if nl < 0:
                    continue
                block = block[nl:]  # keep the newline: it ends the over-long (kept-truncated) line
                skipping = False
            if rest:
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
            block = block[: cut + 1] if rest else block
            for piece in _split_lines(block):
                if is_blank(piece):  # nothing to parse: one blank line stands for the piece
                    lines = piece.count(b"\n")
                    if omitted is not None:
                        omitted[0] += lines - 1
                    yield _blank_frame(offset)
                    offset += lines
                    continue
                frame = _frame_from_bytes(piece, offset)
                offset += frame.height
                yield frame
            del block
        if rest:
            yield _frame_from_bytes(rest, offset)


def lazy_line_frames(path: Path) -> Iterator[pl.LazyFrame]:
    """`line_frames` as LazyFrames (for callers that build a query on each frame)."""
    for frame in line_frames(path):
        yield frame.lazy()


def _split_lines(data: bytes) -> Iterator[bytes]:
    """``data`` (whole lines) in pieces of at most ``FRAME_LINES`` lines, so a chunk of nothing but
    newlines does not become a 16-million-row frame."""
    if len(data) <= FRAME_LINES or data.count(b"\n") <= FRAME_LINES:
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


def _blank_frame(line: int) -> pl.DataFrame:
    return pl.DataFrame({"line": [line], "text": [""]}, schema={"line": pl.Int64, "text": pl.Utf8})


def _frame_from_bytes(data: bytes, offset: int) -> pl.DataFrame:
    frame = pl.read_csv(data, **_csv_kwargs())
    return frame.with_row_index("line", offset=offset).with_columns(pl.col("line").cast(pl.Int64))


def read_text(path: Path) -> tuple[str, int]:
    """Whole file as text (for small structured files: JSON, JSONL). Returns (text, decode errors)."""
    with open_text_stream(path) as fh:
        data = fh.read()
    text = data.decode("utf-8", errors="replace")
    bad = text.count("\ufffd") - data.count("\ufffd".encode()) if "\ufffd" in text else 0
    return text, max(bad, 0)


def head_text(path: Path, n_bytes: int = 4096) -> str:
    """First bytes of the (decompressed) file, for format sniffing."""
    data = b""
    try:  # small reads, so a truncated or corrupt stream still yields its readable head
        with open_text_stream(path) as fh:
            while len(data) < n_bytes:
                block = fh.read(min(4096, n_bytes - len(data)))
                if not block:
                    break
                data += block
    except Exception:  # noqa: BLE001 - the full read reports the stream error with file:line
        pass
    return data.decode("utf-8", errors="replace")
