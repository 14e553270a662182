"""Schema v2 media in pixels -> schema v1 grids, with the model family's own `MediaRule`.

A v2 row may give ``image_sizes`` ([[H, W], ...] pixels, one entry per image), ``video_sizes``
([[T, H, W], ...]: sampled frames and pixels) and, for tiling families, ``image_tiles`` (tiles per
image as the processor produced them, thumbnail included). `MediaConverter.apply` fills
``image_grid_thw`` / ``video_grid_thw`` from them and returns a per-row code (0 = valid, else a
`metadata_schema.REASONS` code) that the reader merges with the v1 checks.

Vectorised: the family's rule (Python) runs once per DISTINCT size of a batch; the sizes are
exploded, joined to that small lookup table and imploded back per row (no Python loop per row).
A batch without any v2 key costs three null counts and is returned unchanged.

``image_tiles`` is a check, not an input: each value must equal the tiles the rule derives for the
image (the grid's first entry for tiling families), so a mismatch between the recorded processor
and the processor files given with the config is reported instead of silently counted.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import polars as pl

if TYPE_CHECKING:  # pragma: no cover
    from ..arch.spec import ModelSpec

__all__ = ["MediaConverter", "SIZE_SIDE_MAX"]

#: Largest accepted H, W (pixels) or T (frames) of one medium.
SIZE_SIDE_MAX = 1 << 20
_V2_KEYS = ("image_sizes", "video_sizes", "image_tiles")
_ENTRY_CODE = {"image": 20, "video": 21}
_BOTH_CODE = {"image": 22, "video": 23}
_NO_RULE_CODE = {"image": 26, "video": 27}
_REJECTED_CODE = {"image": 29, "video": 30}
_TILES_LEN, _TILES_DIFF, _TILES_ALONE = 24, 25, 28


def _media_rule(spec: "ModelSpec | None"):
    """The family's MediaRule, or None (no spec, no vision tower, or a family without one)."""
    if spec is None or spec.vision is None:
        return None
    from ..arch.families import FAMILIES

    family = FAMILIES.get(getattr(spec, "family", None) or "")
    return getattr(family, "media", None) if family is not None else None


