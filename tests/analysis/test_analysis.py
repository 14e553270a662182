"""Windowed TFLOP/s/GPU, cross-check, attribution and explain against hand computations."""

import numpy as np
import polars as pl
import pytest

from vlm_perf.analysis import analyze_run, explain_delta, fit_step_time
from vlm_perf.arch import load_model

PER_TOKEN = 23_006_281_728  # Megatron FLOPs/token, Qwen3-30B-A3B at 4096 (hand-derived in tests/flops)
TOKENS_PER_ITER = 8 * 4096


def _text_stats(iterations):
    return pl.DataFrame({"iteration": list(iterations)}).with_columns(
        lm_tokens=pl.lit(TOKENS_PER_ITER), lm_tokens_sq=pl.lit(8 * 4096**2), lm_sequences=pl.lit(8),
        lm_samples=pl.lit(8), lm_padded_tokens=pl.lit(TOKENS_PER_ITER))


def _log(logged_world=8, times=(2.0, 2.0, 3.0)):
    its = [10, 20, 30]
    f_iter = PER_TOKEN * TOKENS_PER_ITER
    logged = [f_iter / (t * logged_world * 1e12) for t in times]
    return pl.DataFrame({"segment": [0, 0, 0], "iteration": its, "elapsed_s": list(times),
                         "tflops_per_gpu_logged": logged})


def test_windowed_tflops_by_hand():
    spec = load_model("qwen3-30b-a3b")
    run = analyze_run(_log(), spec, _text_stats(range(1, 31)), world_size=8, peak_tflops=989.0, log_interval=10)
    w = run.windows.sort("iteration")
    # window (10, 20]: 10 iterations x F / (10 x 2.0 s x 8 GPUs x 1e12)
    hand = 10 * PER_TOKEN * TOKENS_PER_ITER / (10 * 2.0 * 8 * 1e12)
    assert w["megatron-lm_tflops_per_gpu"][1] == pytest.approx(hand, rel=1e-12)
    assert w["megatron-lm_mfu"][1] == pytest.approx(hand / 989.0, rel=1e-12)
    assert w["first_in_segment"].to_list() == [True, False, False]
    # text-only: exact differs from megatron-lm only by the router GEMM (2*h*E per token per layer)
    router = 3 * 48 * 2 * 2048 * 128 * TOKENS_PER_ITER
    assert w["exact_total"][1] - w["megatron-lm_total"][1] == pytest.approx(10 * router, rel=1e-9)
    summary = run.convention_summary()
    seconds = 10 * 2.0 + 10 * 3.0  # reliable windows (10,20] and (20,30]
    assert summary["megatron-lm"]["tflops_per_gpu_mean"] == pytest.approx(
        20 * PER_TOKEN * TOKENS_PER_ITER / (seconds * 8 * 1e12), rel=1e-12)
    assert run.vision_share_mean() == 0


def test_crosscheck_recovers_world_size():
    spec = load_model("qwen3-30b-a3b")
    ok = analyze_run(_log(logged_world=8), spec, _text_stats(range(1, 31)), world_size=8, log_interval=10)
    assert ok.crosscheck["status"] == "ok"
    assert ok.crosscheck["implied_world_size"] == pytest.approx(8, rel=1e-12)
    bad = analyze_run(_log(logged_world=16), spec, _text_stats(range(1, 31)), world_size=8, log_interval=10)
    assert bad.crosscheck["status"] == "mismatch"
    assert bad.crosscheck["implied_world_size_rounded"] == 16
    assert any("16 GPUs" in c for c in bad.crosscheck["likely_causes"])


def test_gaps_are_reported_not_hidden():
    spec = load_model("qwen3-30b-a3b")
    run = analyze_run(_log(), spec, _text_stats([i for i in range(1, 31) if i != 15]), world_size=8, log_interval=10)
    w = run.windows.sort("iteration")
    assert w["complete"].to_list() == [True, False, True]
    assert run.gaps["incomplete_windows"] == [20]
    assert any("lack metadata" in m for m in run.messages)


def test_unknown_world_size_leaves_rates_empty():
    spec = load_model("qwen3-30b-a3b")
    run = analyze_run(_log(), spec, _text_stats(range(1, 31)), log_interval=10)
    assert run.windows["exact_tflops_per_gpu"].is_nan().all()
    assert run.crosscheck["implied_world_size_rounded"] == 8
    assert any("world size unknown" in m for m in run.messages)


def test_attribution_recovers_rates():
    rng = np.random.default_rng(0)
    gpus, lm_rate, vis_rate, overhead = 8, 400.0, 150.0, 0.3  # TFLOP/s/GPU, seconds
    lm = rng.uniform(2e15, 3e15, 40)
    vis = rng.uniform(0, 8e14, 40)
    seconds = overhead + lm / (lm_rate * gpus * 1e12) + vis / (vis_rate * gpus * 1e12)
    fit = fit_step_time(seconds, lm, vis, gpus)
    assert fit.ok
    assert fit.lm_tflops_per_gpu == pytest.approx(lm_rate, rel=1e-6)
    assert fit.vision_tflops_per_gpu == pytest.approx(vis_rate, rel=1e-6)
    assert fit.overhead_s == pytest.approx(overhead, abs=1e-6)


def test_attribution_refuses_unidentifiable():
    fit = fit_step_time(np.ones(10), np.arange(10.0), 2 * np.arange(10.0), 8)
    assert not fit.ok


