"""A resumed job appends the replayed iterations to its shard again: they must not count twice."""

import json

import polars as pl

from vlm_perf.capture import MetadataWriter
from vlm_perf.ingest.metadata import iteration_stats, scan_microbatches


def _record_run(writer, iterations, tokens_of):
    for it in iterations:
        for mb in range(2):
            writer.record(it, microbatch=mb, seq_lens=[tokens_of(it, mb)], image_grid_thw=[[1, 4, 4]])


def test_replayed_iterations_are_counted_once(tmp_path):
    tokens_of = lambda it, mb: 100 * it + mb + 1  # noqa: E731 - distinct per row, so a double count shows
    with MetadataWriter(tmp_path / "once", rank=0) as w:
        _record_run(w, range(1, 11), tokens_of)
    with MetadataWriter(tmp_path / "resumed", rank=0) as w:  # attempt 1 crashes after 7, resumes at 5
        _record_run(w, range(1, 8), tokens_of)
    with MetadataWriter(tmp_path / "resumed", rank=0) as w:  # same shard, appended
        _record_run(w, range(5, 11), tokens_of)
    clean = iteration_stats(tmp_path / "once")
    resumed = iteration_stats(tmp_path / "resumed")
    assert resumed.frame.equals(clean.frame)
    assert resumed.diagnostics.rows_duplicate == 3 * 2  # iterations 5, 6, 7 x 2 microbatches
    assert resumed.diagnostics.rows_read == 14 + 12 and resumed.diagnostics.rows_used == 20
    assert any("repeated" in note for note in resumed.diagnostics.notes)
    # iteration 6: microbatch token counts 601 and 602, once each
    assert resumed.stats_for(6).lm_tokens == 601 + 602
    micro = scan_microbatches(tmp_path / "resumed").collect()
    assert micro.height == 20 and micro.select(pl.struct("iteration", "microbatch").is_unique().all()).item()


def test_the_last_copy_wins(tmp_path):
    shard = tmp_path / "m.jsonl"
    rows = [{"iteration": i, "microbatch": 0, "dp_rank": 0, "seq_lens": [10]} for i in (1, 2, 3)]
    rows.append({"iteration": 2, "microbatch": 0, "dp_rank": 0, "seq_lens": [30]})  # re-recorded after a restart
    shard.write_text("".join(json.dumps(r) + "\n" for r in rows))
    result = iteration_stats(shard)
    assert result.stats_for(2).lm_tokens == 30 and result.stats_for(3).lm_tokens == 10
    assert result.diagnostics.rows_duplicate == 1


def test_rows_without_keys_are_all_kept(tmp_path):
    # keyed rows with a replay (so deduplication runs) next to rows lacking microbatch/dp_rank
    shard = tmp_path / "m.jsonl"
    keyed = [{"iteration": i, "microbatch": 0, "dp_rank": 0, "seq_lens": [10]} for i in (1, 2, 3, 2)]
    keyless = [{"iteration": 2, "seq_lens": [7]}, {"iteration": 2, "seq_lens": [7]}]
    shard.write_text("".join(json.dumps(r) + "\n" for r in keyed + keyless))
    result = iteration_stats(shard)
    assert result.diagnostics.rows_duplicate == 1
    assert result.stats_for(2).lm_tokens == 10 + 7 + 7


def test_misspelled_key_is_named_in_the_notes(tmp_path):
    shard = tmp_path / "m.jsonl"
    shard.write_text('{"iteration": 1, "seq_lens": [4096], "image_grids": [[1, 64, 64]], "loss": 2.1}\n')
    result = iteration_stats(shard)
    assert result.stats_for(1).vision_patches == 0  # the misspelled key carries no data ...
    note = next(n for n in result.diagnostics.notes if "outside schema v1" in n)
    assert "'image_grids' (did you mean 'image_grid_thw'?)" in note and "loss" not in note  # ... but is named
    assert result.diagnostics.extra_keys == ["image_grids", "loss"]  # free-form extras are listed, not warned


def test_constant_microbatch_field_is_not_used_to_drop_rows(tmp_path):
    # a loop that always writes microbatch=0: 4 real microbatches per iteration, then a resume at 8
    with MetadataWriter(tmp_path / "m", rank=0) as w:
        for it in list(range(1, 11)) + list(range(8, 11)):
            for _ in range(4):
                w.record(it, microbatch=0, seq_lens=[1000])
    result = iteration_stats(tmp_path / "m")
    assert result.stats_for(3).lm_tokens == 4000  # nothing collapsed
    assert result.diagnostics.rows_duplicate == 0
    assert any("does not number the microbatches" in n for n in result.diagnostics.notes)


def test_replays_that_are_the_majority_are_found(tmp_path):
    # iterations 1-10, then a resume from an old checkpoint replays 3-10: most iterations doubled
    with MetadataWriter(tmp_path / "m", rank=0) as w:
        for it in list(range(1, 11)) + list(range(3, 11)):
            for mb in range(2):
                w.record(it, microbatch=mb, seq_lens=[1000])
    result = iteration_stats(tmp_path / "m")
    assert result.frame["lm_tokens"].to_list() == [2000] * 10
    assert result.diagnostics.rows_duplicate == 16


def test_single_iteration_recorded_twice(tmp_path):
    with MetadataWriter(tmp_path / "m", rank=3) as w:
        for _ in range(2):
            for mb in range(4):
                w.record(1, microbatch=mb, seq_lens=[500])
    assert iteration_stats(tmp_path / "m").stats_for(1).lm_tokens == 2000
