"""Checks on hand-made runs: replayed metadata, all step times bad, links outside the run; fuzzed step times."""

import json
import shutil
from pathlib import Path

import numpy as np
import polars as pl
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from vlm_perf.analysis import analyze_run
from vlm_perf.analysis.checks import run_checks
from vlm_perf.arch import load_model
from tests.support import run_main  # the CLI entry point in-process (same exit statuses, one-line errors)

SPEC = load_model("qwen2.5-vl-7b")
ROOT = Path(__file__).resolve().parents[2]


def _stats(samples):
    its = np.arange(1, len(samples) + 1)
    return pl.DataFrame({"iteration": its, "lm_tokens": np.asarray(samples) * 4096,
                         "lm_tokens_sq": np.asarray(samples) * 4096**2, "lm_sequences": samples,
                         "lm_samples": samples, "lm_padded_tokens": np.asarray(samples) * 4096, "vision_patches": 0})


def _log(n, elapsed):
    return pl.DataFrame({"segment": 0, "iteration": np.arange(5, n + 1, 5), "elapsed_s": elapsed,
                         "global_batch_size": 16})


def _check(run, name):
    return next(c for c in run_checks(run) if c.name == name)


def test_excess_samples_flag_undeduplicated_replay():
    samples = [16] * 40
    samples[12] = samples[13] = 32  # iterations 13 and 14 recorded twice
    run = analyze_run(_log(40, 1.0), SPEC, _stats(samples), world_size=8, peak_tflops=989.0, log_interval=5)
    replay = _check(run, "metadata_replay")
    assert replay.status == "fail" and "2 iterations hold more samples" in replay.summary
    assert _check(run, "metadata_coverage").status == "ok"


def test_samples_counted_differently_is_not_a_replay():
    run = analyze_run(_log(40, 1.0), SPEC, _stats([48] * 40), world_size=8, log_interval=5)  # 3 docs per pack
    assert _check(run, "metadata_replay").status == "ok"
    cov = _check(run, "metadata_coverage")
    assert cov.status == "warn" and "counted differently" in cov.summary
    assert run.reliable_windows().height == 7  # nothing excluded for it (8 windows, the first one aside)


def test_microbatch_rows_count_when_the_micro_batch_size_is_known():
    stats = _stats([48] * 40).with_columns(pl.lit(16).alias("microbatches"))  # 16 rows of 3 packed documents
    stats = stats.with_columns(pl.when(pl.col("iteration").is_between(11, 20)).then(8).otherwise(16)
                               .alias("microbatches"))  # iterations 11..20 lost half their rows
    run = analyze_run(_log(40, 1.0), SPEC, stats, world_size=8, log_interval=5, micro_batch_size=1)
    cov = _check(run, "metadata_coverage")
    assert cov.status == "fail" and "10 iterations (11..20)" in cov.summary and "50% of the 16 samples" in cov.summary
    assert run.coverage["counted_as"] == "microbatches x micro_batch_size"
    assert run.reliable_windows().height == 7 - 2  # windows 15 and 20 excluded


def test_undecidable_replay_note_warns():
    run = analyze_run(_log(40, 1.0), SPEC, _stats([16] * 40), world_size=8, log_interval=5)
    note = "microbatch does not number the microbatches of an iteration (one value for several rows), so rows a " \
           "resumed job recorded twice cannot be told apart: none dropped"
    check = next(c for c in run_checks(run, metadata_diagnostics={"notes": [note]}) if c.name == "metadata_replay")
    assert check.status == "warn" and "cannot be told apart" in check.summary


def test_every_step_time_bad_fails_and_means_are_empty():
    run = analyze_run(_log(40, float("nan")), SPEC, _stats([16] * 40), world_size=8, peak_tflops=989.0,
                      log_interval=5)
    assert _check(run, "step_times").status == "fail"
    assert all(e["tflops_per_gpu_mean"] is None for e in run.convention_summary().values())


@settings(derandomize=True, deadline=None, max_examples=60)
@given(st.lists(st.one_of(st.floats(0.5, 2.0), st.sampled_from([float("nan"), float("inf"), -1.0, 0.0, 1e6])),
                min_size=8, max_size=8))
def test_bad_step_times_never_poison_the_means(elapsed):
    run = analyze_run(_log(40, pl.Series(elapsed)), SPEC, _stats([16] * 40), world_size=8, peak_tflops=989.0,
                      log_interval=5)
    check = _check(run, "step_times")
    bad = sum(1 for i, e in enumerate(elapsed) if not (np.isfinite(e) and e > 0))
    assert sum(check.details["excluded"].get(r, 0) for r in ("nan", "inf", "non_positive")) == bad
    for entry in run.convention_summary().values():
        tf = entry["tflops_per_gpu_mean"]
        assert tf is None or (np.isfinite(tf) and tf > 0)
    # by hand: the mean is total FLOPs of the used windows over their seconds
    good = run.reliable_windows()
    if good.height:
        expected = good["exact_total"].sum() / (good["window_seconds"].sum() * 8 * 1e12)
        assert run.convention_summary()["exact"]["tflops_per_gpu_mean"] == pytest.approx(expected)
        assert good["elapsed_s"].is_finite().all() and (good["elapsed_s"] > 0).all()


def test_symlinked_log_outside_the_run_is_noted(tmp_path):
    sample = ROOT / "sample_logs" / "qwen3-vl-30b-a3b-sft"
    run = tmp_path / "run"
    run.mkdir()
    (run / "train.log").symlink_to(sample / "train.log")
    shutil.copy(sample / "metadata.jsonl.gz", run)
    shutil.copy(sample / "run.yaml", run)
    r = run_main("report", run, "-o", tmp_path / "out")
    assert r.returncode == 0, r.stderr
    s = json.loads((tmp_path / "out" / "summary.json").read_text())
    assert any("train.log is a symlink to" in m and "outside the run folder" in m for m in s["messages"])
