"""`MetadataSource`: one pass, every output; hand arithmetic for the per-rank view; chunking,
engines and formats cannot change a result; compressed shards never touch the disk."""

from __future__ import annotations

import gzip
import json
import tempfile
from pathlib import Path

import polars as pl
import pytest

from vlm_perf.ingest.metadata import STAT_FIELDS, iteration_stats
from vlm_perf.ingest.metadata_source import ENGINES, MetadataSource, ParseEngine, register_engine

ROOT = Path(__file__).resolve().parents[2]
SAMPLE = ROOT / "sample_logs" / "qwen3-vl-30b-a3b-sft" / "metadata.jsonl.gz"


def write_jsonl(path: Path, rows) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join((r if isinstance(r, str) else json.dumps(r)) + "\n" for r in rows))
    return path


def balance_rows() -> list[dict]:
    """Iteration 1: rank 0 gets two images, rank 1 text only; iteration 2: both ranks one image."""
    return [
        {"iteration": 1, "microbatch": 0, "dp_rank": 0, "seq_lens": [10, 20], "image_grid_thw": [[1, 4, 4]]},
        {"iteration": 1, "microbatch": 1, "dp_rank": 0, "seq_lens": [30], "image_grid_thw": [[1, 2, 4]]},
        {"iteration": 1, "microbatch": 0, "dp_rank": 1, "seq_lens": [5]},
        {"iteration": 1, "microbatch": 1, "dp_rank": 1, "seq_lens": [7]},
        {"iteration": 2, "microbatch": 0, "dp_rank": 0, "seq_lens": [8], "image_grid_thw": [[1, 2, 2]]},
        {"iteration": 2, "microbatch": 0, "dp_rank": 1, "seq_lens": [9], "image_grid_thw": [[1, 2, 2]]},
    ]


def test_per_rank_hand_arithmetic(tmp_path):
    f = write_jsonl(tmp_path / "m.jsonl", balance_rows())
    src = MetadataSource(f, per_rank=True).read()
    pr = src.per_rank
    assert pr.columns == ["iteration", "dp_rank", *STAT_FIELDS, "microbatches"]
    rows = {(r["iteration"], r["dp_rank"]): r for r in pr.iter_rows(named=True)}
    r0 = rows[(1, 0)]
    assert r0["lm_tokens"] == 10 + 20 + 30
    assert r0["lm_tokens_sq"] == 10**2 + 20**2 + 30**2
    assert r0["lm_sequences"] == 3
    assert r0["vision_patches"] == 16 + 8
    assert r0["vision_patches_sq_frame"] == 16**2 + 8**2
    assert r0["vision_merged_tokens"] == 4 + 2
    assert r0["microbatches"] == 2
    r1 = rows[(1, 1)]
    assert (r1["lm_tokens"], r1["lm_tokens_sq"], r1["vision_patches"], r1["microbatches"]) == (12, 25 + 49, 0, 2)
    assert rows[(2, 0)]["vision_patches"] == rows[(2, 1)]["vision_patches"] == 4
    # summing the ranks gives the per-iteration frame exactly
    summed = (pr.group_by("iteration").agg(pl.col(c).sum() for c in (*STAT_FIELDS, "microbatches"))
              .sort("iteration").select(src.per_iteration.columns))
    assert summed.equals(src.per_iteration)


def test_one_pass_gives_every_output(tmp_path):
    f = write_jsonl(tmp_path / "m.jsonl", balance_rows())
    share = {"tokens_x2": lambda rows: rows["lm_tokens"] * 2}
    src = MetadataSource(f, per_rank=True, per_microbatch=True, row_columns=share).read()
    assert src.per_iteration.equals(iteration_stats(f).frame)
    micro = src.per_microbatch
    assert micro.height == 6 and micro["lm_tokens"].to_list() == [30, 30, 5, 7, 8, 9]
    assert src.row_values["tokens_x2"].to_list() == [60, 60, 10, 14, 16, 18]
    assert src.diagnostics.rows_used == 6


def test_outputs_not_requested_say_so(tmp_path):
    src = MetadataSource(write_jsonl(tmp_path / "m.jsonl", balance_rows()))
    with pytest.raises(ValueError, match="per_rank=True"):
        _ = src.per_rank
    with pytest.raises(ValueError, match="per_microbatch=True"):
        _ = src.per_microbatch


