"""The parse engines of the metadata reader: a chunk of JSON lines -> a typed frame (strict schema).

``ENGINES`` is a registry (`register_engine`, duplicates rejected): ``pyarrow`` (default) and ``polars``; a chunk an
engine refuses goes to the precise per-line path (`metadata_io.parse_line`), so engines need not name bad lines.
"""

from __future__ import annotations

import io
from dataclasses import dataclass
from typing import Callable

import polars as pl

from .metadata_schema import SCHEMA


@dataclass(frozen=True)
class ParseEngine:
    """Bytes of whole JSON lines -> a frame with exactly `SCHEMA`; raises on anything it cannot
    parse strictly (the caller then locates the line). ``strict`` engines reject floats, strings
    and booleans in integer fields instead of converting them."""

    name: str
    parse: Callable[[bytes], pl.DataFrame]
    description: str


ENGINES: dict[str, ParseEngine] = {}


def register_engine(engine: ParseEngine) -> ParseEngine:
    """Add a parse engine; a second engine of the same name is an error."""
    if engine.name in ENGINES:
        raise ValueError(f"metadata parse engine {engine.name!r} is already registered")
    ENGINES[engine.name] = engine
    return engine


def arrow_schema():
    import pyarrow as pa

    def arrow(dtype: pl.DataType):
        if dtype == pl.Int64:
            return pa.int64()
        if dtype == pl.List(pl.Int64):
            return pa.list_(pa.int64())
        return pa.list_(pa.list_(pa.int64()))

    return pa.schema([(name, arrow(dtype)) for name, dtype in SCHEMA.items()])


_PYARROW_OPTIONS: list = []
#: pyarrow parses a buffer in blocks on its thread pool: blocks of len/8 (256 KiB to 4 MiB) keep a
#: small shard (one chunk of a few MB) on several threads instead of one.
_BLOCK_MIN, _BLOCK_MAX, _BLOCKS_PER_CHUNK = 256 << 10, 4 << 20, 8


def _parse_pyarrow(data: bytes) -> pl.DataFrame:
    import pyarrow as pa
    import pyarrow.json as pj

    if not _PYARROW_OPTIONS:
        _PYARROW_OPTIONS.append(pj.ParseOptions(explicit_schema=arrow_schema(), unexpected_field_behavior="ignore"))
    block = min(_BLOCK_MAX, max(_BLOCK_MIN, len(data) // _BLOCKS_PER_CHUNK))

    def read(block_size: int):
        return pj.read_json(pa.BufferReader(data), parse_options=_PYARROW_OPTIONS[0],
                            read_options=pj.ReadOptions(block_size=block_size))

    try:
        table = read(block)
    except pa.ArrowInvalid as exc:
        if "straddl" not in str(exc) or block > len(data):
            raise
        table = read(len(data) + 1)  # a line longer than a block: the whole buffer as one block
    frame = pl.from_arrow(table)
    assert isinstance(frame, pl.DataFrame)
    return frame.cast(SCHEMA)  # type: ignore[arg-type]


def _parse_polars(data: bytes) -> pl.DataFrame:
    return pl.read_ndjson(io.BytesIO(data), schema=SCHEMA)


DEFAULT_ENGINE = "pyarrow"
register_engine(ParseEngine("pyarrow", _parse_pyarrow,
                            "pyarrow.json with the explicit schema (strict integers; rejects invalid surrogates "
                            "and duplicate keys, which then go to the per-line path)"))
register_engine(ParseEngine("polars", _parse_polars,
                            "polars.read_ndjson with the explicit schema (strict integers; accepts a duplicate "
                            "key, first value wins)"))
