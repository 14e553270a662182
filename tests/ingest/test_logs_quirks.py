"""Cross-format quirks: launcher prefixes, per-rank duplicates, restarts, mixed files, API errors."""

from __future__ import annotations

import polars as pl
import pytest

from tests.support import megatron_line as mline, write_log as write
from vlm_perf.ingest.logs import CORE_COLUMNS, FORMATS, parse_logs


@pytest.mark.parametrize("prefix,label", [
    ("[default0]:", "default0"),
    ("[rank3]:", "rank3"),
    ("  7:", "7"),
    ("trainer/0", "trainer/0"),
    ("\x1b[32mtrainer/1\x1b[0m", "trainer/1"),
    ("(WorkerDict pid=5678)", "WorkerDict pid=5678"),
])
def test_launcher_prefixes(tmp_path, prefix, label):
    r = parse_logs([write(tmp_path, mline(10, 2.5, prefix) + "\n")])
    row = r.raw.row(0, named=True)
    assert row["rank_label"] == label and row["iteration"] == 10 and row["loss"] == 2.5


def test_srun_label_only_and_whitespace_lines_are_counted(tmp_path):
    text = " 3: \n      \n\n" + mline(5, 1.0, " 3:") + "\n"
    r = parse_logs([write(tmp_path, text)])
    assert r.raw.height == 1 and r.raw.row(0, named=True)["rank_label"] == "3"
    d = r.diagnostics
    assert d.lines_read == 4 and d.records == 1 and d.ignored == {"blank": 3}


def test_every_rank_prints_same_line_dedup_keeps_labels(tmp_path):
    lines = []
    for it in (10, 20):
        for rank in range(4):
            lines.append(mline(it, 3.0 - it / 100, f"[rank{rank}]:"))
    # rank4's output was buffered: its 10 arrives after others' 20 -> a duplicate, not a restart
    lines += [mline(10, 9.9, "[rank4]:"), mline(20, 9.9, "[rank4]:")]
    r = parse_logs([write(tmp_path, "\n".join(lines) + "\n")])
    assert r.raw.height == 10
    assert r.raw.get_column("segment").unique().to_list() == [0]
    dd = r.deduplicated
    assert dd.height == 2
    assert dd.get_column("copies").to_list() == [5, 5]
    assert dd.get_column("rank_labels").to_list() == ["rank0,rank1,rank2,rank3,rank4"] * 2
    assert dd.get_column("loss").to_list() == [2.9, 2.8]  # first print wins inside a segment
    assert r.diagnostics.duplicates == 8 and r.diagnostics.failed == []


def test_restart_segments_and_last_write_wins(tmp_path):
    first = [mline(i, 5.0 - i / 100) for i in (10, 20, 30)]
    banner = "successfully loaded checkpoint from /ckpt [ t 1/1, p 1/1 ] at iteration 20"
    second = [mline(i, 4.0 - i / 100) for i in (30, 40)]  # resumed from 20: 30 is logged again
    third_banner_only = [banner, mline(50, 1.0)]  # banner without steps going back -> new segment too
    r = parse_logs([write(tmp_path, "\n".join(first + [banner] + second + third_banner_only) + "\n")])
    raw = r.raw
    assert raw.get_column("segment").to_list() == [0, 0, 0, 1, 1, 2]
    assert raw.get_column("first_in_segment").to_list() == [True, False, False, True, False, True]
    it = r.iterations
    assert it.get_column("iteration").to_list() == [10, 20, 30, 40, 50]
    assert it.filter(pl.col("iteration") == 30).row(0, named=True)["loss"] == pytest.approx(3.7)  # later segment wins
    assert r.diagnostics.segments == 3
    assert r.diagnostics.ignored.get("restart_banner") == 2


def test_restart_across_files(tmp_path):
    a = write(tmp_path, "\n".join(mline(i, 2.0) for i in (1, 2, 3)) + "\n", "a.log")
    b = write(tmp_path, "\n".join(mline(i, 1.0) for i in (2, 3, 4)) + "\n", "b.log")
    r = parse_logs([a, b])
    assert r.raw.get_column("segment").to_list() == [0, 0, 0, 1, 1, 1]
    assert r.raw.get_column("file").to_list() == [str(a)] * 3 + [str(b)] * 3
    assert r.iterations.get_column("loss").to_list() == [2.0, 1.0, 1.0, 1.0]


def test_mixed_file_detects_per_line_and_counts_noise(tmp_path):
    text = "\n".join([
        "time (ms) | forward-compute: 812.34 | backward-compute: 1620.11",
        "[Rank 1] (after 20 iterations) memory (MB) | allocated: 1.0 | max allocated: 2.0",
        mline(20, 2.0),
        "Traceback (most recent call last):",
        "{'loss': 1.5, 'learning_rate': 1e-05, 'epoch': 0.5, 'step': 7}",
        "step:3 - actor/pg_loss:0.01 - perf/mfu/actor:0.2",
        "<IPython.core.display.HTML object>",
        "{'loss': 1.5, 'learning_rate': 1e-05, 'epoch'",  # garbled dict
    ]) + "\n"
    r = parse_logs([write(tmp_path, text)])
    d = r.diagnostics
    assert d.formats_seen == {"hf": 1, "megatron": 1, "verl": 1}
    assert d.ignored == {"megatron_timer": 1, "memory_report": 1, "traceback": 1, "other": 1}
    assert d.failed == [f"{tmp_path / 'train.log'}:8"]
    assert d.lines_read == 8 and d.records == 3
    assert d.lines_read == d.records + sum(d.ignored.values()) + len(d.failed)
    # format restriction: only megatron rows, other parsed formats counted as other_format
    r2 = parse_logs([tmp_path / "train.log"], format="megatron")
    assert r2.raw.get_column("framework").to_list() == ["megatron"]
    assert r2.diagnostics.ignored["other_format"] == 2


def test_api_shape_and_errors(tmp_path):
    assert CORE_COLUMNS[:3] == ("framework", "file", "line") and CORE_COLUMNS[-1] == "nan_iterations"
    assert "megatron" in FORMATS and "tensorboard" in FORMATS
    with pytest.raises(ValueError, match="not found"):
        parse_logs([tmp_path / "missing.log"])
    junk = write(tmp_path, "hello\nworld\n", "junk.log")
    with pytest.raises(ValueError, match=r"junk\.log: no recognisable.*formats tried: megatron"):
        parse_logs([junk])
    with pytest.raises(ValueError, match="unknown format"):
        parse_logs([junk], format="nope")
    r = parse_logs([write(tmp_path, mline(1, 1.0) + "\n")])
    d = r.diagnostics.to_dict()
    assert set(d) >= {"lines_read", "records", "ignored", "failed", "duplicates", "decode_errors", "formats_seen"}
    assert r.raw.schema["timestamp"] == pl.Datetime("us") and r.raw.schema["iteration"] == pl.Int64
    assert r.run_config == {}
