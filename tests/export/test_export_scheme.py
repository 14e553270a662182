"""The export's metric scheme (`vlm_perf.export.scheme`): which number goes under which name at which step, on
hand-made window tables and summaries whose every expected point is written out here, and a seeded fuzz of
window tables (restarts, missing cells) against the rule stated row by row; the refusals (unknown
backend, -o a file, a run without windows, a missing backend library) as one error line and exit status 2."""

from __future__ import annotations

import math
import re
import sys

import polars as pl
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.support import SAMPLE_LOGS, run_main
from vlm_perf.errors import VlmPerfError
from vlm_perf.export import BACKENDS, MissingBackend, export_data, metric_segment, run_name
from vlm_perf.export.backends import require
from vlm_perf.extras import install_hint

NAN = float("nan")


def windows(rows: list[tuple]) -> pl.DataFrame:
    """The report's window table's columns for conventions exact and megatron-lm."""
    return pl.DataFrame(rows, orient="row", schema={
        "segment": pl.Int64, "iteration": pl.Int64, "reliable": pl.Boolean, "step_time_s": pl.Float64,
        "megatron-lm_tflops_per_gpu": pl.Float64, "megatron-lm_mfu": pl.Float64, "exact_tflops_per_gpu": pl.Float64,
        "exact_mfu": pl.Float64, "vision_share": pl.Float64, "tflops_per_gpu_logged": pl.Float64})


SUMMARY = {
    "run": "runs/a", "model": "Qwen2-VL-7B", "world_size": 16, "gpu": "H100-SXM", "dtype": "bf16",
    "peak_tflops": 989.0, "estimated": False, "synthetic": False, "checks_status": "ok", "iterations": 40,
    "logged_windows": 4, "windows_used": 3, "inputs": {"model": "qwen2-vl-7b", "causal": "half"},
    "regime": {"description": "full training", "source": "default"}, "peak": {"source_short": "datasheet"},
    "vision_share_mean": 0.25, "logged_tflops_per_gpu_mean": 300.0, "step": {"seconds_per_iteration": 2.5},
    "conventions": {"megatron-lm": {"tflops_per_gpu_mean": 310.0, "mfu_mean": 310.0 / 989.0},
                    "exact": {"tflops_per_gpu_mean": 400.0, "mfu_mean": 400.0 / 989.0}},
    "rl": None,
}


def test_every_window_number_goes_under_its_name_at_the_window_iteration():
    w = windows([(0, 10, False, 4.0, 150.0, 0.15, 200.0, 0.2, 0.3, 140.0),
                 (0, 20, True, 2.0, 300.0, 0.3, 400.0, 0.4, 0.25, None)])
    data = export_data(w, SUMMARY, ["megatron-lm", "exact"], "a")
    assert data.series("vlm_perf/tflops_per_gpu/exact") == [(10, 200.0), (20, 400.0)]
    assert data.series("vlm_perf/tflops_per_gpu/megatron-lm") == [(10, 150.0), (20, 300.0)]
    assert data.series("vlm_perf/mfu/exact") == [(10, 0.2), (20, 0.4)]
    assert data.series("vlm_perf/mfu/megatron-lm") == [(10, 0.15), (20, 0.3)]
    assert data.series("vlm_perf/vision_share") == [(10, 0.3), (20, 0.25)]
    assert data.series("vlm_perf/step_time_s") == [(10, 4.0), (20, 2.0)]
    assert data.series("vlm_perf/logged/tflops_per_gpu") == [(10, 140.0)]  # the log printed no number at 20
    assert data.series("vlm_perf/window/in_means") == [(10, 0.0), (20, 1.0)]
    assert data.points.height == 15 and data.superseded_windows == 0 and data.notes == []
    assert data.points["step"].dtype == pl.Int64 and data.points["value"].dtype == pl.Float64


def test_run_values_are_the_summary_numbers():
    data = export_data(windows([(0, 10, True, 4.0, 150.0, 0.15, 200.0, 0.2, 0.3, 140.0)]), SUMMARY,
                       ["megatron-lm", "exact"], "a")
    assert data.run_values == {
        "vlm_perf/mean/tflops_per_gpu/megatron-lm": 310.0, "vlm_perf/mean/tflops_per_gpu/exact": 400.0,
        "vlm_perf/mean/mfu/megatron-lm": 310.0 / 989.0, "vlm_perf/mean/mfu/exact": 400.0 / 989.0,
        "vlm_perf/mean/vision_share": 0.25, "vlm_perf/mean/step_time_s": 2.5,
        "vlm_perf/mean/logged/tflops_per_gpu": 300.0}