class MediaConverter:
    """Pixel sizes -> grids for one model; caches the rule's answer per distinct size across batches."""

    def __init__(self, spec: "ModelSpec | None") -> None:
        self.spec = spec
        self.rule = _media_rule(spec)
        self._cache: dict[tuple[str, tuple[int, ...]], tuple[int, int, int, int, int]] = {}

    @staticmethod
    def needed(frame: pl.DataFrame) -> bool:
        """True when some row of ``frame`` carries a schema v2 media key (O(1): null counts)."""
        return any(name in frame.columns and frame[name].null_count() < frame.height for name in _V2_KEYS)

    def _derive(self, kind: str, size: tuple[int, ...]) -> tuple[int, int, int, int, int]:
        """(t, h, w, tiles, code) of one distinct size; code 0 = valid."""
        key = (kind, size)
        hit = self._cache.get(key)
        if hit is not None:
            return hit
        dims = 2 if kind == "image" else 3
        if len(size) != dims or any(v is None or v <= 0 or v > SIZE_SIDE_MAX for v in size):
            out = (0, 0, 0, -1, _ENTRY_CODE[kind])
        elif self.rule is None:
            out = (0, 0, 0, -1, _NO_RULE_CODE[kind])
        else:
            from ..errors import UnsupportedModelError

            try:
                media = self.rule.image(self.spec, *size) if kind == "image" else self.rule.video(self.spec, *size)
                if media.merged_tokens is None:  # own projector rows (Phi-4-multimodal): the row's code 36
                    media.single_grid("metadata")  # one grid per item here: several shapes are not modelled
            except UnsupportedModelError:  # the family models no pixels of this kind
                out = (0, 0, 0, -1, _NO_RULE_CODE[kind])
            except ValueError:  # the processor rule rejects this size (e.g. Qwen: aspect ratio over 200)
                out = (0, 0, 0, -1, _REJECTED_CODE[kind])
            else:
                t, h, w = media.grid
                # tiles: the family's tile count (thumbnail included), else the grid's slices
                out = (int(t), int(h), int(w), int(t) if media.tiles is None else int(media.tiles), 0)
        self._cache[key] = out
        return out

    def _lookup(self, kind: str, sizes: pl.Series) -> pl.DataFrame:
        """One row per distinct size: key columns + t, h, w, tiles, code."""
        distinct = sizes.unique().drop_nulls()
        rows = [(s, *self._derive(kind, tuple(s))) for s in distinct.to_list()]
        frame = pl.DataFrame({"_size": [r[0] for r in rows]}, schema={"_size": pl.List(pl.Int64)})
        cols = list(zip(*[r[1:] for r in rows])) if rows else [[], [], [], [], []]
        for name, values in zip(("_t", "_h", "_w", "_tiles", "_code"), cols):
            frame = frame.with_columns(pl.Series(name, list(values), pl.Int64))
        return frame

    def _grids(self, frame: pl.DataFrame, kind: str) -> pl.DataFrame | None:
        """Per row of ``frame`` (by ``_r``): derived grid list, derived tiles list, worst code."""
        col = f"{kind}_sizes"
        if frame[col].null_count() == frame.height:
            return None
        flat = (frame.select("_r", col).filter(pl.col(col).is_not_null())
                .with_columns(pl.int_ranges(pl.col(col).list.len()).alias("_k")).explode(col, "_k")
                .filter(pl.col("_k").is_not_null()))
        # a null entry is invalid; stand in an empty list so that it gets the entry code
        flat = flat.with_columns(pl.col(col).fill_null(pl.lit([], pl.List(pl.Int64))).alias("_size"))
        table = self._lookup(kind, flat["_size"])
        joined = flat.join(table, on="_size", how="left").sort("_r", "_k")
        return joined.group_by("_r", maintain_order=True).agg(
            pl.concat_list("_t", "_h", "_w").alias(f"_{kind}_grid"),
            pl.col("_tiles").alias(f"_{kind}_tiles"),
            pl.col("_code").max().alias(f"_{kind}_code"))

    def apply(self, frame: pl.DataFrame) -> tuple[pl.DataFrame, pl.Series]:
        """(``frame`` with grids filled from pixel sizes, per-row code as UInt8)."""
        frame = frame.with_row_index("_r")
        code = pl.lit(0, pl.Int64)
        derived_tiles: pl.Expr | None = None
        for kind in ("image", "video"):
            per_row = self._grids(frame, kind)
            if per_row is None:
                continue
            frame = frame.join(per_row, on="_r", how="left")
            sizes, grids = pl.col(f"{kind}_sizes"), pl.col(f"{kind}_grid_thw")
            both = sizes.is_not_null() & grids.is_not_null()
            # evaluated now: the grid column is replaced below
            frame = frame.with_columns(pl.when(both).then(_BOTH_CODE[kind])
                                       .otherwise(pl.col(f"_{kind}_code").fill_null(0)).alias(f"_{kind}_code"))
            code = pl.when(code != 0).then(code).otherwise(pl.col(f"_{kind}_code"))
            frame = frame.with_columns(pl.when(sizes.is_not_null() & (pl.col(f"_{kind}_code") == 0))
                                       .then(pl.col(f"_{kind}_grid")).otherwise(grids).alias(f"{kind}_grid_thw"))
            if kind == "image":
                derived_tiles = pl.col("_image_tiles")
        tiles = pl.col("image_tiles")
        if frame["image_tiles"].null_count() < frame.height:
            slices = pl.col("image_grid_thw").list.eval(pl.element().list.get(0, null_on_oob=True))
            expected = slices if derived_tiles is None else pl.coalesce(
                pl.when(pl.col("image_sizes").is_not_null()).then(derived_tiles), slices)
            bad_len = tiles.list.len() != expected.list.len()
            bad_value = tiles.list.eval((pl.element().is_null()) | (pl.element() <= 0)).list.any()
            code = (pl.when(code != 0).then(code)
                    .when(tiles.is_null()).then(0)
                    .when(expected.is_null()).then(_TILES_ALONE)
                    .when(bad_len.fill_null(True) | bad_value.fill_null(True)).then(_TILES_LEN)
                    .when(tiles != expected).then(_TILES_DIFF)
                    .otherwise(0))
        out = frame.sort("_r").with_columns(code.cast(pl.UInt8).alias("_media_code"))
        added = [c for c in out.columns if c == "_r" or c.startswith(("_image_", "_video_", "_media_"))]
        return out.drop(added), out["_media_code"]
