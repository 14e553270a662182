"""Text inputs in the encoding their byte-order mark states: UTF-16 / UTF-32 logs and manifests are read as the
text they hold (Windows editors and PowerShell's ``>`` write UTF-16 with a BOM); UTF-16 without a BOM, and bytes
that are not UTF-8, are one line naming the file.

* `open_text_stream`: the decompressed bytes of a file (`vlm_perf.ingest.compressed.open_maybe_compressed`) as
  UTF-8, transcoded in blocks when a UTF-16 / UTF-32 BOM starts it (streaming: memory bounded by the block);
* `decode_text`: a small file's bytes as text by the same rule, strict (an undecodable byte is an error naming
  the file and line).
"""

from __future__ import annotations

import codecs
from pathlib import Path
from typing import BinaryIO

from ..errors import InputError
from .compressed import open_maybe_compressed

__all__ = ["bom_encoding", "decode_text", "open_text_stream"]

#: BOM -> codec (UTF-32 first: its little-endian BOM starts with UTF-16's)
_BOMS = ((codecs.BOM_UTF32_LE, "utf-32"), (codecs.BOM_UTF32_BE, "utf-32"),
         (codecs.BOM_UTF16_LE, "utf-16"), (codecs.BOM_UTF16_BE, "utf-16"))


def bom_encoding(head: bytes) -> str | None:
    """``"utf-16"`` / ``"utf-32"`` when ``head`` starts with that byte-order mark, else None (UTF-8's BOM is
    UTF-8: the readers drop it)."""
    for bom, name in _BOMS:
        if head.startswith(bom):
            return name
    return None


def _utf16_without_bom(head: bytes) -> bool:
    """Every other byte 0 in the first bytes: UTF-16 text of ASCII characters with no BOM to say so."""
    sample = head[:256]
    if len(sample) < 8 or sample.count(0) < len(sample) // 3:
        return False
    return max(sample[0::2].count(0), sample[1::2].count(0)) >= 0.9 * (len(sample) // 2)


def _no_bom_error(source: str) -> InputError:
    return InputError("looks like UTF-16 text without a byte-order mark (every other byte is 0): save it as "
                      "UTF-8 (or UTF-16 with its BOM)", source=source)


class _Transcoded:
    """A binary reader giving the UTF-8 bytes of ``raw`` decoded with ``encoding`` (``read(n)`` only)."""

    def __init__(self, raw: BinaryIO, head: bytes, encoding: str | None) -> None:
        self.raw, self.head = raw, head
        self.decoder = codecs.getincrementaldecoder(encoding)(errors="replace") if encoding else None
        self.buf = b""
        self.done = False

    def _more(self, n: int) -> bytes:
        if self.head:
            chunk, self.head = self.head, b""
            return chunk
        return self.raw.read(n)

    def read(self, n: int = -1) -> bytes:
        if self.decoder is None:  # plain UTF-8 (or anything else): the bytes as they are, the head first
            if n is None or n < 0:
                out, self.head = self.head + self.raw.read(), b""
                return out
            head, self.head = self.head, b""
            return head + self.raw.read(max(n - len(head), 0)) if len(head) < n else head
        if n is None or n < 0:  # the rest, whole
            data, self.head = self.head + self.raw.read(), b""
            out, self.buf, self.done = self.buf + self.decoder.decode(data, final=True).encode("utf-8"), b"", True
            return out
        while len(self.buf) < n and not self.done:
            chunk = self._more(max(n, 1 << 16))
            self.buf += self.decoder.decode(chunk, final=not chunk).encode("utf-8")
            self.done = not chunk
        out, self.buf = self.buf[:n], self.buf[n:]
        return out

    def close(self) -> None:
        self.raw.close()

    def __enter__(self) -> "_Transcoded":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def open_text_stream(path: str | Path) -> BinaryIO:
    """The decompressed bytes of ``path`` as UTF-8: transcoded when a UTF-16 / UTF-32 BOM starts them, as they
    are otherwise; UTF-16 without a BOM is an `InputError` naming the file."""
    raw = open_maybe_compressed(path)
    try:
        head = raw.read(4)
        encoding = bom_encoding(head)
        if encoding is None and head.count(0) >= 1:
            head += raw.read(252)
            if _utf16_without_bom(head):
                raise _no_bom_error(str(path))
    except BaseException:
        raw.close()
        raise
    return _Transcoded(raw, head, encoding)  # type: ignore[return-value]


def decode_text(data: bytes, source: str) -> str:
    """A small file's bytes as text: by its BOM (UTF-8 / UTF-16 / UTF-32; the BOM dropped), else strict UTF-8;
    UTF-16 without a BOM or a byte that is not UTF-8 is an `InputError` naming ``source`` (and the line)."""
    encoding = bom_encoding(data[:4])
    if encoding is not None:
        try:
            return data.decode(encoding)
        except UnicodeDecodeError as exc:
            raise InputError(f"not valid {encoding.upper()} text after its byte-order mark ({exc.reason} at byte "
                             f"{exc.start})", source=source) from None
    if _utf16_without_bom(data[:256]):
        raise _no_bom_error(source)
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        line = data.count(b"\n", 0, exc.start) + 1
        raise InputError(f"byte 0x{data[exc.start]:02x} is not UTF-8 text (save the file as UTF-8)",
                         source=f"{source}:{line}") from None
