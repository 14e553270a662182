"""Per-microbatch metadata reader: hand-computed statistics, inputs (shards, dirs, globs, gzip)."""

from __future__ import annotations

import gzip
import json
import shutil
from pathlib import Path
from types import SimpleNamespace

import polars as pl
import pytest

from vlm_perf.ingest.metadata import STAT_FIELDS, iteration_stats, scan_microbatches
from vlm_perf.stats import BatchStats

FIXTURES = Path(__file__).parent / "fixtures" / "metadata"


def write_jsonl(path: Path, rows: list[dict | str]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w", encoding="utf-8") as fh:
        for row in rows:
            fh.write((row if isinstance(row, str) else json.dumps(row)) + "\n")
    return path


def spec_with(merge: int, window_side: int | None):
    """A stand-in ModelSpec: the reader only reads spec.vision.{spatial_merge_size, window_side_merged}."""
    return SimpleNamespace(vision=SimpleNamespace(spatial_merge_size=merge, window_side_merged=window_side))


# ---------------------------------------------------------------------------------------------
def test_grid_rows_hand_computed(tmp_path):
    f = write_jsonl(tmp_path / "m.jsonl", [{"iteration": 7, "seq_lens": [100], "image_grid_thw": [[2, 4, 4], [1, 2, 4]]}])
    s = iteration_stats(f).stats_for(7)
    # [2,4,4]: 2*4*4 = 32 patches; [1,2,4]: 1*2*4 = 8 -> 40
    assert s.vision_patches == 2 * 4 * 4 + 1 * 2 * 4 == 40
    # per frame: t*(h*w)^2 -> 2*16^2 + 1*8^2 = 512 + 64 = 576
    assert s.vision_patches_sq_frame == 2 * 16**2 + 1 * 8**2 == 576
    # per item: (t*h*w)^2 -> 32^2 + 8^2 = 1088
    assert s.vision_patches_sq_item == 32**2 + 8**2 == 1088
    # merged (m=2): t*(h/2)*(w/2) -> 2*2*2 + 1*1*2 = 10
    assert s.vision_merged_tokens == 2 * 2 * 2 + 1 * 1 * 2 == 10
    assert s.vision_window_sq == 576  # no window model: the per-frame sum
    assert (s.vision_frames, s.vision_items) == (3, 2)
    assert (s.video_patches, s.video_patches_sq_frame, s.video_merged_tokens) == (0, 0, 0)
    assert (s.lm_tokens, s.lm_tokens_sq, s.lm_sequences, s.lm_samples, s.lm_padded_tokens) == (100, 10000, 1, 1, 100)


def test_video_grid_hand_computed(tmp_path):
    f = write_jsonl(tmp_path / "m.jsonl", [{"iteration": 1, "seq_lens": [60], "video_grid_thw": [[2, 10, 10]]}])
    s = iteration_stats(f).stats_for(1)
    # [2,10,10]: 2*10*10 = 200 patches, 2*(100)^2 = 20000, merged 2*5*5 = 50
    assert (s.vision_patches, s.vision_patches_sq_frame, s.vision_merged_tokens) == (200, 20000, 50)
    assert (s.video_patches, s.video_patches_sq_frame, s.video_merged_tokens) == (200, 20000, 50)
    assert s.vision_patches_sq_item == 200**2 == 40000


def test_fixture_per_iteration_frame():
    res = iteration_stats(FIXTURES / "small.jsonl")
    frame = res.frame
    assert frame.columns == ["iteration", *STAT_FIELDS, "microbatches"]
    assert frame["iteration"].to_list() == [1, 2]
    it1 = res.stats_for(1)
    # row 1: seq [3,4] -> 7 tokens, 9+16 = 25; grids as above (40, 576, 1088, 10, frames 3, items 2)
    # row 2: seq [10], padded 16; video [2,10,10] -> (200, 20000, 40000, 50, frames 2, item 1)
    assert it1 == BatchStats(
        lm_tokens=7 + 10, lm_tokens_sq=25 + 100, lm_sequences=2 + 1, lm_samples=2 + 1, lm_padded_tokens=7 + 16,
        vision_patches=40 + 200, vision_patches_sq_frame=576 + 20000, vision_patches_sq_item=1088 + 40000,
        vision_merged_tokens=10 + 50, vision_window_sq=576 + 20000, vision_frames=3 + 2, vision_items=2 + 1,
        video_patches=200, video_patches_sq_frame=20000, video_merged_tokens=50,
        # text x vision without images_per_sample: the longest sequence x the row's patches / frames (a bound):
        # row 1: 4 x 40, 4 x 3; row 2 (video): 10 x 200, 10 x 2
        lm_x_vision_patches=4 * 40 + 10 * 200, lm_x_vision_frames=4 * 3 + 10 * 2)
    it2 = res.stats_for(2)
    # row 3: padded_tokens 8 as 2 unpacked samples of 4 -> tokens 8, sq 2*4^2 = 32
    # row 4: pre-aggregated: tokens 5, sq 25; vision 4 patches, sq 16 (item := frame, window := frame), merged 1
    assert it2 == BatchStats(
        lm_tokens=8 + 5, lm_tokens_sq=32 + 25, lm_sequences=2 + 1, lm_samples=2 + 1, lm_padded_tokens=8 + 5,
        vision_patches=4, vision_patches_sq_frame=16, vision_patches_sq_item=16, vision_merged_tokens=1,
        vision_window_sq=16, vision_frames=0, vision_items=0,
        # pre-aggregated row 4: lm_tokens x vision_patches (frames unknown: patches bound them) = 5 x 4 each
        lm_x_vision_patches=5 * 4, lm_x_vision_frames=5 * 4)
    assert frame["microbatches"].to_list() == [2, 2]
    d = res.diagnostics
    assert (d.rows_read, d.rows_used, d.rows_skipped_total, d.iterations) == (4, 4, 0, 2)
    assert (d.rows_preaggregated_lm, d.rows_preaggregated_vision, d.rows_padded_tokens_only) == (1, 1, 1)
    assert any("pre-aggregated vision" in n for n in d.notes)
    json.dumps(d.to_dict())  # serialisable


def test_window_statistic_with_spec(tmp_path):
    f = write_jsonl(tmp_path / "m.jsonl", [{"iteration": 1, "seq_lens": [80], "image_grid_thw": [[1, 16, 20]]}])
    s = iteration_stats(f, spec=spec_with(2, 4)).stats_for(1)
    # merged grid 8 x 10, window side 4 merged tokens: rows split 4+4, columns 4+4+2.
    # window patches = 4 * rows * cols: 4 windows of 4x4 -> 64 patches, 2 windows of 4x2 -> 32 patches
    assert s.vision_window_sq == 4 * 64**2 + 2 * 32**2 == 18432
    assert s.vision_patches_sq_frame == (16 * 20) ** 2 == 102400
    # pre-aggregated rows cannot split windows: the per-frame sum (upper bound) is used and noted
    write_jsonl(tmp_path / "m.jsonl", [{"iteration": 1, "lm_tokens": 80, "lm_tokens_sq": 6400, "vision_patches": 320,
                                        "vision_patches_sq": 102400, "vision_merged_tokens": 80}])
    res = iteration_stats(tmp_path / "m.jsonl", spec=spec_with(2, 4))
    assert res.stats_for(1).vision_window_sq == 102400
    assert any("upper bound" in n for n in res.diagnostics.notes)


def test_merge_size_from_spec(tmp_path):
    f = write_jsonl(tmp_path / "m.jsonl", [{"iteration": 1, "seq_lens": [9], "image_grid_thw": [[1, 6, 9]]}])
    s = iteration_stats(f, spec=spec_with(3, None)).stats_for(1)
    assert s.vision_merged_tokens == (6 // 3) * (9 // 3) == 6
    with pytest.raises(ValueError, match="divisible"):
        iteration_stats(f)  # default merge size 2: 9 is odd


def test_real_preset_geometry(tmp_path):
    from vlm_perf.arch import load_model

    spec = load_model("qwen2.5-vl-7b")
    f = write_jsonl(tmp_path / "m.jsonl", [{"iteration": 1, "seq_lens": [80], "image_grid_thw": [[1, 16, 20]]}])
    res = iteration_stats(f, spec=spec)
    assert (res.diagnostics.merge_size, res.diagnostics.window_side) == (2, 4)
    assert res.stats_for(1).vision_window_sq == 18432


def test_stats_for_unknown_iteration():
    res = iteration_stats(FIXTURES / "small.jsonl")
    with pytest.raises(ValueError, match="iteration 99"):
        res.stats_for(99)


def test_matches_batchstats_from_batch(tmp_path):
    """The vectorised reader agrees with the scalar reference BatchStats.from_batch, row by row."""
    rows = [
        {"iteration": 3, "seq_lens": [51, 6, 7], "padded_tokens": 70, "image_grid_thw": [[1, 14, 18], [1, 2, 2]]},
        {"iteration": 3, "seq_lens": [60], "video_grid_thw": [[4, 8, 6]], "image_grid_thw": [[1, 4, 4]]},
        {"iteration": 4, "seq_lens": [1, 1]},
    ]
    f = write_jsonl(tmp_path / "m.jsonl", rows)
    spec = spec_with(2, 4)
    res = iteration_stats(f, spec=spec)
    for it in (3, 4):
        expected = BatchStats()
        for r in rows:
            if r["iteration"] == it:
                expected = expected + BatchStats.from_batch(
                    seq_lens=r["seq_lens"], image_grids=r.get("image_grid_thw", ()),
                    video_grids=r.get("video_grid_thw", ()), padded_tokens=r.get("padded_tokens"),
                    merge_size=2, window_side=4)
        assert res.stats_for(it) == expected


# --------------------------------------------------------------------------------- inputs
def _shards(tmp_path: Path) -> Path:
    d = tmp_path / "meta"
    write_jsonl(d / "metadata-rank00000.jsonl", [
        {"iteration": 1, "microbatch": 0, "dp_rank": 0, "seq_lens": [4], "image_grid_thw": [[1, 2, 2]]},
        {"iteration": 2, "microbatch": 0, "dp_rank": 0, "seq_lens": [6]}])
    write_jsonl(d / "metadata-rank00001.jsonl", [
        {"iteration": 1, "microbatch": 0, "dp_rank": 1, "seq_lens": [2, 2], "video_grid_thw": [[2, 2, 2]]}])
    (d / "README.txt").write_text("not metadata")
    return d


def _check_shards(res):
    assert res.frame["iteration"].to_list() == [1, 2]
    s1 = res.stats_for(1)
    # rank 0: 4 tokens, [1,2,2] -> 4 patches; rank 1: [2,2] -> 4 tokens (sq 8), [2,2,2] -> 8 patches
    assert (s1.lm_tokens, s1.lm_tokens_sq, s1.vision_patches, s1.video_patches) == (8, 16 + 8, 4 + 8, 8)
    assert res.frame["microbatches"].to_list() == [2, 1]


def test_directory_glob_and_list(tmp_path):
    d = _shards(tmp_path)
    _check_shards(iteration_stats(d))
    _check_shards(iteration_stats(str(d / "metadata-rank*.jsonl")))
    _check_shards(iteration_stats(sorted(d.glob("*.jsonl"))))
    assert len(iteration_stats(d).diagnostics.files) == 2


def test_gzip_shards(tmp_path):
    d = _shards(tmp_path)
    src = d / "metadata-rank00001.jsonl"
    with open(src, "rb") as fi, gzip.open(d / "metadata-rank00001.jsonl.gz", "wb") as fo:
        shutil.copyfileobj(fi, fo)
    src.unlink()
    res = iteration_stats(d)
    _check_shards(res)
    assert res.diagnostics.decompressed == [str(d / "metadata-rank00001.jsonl.gz")]


def test_gzip_error_names_original_file(tmp_path):
    f = tmp_path / "m.jsonl.gz"
    with gzip.open(f, "wt") as fh:
        fh.write(json.dumps({"iteration": 1, "seq_lens": [2]}) + "\n\n" + json.dumps({"seq_lens": [2]}) + "\n")
    with pytest.raises(ValueError, match=r"m\.jsonl\.gz:3: iteration"):
        iteration_stats(f)


def test_corrupt_gzip(tmp_path):
    f = tmp_path / "m.jsonl.gz"
    f.write_bytes(b"\x1f\x8b\x08\x00garbage")
    with pytest.raises(ValueError, match="decompress"):
        iteration_stats(f)


def test_missing_inputs(tmp_path):
    with pytest.raises(ValueError, match="no such file"):
        iteration_stats(tmp_path / "nope.jsonl")
    with pytest.raises(ValueError, match="matches no file"):
        iteration_stats(str(tmp_path / "*.jsonl"))
    (tmp_path / "empty").mkdir()
    with pytest.raises(ValueError, match="no metadata shards"):
        iteration_stats(tmp_path / "empty")


def test_empty_file(tmp_path):
    f = tmp_path / "m.jsonl"
    f.write_text("\n\n")
    res = iteration_stats(f)
    assert res.frame.height == 0 and res.diagnostics.rows_read == 0


# --------------------------------------------------------------------------------- per microbatch
def test_scan_microbatches_rows():
    lf = scan_microbatches(FIXTURES / "small.jsonl")
    assert isinstance(lf, pl.LazyFrame)
    df = lf.collect()
    assert df.columns == ["iteration", "microbatch", "dp_rank", *STAT_FIELDS]
    assert df.height == 4
    first = df.row(0, named=True)
    assert (first["iteration"], first["microbatch"], first["dp_rank"]) == (1, 0, 0)
    assert (first["lm_tokens"], first["vision_patches"], first["vision_merged_tokens"]) == (7, 40, 10)
    # vision share per microbatch (what analysis uses): merged visual tokens / LM tokens
    share = df.select(pl.col("vision_merged_tokens") / pl.col("lm_tokens"))
    assert share.to_series().to_list()[0] == pytest.approx(10 / 7)
    # per-microbatch rows sum to the per-iteration frame
    summed = df.group_by("iteration").agg(pl.col(STAT_FIELDS).sum()).sort("iteration")
    frame = iteration_stats(FIXTURES / "small.jsonl").frame
    assert summed.select(STAT_FIELDS).equals(frame.select(STAT_FIELDS))


def test_scan_microbatches_validates():
    with pytest.raises(ValueError, match=r"bad\.jsonl:2: image_grid_thw"):
        scan_microbatches(FIXTURES / "bad.jsonl")
    df = scan_microbatches(FIXTURES / "bad.jsonl", skip_bad=True).collect()
    assert df["iteration"].to_list() == [1, 2]
