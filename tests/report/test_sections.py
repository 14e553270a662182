"""Report sections are a registry; convention differences are checked against the scalar FLOPs path."""

import numpy as np
import polars as pl
import pytest

from vlm_perf.analysis import analyze_run
from vlm_perf.analysis.checks import CHECKS, MFU_PLAUSIBLE, register_check, run_checks
from vlm_perf.arch import load_model
from vlm_perf.flops import compute_flops
from vlm_perf.report import ReportContext, write_report
from vlm_perf.report.content import SectionContent
from vlm_perf.report.sections import SECTIONS, all_sections, register_section
from vlm_perf.stats import BatchStats

SPEC = load_model("qwen2.5-vl-7b")


def _stats(n=30, seed=3):
    """Per-iteration statistics built with BatchStats.from_batch (the scalar path) from random batches."""
    rng = np.random.default_rng(seed)
    rows = []
    for it in range(1, n + 1):
        grids = [(1, int(rng.integers(8, 40)) * 2, int(rng.integers(8, 40)) * 2) for _ in range(rng.integers(0, 5))]
        st = BatchStats.from_batch(seq_lens=[int(x) for x in rng.integers(200, 4000, 4)], image_grids=grids, spec=SPEC)
        rows.append({"iteration": it, **st.as_dict()})
    return pl.DataFrame(rows), rows


def test_sections_in_order_and_duplicates_rejected():
    names = [s.name for s in all_sections()]
    assert names[0] == "headline" and names[-1] == "appendix"
    assert {"conventions", "which_number", "crosscheck", "health", "attribution", "figures"} <= set(names)
    with pytest.raises(ValueError, match="already registered"):
        register_section("health", order=5)(lambda inputs: None)
    with pytest.raises(ValueError, match="already registered"):
        register_check("step_times")(lambda inputs: None)


def test_a_new_section_appears_where_ordered(tmp_path):
    @register_section("test-extra", order=35)
    def extra(inputs):
        return SectionContent("Extra section for a test", [])

    try:
        stats, _ = _stats()
        log = pl.DataFrame({"segment": 0, "iteration": np.arange(5, 31, 5), "elapsed_s": 2.0})
        run = analyze_run(log, SPEC, stats, world_size=8, peak_tflops=989.0, log_interval=5)
        write_report(run, tmp_path / "out", ReportContext(run="t"))
        md = (tmp_path / "out" / "report.md").read_text()
        assert md.index("## Run health") < md.index("## Extra section for a test") < md.index("## Step-time")
    finally:
        SECTIONS.pop("test-extra")


def test_convention_differences_match_the_scalar_path():
    stats, rows = _stats()
    log = pl.DataFrame({"segment": 0, "iteration": np.arange(5, 31, 5), "elapsed_s": 2.0})
    run = analyze_run(log, SPEC, stats, world_size=8, peak_tflops=989.0, log_interval=5)
    # independent: scalar compute_flops per iteration (Python numbers), summed per component
    def totals(conv):
        out = {}
        for r in rows:
            st = BatchStats(**{k: v for k, v in r.items() if k != "iteration"})
            for k, v in compute_flops(SPEC, st, conv).components.items():
                out[k] = out.get(k, 0.0) + float(v)
        return out

    exact = totals("exact")
    exact_total = sum(exact.values())
    for conv in ("megatron-lm", "megatron-bridge", "mbridge-pr2575"):
        conv_totals = totals(conv)
        diff = run.differences[conv]
        assert diff["total_vs_exact"] == pytest.approx(sum(conv_totals.values()) / exact_total - 1, rel=1e-9)
        for d in diff["components"]:
            expected = conv_totals.get(d["component"], 0.0) - exact.get(d["component"], 0.0)
            assert d["delta_flops"] == pytest.approx(expected, rel=1e-9)
    # megatron-lm counts no vision: each vision component's delta is minus exact's
    lm_only = {d["component"]: d for d in run.differences["megatron-lm"]["components"]}
    assert lm_only["vision.mlp"]["delta_flops"] == pytest.approx(-exact["vision.mlp"], rel=1e-9)


def test_mfu_plausibility_thresholds():
    stats, _ = _stats()
    log = pl.DataFrame({"segment": 0, "iteration": np.arange(5, 31, 5), "elapsed_s": 2.0})
    base = analyze_run(log, SPEC, stats, world_size=8, peak_tflops=1e6, log_interval=5)
    rate = base.convention_summary()["megatron-bridge"]["tflops_per_gpu_mean"]  # the largest convention here
    for peak, status in ((rate / 0.5, "ok"), (rate / (MFU_PLAUSIBLE + 0.05), "warn"), (rate / 1.2, "fail")):
        run = analyze_run(log, SPEC, stats, world_size=8, peak_tflops=peak, log_interval=5)
        check = next(c for c in run_checks(run) if c.name == "mfu_plausibility")
        assert check.status == status, (peak, check.summary)
    assert list(CHECKS)[0] == "log_crosscheck"