def test_a_missing_number_is_left_out_never_written_as_zero():
    """No peak: no MFU series at all; a NaN or null cell: no point at that step."""
    w = windows([(0, 10, True, 4.0, 150.0, None, NAN, None, 0.3, None),
                 (0, 20, True, None, 300.0, None, 400.0, None, None, None)])
    summary = {**SUMMARY, "peak_tflops": None, "logged_tflops_per_gpu_mean": None,
               "conventions": {"megatron-lm": {"tflops_per_gpu_mean": 310.0, "mfu_mean": None},
                               "exact": {"tflops_per_gpu_mean": 400.0, "mfu_mean": None}}}
    data = export_data(w, summary, ["megatron-lm", "exact"], "a")
    assert not [m for m in data.metrics if "/mfu/" in m or "logged" in m]
    assert data.series("vlm_perf/tflops_per_gpu/exact") == [(20, 400.0)]
    assert data.series("vlm_perf/step_time_s") == [(10, 4.0)]
    assert data.series("vlm_perf/vision_share") == [(10, 0.3)]
    assert "peak_tflops" not in data.facts
    assert data.notes == ["no GPU peak for this run: no MFU series (state the GPU type or its dense peak)"]
    assert set(data.run_values) == {"vlm_perf/mean/tflops_per_gpu/megatron-lm", "vlm_perf/mean/tflops_per_gpu/exact",
                                    "vlm_perf/mean/vision_share", "vlm_perf/mean/step_time_s"}
    assert all(math.isfinite(v) for v in data.points["value"])


def test_after_a_restart_the_later_segment_wins_and_is_counted():
    """Iterations 30 and 40 logged in segment 0, the run restarts from 20 and logs 30 and 40 again."""
    w = windows([(0, 20, True, 2.0, 1.0, 0.1, 2.0, 0.2, 0.3, None),
                 (0, 30, True, 2.0, 3.0, 0.1, 4.0, 0.2, 0.3, None),
                 (0, 40, True, 2.0, 5.0, 0.1, 6.0, 0.2, 0.3, None),
                 (1, 30, False, 2.0, 7.0, 0.1, 8.0, 0.2, 0.3, None),
                 (1, 40, True, 2.0, 9.0, 0.1, 10.0, 0.2, 0.3, None)])
    data = export_data(w, SUMMARY, ["megatron-lm", "exact"], "a")
    assert data.series("vlm_perf/tflops_per_gpu/exact") == [(20, 2.0), (30, 8.0), (40, 10.0)]
    assert data.series("vlm_perf/window/in_means") == [(20, 1.0), (30, 0.0), (40, 1.0)]
    assert data.superseded_windows == 2
    assert data.notes and "2 window(s)" in data.notes[0]


def test_rl_phase_seconds_per_rl_step():
    summary = {**SUMMARY, "rl": {"algorithm": "grpo", "framework": "trl", "per_iteration": [
        {"iteration": 1, "step_s": 3.0, "seconds": {"generation": 1.25, "update_actor": 1.5, "other": 0.25}},
        {"iteration": 2, "step_s": 0.5, "seconds": {"update_actor": 0.5, "ref": None}}]}}
    data = export_data(windows([(0, 1, True, 3.0, 1.0, 0.1, 2.0, 0.2, 0.3, None)]), summary,
                       ["megatron-lm", "exact"], "a")
    assert data.series("vlm_perf/rl/phase_s/generation") == [(1, 1.25)]
    assert data.series("vlm_perf/rl/phase_s/update_actor") == [(1, 1.5), (2, 0.5)]
    assert data.series("vlm_perf/rl/phase_s/other") == [(1, 0.25)]
    assert "vlm_perf/rl/phase_s/ref" not in data.metrics  # not timed: no point
    assert data.series("vlm_perf/rl/step_s") == [(1, 3.0), (2, 0.5)]
    assert data.facts["rl_algorithm"] == "grpo" and data.facts["rl_framework"] == "trl"