def test_explain_494_to_554():
    # reference §3: 554/494 - 1 = 0.121; ~3.03 GF per patch at 1024 patches/frame; 23.006 GF per LM token
    e = explain_delta(load_model("qwen3-vl-30b-a3b"), 494, 554, seq_len=4096)
    mid = next(f for f in e.frames if f.patches_per_frame == 1024)
    assert round(mid.vision_flops_per_visual_token / 4 / 1e9, 2) == 3.04  # per patch, PR #2575 incl. patch embed
    hand_phi = (554 / 494 - 1) * 23.006281728e9 / mid.vision_flops_per_visual_token
    assert mid.visual_token_share == pytest.approx(hand_phi, rel=1e-9)
    assert 0.20 < mid.visual_token_share < 0.24
    assert 0.5 < mid.vision_to_lm_per_visual_token < 0.6  # far above the 1/6 parameter ratio
    assert e.param_ratio == pytest.approx(538_631_408 / 3_041_867_776, rel=1e-3)


def test_explain_with_a_convention_that_counts_no_vision_says_so():
    """mbridge-pr2575 counts no vision for Qwen2.5-VL (its number is megatron-lm's): 'after' cannot move with vision.
    Before: ZeroDivisionError (an internal error) when the two numbers were equal, as such a report prints them; now
    the answer says so, solves nothing, and names the conventions that count its vision."""
    equal = explain_delta(load_model("qwen2.5-vl-7b"), 391.9, 391.9, seq_len=8192)
    assert equal.counts_no_vision and "exact" in equal.vision_conventions
    assert all(f.visual_token_share is None for f in equal.frames)
    assert "mbridge-pr2575 convention counts no vision FLOPs for qwen2.5-vl-7b" in equal.statement
    assert explain_delta(load_model("qwen2.5-vl-7b"), 391.9, 420.8, convention="exact", seq_len=8192).ratio > 1


def test_explain_text_model_rejected():
    with pytest.raises(ValueError, match="no vision tower"):
        explain_delta(load_model("qwen3-30b-a3b"), 494, 554)


def test_crosscheck_names_the_convention_a_log_used():
    # every sequence padded from 3000 to 4096 tokens; the log bills the LM on padded tokens
    # (as Megatron-Bridge does): megatron-lm (real tokens) mismatches, Bridge's LM-only term matches
    spec = load_model("qwen3-30b-a3b")
    stats = pl.DataFrame({"iteration": list(range(1, 31))}).with_columns(
        lm_tokens=pl.lit(8 * 3000), lm_tokens_sq=pl.lit(8 * 3000**2), lm_sequences=pl.lit(8), lm_samples=pl.lit(8),
        lm_padded_tokens=pl.lit(8 * 4096))
    h, L, q, kv, fe, k, V = 2048, 48, 4096, 512, 768, 8, 151936
    linear_per_token = 6 * h * 3 * fe * k * L + 6 * L * (h * (q + 2 * kv) + q * h) + 6 * h * V
    bridge_lm = linear_per_token * 8 * 4096 + 6 * q * L * 8 * 3000**2  # padded linear terms, real S2
    log = pl.DataFrame({"segment": [0, 0, 0], "iteration": [10, 20, 30], "elapsed_s": [2.0, 2.0, 2.0],
                        "tflops_per_gpu_logged": [bridge_lm / (2.0 * 8 * 1e12)] * 3})
    run = analyze_run(log, spec, stats, world_size=8, log_interval=10)
    cc = run.crosscheck
    assert cc["status"] == "mismatch"
    # a text-only model: Bridge's total is its LM-only term
    assert cc["candidates"]["megatron-bridge"] == pytest.approx(1.0, rel=1e-12)
    assert cc["candidates"]["megatron-lm"] == pytest.approx(bridge_lm / (linear_per_token * 8 * 3000
                                                                          + 6 * q * L * 8 * 3000**2), rel=1e-12)
    assert any("megatron-bridge" in cause for cause in cc["likely_causes"])


def test_window_boundaries_are_exclusive_start_inclusive_end():
    # per-iteration statistics that differ, so an off-by-one window boundary changes the sums
    spec = load_model("qwen3-30b-a3b")
    its = list(range(1, 31))
    stats = pl.DataFrame({"iteration": its, "lm_tokens": [1000 * i for i in its],
                          "lm_tokens_sq": [(1000 * i) ** 2 for i in its], "lm_sequences": 1, "lm_samples": 1,
                          "lm_padded_tokens": [1000 * i for i in its]})
    log = pl.DataFrame({"segment": [0, 0, 0], "iteration": [10, 20, 30], "elapsed_s": [2.0, 3.0, 4.0]})
    run = analyze_run(log, spec, stats, world_size=8, log_interval=10)
    h, L, q, kv, fe, k, V = 2048, 48, 4096, 512, 768, 8, 151936
    linear_per_token = 6 * h * 3 * fe * k * L + 6 * L * (h * (q + 2 * kv) + q * h) + 6 * h * V

    def megatron(i):  # one sequence of 1000*i tokens
        return linear_per_token * 1000 * i + 6 * q * L * (1000 * i) ** 2

    w = run.windows.sort("iteration")
    assert w["megatron-lm_total"][1] == pytest.approx(sum(megatron(i) for i in range(11, 21)), rel=1e-12)
    assert w["megatron-lm_total"][2] == pytest.approx(sum(megatron(i) for i in range(21, 31)), rel=1e-12)
    assert w["window_seconds"].to_list() == [20.0, 30.0, 40.0]
    assert w["megatron-lm_tflops_per_gpu"][2] == pytest.approx(
        sum(megatron(i) for i in range(21, 31)) / (40.0 * 8 * 1e12), rel=1e-12)
