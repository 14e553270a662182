"""One way to open a possibly compressed input file, for every reader in the package.

The compression is sniffed from the magic bytes (not the suffix), so a renamed ``.gz`` still
works and a plain file called ``x.jsonl.gz`` is read as plain text. The returned object streams:
nothing is decompressed in full, to memory or to disk.
"""

from __future__ import annotations

import gzip
import re
from pathlib import Path
from typing import BinaryIO

from ..remote import is_url, open_binary

__all__ = ["compression_of", "is_blank", "open_maybe_compressed"]

_BLANK = b" \t\r\n"
_NONBLANK = re.compile(rb"[^ \t\r\n]")


def is_blank(data: bytes) -> bool:
    """True when ``data`` holds only spaces, tabs and line ends: readers skip such a stretch in C
    instead of parsing millions of empty lines (a 32 KB ``.zst`` expands to 1 GiB of newlines)."""
    if _NONBLANK.search(data, 0, 1 << 12) is not None:  # ordinary text: answered in the first bytes
        return False
    return not data.translate(None, _BLANK)

_GZIP_MAGIC = b"\x1f\x8b"
_ZSTD_MAGIC = b"\x28\xb5\x2f\xfd"


def compression_of(path: str | Path) -> str | None:
    """``"gzip"``, ``"zstd"`` or ``None`` (plain), from the first bytes of the file."""
    with open_binary(path) as fh:  # a local file, or a URL's stream (vlm_perf.remote)
        head = fh.read(4)
    if head[:2] == _GZIP_MAGIC:
        return "gzip"
    if head == _ZSTD_MAGIC:
        return "zstd"
    return None


def open_maybe_compressed(path: str | Path) -> BinaryIO:
    """A binary, streaming reader of the decompressed bytes of ``path`` (multi-frame zstd included)."""
    kind = compression_of(path)
    if kind == "gzip":
        if is_url(path):
            raw = open_binary(path)
            stream = gzip.GzipFile(fileobj=raw, mode="rb")
            stream.myfileobj = raw  # closed with the stream, as gzip.open closes the file it opened
            return stream  # type: ignore[return-value]
        return gzip.open(path, "rb")  # type: ignore[return-value]
    if kind == "zstd":
        import zstandard  # a core dependency; imported here to keep import time low

        return zstandard.ZstdDecompressor().stream_reader(open_binary(path), read_across_frames=True,
                                                          closefd=True)  # type: ignore[return-value]
    return open_binary(path)
