"""Cost of the report's checks, run health and convention differences next to the analysis they extend.

Input (INVENTED, seeded with numpy default_rng(SEED)): a run of ``--iterations`` iterations of
qwen2.5-vl-7b statistics (random token counts and image patches per iteration), logged every
``--interval`` iterations with timestamps, one restart at the middle (the job resumes 3 windows
back) and one NaN step time. Times, interleaved in this process over ``--repeat`` rounds (median):

* ``analyze_run`` (everything, health and differences included) - the baseline;
* ``run_health`` alone, ``convention_differences`` alone and ``run_checks`` alone, as a fraction of it.

Prints the load average before and after: the machine is shared, so only ratios measured in the
same round mean anything.

    python benchmarks/bench_report.py --iterations 200000 --interval 10 --repeat 5
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
from datetime import datetime, timedelta

import numpy as np
import polars as pl

from vlm_perf.analysis import analyze_run
from vlm_perf.analysis.checks import run_checks
from vlm_perf.analysis.differences import convention_differences
from vlm_perf.analysis.health import run_health
from vlm_perf.analysis.windows import build_windows
from vlm_perf.arch import load_model

SEED = 2026


def make_inputs(iterations: int, interval: int):
    rng = np.random.default_rng(SEED)
    its = np.arange(1, iterations + 1)
    tokens = rng.integers(200_000, 260_000, iterations)
    patches = rng.integers(0, 64, iterations) * 1024
    stats = pl.DataFrame({"iteration": its, "lm_tokens": tokens, "lm_tokens_sq": tokens * 4096,
                          "lm_sequences": 64, "lm_samples": 64, "lm_padded_tokens": 64 * 4096,
                          "vision_patches": patches, "vision_patches_sq_frame": patches * 1024,
                          "vision_merged_tokens": patches // 4, "vision_window_sq": patches * 1024})
    ends = np.arange(interval, iterations + 1, interval)
    half = len(ends) // 2
    seg_ends = np.concatenate([ends[:half], ends[half - 3:]])  # restart 3 windows back, replayed
    segment = np.concatenate([np.zeros(half, int), np.ones(len(ends) - half + 3, int)])
    elapsed = rng.uniform(0.9, 1.1, len(seg_ends))
    elapsed[len(elapsed) // 3] = np.nan
    seconds = np.nan_to_num(elapsed, nan=1.0) * interval
    stamps = np.cumsum(seconds) + np.where(segment == 1, 600.0, 0.0)
    t0 = datetime(2025, 1, 1)
    log = pl.DataFrame({"segment": segment, "iteration": seg_ends, "elapsed_s": elapsed,
                        "timestamp": [t0 + timedelta(seconds=float(s)) for s in stamps],
                        "global_batch_size": 64, "tflops_per_gpu_logged": 400.0})
    last = log.unique("iteration", keep="last").sort("iteration")
    return stats, log, last


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--iterations", type=int, default=200_000)
    ap.add_argument("--interval", type=int, default=10)
    ap.add_argument("--repeat", type=int, default=5)
    args = ap.parse_args()
    spec = load_model("qwen2.5-vl-7b")
    stats, log, last = make_inputs(args.iterations, args.interval)
    print(f"input: INVENTED (numpy default_rng({SEED})), {args.iterations:,} iterations, {log.height:,} log lines, "
          f"one restart, one NaN step time")
    print(f"load average before: {os.getloadavg()}")
    times: dict[str, list[float]] = {"analyze_run": [], "run_health": [], "convention_differences": [],
                                     "run_checks": []}
    for _ in range(args.repeat):
        t = time.perf_counter()
        run = analyze_run(last, spec, stats, world_size=64, peak_tflops=989.0, log_interval=args.interval,
                          log_segments=log)
        times["analyze_run"].append(time.perf_counter() - t)
        t = time.perf_counter()
        run_health(build_windows(log, args.interval), run.windows, 64)
        times["run_health"].append(time.perf_counter() - t)
        t = time.perf_counter()
        convention_differences(run.per_iteration, spec, run.conventions)
        times["convention_differences"].append(time.perf_counter() - t)
        t = time.perf_counter()
        run_checks(run)
        times["run_checks"].append(time.perf_counter() - t)
    base = statistics.median(times["analyze_run"])
    for name, values in times.items():
        med = statistics.median(values)
        print(f"{name:24s} median {med * 1e3:9.1f} ms   {med / base:6.3f} x analyze_run")
    print(f"load average after: {os.getloadavg()}")


if __name__ == "__main__":
    main()
