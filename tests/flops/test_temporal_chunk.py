"""``temporal_chunk`` (Kimi K2.5's MoonViT3d): a grid row's frames attend jointly in chunks and are averaged into one
frame's merged tokens -- hand arithmetic, Python ints and polars expressions alike."""

from __future__ import annotations

import polars as pl

from vlm_perf.stats import grid_row_stats


def test_row_of_ten_frames_is_chunks_of_four_four_two():
    # 10 frames of 4x6 patches, chunk 4: sequences of 96, 96 and 48 patches; 3 chunks x (2x3) merged tokens
    row = grid_row_stats(10, 4, 6, 2, temporal_chunk=4)
    assert row["patches"] == 240
    assert row["patches_sq_per_item"] == 96 * 96 + 96 * 96 + 48 * 48 == 20736
    assert row["merged_tokens"] == 3 * 2 * 3 == 18
    assert row["patches_sq_per_frame"] == 10 * 24 * 24  # unchanged: per-frame towers read it
    assert row["frames"] == 10
    # the processor's chunk rows sum to the same
    parts = [grid_row_stats(t, 4, 6, 2, temporal_chunk=4) for t in (4, 4, 2)]
    for key in ("patches", "patches_sq_per_item", "merged_tokens", "frames"):
        assert sum(p[key] for p in parts) == row[key], key


def test_without_chunk_unchanged_and_images_equal():
    assert grid_row_stats(3, 4, 6, 2)["patches_sq_per_item"] == 72 * 72
    assert grid_row_stats(3, 4, 6, 2)["merged_tokens"] == 18
    for chunk in (0, 4):
        assert grid_row_stats(1, 4, 6, 2, temporal_chunk=chunk)["patches_sq_per_item"] == 24 * 24
        assert grid_row_stats(1, 4, 6, 2, temporal_chunk=chunk)["merged_tokens"] == 6


def test_polars_expressions_match_python_ints():
    frame = pl.DataFrame({"t": [1, 2, 4, 5, 10, 13], "h": [4, 4, 6, 2, 4, 8], "w": [6, 2, 6, 2, 6, 10]})
    exprs = grid_row_stats(pl.col("t"), pl.col("h"), pl.col("w"), 2, temporal_chunk=4)
    out = frame.select(**{k: v for k, v in exprs.items() if k != "window_patches_sq"})
    for i, (t, h, w) in enumerate(frame.iter_rows()):
        want = grid_row_stats(t, h, w, 2, temporal_chunk=4)
        for key in out.columns:
            assert out[key][i] == want[key], (t, h, w, key)
