"""File handling for the metadata reader: path expansion, compressed input, slow per-line checks.

The fast path hands plain files straight to ``pl.scan_ndjson``. Compressed shards (``.gz``,
``.zst``) are stream-decompressed into a private temporary directory first (bounded memory: the
scan then streams the plain file; polars would otherwise decompress a whole shard in memory).
The per-line functions here run only after the fast path reported a problem: they locate the
offending ``file:line`` and, with ``skip_bad``, write a cleaned copy of a shard whose bad lines
polars cannot parse at all.
"""

from __future__ import annotations

import atexit
from array import array
import glob
import gzip
import json
import shutil
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterable, Iterator, Sequence

from .metadata_schema import GRID_FIELDS, INT_FIELDS, INT_LIST_FIELDS

SUFFIXES = (".jsonl", ".ndjson", ".jsonl.gz", ".ndjson.gz", ".jsonl.zst", ".ndjson.zst")
_JSON_WS = b" \t\r\n"
_I64_MIN, _I64_MAX = -(2**63), 2**63 - 1


@dataclass
class Source:
    """One input shard: ``display`` is what the user gave, ``path`` what polars scans."""

    display: str
    path: Path
    # original line number of every non-blank line of ``path`` (None: count lines of ``display``)
    line_map: "array[int] | None" = None
    cleaned: bool = False


@dataclass
class TempArea:
    """A private temporary directory for decompressed / cleaned shards."""

    root: Path | None = None
    _files: list[Path] = field(default_factory=list)

    def new_file(self, stem: str) -> Path:
        if self.root is None:
            self.root = Path(tempfile.mkdtemp(prefix="vlm-perf-metadata-"))
        path = self.root / f"{len(self._files):05d}-{stem}.jsonl"
        self._files.append(path)
        return path

    def cleanup(self) -> None:
        if self.root is not None:
            shutil.rmtree(self.root, ignore_errors=True)
            self.root = None

    def keep_until_exit(self) -> None:
        """For lazy frames handed to a caller: the files must outlive this call."""
        if self.root is not None:
            atexit.register(shutil.rmtree, self.root, True)


def _is_glob(text: str) -> bool:
    return any(ch in text for ch in "*?[")


def _has_suffix(path: Path) -> bool:
    name = path.name.lower()
    return name.endswith(SUFFIXES)


def expand_paths(paths: str | Path | Iterable[str | Path]) -> list[Path]:
    """Files named by ``paths``: files, directories (their metadata shards) or glob patterns."""
    if isinstance(paths, (str, Path)):
        paths = [paths]
    out: list[Path] = []
    for item in paths:
        text = str(item)
        path = Path(text)
        if path.is_dir():
            found = sorted(p for p in path.iterdir() if p.is_file() and _has_suffix(p))
            if not found:
                raise ValueError(f"{text}: no metadata shards ({', '.join(SUFFIXES)}) in this directory")
            out.extend(found)
        elif path.is_file():
            out.append(path)
        elif _is_glob(text):
            found = sorted(Path(p) for p in glob.glob(text, recursive=True) if Path(p).is_file())
            if not found:
                raise ValueError(f"{text}: the pattern matches no file")
            out.extend(found)
        else:
            raise ValueError(f"{text}: no such file or directory")
    seen: set[Path] = set()
    unique = []
    for p in out:
        key = p.resolve()
        if key not in seen:
            seen.add(key)
            unique.append(p)
    if not unique:
        raise ValueError("no metadata files given")
    return unique


def _open_binary(path: Path):
    name = path.name.lower()
    if name.endswith(".gz"):
        return gzip.open(path, "rb")
    if name.endswith(".zst"):
        import zstandard

        return zstandard.ZstdDecompressor().stream_reader(open(path, "rb"), closefd=True)
    return open(path, "rb")


def is_compressed(path: Path) -> bool:
    return path.name.lower().endswith((".gz", ".zst"))


