"""The flat (numpy) grid path of the metadata reader gives exactly what the polars expressions give.

`RowExprs.apply_frame` computes the per-microbatch grid sums and problem codes from the flat t/h/w
arrays (`grid_columns_flat`) when every grid row is three non-null integers; the reference is
`RowExprs.apply`, the ``list.eval`` expressions. Checked on hand-made rows and fuzzed frames
(nulls, empty lists, malformed rows, zero/negative/huge sides next to valid rows, sliced and
multi-chunk frames) for several tower geometries."""

from __future__ import annotations

import polars as pl
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from vlm_perf.ingest.metadata_schema import SCHEMA, grid_columns_flat, row_exprs

GEOMETRIES = [(2, None, 0), (2, 4, 0), (2, None, 1), (1, 8, 1), (4, 2, 0)]
GRIDS = pl.List(pl.List(pl.Int64))


def frame_of(image, video) -> pl.DataFrame:
    n = len(image)
    cols = {k: pl.Series(k, [None] * n, dtype=v) for k, v in SCHEMA.items()}
    cols["iteration"] = pl.Series("iteration", [1] * n, dtype=pl.Int64)
    cols["seq_lens"] = pl.Series("seq_lens", [[8]] * n, dtype=pl.List(pl.Int64))
    cols["image_grid_thw"] = pl.Series("image_grid_thw", image, dtype=GRIDS)
    cols["video_grid_thw"] = pl.Series("video_grid_thw", video, dtype=GRIDS)
    return pl.DataFrame(cols)


def assert_same(frame: pl.DataFrame, geometry) -> None:
    ex = row_exprs(*geometry)
    ref = ex.apply(frame.lazy()).collect()
    got = ex.apply_frame(frame).collect()
    assert sorted(ref.columns) == sorted(got.columns)
    assert dict(ref.schema) == dict(got.schema)
    for prefix in ("__img_", "__vid_"):
        assert got[prefix + "worst"].equals(ref[prefix + "worst"]), prefix
        valid = (ref[prefix + "worst"] == 0)
        for name in ref.columns:
            if name.startswith(prefix):
                assert got[name].filter(valid).equals(ref[name].filter(valid)), name
    # what the reader keeps: the row code and every statistic of the valid rows
    cols = [ex.code.alias("_code")] + [(e if isinstance(e, pl.Expr) else pl.lit(e, pl.Int64)).alias(n)
                                       for n, e in ex.stats.as_dict().items()]
    a, b = ref.select(cols), got.select(cols)
    assert a["_code"].equals(b["_code"])
    assert a.filter(pl.col("_code") == 0).equals(b.filter(pl.col("_code") == 0))


def test_hand_rows_and_sums():
    image = [[[1, 4, 6]], None, [], [[1, 2, 2], [2, 4, 4]], [[1, 2, 2]]]
    video = [None, [[3, 4, 4]], None, None, [[1, 4, 4], [1, 2, 2]]]
    frame = frame_of(image, video)
    flat = grid_columns_flat(frame["image_grid_thw"], "__img_", 2, None, 0)
    assert flat is not None
    # hand arithmetic: patches t*h*w per microbatch; squared per frame t*(h*w)^2; merged t*(h/2)*(w/2)
    assert flat["__img_patches"].to_list() == [24, 0, 0, 4 + 32, 4]
    assert flat["__img_patches_sq_per_frame"].to_list() == [576, 0, 0, 16 + 2 * 256, 16]
    assert flat["__img_merged_tokens"].to_list() == [6, 0, 0, 1 + 8, 1]
    assert flat["__img_items"].to_list() == [1, 0, 0, 2, 1]
    for geometry in GEOMETRIES:
        assert_same(frame, geometry)


@pytest.mark.parametrize("bad", [[[1, 2]], [[1, 2, 3, 4]], [None], [[1, None, 2]], [[]]])
def test_malformed_rows_use_the_expressions(bad):
    frame = frame_of([[[1, 2, 2]], bad], [None, None])
    assert grid_columns_flat(frame["image_grid_thw"], "__img_", 2, None, 0) is None
    assert_same(frame, (2, None, 0))


side = st.one_of(st.integers(1, 64), st.sampled_from([0, -2, (1 << 20) + 1, 1 << 40, 1 << 62]))
good_side = st.integers(1, 48)
grid_row = st.one_of(st.lists(good_side, min_size=3, max_size=3), st.lists(side, min_size=3, max_size=3))
grids = st.one_of(st.none(), st.lists(grid_row, max_size=4))


@settings(derandomize=True, deadline=None, max_examples=150)
@given(image=st.lists(grids, min_size=1, max_size=30), video=st.data(), geometry=st.sampled_from(GEOMETRIES),
       cut=st.integers(0, 5), split=st.booleans())
def test_flat_equals_expressions_fuzzed(image, video, geometry, cut, split):
    video_rows = video.draw(st.lists(grids, min_size=len(image), max_size=len(image)))
    frame = frame_of(image, video_rows)
    if split and frame.height > 1:  # two chunks, as the pyarrow engine's record batches give
        half = frame.height // 2
        frame = pl.concat([frame.slice(0, half), frame.slice(half)], rechunk=False)
    frame = frame.slice(min(cut, frame.height - 1))  # an offset into the Arrow arrays
    assert_same(frame, geometry)
