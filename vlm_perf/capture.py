"""Capture per-microbatch metadata (schema v1) from inside a training loop.

A tiny, dependency-free JSON-lines writer: call `MetadataWriter.record` once per microbatch with
tensors or lists. torch is never imported: anything with ``.tolist()`` (torch/numpy arrays) is
converted with it, so the call costs one small device->host copy of the metadata tensors
(``cu_seqlens`` and ``*_grid_thw`` are a few dozen integers). See ``docs/capture.md``.

    with MetadataWriter("run/metadata", rank=dp_rank) as meta:
        ...
        meta.record(iteration, microbatch=i, cu_seqlens=cu, image_grid_thw=batch["image_grid_thw"])

Each rank writes its own shard ``metadata-rank{rank:05d}.jsonl`` (appending; line-buffered, so a
crash loses at most the line being written); `vlm_perf.ingest.metadata` reads the directory.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

# MetadataCallback is deliberately not in __all__: a star import must not pull in torch/transformers.
__all__ = ["MetadataWriter", "batch_metadata", "seq_lens_from_cu_seqlens", "shard_name"]


def __getattr__(name: str) -> Any:
    """``MetadataCallback`` (a transformers ``TrainerCallback``) is loaded on first use only, so this
    module never imports torch or transformers (see ``vlm_perf.capture_trainer``)."""
    if name == "MetadataCallback":
        try:
            from .capture_trainer import MetadataCallback
        except ImportError as exc:
            raise ImportError(f"vlm_perf.capture.MetadataCallback needs torch and transformers (and accelerate for "
                              f"the Trainer): {exc}") from exc
        return MetadataCallback
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")

SCHEMA_VERSION = 1  # lines with grids only (v1)
SCHEMA_VERSION_PIXELS = 2  # lines with image_sizes / video_sizes / image_tiles (schema v2)
#: Batch keys holding tiles per image (GotOcr2 / InternVL image processors: tiles incl. thumbnail).
TILES_KEYS = ("num_patches", "image_num_patches")


def shard_name(rank: int | None, suffix: str = ".jsonl") -> str:
    return f"metadata{suffix}" if rank is None else f"metadata-rank{int(rank):05d}{suffix}"


def _plain(value: Any) -> Any:
    """Tensors/arrays -> nested lists of Python ints (duck-typed ``.tolist()``)."""
    if value is None:
        return None
    if hasattr(value, "detach"):  # a torch tensor that may require grad
        value = value.detach()
    if hasattr(value, "tolist"):
        value = value.tolist()
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    if isinstance(value, bool):
        raise ValueError(f"expected an integer, got {value!r}")
    if isinstance(value, float):
        if not value.is_integer():
            raise ValueError(f"expected an integer, got {value!r}")
        return int(value)
    if isinstance(value, int):
        return value
    if hasattr(value, "__index__"):
        return int(value.__index__())
    raise ValueError(f"expected integers, got {type(value).__name__}: {value!r}")


def _as_int(value: Any, name: str) -> int | None:
    if value is None:
        return None
    if hasattr(value, "item"):
        value = value.item()
    if isinstance(value, bool) or not float(value).is_integer():
        raise ValueError(f"{name} must be an integer, got {value!r}")
    return int(value)


def seq_lens_from_cu_seqlens(cu_seqlens: Any) -> list[int]:
    """``[0, 5, 12, 12, 20]`` -> ``[5, 7, 8]`` (differences; zero-length padding entries dropped).

    Accepts a 1-D tensor/list of cumulative offsets starting at 0 (varlen / THD ``cu_seqlens``).
    A padded variant whose last entries repeat (Megatron ``cu_seqlens_padded`` tails) yields
    zero differences, which are dropped.
    """
    cu = _plain(cu_seqlens)
    if cu and isinstance(cu[0], list):  # [1, n] shaped
        if len(cu) != 1:
            raise ValueError(f"cu_seqlens must be 1-D, got {len(cu)} rows")
        cu = cu[0]
    if not cu or cu[0] != 0:
        raise ValueError(f"cu_seqlens must start at 0, got {cu[:3]!r}")
    lens = [b - a for a, b in zip(cu, cu[1:])]
    if any(n < 0 for n in lens):
        raise ValueError("cu_seqlens must be non-decreasing")
    return [n for n in lens if n > 0]


CU_SEQLENS_KEYS = ("cu_seq_lens_q", "cu_seqlens_q", "cu_seqlens")  # HF flash varlen kwargs; THD names


def _shape(value: Any) -> tuple[int, ...] | None:
    shape = getattr(value, "shape", None)
    return tuple(int(n) for n in shape) if shape is not None else None


def _segments(row: list[int]) -> list[int]:
    """Lengths of the causal documents in one packed row of position ids (each restarts at 0)."""
    starts = [i for i, p in enumerate(row) if p == 0] or [0]
    if starts[0] != 0:
        starts.insert(0, 0)
    return [b - a for a, b in zip(starts, starts[1:] + [len(row)])]


def batch_metadata(inputs: dict) -> dict:
    """Schema-v1 fields of one microbatch from the keyword inputs of a Hugging Face model call.

    Returns keyword arguments for :meth:`MetadataWriter.record`: ``seq_lens`` (or ``cu_seqlens``),
    ``padded_tokens`` and ``samples`` (from the token tensor's shape [B, S]), ``image_grid_thw`` and
    ``video_grid_thw`` (as given); schema v2 ``image_sizes`` (the batch's ``image_sizes``, [[H, W], ...] pixels,
    as LLaVA-style processors return it; not recorded when the batch has ``image_grid_thw``) and
    ``image_tiles`` (``num_patches`` / ``image_num_patches``: tiles per image incl. thumbnail, where the
    processor leaves them in the batch). Sequence lengths, in order of preference:

    1. ``cu_seq_lens_q`` / ``cu_seqlens_q`` / ``cu_seqlens`` (packed varlen batches, e.g.
       ``DataCollatorWithFlattening(return_flash_attn_kwargs=True)``): one length per document;
    2. 2-D ``position_ids`` that restart at 0 inside a row (packed rows, e.g. TRL
       ``padding_free=True``): one length per restart;
    3. a 2-D ``attention_mask``: real (unmasked) tokens per row; rows with none are dropped;
    4. otherwise every row is one sequence of S tokens.

    3-D ``position_ids`` (Qwen M-RoPE, [3, B, S]) are not used for packing detection: vision tokens
    share positions, so restarts are ambiguous; the attention mask decides then. Tensors are read
    with ``.tolist()`` / ``.sum(-1)`` (torch or numpy), never imported.
    """
    ids = inputs.get("input_ids")
    shape = _shape(ids)
    if shape is None and inputs.get("inputs_embeds") is not None:
        shape = _shape(inputs["inputs_embeds"])[:2]
    if shape is not None and len(shape) == 1:
        shape = (1, shape[0])
    out: dict[str, Any] = {}
    if shape is not None:
        rows, length = shape[0], shape[1]
        out["samples"], out["padded_tokens"] = rows, rows * length
    for key in CU_SEQLENS_KEYS:
        if inputs.get(key) is not None:
            out["cu_seqlens"] = inputs[key]
            break
    else:
        positions, mask = inputs.get("position_ids"), inputs.get("attention_mask")
        pos_shape, mask_shape = _shape(positions), _shape(mask)
        lens: list[int] | None = None
        if pos_shape is not None and len(pos_shape) == 2 and pos_shape[1] > 1:
            # one reduction on the tensor decides; only packed rows are copied to the host as lists
            if bool((positions[:, 1:] == 0).any()):
                pos_rows = _plain(positions)
                if mask_shape == pos_shape:  # padding inside a packed batch: keep real tokens only
                    pos_rows = [[p for p, m in zip(row, keep) if m] for row, keep in zip(pos_rows, _plain(mask))]
                lens = [n for row in pos_rows if row for n in _segments(row)]
        if lens is None and mask_shape is not None and len(mask_shape) == 2:
            lens = [n for n in _plain(mask.sum(-1)) if n > 0]
        if lens is None and shape is not None:
            lens = [shape[1]] * shape[0]
        if lens is not None:
            out["seq_lens"] = lens
    for key in ("image_grid_thw", "video_grid_thw"):
        if inputs.get(key) is not None:
            out[key] = inputs[key]
    # schema v2: image sizes in pixels as LLaVA-style processors return them ([[H, W], ...]); grids, when the
    # batch has them too, are exact and win (a line must not carry both)
    if inputs.get("image_sizes") is not None and inputs.get("image_grid_thw") is None:
        out["image_sizes"] = inputs["image_sizes"]
    for key in TILES_KEYS:
        if inputs.get(key) is not None:
            out["image_tiles"] = inputs[key]
            break
    return out


def _grid_rows(value: Any, name: str, width: int = 3, shape: str = "[t, h, w]") -> list[list[int]] | None:
    rows = _plain(value)
    if rows is None:
        return None
    if rows and not isinstance(rows[0], list):  # one row given flat
        rows = [rows]
    for row in rows:
        if not isinstance(row, list) or len(row) != width:
            raise ValueError(f"{name}: expected rows of {shape}, got {row!r}")
    return rows


class MetadataWriter:
    """Append per-microbatch metadata lines to ``path_or_dir``.

    ``path_or_dir``: a directory (created if missing; the shard is ``metadata-rank{rank:05d}.jsonl``,
    or ``metadata.jsonl`` without a rank) or a file path ending in ``.jsonl`` (used as given; with a
    rank, ``.rank{rank:05d}`` is inserted before the suffix so ranks never share a file).
    ``rank``: the data-parallel rank recorded as ``dp_rank`` (and used in the shard name).
    ``format``: ``"jsonl"`` (default; line-buffered, a crash loses at most one line) or
    ``"parquet"`` (a file path ending in ``.parquet`` selects it too): rows are buffered and
    written in row groups of `PARQUET_ROW_GROUP` rows, the file is complete only after `close`
    (a crash before it loses the shard), and only schema keys (v1 and v2) are kept (extras are dropped).
    """

    PARQUET_ROW_GROUP = 65536

    def __init__(self, path_or_dir: str | os.PathLike, rank: int | None = None, format: str | None = None) -> None:
        target = Path(path_or_dir)
        if format is None:
            format = "parquet" if target.suffix == ".parquet" else "jsonl"
        if format not in ("jsonl", "parquet"):
            raise ValueError(f"format must be 'jsonl' or 'parquet', got {format!r}")
        if target.suffix in (".jsonl", ".ndjson", ".parquet"):
            if rank is not None:
                target = target.with_name(f"{target.stem}.rank{int(rank):05d}{target.suffix}")
            target.parent.mkdir(parents=True, exist_ok=True)
        else:
            target.mkdir(parents=True, exist_ok=True)
            target = target / shard_name(rank, ".parquet" if format == "parquet" else ".jsonl")
        self.path = target
        self.rank = rank
        self.records = 0
        self.format = format
        self._rows: list[dict] = []
        self._parquet: Any = None
        self._fh: Any = None
        if format == "jsonl":
            self._fh = open(target, "a", encoding="utf-8", buffering=1)  # line-buffered
        else:
            import pyarrow.parquet as pq

            from .ingest.metadata_source import arrow_schema

            self._schema = arrow_schema()
            self._fh = pq.ParquetWriter(target, self._schema, compression="zstd")

    # ----------------------------------------------------------------------------------------
    def record(self, iteration: int, microbatch: int | None = None, *, seq_lens: Any = None,
               cu_seqlens: Any = None, image_grid_thw: Any = None, video_grid_thw: Any = None,
               padded_tokens: Any = None, samples: Any = None, dp_rank: int | None = None,
               image_sizes: Any = None, video_sizes: Any = None, image_tiles: Any = None,
               **extra: Any) -> dict:
        """Write one line; returns the dict written. Give ``seq_lens`` or ``cu_seqlens`` (not both).

        Schema v2 (the line then says ``schema_version: 2``): ``image_sizes`` [[H, W], ...] and
        ``video_sizes`` [[T, H, W], ...] in pixels (instead of the grids of the same kind; the reader
        derives grids with the model family's processor rule), ``image_tiles`` (tiles per image,
        thumbnail included, where the family tiles; checked against the rule by the reader)."""
        if self._fh is None:
            raise ValueError(f"{self.path}: writer is closed")
        if seq_lens is not None and cu_seqlens is not None:
            raise ValueError("give seq_lens or cu_seqlens, not both")
        row: dict[str, Any] = {"schema_version": SCHEMA_VERSION, "iteration": _as_int(iteration, "iteration")}
        if microbatch is not None:
            row["microbatch"] = _as_int(microbatch, "microbatch")
        rank = dp_rank if dp_rank is not None else self.rank
        if rank is not None:
            row["dp_rank"] = _as_int(rank, "dp_rank")
        if cu_seqlens is not None:
            row["seq_lens"] = seq_lens_from_cu_seqlens(cu_seqlens)
        elif seq_lens is not None:
            lens = _plain(seq_lens)
            row["seq_lens"] = [lens] if isinstance(lens, int) else lens
        if padded_tokens is not None:
            row["padded_tokens"] = _as_int(padded_tokens, "padded_tokens")
        if samples is not None:
            row["samples"] = _as_int(samples, "samples")
        for name, value in (("image_grid_thw", image_grid_thw), ("video_grid_thw", video_grid_thw)):
            rows = _grid_rows(value, name)
            if rows:
                row[name] = rows
        for name, value, width, shape in (("image_sizes", image_sizes, 2, "[H, W]"),
                                          ("video_sizes", video_sizes, 3, "[T, H, W]")):
            rows = _grid_rows(value, name, width, shape)
            if rows:
                grids = "image_grid_thw" if name == "image_sizes" else "video_grid_thw"
                if grids in row:
                    raise ValueError(f"give {name} or {grids}, not both")
                row[name] = rows
        if image_tiles is not None:
            tiles = _plain(image_tiles)
            tiles = [tiles] if isinstance(tiles, int) else tiles
            if not isinstance(tiles, list) or not all(isinstance(n, int) and not isinstance(n, bool) and n > 0
                                                      for n in tiles):
                raise ValueError(f"image_tiles: expected positive integers (tiles per image), got {image_tiles!r}")
            row["image_tiles"] = tiles
        if any(k in row for k in ("image_sizes", "video_sizes", "image_tiles")):
            row["schema_version"] = SCHEMA_VERSION_PIXELS
        for key, value in extra.items():  # free-form extras (ignored by the reader)
            row[key] = _plain(value) if hasattr(value, "tolist") else value
        if self.format == "jsonl":
            self._fh.write(json.dumps(row, separators=(",", ":")) + "\n")
        else:
            self._rows.append(row)
            if len(self._rows) >= self.PARQUET_ROW_GROUP:
                self._write_row_group()
        self.records += 1
        return row

    def _write_row_group(self) -> None:
        import pyarrow as pa

        if self._rows:
            names = self._schema.names
            table = pa.Table.from_pylist([{k: r.get(k) for k in names} for r in self._rows], schema=self._schema)
            self._fh.write_table(table)
            self._rows = []

    def flush(self) -> None:
        if self._fh is None:
            return
        if self.format == "jsonl":
            self._fh.flush()
        else:
            self._write_row_group()

    def close(self) -> None:
        if self._fh is not None:
            if self.format == "parquet":
                self._write_row_group()
            self._fh.close()
            self._fh = None

    def __enter__(self) -> "MetadataWriter":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def __del__(self) -> None:  # pragma: no cover - best effort
        try:
            self.close()
        except Exception:  # noqa: BLE001
            pass

    def __repr__(self) -> str:
        return f"MetadataWriter({str(self.path)!r}, rank={self.rank}, records={self.records})"
