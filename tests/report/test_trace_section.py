"""The report's "Where the time went, per part" section: a run folder's profiler traces (found by the one
discovery rule) analysed with the run's model and metadata; the per-part FLOPs are the report's exact FLOPs
of the profiled iterations, which torch's FlopCounterMode measured for the same microbatches."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import polars as pl
import pytest

from vlm_perf.pipeline import load_run
from vlm_perf.run.discover import discover_run, traces_of

ROOT = Path(__file__).resolve().parents[2]
TRACE_RUN = ROOT / "sample_logs" / "qwen2-vl-tiny-trace"
MEASURED = ROOT / "sample_logs" / "qwen2-vl-tiny-real" / "measured_flops.json"


def test_discovery_rule_for_traces(tmp_path):
    assert [p.name for p in discover_run(TRACE_RUN).traces] == ["rank0.pt.trace.json.gz"]
    assert discover_run(ROOT / "sample_logs" / "qwen2-vl-tiny-real").traces == []
    for name in ("config.json", "run.json", "trainer_state.json", "measured_flops.json", "rank0.pt.trace.json",
                 "rank1.pt.trace.json.gz", "prof.sqlite", "notes.txt"):
        (tmp_path / name).write_text("{}")
    for sub, name in (("traces", "a.json"), ("profiler", "b.json.gz"), ("trace", "c.sqlite"), ("other", "d.json"),
                      ("traces", "readme.md")):
        (tmp_path / sub).mkdir(exist_ok=True)
        (tmp_path / sub / name).write_text("{}")
    assert [str(p.relative_to(tmp_path)) for p in traces_of(tmp_path)] == [
        "prof.sqlite", "rank0.pt.trace.json", "rank1.pt.trace.json.gz", "trace/c.sqlite", "traces/a.json",
        "profiler/b.json.gz"]


@pytest.fixture(scope="module")
def loaded():
    return load_run(TRACE_RUN, causal="full")


def test_trace_block_flops_are_exact_and_measured(loaded):
    block = loaded.context.block("trace_parts")
    assert block["iterations"] == [3, 4] and block["ranks"] == 1 and block["max_sum_gap"] <= 0.01
    per_it = loaded.analysis.per_iteration
    exact = float(per_it.filter(pl.col("iteration").is_in([3, 4]))["exact_total"].sum())
    assert block["flops_total"] == pytest.approx(exact, rel=1e-12)
    assert block["flops_match_report"] is True
    # independent: FlopCounterMode on the same microbatches (eager attention = --causal full)
    steps = {s["iteration"]: s["flops"] for s in json.loads(MEASURED.read_text())["per_step"]}
    assert block["flops_total"] == steps[3] + steps[4]
    shares = [p["time_share"] for p in block["parts"]]
    assert sum(shares) == pytest.approx(1.0)
    assert block["unattributed_s"] > 0 and any(p["part"] == "unattributed" for p in block["parts"])
    for p in block["parts"]:
        if p["flops"]:
            assert p["flops_per_s"] == pytest.approx(p["flops"] / p["time_s"])


def test_report_section_figure_and_peak(tmp_path, cli):
    out = tmp_path / "out"
    r = cli("report", str(TRACE_RUN), "-o", str(out), "--causal", "full", "--peak-tflops", "0.1")
    assert r.exit_code == 0, (r.output, r.exception)
    md = (out / "report.md").read_text()
    assert "## Where the time went, per part" in md and "achieved GFLOP/s" in md and "Unattributed time" in md
    assert (out / "trace_parts.png").stat().st_size > 1000 and "trace_parts.png" in md
    s = json.loads((out / "summary.json").read_text())["trace_parts"]
    assert s["peak_tflops"] == 0.1
    for p in s["parts"]:
        if p["flops_per_s"]:
            assert p["mfu"] == pytest.approx(p["flops_per_s"] / 0.1e12)


def test_no_trace_no_section_and_bad_trace_is_a_message(tmp_path, cli):
    run = tmp_path / "run"
    shutil.copytree(TRACE_RUN, run)
    (run / "trace" / "rank0.pt.trace.json.gz").write_bytes(b"not a trace")
    loaded = load_run(run, causal="full")
    assert loaded.context.block("trace_parts") is None
    assert any(m.startswith("profiler trace not analysed:") for m in loaded.analysis.messages)
    shutil.rmtree(run / "trace")
    out = tmp_path / "out"
    r = cli("report", str(run), "-o", str(out), "--causal", "full")
    assert r.exit_code == 0, (r.output, r.exception)
    assert json.loads((out / "summary.json").read_text())["trace_parts"] is None
    assert "Where the time went" not in (out / "report.md").read_text()