def test_facts_state_the_run_and_each_conventions_pin():
    from vlm_perf.flops import get_convention

    data = export_data(windows([(0, 1, True, 3.0, 1.0, 0.1, 2.0, 0.2, 0.3, None)]), SUMMARY,
                       ["megatron-lm", "exact"], "a")
    facts = data.facts
    assert (facts["model"], facts["gpus"], facts["gpu"], facts["peak_tflops"], facts["regime"]) == (
        "Qwen2-VL-7B", 16, "H100-SXM", 989.0, "full training")
    assert facts["conventions"] == "megatron-lm, exact"
    assert facts["pin/megatron-lm"] == get_convention("megatron-lm").pin.describe()
    assert "Megatron-LM" in facts["pin/megatron-lm"]
    assert facts["pin/exact"] == "vlm-perf (no framework pin)"
    assert all(isinstance(v, (str, int, float, bool)) for v in facts.values())


def test_names_are_one_segment_per_convention_and_accepted_by_every_backend():
    from vlm_perf.export import METRICS, RUN_VALUES
    from vlm_perf.flops.conventions import CONVENTIONS
    from vlm_perf.ingest.rl_metadata import PHASE_NAMES

    assert metric_segment("verl@v0.7.1") == "verl.v0.7.1"
    assert metric_segment("megatron-lm@dev-qwen35_vl_v2") == "megatron-lm.dev-qwen35_vl_v2"
    assert metric_segment("megatron-lm") == "megatron-lm"
    assert metric_segment("a b/c") == "a_b_c"
    names = {m.full(convention=c, phase=p) for m in METRICS + RUN_VALUES for c in CONVENTIONS for p in PHASE_NAMES}
    # MLflow's portable metric names (letters, digits, _ - . / and space; ':' only off Windows)
    assert all(re.fullmatch(r"vlm_perf(/[A-Za-z0-9_.-]+)+", n) for n in names), sorted(names)[:5]
    assert len({metric_segment(c) for c in CONVENTIONS}) == len(CONVENTIONS)


def test_two_conventions_with_one_segment_are_refused():
    w = windows([(0, 1, True, 3.0, 1.0, 0.1, 2.0, 0.2, 0.3, None)])
    with pytest.raises(VlmPerfError, match="same metric name segment"):
        export_data(w, SUMMARY, ["a@b", "a.b"], "a")


def test_a_run_without_windows_is_refused():
    empty = windows([(0, 1, True, None, None, None, None, None, None, None)])
    with pytest.raises(VlmPerfError, match="no logged window has a number"):
        export_data(empty, SUMMARY, ["megatron-lm", "exact"], "a")


def test_run_names():
    assert run_name("runs/qwen-sft/") == "qwen-sft"
    assert run_name("runs/qwen-sft/train.log") == "train"
    assert run_name("s3://bucket/runs/qwen-sft") == "qwen-sft"
    assert run_name(SAMPLE_LOGS / "qwen2-vl-tiny-real") == "qwen2-vl-tiny-real"


# ------------------------------------------------------------------------------------------------ refusals

def _one_line_error(done, *parts: str) -> None:
    assert done.returncode == 2, (done.returncode, done.stdout, done.stderr)
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), done.stderr
    for part in parts:
        assert part in lines[0], lines[0]


def test_unknown_backend_is_one_line(tmp_path):
    done = run_main("export", SAMPLE_LOGS / "qwen2-vl-tiny-real", "--to", "neptune", "-o", tmp_path / "x")
    _one_line_error(done, "export backend 'neptune' is unknown", ", ".join(BACKENDS))
    assert not (tmp_path / "x").exists()


def test_out_that_is_a_file_is_one_line_and_left_alone(tmp_path):
    target = tmp_path / "notes.txt"
    target.write_text("mine\n")
    done = run_main("export", SAMPLE_LOGS / "qwen2-vl-tiny-real", "--to", "csv", "-o", target)
    _one_line_error(done, "exists and is not a folder")
    assert target.read_text() == "mine\n"


def test_out_that_is_a_symlink_is_refused(tmp_path):
    (tmp_path / "real").mkdir()
    (tmp_path / "link").symlink_to(tmp_path / "real")
    done = run_main("export", SAMPLE_LOGS / "qwen2-vl-tiny-real", "--to", "csv", "-o", tmp_path / "link")
    _one_line_error(done, "symlink")
    assert list((tmp_path / "real").iterdir()) == []


