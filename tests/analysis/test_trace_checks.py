"""A trace is checked against itself and against the run it is joined with (issue 34, `vlm_perf.analysis.trace_checks`).

Specification:
* joined with metadata whose shapes are not the profiled ones (another run's), the parts whose recorded matmul
  FLOPs differ from the exact FLOPs by more than SHAPES_AGREE are named, and the cross-check line says FAILED
  instead of "match within"; with the run's own metadata it still says they match (near miss);
* a part above the GPU's peak (MFU > 100%) is named as implausible;
* two files holding the same rank's same ProfilerStep (a copy of a rank's trace) are one line naming both files;
  the same rank profiled at other steps in another file is fine (near miss);
* a ProfilerStep repeated inside one trace and negative durations are named with their counts; a negative event
  is dropped, so the step still adds up.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from hypothesis import given, settings, strategies as st

from tests.support import run_main
from vlm_perf.analysis.trace_checks import SHAPES_AGREE
from vlm_perf.analysis.trace_parts import analyze_traces
from vlm_perf.arch import load_model
from vlm_perf.ingest.traces import read_traces, trace_metadata

ROOT = Path(__file__).resolve().parents[2]
TRACE_RUN = ROOT / "sample_logs" / "qwen2-vl-tiny-trace"
TRACE = TRACE_RUN / "trace" / "rank0.pt.trace.json.gz"


def _other_run(tmp_path: Path, scale: int) -> Path:
    """The trace run's folder with every sequence ``scale`` times longer (another run's metadata)."""
    run = tmp_path / "other"
    shutil.copytree(TRACE_RUN, run, ignore=shutil.ignore_patterns("trace"))
    shard = run / "metadata" / "metadata-rank00000.jsonl"
    rows = [json.loads(line) for line in shard.read_text().splitlines()]
    for row in rows:
        row["seq_lens"] = [n * scale for n in row["seq_lens"]]
        row["padded_tokens"] *= scale
    shard.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return run


def test_the_runs_own_metadata_matches_the_recorded_shapes():
    r = run_main("trace", TRACE, "--run", TRACE_RUN, "--causal", "full")
    assert r.returncode == 0, r.stderr
    assert "Cross-check: the matmul FLOPs the trace recorded (Input Dims) match the exact FLOPs within 0.000%" in r.stdout
    assert "IMPLAUSIBLE" not in r.stdout and "differ from the metadata" not in r.stdout


@settings(derandomize=True, deadline=None, database=None, max_examples=3)
@given(scale=st.integers(2, 6))
def test_another_runs_metadata_is_named(tmp_path_factory, scale):
    run = _other_run(tmp_path_factory.mktemp("o"), scale)
    r = run_main("trace", TRACE, "--run", run, "--causal", "full")
    assert r.returncode == 0, r.stderr
    assert "Cross-check FAILED" in r.stdout and "match the exact FLOPs within" not in r.stdout
    assert "otherwise the metadata is not of the profiled run" in r.stdout
    assert f"beyond {100 * SHAPES_AGREE:g}%" in r.stdout


def test_a_part_above_the_peak_is_implausible():
    spec = load_model(str(TRACE_RUN / "config.json"))
    result = analyze_traces(read_traces(TRACE), spec=spec, causal="full", peak_flops=1e9,
                            metadata=trace_metadata(sorted((TRACE_RUN / "metadata").iterdir()), spec))
    mfu = {r["part"]: r["mfu"] for r in result.summary().iter_rows(named=True) if r["mfu"] is not None}
    over = {p for p, m in mfu.items() if m > 1}
    assert over  # 1 GFLOP/s is below what the parts achieved
    named = [n for n in result.notes if n.startswith("IMPLAUSIBLE")]
    assert {p for p in over if any(f"part {p} at" in n for n in named)} == over


_EV = {"ph": "X", "cat": "user_annotation", "pid": 1, "tid": 1}


def _trace(path: Path, steps: list[tuple[int, int, int]], extra: list[dict] = ()) -> Path:
    ev = [{**_EV, "name": f"ProfilerStep#{n}", "ts": ts, "dur": dur} for n, ts, dur in steps]
    ev += [{"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": 1, "tid": 1, "ts": steps[0][1] + 1, "dur": 5},
           *extra]
    path.write_text(json.dumps({"traceEvents": ev}))
    return path


def test_a_copy_of_a_ranks_trace_is_one_line_naming_both_files(tmp_path):
    a = _trace(tmp_path / "rank0.json", [(0, 0, 100), (1, 100, 100)])
    b = tmp_path / "copy-rank0.json"
    shutil.copy(a, b)
    r = run_main("trace", a, b)
    assert r.returncode == 2 and r.stderr.strip().count("\n") == 0, r.stderr
    assert str(a) in r.stderr and str(b) in r.stderr and "two copies of one rank's trace" in r.stderr


def test_one_rank_profiled_twice_at_other_steps_is_fine(tmp_path):
    a = _trace(tmp_path / "rank0_a.json", [(0, 0, 100)])
    b = _trace(tmp_path / "rank0_b.json", [(5, 1000, 100)])
    r = run_main("trace", a, b, "--json")
    assert r.returncode == 0, r.stderr
    assert [s["step"] for s in json.loads(r.stdout)["steps"]] == [0, 5]


def test_repeated_steps_and_negative_durations_are_named(tmp_path):
    bad = {"ph": "X", "cat": "cpu_op", "name": "aten::add", "pid": 1, "tid": 1, "ts": 50, "dur": -20}
    path = _trace(tmp_path / "rank0.json", [(0, 0, 100), (0, 200, 100)], [bad])
    result = analyze_traces(read_traces(path))
    assert any("ProfilerStep#0 appears 2 times" in n for n in result.notes)
    assert any("1 event(s) with a negative duration" in n for n in result.notes)
    assert result.check_sums() == pytest.approx(0.0, abs=1e-9)
