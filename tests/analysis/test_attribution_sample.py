"""Step-time attribution recovers the step-time model a synthetic run was generated with."""

from pathlib import Path

import numpy as np
import pytest

from vlm_perf.analysis import fit_step_time
from vlm_perf.pipeline import load_run
from vlm_perf.synth.presets import QWEN25_VL_7B_VIDEO as RUN
from vlm_perf.synth.steptime import COMPONENT_GROUPS, efficiency

ROOT = Path(__file__).resolve().parents[2]


def test_no_overhead_model_when_lm_flops_are_constant():
    # packed training: LM FLOPs per iteration constant, vision varies; no fixed overhead
    rng = np.random.default_rng(3)
    gpus, lm_rate, vis_rate = 64, 450.0, 250.0  # TFLOP/s/GPU
    lm = np.full(30, 5e16)
    vis = rng.uniform(1e15, 6e15, 30)
    seconds = lm / (lm_rate * gpus * 1e12) + vis / (vis_rate * gpus * 1e12)
    fit = fit_step_time(seconds, lm, vis, gpus)
    assert fit.ok and fit.model == "no_overhead" and "effective rates" in fit.reason
    assert fit.lm_tflops_per_gpu == pytest.approx(lm_rate, rel=1e-9)
    assert fit.vision_tflops_per_gpu == pytest.approx(vis_rate, rel=1e-9)


def test_sample_run_rates_match_its_generator():
    """Sample (c) alternates media-heavy and text-heavy phases, so the vision share varies between
    windows. Its generator's rates per part are sum(F) / sum(F / (eff * peak)) / (1 + bubble); the fit
    comes out a little lower because it also carries the fixed per-step overhead and the slowest
    data-parallel rank sets each step's time."""
    analysis = load_run(ROOT / "sample_logs" / RUN.name).analysis
    per = analysis.per_iteration
    bubble = (RUN.parallel.pp - 1) / (RUN.parallel.vpp * RUN.num_microbatches)

    def generator_rate(prefix):
        names = [c for c in COMPONENT_GROUPS if c.startswith(prefix)]
        flops = sum(per[f"flops.{c}"].sum() for c in names)
        seconds = sum(per[f"flops.{c}"].sum() / (efficiency(RUN.timing, COMPONENT_GROUPS[c]) * RUN.timing.peak_tflops)
                      for c in names)
        return flops / seconds / (1 + bubble)

    fit = analysis.attribution
    assert fit.ok, fit.reason
    assert 0.85 < fit.lm_tflops_per_gpu / generator_rate("lm.") <= 1.0
    assert 0.85 < fit.vision_tflops_per_gpu / generator_rate("vision.") <= 1.05
    assert fit.vision_tflops_per_gpu < fit.lm_tflops_per_gpu  # the ViT runs less efficiently, as generated
