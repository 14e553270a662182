"""Vision/LM sufficient statistics against hand arithmetic and an independent window builder."""

import numpy as np
import polars as pl
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from vlm_perf.arch import load_model
from vlm_perf.stats import BatchStats, grid_row_stats


def test_megatron_lm_pr6173_fixture():
    # rows [[2,4,4],[1,2,4]]: P = 32 + 8, P2 = 2*16^2 + 8^2, M = 2*2*2 + 1*1*2
    s = BatchStats.from_batch(image_grids=[(2, 4, 4), (1, 2, 4)])
    assert (s.vision_patches, s.vision_patches_sq_frame, s.vision_merged_tokens) == (40, 576, 10)
    assert s.vision_patches_sq_item == 32**2 + 8**2


def test_megatron_bridge_fixture():
    s = BatchStats.from_batch(video_grids=[(2, 10, 10)])
    assert (s.vision_patches, s.vision_patches_sq_frame, s.vision_merged_tokens) == (200, 20000, 50)
    assert (s.video_patches, s.video_merged_tokens) == (200, 50)
    assert s.images_only().vision_patches == 0


def test_window_stat_by_hand():
    # 10x14 patches -> 5x7 merged; 4x4-merged windows: sides (4,1) x (4,3) merged tokens
    # patches per window = 4 * r * c: 64, 48, 16, 12 -> squares 4096 + 2304 + 256 + 144
    s = BatchStats.from_batch(image_grids=[(1, 10, 14)], window_side=4)
    assert s.vision_window_sq == 6800
    two_frames = BatchStats.from_batch(video_grids=[(2, 10, 14)], window_side=4)
    assert two_frames.vision_window_sq == 2 * 6800


def windows_like_qwen25vl(t: int, h: int, w: int, merge: int = 2, side: int = 4) -> int:
    """Independent re-derivation: pad the merged index grid to whole windows, count non-pad cells."""
    total = 0
    gh, gw = h // merge, w // merge
    for _ in range(t):
        index = np.arange(gh * gw).reshape(gh, gw)
        ph, pw = (-gh) % side + side * 0, (-gw) % side
        padded = np.pad(index, ((0, ph), (0, pw)), constant_values=-100)
        blocks = padded.reshape((gh + ph) // side, side, (gw + pw) // side, side).transpose(0, 2, 1, 3)
        counts = (blocks != -100).sum(axis=(2, 3)).ravel()
        total += int(((counts * merge * merge) ** 2).sum())
    return total


@settings(max_examples=60, deadline=None)
@given(st.integers(1, 3), st.integers(1, 23), st.integers(1, 23))
def test_window_stat_matches_window_builder(t, gh, gw):
    h, w = 2 * gh, 2 * gw
    s = BatchStats.from_batch(video_grids=[(t, h, w)], window_side=4)
    assert s.vision_window_sq == windows_like_qwen25vl(t, h, w)


def test_window_side_from_spec():
    spec = load_model("qwen2.5-vl-7b")
    assert spec.vision.window_side_merged == 112 // 2 // 14 == 4
    s = BatchStats.from_batch(seq_len=100, image_grids=[(1, 10, 14)], spec=spec)
    assert s.vision_window_sq == 6800


def test_seq_lens():
    s = BatchStats.from_batch(seq_lens=[3, 4])
    assert (s.lm_tokens, s.lm_tokens_sq, s.lm_sequences, s.lm_samples) == (7, 25, 2, 2)
    u = BatchStats.from_batch(seq_len=4096, samples=2)
    assert (u.lm_tokens, u.lm_tokens_sq) == (8192, 2 * 4096**2)


@pytest.mark.parametrize("bad, message", [
    ({"image_grids": [(0, 4, 4)]}, "positive"),
    ({"image_grids": [(1, 3, 4)]}, "divisible"),
    ({"image_grids": [(1, 4)]}, "three integers"),
    ({"seq_lens": [3, -1]}, "positive integers"),
    ({"seq_lens": [3], "seq_len": 3}, "either"),
    ({"seq_len": 10, "padded_tokens": 5}, "padded_tokens"),
])
def test_bad_input_raises(bad, message):
    with pytest.raises(ValueError, match=message):
        BatchStats.from_batch(**bad)


def test_grids_on_text_model_rejected():
    with pytest.raises(ValueError, match="no vision tower"):
        BatchStats.from_batch(seq_len=10, image_grids=[(1, 4, 4)], spec=load_model("qwen3-30b-a3b"))


@settings(max_examples=40, deadline=None)
@given(st.lists(st.tuples(st.integers(1, 4), st.integers(1, 40), st.integers(1, 40)), min_size=1, max_size=6))
def test_polars_expressions_equal_python(rows):
    rows = [(t, 2 * h, 2 * w) for t, h, w in rows]
    frame = pl.DataFrame({"t": [r[0] for r in rows], "h": [r[1] for r in rows], "w": [r[2] for r in rows]})
    exprs = grid_row_stats(pl.col("t"), pl.col("h"), pl.col("w"), 2, 4)
    got = frame.select(**{k: v.sum() for k, v in exprs.items()}).row(0, named=True)
    expected = BatchStats.from_batch(image_grids=rows, window_side=4)
    assert got["patches"] == expected.vision_patches
    assert got["patches_sq_per_frame"] == expected.vision_patches_sq_frame
    assert got["merged_tokens"] == expected.vision_merged_tokens
    assert got["window_patches_sq"] == expected.vision_window_sq
