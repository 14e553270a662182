"""`analyze_run`: join iterations, per-iteration statistics and the model; windows x conventions."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Iterable, Sequence

import numpy as np
import polars as pl

from ..arch.spec import ModelSpec
from ..stats import BatchStats
from .attribution import Attribution, fit_step_time
from .crosscheck import crosscheck_log
from .flops_frame import with_flops
from .windows import build_windows, infer_log_interval, window_sums

DEFAULT_CONVENTIONS = ("megatron-lm", "exact", "megatron-bridge", "mbridge-pr2575")
BEFORE = "megatron-lm"  # LM-only: what a pre-vision Megatron/Megatron-Bridge log printed


@dataclass
class RunAnalysis:
    """Everything the report shows. Frames are polars; FLOPs in FLOPs, rates in TFLOP/s/GPU."""

    model: str
    conventions: list[str]
    world_size: int | None
    peak_tflops: float | None
    estimated: bool  # True when statistics come from the run configuration, not metadata
    per_iteration: pl.DataFrame  # iteration, stats, <conv>_total|vision|language, flops.<component>
    windows: pl.DataFrame  # per logged window: seconds, FLOPs sums, <conv>_tflops_per_gpu, <conv>_mfu
    crosscheck: dict
    attribution: Attribution
    gaps: dict
    messages: list[str] = field(default_factory=list)

    def convention_summary(self) -> dict:
        """Mean TFLOP/s/GPU and MFU per convention over complete windows (time-weighted)."""
        good = self.reliable_windows()
        out = {}
        for conv in self.conventions:
            entry = {"tflops_per_gpu_mean": None, "mfu_mean": None, "flops_total": _sum(self.per_iteration,
                                                                                           f"{conv}_total")}
            if self.world_size and good.height:
                seconds = good["window_seconds"].sum()
                entry["tflops_per_gpu_mean"] = float(good[f"{conv}_total"].sum() / (seconds * self.world_size * 1e12))
                if self.peak_tflops:
                    entry["mfu_mean"] = entry["tflops_per_gpu_mean"] / self.peak_tflops
            out[conv] = entry
        return out

    def reliable_windows(self) -> pl.DataFrame:
        return self.windows.filter(~pl.col("first_in_segment") & (pl.col("covered_iterations")
                                                                   == pl.col("window_iterations")))

    def vision_share_mean(self) -> float | None:
        if "exact_total" not in self.per_iteration.columns:
            return None
        total = _sum(self.per_iteration, "exact_total")
        return _sum(self.per_iteration, "exact_vision") / total if total else None


def _sum(frame: pl.DataFrame, column: str) -> float:
    return float(frame[column].sum()) if column in frame.columns else 0.0


def estimate_stats(iterations: pl.DataFrame, per_iteration: BatchStats) -> pl.DataFrame:
    """Per-iteration statistics from the run configuration (one constant row per logged iteration range)."""
    last = int(iterations["iteration"].max())
    values = per_iteration.as_dict()
    return pl.DataFrame({"iteration": np.arange(1, last + 1)}).with_columns(
        [pl.lit(float(v), dtype=pl.Float64).alias(k) for k, v in values.items()])


def analyze_run(
    iterations: pl.DataFrame,
    spec: ModelSpec,
    stats: pl.DataFrame | None = None,
    *,
    world_size: int | None = None,
    peak_tflops: float | None = None,
    conventions: Sequence[str] = DEFAULT_CONVENTIONS,
    frozen: Iterable[str] = (),
    estimate: BatchStats | None = None,
    log_interval: int | None = None,
    causal: str = "half",
) -> RunAnalysis:
    """Recompute FLOPs per iteration under each convention and aggregate over logged windows.

    ``iterations``: deduplicated iteration table (columns segment, iteration, elapsed_s,
    optionally tflops_per_gpu_logged). ``stats``: per-iteration statistics (``iteration`` + BatchStats
    fields) from metadata; without it ``estimate`` (statistics of one iteration, from the run
    configuration) is used and every number is labelled an estimate.
    """
    messages: list[str] = []
    convs = list(dict.fromkeys([BEFORE, *conventions]))
    if "exact" not in convs:
        convs.append("exact")
    estimated = stats is None
    if estimated:
        if estimate is None:
            raise ValueError("no metadata and no run configuration to estimate from: pass --metadata, or state "
                             "seq_length/global_batch_size (and an image grid) in run.yaml")
        stats = estimate_stats(iterations, estimate)
        messages.append("ESTIMATE: no per-microbatch metadata; statistics come from the run configuration")
    per_iteration = with_flops(stats.sort("iteration"), spec, convs, frozen, causal=causal)
    interval = log_interval or infer_log_interval(iterations)
    windows = build_windows(iterations, interval)
    sums = [c for c in per_iteration.columns if c.endswith(("_total", "_vision", "_language")) or c.startswith("flops.")]
    windows = window_sums(windows, per_iteration, sums)
    gaps = _gaps(iterations, per_iteration, windows, interval)
    if gaps["log_iterations_without_metadata"]:
        messages.append(f"{gaps['log_iterations_without_metadata']} logged windows lack metadata for some iterations; "
                        "their rates are marked incomplete and excluded from means")
    if gaps["metadata_iterations_outside_log"]:
        messages.append(f"{gaps['metadata_iterations_outside_log']} metadata iterations fall outside the logged range")
    if world_size is None:
        messages.append("world size unknown: pass --gpus N or set num_gpus in run.yaml; TFLOP/s/GPU left empty")
    if peak_tflops is None:
        messages.append("GPU peak unknown: pass --gpu TYPE or --peak-tflops X; MFU left empty")
    rate_cols = []
    for conv in convs:
        rate = pl.col(f"{conv}_total") / (pl.col("window_seconds") * (world_size or float("nan")) * 1e12)
        rate_cols.append(rate.alias(f"{conv}_tflops_per_gpu"))
        rate_cols.append((rate / (peak_tflops or float("nan"))).alias(f"{conv}_mfu"))
    windows = windows.with_columns(rate_cols).with_columns(
        (pl.col("covered_iterations") == pl.col("window_iterations")).alias("complete"))
    reliable = windows.filter(~pl.col("first_in_segment") & pl.col("complete"))
    n = reliable.height
    attribution = fit_step_time(
        (reliable["window_seconds"] / reliable["window_iterations"]).to_numpy() if n else np.array([]),
        (reliable["exact_language"] / reliable["window_iterations"]).to_numpy() if n else np.array([]),
        (reliable["exact_vision"] / reliable["window_iterations"]).to_numpy() if n else np.array([]),
        world_size or 1)
    crosscheck = crosscheck_log(windows, world_size) if not estimated else {
        "status": "estimate", "message": "no metadata: cross-check would compare the log with itself"}
    return RunAnalysis(spec.name, convs, world_size, peak_tflops, estimated, per_iteration, windows, crosscheck,
                       attribution, gaps, messages)


def _gaps(iterations: pl.DataFrame, per_iteration: pl.DataFrame, windows: pl.DataFrame, interval: int) -> dict:
    lo, hi = int(iterations["iteration"].min()), int(iterations["iteration"].max())
    meta = per_iteration["iteration"]
    outside = int(((meta < lo - interval) | (meta > hi)).sum())
    incomplete = windows.filter(pl.col("covered_iterations") < pl.col("window_iterations"))
    return {"log_iterations": iterations.height, "metadata_iterations": per_iteration.height,
            "log_iterations_without_metadata": incomplete.height,
            "incomplete_windows": incomplete.select("iteration").to_series().to_list()[:20],
            "metadata_iterations_outside_log": outside}
