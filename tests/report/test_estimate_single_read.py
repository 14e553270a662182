"""Estimate mode reads the log once: the per-rank timing the parse collected gives the same summary.json
as reading the logs a second time for it (the code path before, still the fallback)."""

import json
import shutil
from pathlib import Path

from vlm_perf.cli import main as cli
from vlm_perf.ingest.logs import parser

FIX = Path(__file__).resolve().parents[1] / "ingest" / "fixtures" / "timers" / "megatron_timers.log"
RUN_YAML = ("# SYNTHETIC: tests/report/test_estimate_single_read.py\nmodel: qwen2.5-vl-7b\nnum_gpus: 16\n"
            "gpu: H100-SXM\ndtype: bf16\nseq_length: 4096\nglobal_batch_size: 64\nimage_grid: [1, 28, 28]\n"
            "synthetic: true\n")


def report(run: Path, out: Path) -> dict:
    try:
        cli(["report", str(run), "-o", str(out)])
    except SystemExit as exc:
        assert not exc.code
    return json.loads((out / "summary.json").read_text())


def test_summary_equal_with_and_without_the_second_read(tmp_path, monkeypatch):
    run = tmp_path / "run"
    run.mkdir()
    shutil.copy(FIX, run / "train.log")
    (run / "run.yaml").write_text(RUN_YAML)
    once = report(run, tmp_path / "once")
    reads = []
    from vlm_perf.ingest.logs import timers

    original = timers.read_rank_timing
    monkeypatch.setattr(timers, "read_rank_timing", lambda paths: reads.append(paths) or original(paths))
    monkeypatch.setattr(parser.ParseResult, "rank_timing", property(lambda self: None))
    twice = report(run, tmp_path / "twice")
    assert reads, "the fallback (second read) ran"
    assert once == twice
    assert json.dumps(once).count("forward-backward") >= 1  # the timers reached the summary