def test_replayed_rows_dropped_from_every_output(tmp_path):
    rows = balance_rows()
    f = write_jsonl(tmp_path / "m.jsonl", rows + rows[4:])  # iteration 2 recorded twice
    src = MetadataSource(f, per_rank=True, per_microbatch=True,
                         row_columns={"t": lambda r: r["lm_tokens"]}).read()
    once = MetadataSource(write_jsonl(tmp_path / "once.jsonl", rows), per_rank=True).read()
    assert src.per_iteration.equals(once.per_iteration)
    assert src.per_rank.equals(once.per_rank)
    assert src.per_microbatch.height == 6 and len(src.row_values["t"]) == 6
    assert src.diagnostics.rows_duplicate == 2


@pytest.mark.parametrize("engine", sorted(ENGINES))
# 16 KiB: ~270 chunks over the 4.4 MB sample, each smaller than one iteration's 128 rows (~22 KB), so every chunk
# boundary cuts a line and every iteration spans chunks (lines are <= 241 bytes); 4 KiB took the same paths 4x
# as often at ~12 ms of polars planning per chunk (13 s per engine)
@pytest.mark.parametrize("chunk", [1 << 14, 1 << 25])
def test_engine_and_chunking_do_not_change_results(engine, chunk):
    ref = iteration_stats(SAMPLE)
    src = MetadataSource(SAMPLE, engine=engine, chunk_bytes=chunk).read()
    assert src.per_iteration.equals(ref.frame)
    assert src.diagnostics.to_dict() == ref.diagnostics.to_dict()


def test_small_chunks_and_bad_lines_keep_line_numbers(tmp_path):
    good = {"iteration": 1, "seq_lens": [4]}
    rows = [good] * 300 + ['{"iteration": 1.5, "seq_lens": [4]}'] + [good] * 300 + [
        {"iteration": 1, "seq_lens": [0]}] + [good] * 10
    f = write_jsonl(tmp_path / "m.jsonl", rows)
    for chunk in (1 << 10, 1 << 20):
        d = MetadataSource(f, skip_bad=True, chunk_bytes=chunk).read().diagnostics
        assert [b.split(": ")[0] for b in d.bad_lines] == [f"{f}:301", f"{f}:602"]
        assert (d.rows_read, d.rows_used, d.rows_skipped_total) == (612, 610, 2)


