"""File handling for the metadata reader: path expansion and the precise per-line check.

`expand_paths` turns files, directories and globs into the list of shards (in the order every
reader uses). `parse_line` is the slow, precise path: it runs only on lines the fast parse engine
rejected, and says which field is wrong and why (the reader adds ``file:line``).
"""

from __future__ import annotations

import glob
import json
from pathlib import Path
from typing import Any, Iterable

from ..errors import InputError
from ..remote import RemotePath, as_path, is_url
from .metadata_schema import GRID_FIELDS, INT_FIELDS, INT_LIST_FIELDS, SCHEMA

SCHEMA_KEYS = tuple(SCHEMA)

SUFFIXES = (".jsonl", ".ndjson", ".jsonl.gz", ".ndjson.gz", ".jsonl.zst", ".ndjson.zst", ".parquet")
_I64_MIN, _I64_MAX = -(2**63), 2**63 - 1


def _is_glob(text: str) -> bool:
    return any(ch in text for ch in "*?[")


def _has_suffix(path: Path) -> bool:
    name = path.name.lower()
    return name.endswith(SUFFIXES)


def expand_paths(paths: str | Path | Iterable[str | Path]) -> list[Path]:
    """Files named by ``paths``: files, directories (their metadata shards) or glob patterns; each may be a
    URL (``s3://bucket/run/metadata/``, ``gs://b/run/metadata-*.jsonl.gz``: `vlm_perf.remote`)."""
    if isinstance(paths, (str, Path, RemotePath)):
        paths = [paths]  # type: ignore[list-item]
    out: list[Path] = []
    for item in paths:
        text = str(item)
        path = as_path(item if isinstance(item, RemotePath) else text)
        if is_url(text) and _is_glob(text):
            root = RemotePath(text[: text.rfind("/", 0, min(text.find(c) for c in "*?[" if c in text))])
            pattern = text[len(root.url) + 1:]
            found = sorted(p for p in root.glob(pattern) if p.is_file())
            if not found:
                raise InputError("the pattern matches no file", source=text)
            out.extend(found)  # type: ignore[arg-type]
        elif path.is_dir():
            found = sorted(p for p in path.iterdir() if p.is_file() and _has_suffix(p))
            if not found:
                raise InputError(f"no metadata shards ({', '.join(SUFFIXES)}) in this directory", source=text)
            out.extend(found)
        elif path.is_file():
            out.append(path)
        elif _is_glob(text):
            found = sorted(Path(p) for p in glob.glob(text, recursive=True) if Path(p).is_file())
            if not found:
                raise InputError("the pattern matches no file", source=text)
            out.extend(found)
        else:
            raise InputError("no such file or directory", source=text)
    seen: set[Path] = set()
    unique = []
    for p in out:
        key = p.resolve()
        if key not in seen:
            seen.add(key)
            unique.append(p)
    if not unique:
        raise InputError("no metadata files given")
    check_one_format(unique)
    return unique


def check_one_format(files: Iterable[Path]) -> None:
    """Refuse a mix of JSONL and Parquet shards: a run converted in place (``--to-parquet``)
    would otherwise have every row counted twice."""
    files = list(files)
    parquet = [p for p in files if is_parquet(p)]
    if parquet and len(parquet) < len(files):
        other = next(p for p in files if not is_parquet(p))
        raise InputError(f"both JSONL ({other.name}) and Parquet ({parquet[0].name}) metadata were given; the same "
                         "rows would be counted twice: keep one format (or name the files to read)")


def is_compressed(path: Path) -> bool:
    return path.name.lower().endswith((".gz", ".zst"))


def is_parquet(path: Path) -> bool:
    return path.name.lower().endswith(".parquet")


def _is_int(v) -> bool:
    return isinstance(v, int) and not isinstance(v, bool) and _I64_MIN <= v <= _I64_MAX


def _no_duplicate_schema_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in pairs:
        if key in out and key in SCHEMA_KEYS:
            raise _Duplicate(key)
        out[key] = value
    return out


class _Duplicate(ValueError):
    pass


def parse_line(raw: bytes) -> tuple[dict[str, Any] | None, str | None]:
    """The precise per-line check: (schema fields of the line, None) or (None, "field: reason").

    Runs only on lines the fast engine rejected. Rejects what the fast engine must not convert
    silently: floats (``1.5``, ``1e3``, ``NaN``, ``Infinity``), strings and booleans in integer
    fields, integers outside Int64, a schema key given twice. Ignored keys may hold anything
    Python's parser reads (``NaN``, lone surrogate escapes); a line it cannot read at all (invalid
    UTF-8, nesting beyond its recursion limit) gets a ``json:`` reason.
    """
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        return None, f"json: not valid UTF-8 (byte {exc.start})"
    try:
        obj = json.loads(text, object_pairs_hook=_no_duplicate_schema_keys)
    except _Duplicate as exc:
        return None, f"{exc.args[0]}: the key appears twice in the line"
    except RecursionError:
        return None, "json: nested too deeply to parse"
    except ValueError:
        return None, "json: not valid JSON"
    if not isinstance(obj, dict):
        return None, "json: a line must be a JSON object"
    problem = _type_problem(obj)
    if problem is not None:
        return None, problem
    return {key: obj.get(key) for key in SCHEMA_KEYS}, None


def _type_problem(obj: dict[str, Any]) -> str | None:
    """Why the schema fields of ``obj`` do not have schema v1 types (None when they do)."""
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
            shape = {"image_sizes": "[H, W]", "video_sizes": "[T, H, W]"}.get(key, "[t, h, w]")
            return f"{key}: expected a list of {shape} integer rows, got {v!r}"[:160]
    return None
