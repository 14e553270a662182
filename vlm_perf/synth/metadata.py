"""Metadata writer: schema v1 JSON lines, gzip-compressed deterministically.

One object per (iteration, microbatch, dp_rank), keys in a fixed order, compact separators. The
gzip header carries a fixed name and mtime 0, so the same rows always give the same bytes.
"""

from __future__ import annotations

import gzip
import io
import json
from pathlib import Path
from typing import Iterable

from .packing import Pack

KEY_ORDER = ("iteration", "microbatch", "dp_rank", "samples", "padded_tokens", "seq_lens", "image_grid_thw",
             "video_grid_thw")


def metadata_row(iteration: int, microbatch: int, dp_rank: int, packs: list[Pack], seq_length: int,
                 with_media: bool) -> dict:
    """The schema v1 row of one microbatch made of ``packs`` (one pack per row of the micro batch)."""
    row = {
        "iteration": iteration,
        "microbatch": microbatch,
        "dp_rank": dp_rank,
        "samples": len(packs),
        "padded_tokens": seq_length * len(packs),
        "seq_lens": [n for p in packs for n in p.seq_lens],
    }
    if with_media:
        row["image_grid_thw"] = [g for p in packs for g in p.image_grids]
        row["video_grid_thw"] = [g for p in packs for g in p.video_grids]
    return row


def dumps_row(row: dict) -> str:
    return json.dumps({k: row[k] for k in KEY_ORDER if k in row}, separators=(",", ":"))


def write_jsonl_gz(path: Path, rows: Iterable[dict], inner_name: str = "metadata.jsonl") -> Path:
    """Write rows as gzip'd JSON lines with a reproducible header (fixed name, mtime 0)."""
    buffer = io.BytesIO()
    with gzip.GzipFile(filename=inner_name, mode="wb", fileobj=buffer, compresslevel=9, mtime=0) as gz:
        for row in rows:
            gz.write(dumps_row(row).encode("utf-8") + b"\n")
    path.write_bytes(buffer.getvalue())
    return path