def test_compressed_shards_are_streamed_not_written(tmp_path, monkeypatch):
    import zstandard

    plain = write_jsonl(tmp_path / "plain" / "m.jsonl", balance_rows() * 50)
    data = plain.read_bytes()
    gz = tmp_path / "gz" / "m.jsonl.gz"
    gz.parent.mkdir()
    gz.write_bytes(gzip.compress(data))
    zst = tmp_path / "zst" / "m.jsonl.zst"
    zst.parent.mkdir()
    zst.write_bytes(zstandard.ZstdCompressor().compress(data[: len(data) // 2])
                    + zstandard.ZstdCompressor().compress(data[len(data) // 2:]))  # two frames

    def no_temp(*a, **k):
        raise AssertionError("the metadata reader must not create temporary files")

    monkeypatch.setattr(tempfile, "mkdtemp", no_temp)
    monkeypatch.setattr(tempfile, "mkstemp", no_temp)
    ref = MetadataSource(plain, per_rank=True).read()
    for path in (gz, zst):
        src = MetadataSource(path, per_rank=True, chunk_bytes=1 << 12).read()
        assert src.per_iteration.equals(ref.per_iteration) and src.per_rank.equals(ref.per_rank)
        assert src.diagnostics.decompressed == [str(path)]


def test_truncated_gzip_is_one_line_error(tmp_path):
    f = tmp_path / "m.jsonl.gz"
    whole = gzip.compress(b'{"iteration": 1, "seq_lens": [4]}\n' * 1000)
    f.write_bytes(whole[: len(whole) // 2])
    with pytest.raises(ValueError, match=rf"^{f}: cannot decompress"):
        MetadataSource(f).read()


def test_parquet_reads_like_jsonl(tmp_path):
    jsonl = write_jsonl(tmp_path / "m.jsonl", balance_rows())
    pq = tmp_path / "m.parquet"
    pl.read_ndjson(jsonl, schema={k: v for k, v in __import__("vlm_perf.ingest.metadata_schema",
                                                               fromlist=["SCHEMA"]).SCHEMA.items()}).write_parquet(pq)
    a = MetadataSource(jsonl, per_rank=True).read()
    b = MetadataSource(pq, per_rank=True).read()
    assert a.per_iteration.equals(b.per_iteration) and a.per_rank.equals(b.per_rank)


def test_parquet_float_column_rejected(tmp_path):
    pq = tmp_path / "m.parquet"
    pl.DataFrame({"iteration": [1.5], "seq_lens": [[4]]}).write_parquet(pq)
    with pytest.raises(ValueError, match=r"column 'iteration' has type Float64"):
        MetadataSource(pq).read()


def test_engines_registry_rejects_duplicates():
    with pytest.raises(ValueError, match="already registered"):
        register_engine(ParseEngine("pyarrow", lambda b: pl.DataFrame(), "dup"))
    with pytest.raises(ValueError, match="unknown metadata engine"):
        MetadataSource(SAMPLE, engine="nope")


def test_load_run_keeps_the_source_and_per_rank():
    from vlm_perf.pipeline import load_run

    loaded = load_run(SAMPLE.parent, per_rank=True)
    src = loaded.metadata
    assert src.per_iteration.equals(iteration_stats(SAMPLE, spec=loaded.spec).frame)
    summed = (src.per_rank.group_by("iteration").agg(pl.col(c).sum() for c in (*STAT_FIELDS, "microbatches"))
              .sort("iteration").select(src.per_iteration.columns))
    assert summed.equals(src.per_iteration)
    # one share per microbatch of the iterations the means use (the analysis' one window selection)
    used = loaded.analysis.selection.iterations()
    rows_used = int(src.per_iteration.filter(pl.col("iteration").is_in(used.implode()))["microbatches"].sum())
    assert 0 < rows_used < src.diagnostics.rows_used
    assert len(loaded.context.microbatch_vision_share) == rows_used


def test_jsonl_and_parquet_together_are_refused(tmp_path):
    """A run converted in place must not be counted twice."""
    jsonl = write_jsonl(tmp_path / "m" / "metadata.jsonl", balance_rows())
    MetadataSource(jsonl, raw_sink=lambda f: f.write_parquet(tmp_path / "m" / "metadata.parquet")).read()
    with pytest.raises(ValueError, match="counted twice"):
        MetadataSource(tmp_path / "m").read()
    assert MetadataSource(tmp_path / "m" / "metadata.parquet").read().per_iteration.equals(
        MetadataSource(jsonl).read().per_iteration)


def _mixed_rows() -> list:
    """Valid rows over 3 iterations x 2 ranks, with a float, a string, a too-long line, a blank
    line and an invalid grid scattered through (lines 41, 95, 130, 170, 201)."""
    rows: list = []
    for i in range(240):
        rows.append({"iteration": 1 + i // 80, "microbatch": i % 40, "dp_rank": (i // 40) % 2,
                     "seq_lens": [3 + i % 7, 11], "image_grid_thw": [[1, 2 * (1 + i % 3), 4]] if i % 2 else None})
    rows[40] = '{"iteration": 1.5, "seq_lens": [4]}'
    rows[94] = '{"iteration": "2", "seq_lens": [4]}'
    rows[129] = '{"iteration": 2, "seq_lens": [' + ",".join(["1"] * 600) + "]}"
    rows[169] = ""
    rows[200] = {"iteration": 3, "seq_lens": [4], "image_grid_thw": [[1, 3, 4]]}
    return rows


@pytest.mark.parametrize("chunk", [1 << 9, 1 << 11, 1 << 25])
def test_prefetch_changes_nothing(tmp_path, chunk):
    """Parsing the next chunk in a worker thread gives the same outputs, diagnostics and first
    error as the sequential pass, whatever the chunking."""
    f = write_jsonl(tmp_path / "m.jsonl", _mixed_rows())
    cols = {"lm": lambda s: s["lm_tokens"].cast(pl.Float64) * 2.0}
    out = []
    for prefetch in (False, True):
        src = MetadataSource(f, skip_bad=True, per_rank=True, row_columns=cols, chunk_bytes=chunk,
                             max_line_bytes=1000, prefetch=prefetch).read()
        out.append((src.per_iteration, src.per_rank, src.row_values["lm"], src.diagnostics.to_dict()))
    (it0, rk0, v0, d0), (it1, rk1, v1, d1) = out
    assert it0.equals(it1) and rk0.equals(rk1) and v0.equals(v1)
    assert d0 == d1
    assert [b.split(": ")[0] for b in d1["bad_lines"]] == [f"{f}:{n}" for n in (41, 95, 130, 201)]
    errors = []
    for prefetch in (False, True):
        with pytest.raises(Exception) as info:
            MetadataSource(f, chunk_bytes=chunk, max_line_bytes=1000, prefetch=prefetch).read()
        errors.append(str(info.value))
    assert errors[0] == errors[1] and f"{f}:41" in errors[0]


@pytest.mark.parametrize("chunk", [1 << 9, 1 << 25])
def test_prefetch_across_shards_changes_nothing(tmp_path, chunk):
    """The pipeline spans shards (the next shard's first chunk is parsed while the previous one's
    last is aggregated): outputs, diagnostics, progress calls and the first error are unchanged."""
    rows = _mixed_rows()
    shards = [write_jsonl(tmp_path / "s0.jsonl", rows[:70]), write_jsonl(tmp_path / "s1.jsonl", rows[70:150])]
    with gzip.open(tmp_path / "s2.jsonl.gz", "wt") as fh:
        fh.write("".join((r if isinstance(r, str) else json.dumps(r)) + "\n" for r in rows[150:]))
    shards.append(tmp_path / "s2.jsonl.gz")
    out = []
    for prefetch in (False, True):
        calls: list = []
        src = MetadataSource(shards, skip_bad=True, per_rank=True, chunk_bytes=chunk, max_line_bytes=1000,
                             prefetch=prefetch, progress=lambda done, total: calls.append((done, total))).read()
        out.append((src.per_iteration, src.per_rank, src.diagnostics.to_dict(), calls))
    assert out[0][0].equals(out[1][0]) and out[0][1].equals(out[1][1])
    assert out[0][2] == out[1][2] and out[0][3] == out[1][3]
    assert [b.split(": ")[0] for b in out[1][2]["bad_lines"]] == [
        f"{shards[0]}:41", f"{shards[1]}:25", f"{shards[1]}:60", f"{shards[2]}:51"]
    errors = []
    for prefetch in (False, True):
        with pytest.raises(Exception) as info:
            MetadataSource(shards[1:], chunk_bytes=chunk, max_line_bytes=1000, prefetch=prefetch).read()
        errors.append(str(info.value))
    assert errors[0] == errors[1] and f"{shards[1]}:25" in errors[0]


def test_line_longer_than_a_pyarrow_block_is_parsed_not_refused(tmp_path):
    """pyarrow parses in blocks (256 KiB up to 4 MiB, by chunk size); a line longer than a block is
    re-read as one block, so block sizing never changes a verdict or a statistic."""
    long_row = {"iteration": 2, "microbatch": 0, "dp_rank": 0, "seq_lens": [1] * 200_000}
    rows = [{"iteration": 1, "microbatch": i, "dp_rank": 0, "seq_lens": [3, 4]} for i in range(20_000)]
    tail = [{"iteration": 1, "microbatch": 20_000 + i, "dp_rank": 0, "seq_lens": [3, 4]} for i in range(5)]
    f = write_jsonl(tmp_path / "m.jsonl", rows + [long_row] + tail)
    src = MetadataSource(f).read()
    assert src.diagnostics.cleaned == []  # no fallback to the per-line path
    it = src.per_iteration
    # hand arithmetic: iteration 1 holds 20,005 rows of [3, 4]; iteration 2 one row of 200,000 ones
    assert it["lm_tokens"].to_list() == [20_005 * 7, 200_000]
    assert it["lm_tokens_sq"].to_list() == [20_005 * 25, 200_000]