def test_tracking_uri_belongs_to_mlflow(tmp_path):
    done = run_main("export", SAMPLE_LOGS / "qwen2-vl-tiny-real", "--to", "parquet", "--tracking-uri", "file:/x",
                    "-o", tmp_path / "x")
    _one_line_error(done, "a tracking URI is an MLflow setting; the parquet export does not take one")


def test_run_whose_log_has_no_step_times_is_one_line(tmp_path):
    run = tmp_path / "run"
    run.mkdir()
    (run / "run.yaml").write_text("model: qwen2-vl-7b\nnum_gpus: 8\nseq_length: 4096\nglobal_batch_size: 8\n")
    (run / "train.log").write_text("".join(
        f" iteration {i:>8}/     100 | consumed samples: {8 * i:>10} | lm loss: 1.0E+00 | global batch size:     8 |\n"
        for i in (1, 2, 3)))
    done = run_main("export", run, "--to", "csv", "-o", tmp_path / "x")
    _one_line_error(done, "no logged window has a number to export")
    assert not (tmp_path / "x").exists()


@pytest.mark.parametrize("backend,module,extra", [("wandb", "wandb", "export-wandb"),
                                                  ("mlflow", "mlflow.tracking", "export-mlflow"),
                                                  ("tensorboard", "tensorboard.summary.writer.event_file_writer",
                                                   "export-tensorboard")])
def test_missing_backend_names_the_extra_and_the_install_command(backend, module, extra, monkeypatch, tmp_path):
    monkeypatch.setitem(sys.modules, module, None)  # import -> ImportError, as when the package is absent
    with pytest.raises(MissingBackend) as info:
        require(backend)
    assert str(info.value).endswith(install_hint(extra))  # tests/test_extras.py: what the hint says
    done = run_main("export", SAMPLE_LOGS / "qwen2-vl-tiny-real", "--to", backend, "-o", tmp_path / "x")
    _one_line_error(done, f"the {extra} extra", f"pip install 'vlm-perf[{extra}]'", install_hint(extra))
    assert not (tmp_path / "x").exists()


def test_the_docs_metric_table_is_generated_from_the_scheme():
    from vlm_perf.export.docs import DOC, with_metrics

    text = DOC.read_text()
    assert with_metrics(text) == text, "docs/export.md is stale: run python -m vlm_perf.export.docs"


# ------------------------------------------------------------------------------------------------ fuzz

_cell = st.one_of(st.none(), st.just(NAN), st.just(float("inf")), st.floats(0.0, 1e3, allow_nan=False))


@st.composite
def window_tables(draw):
    """Segments of increasing iterations, a later segment may go back (a restart); any cell may be missing."""
    rows, segment, iteration = [], 0, 0
    for _ in range(draw(st.integers(1, 25))):
        if rows and draw(st.booleans()) and draw(st.integers(0, 4)) == 0:
            segment += 1
            iteration = max(0, iteration - draw(st.integers(0, 6)))
        iteration += draw(st.integers(1, 3))
        rows.append((segment, iteration, draw(st.booleans()), *(draw(_cell) for _ in range(7))))
    return windows(rows)


@settings(derandomize=True, deadline=None, max_examples=120, suppress_health_check=list(HealthCheck))
@given(window_tables())
def test_fuzz_one_finite_point_per_metric_and_step_from_the_last_segment(w):
    columns = {"vlm_perf/tflops_per_gpu/exact": "exact_tflops_per_gpu", "vlm_perf/mfu/megatron-lm": "megatron-lm_mfu",
               "vlm_perf/step_time_s": "step_time_s", "vlm_perf/vision_share": "vision_share",
               "vlm_perf/logged/tflops_per_gpu": "tflops_per_gpu_logged"}
    last = {}  # iteration -> the row of its latest segment
    for row in w.sort("segment", "iteration").iter_rows(named=True):
        last[row["iteration"]] = row
    try:
        data = export_data(w, SUMMARY, ["megatron-lm", "exact"], "a")
    except VlmPerfError as exc:
        assert "no logged window has a number" in str(exc)
        assert not any(row[c] is not None and math.isfinite(row[c]) for row in last.values()
                       for c in columns.values())
        return
    assert data.points.select("metric", "step").is_unique().all()
    assert all(math.isfinite(v) for v in data.points["value"])
    for metric, column in columns.items():
        want = [(it, row[column]) for it, row in sorted(last.items())
                if row[column] is not None and math.isfinite(row[column])]
        assert data.series(metric) == want, metric
    assert data.superseded_windows == w.height - len(last)