def prepare_sources(files: Sequence[Path], temp: TempArea) -> list[Source]:
    """Decompress compressed shards (streaming, 4 MiB chunks) into ``temp``; plain files as is."""
    sources = []
    for path in files:
        if is_compressed(path):
            target = temp.new_file(path.name.split(".")[0])
            try:
                with _open_binary(path) as src, open(target, "wb") as dst:
                    shutil.copyfileobj(src, dst, 4 << 20)
            except (OSError, EOFError) as exc:  # gzip.BadGzipFile is an OSError
                raise ValueError(f"{path}: cannot decompress ({exc})") from None
            sources.append(Source(str(path), target))
        else:
            sources.append(Source(str(path), path))
    return sources


def iter_nonblank_lines(source: Source) -> Iterator[tuple[int, bytes]]:
    """(original line number, raw line) of every non-blank line, in file order."""
    with open(source.path, "rb") as fh:
        if source.line_map is not None:
            k = 0
            for raw in fh:
                if raw.strip(_JSON_WS):
                    yield source.line_map[k], raw
                    k += 1
            return
        for lineno, raw in enumerate(fh, start=1):
            if raw.strip(_JSON_WS):
                yield lineno, raw


def line_numbers(source: Source, rows: Sequence[int]) -> dict[int, int]:
    """Map 0-based row indexes (non-blank lines, as polars counts them) to 1-based line numbers."""
    wanted = sorted(set(rows))
    out: dict[int, int] = {}
    if not wanted:
        return out
    if source.line_map is not None:
        return {r: source.line_map[r] for r in wanted}
    it = iter(wanted)
    target = next(it)
    row = 0
    for lineno, _ in iter_nonblank_lines(source):
        if row == target:
            out[row] = lineno
            target = next(it, None)
            if target is None:
                break
        row += 1
    return out


def _is_int(v) -> bool:
    return isinstance(v, int) and not isinstance(v, bool) and _I64_MIN <= v <= _I64_MAX


def type_error(raw: bytes) -> str | None:
    """Why polars cannot parse this line against the schema (None when it can): the field name."""
    try:
        obj = json.loads(raw)
    except (ValueError, UnicodeDecodeError):
        return "json: not valid JSON"
    if not isinstance(obj, dict):
        return "json: a line must be a JSON object"
    for key in INT_FIELDS:
        v = obj.get(key)
        if v is not None and not _is_int(v):
            return f"{key}: expected an integer, got {v!r}"[:160]
    for key in INT_LIST_FIELDS:
        v = obj.get(key)
        if v is not None and not (isinstance(v, list) and all(x is None or _is_int(x) for x in v)):
            return f"{key}: expected a list of integers, got {v!r}"[:160]
    for key in GRID_FIELDS:
        v = obj.get(key)
        if v is None:
            continue
        if not isinstance(v, list) or not all(
                row is None or (isinstance(row, list) and all(x is None or _is_int(x) for x in row)) for row in v):
            return f"{key}: expected a list of [t, h, w] integer rows, got {v!r}"[:160]
    return None


def clean_source(source: Source, temp: TempArea, bad: list[tuple[int, str]],
                 max_bad: int) -> tuple[Source, dict[str, int]]:
    """Per-line check of a shard polars failed to parse: write the parsable lines to a cleaned
    copy, count the others by reason and append the first ``max_bad`` as (line, message)."""
    counts: dict[str, int] = {}
    target = temp.new_file(Path(source.display).name.split(".")[0] + "-clean")
    kept = array("q")
    with open(target, "wb") as out:
        for lineno, raw in iter_nonblank_lines(source):
            problem = type_error(raw)
            if problem is None:
                out.write(raw if raw.endswith(b"\n") else raw + b"\n")
                kept.append(lineno)
                continue
            key = problem.split(":", 1)[0]
            key = "json: not a JSON object matching schema v1 types" if key == "json" else f"{key}: wrong type"
            counts[key] = counts.get(key, 0) + 1
            if len(bad) < max_bad:
                bad.append((lineno, problem))
    return Source(source.display, target, kept, cleaned=True), counts
