"""`analyze_run`: join iterations, per-iteration statistics and the model; windows x conventions."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterable, Mapping, Sequence

import numpy as np
import polars as pl

from ..arch.spec import ModelSpec
from ..errors import ConfigError
from ..stats import BatchStats
from .attribution import Attribution, fit_step_time
from .crosscheck import crosscheck_log
from .differences import convention_differences
from .health import run_health
from .flops_frame import with_flops
from .selection import WindowSelection, reliable_expr, select_windows
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
    coverage: dict = field(default_factory=dict)  # metadata samples per iteration vs the global batch size
    checks: list = field(default_factory=list)  # vlm_perf.analysis.checks.Check, filled by run_checks
    differences: dict = field(default_factory=dict)  # differences.convention_differences: per-component vs exact
    health: dict = field(default_factory=dict)  # health.run_health: wall-clock, goodput, step-time percentiles

    @property
    def selection(self) -> WindowSelection:
        """The one selection of windows every mean uses (`vlm_perf.analysis.selection`), computed once per
        windows frame."""
        cached = self.__dict__.get("_selection")
        if cached is None or cached[0] is not self.windows:
            cached = (self.windows, select_windows(self.windows))
            self.__dict__["_selection"] = cached
        return cached[1]

    def convention_summary(self) -> dict:
        """Mean TFLOP/s/GPU and MFU per convention over the selected windows (time-weighted)."""
        cached = self.__dict__.get("_convention_summary")
        if cached is not None and cached[0] is self.windows and cached[1] == (self.world_size, self.peak_tflops,
                                                                              tuple(self.conventions)):
            return {k: dict(v) for k, v in cached[2].items()}
        good = self.selection.windows
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
        self.__dict__["_convention_summary"] = (self.windows, (self.world_size, self.peak_tflops,
                                                               tuple(self.conventions)), out)
        return {k: dict(v) for k, v in out.items()}

    def reliable_windows(self) -> pl.DataFrame:
        """Windows every mean uses: not the first after a (re)start, statistics for every iteration
        (complete metadata), and a usable step time (`vlm_perf.analysis.selection`)."""
        return self.selection.windows

    def vision_share_mean(self) -> float | None:
        """`vlm_perf.analysis.selection.VISION_SHARE`: Σ exact vision / Σ exact training FLOPs over the
        selected windows (the same windows as every TFLOP/s and MFU mean)."""
        return self.selection.vision_share()


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
    global_batch_size: int | None = None,
    log_segments: pl.DataFrame | None = None,
    micro_batch_size: int | None = None,
    log_events: Mapping[str, int] | None = None,
) -> RunAnalysis:
    """Recompute FLOPs per iteration under each convention and aggregate over logged windows.

    ``iterations``: deduplicated iteration table (columns segment, iteration, elapsed_s,
    optionally tflops_per_gpu_logged). ``stats``: per-iteration statistics (``iteration`` + BatchStats
    fields) from metadata; without it ``estimate`` (statistics of one iteration, from the run
    configuration) is used and every number is labelled an estimate.

    ``global_batch_size`` (samples per iteration, used where the log's lines do not print
    ``global_batch_size``) is what the metadata's ``lm_samples`` per iteration is checked against:
    iterations with fewer samples (e.g. a DP rank's metadata missing) count as not covered, so their
    windows are excluded from means like windows with missing iterations. ``log_segments``: the
    per-(segment, iteration) log table (iterations a restart redid included) for the run-health block;
    ``log_events``: kind -> count of the log's events (checkpoints, validations, tracebacks, restart banners), the
    run-health block's ``log_events``. The analysis is titled `model_title` of the model.
    """
    messages: list[str] = []
    from ..flops.conventions import get_convention

    # the LM-only "before" baseline where it is defined for the family (InternVL, Gemma 3, ...: exact only)
    before = [BEFORE] if get_convention(BEFORE).covers(spec.family or spec.model_type) else []
    convs = list(dict.fromkeys([*before, *conventions]))
    if "exact" not in convs:
        convs.append("exact")
    estimated = stats is None
    if estimated:
        if estimate is None:
            raise ConfigError("no metadata and no run configuration to estimate from: give the per-microbatch "
                              "metadata, or state seq_length/global_batch_size (and an image grid) in run.yaml")
        stats = estimate_stats(iterations, estimate)
        messages.append("ESTIMATE: no per-microbatch metadata; statistics come from the run configuration")
    per_iteration = with_flops(stats.sort("iteration"), spec, convs, frozen, causal=causal)
    coverage = {"status": "estimate", "message": "no metadata: coverage cannot be checked"} if estimated else {}
    if not estimated:
        per_iteration, coverage = metadata_coverage(per_iteration, iterations, global_batch_size, micro_batch_size)
    interval = log_interval or infer_log_interval(iterations)
    windows = build_windows(iterations, interval)
    sums = [c for c in per_iteration.columns if c.endswith(("_total", "_vision", "_language")) or c.startswith("flops.")]
    sums += [c for c in ("lm_tokens", "_covered") if c in per_iteration.columns]
    windows = window_sums(windows, per_iteration, sums)
    if "_covered" in windows.columns:  # iterations short of samples do not cover their window
        windows = windows.with_columns(pl.col("covered_iterations").alias("metadata_iterations_present"),
                                       pl.col("_covered").round().cast(pl.Int64).alias("covered_iterations")).drop(
            "_covered")
        per_iteration = per_iteration.drop("_covered")
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
        (pl.col("covered_iterations") == pl.col("window_iterations")).alias("complete")).with_columns(
        reliable_expr().alias("reliable"))
    reliable = windows.filter(pl.col("reliable"))
    n = reliable.height
    attribution = fit_step_time(
        (reliable["window_seconds"] / reliable["window_iterations"]).to_numpy() if n else np.array([]),
        (reliable["exact_language"] / reliable["window_iterations"]).to_numpy() if n else np.array([]),
        (reliable["exact_vision"] / reliable["window_iterations"]).to_numpy() if n else np.array([]),
        world_size or 1)
    base = convs[0]  # the log is checked against the LM-only baseline, else exact (no baseline defined)
    crosscheck = crosscheck_log(windows, world_size, flops_column=f"{base}_total", convention=base, estimated=estimated)
    crosscheck["basis"] = "estimate from the run configuration" if estimated else "metadata"
    differences = convention_differences(per_iteration, spec, convs, frozen)
    segments = log_segments if log_segments is not None else iterations
    health = run_health(build_windows(segments, interval), windows, world_size)
    if log_events is not None:
        health["log_events"] = dict(log_events)
    return RunAnalysis(model_title(spec.name, spec.source, spec.model_type), convs, world_size, peak_tflops, estimated, per_iteration, windows, crosscheck,
                       attribution, gaps, messages, coverage, differences=differences, health=health)


def metadata_coverage(per_iteration: pl.DataFrame, iterations: pl.DataFrame, global_batch_size: int | None,
                      micro_batch_size: int | None = None) -> tuple[pl.DataFrame, dict]:
    """Samples per iteration in the metadata vs the global batch size (the log's, else the configured one).

    Adds ``_covered`` (1.0 when the iteration's metadata is complete) and returns a summary. An
    iteration with fewer samples than the global batch size misses some microbatches (typically
    a DP rank's file) and counts as not covered; one with more suggests replayed rows the reader could
    not deduplicate (counted, not excluded). When every iteration is short by the same factor, or most
    have more, the metadata may count samples differently (e.g. packed documents without ``samples``,
    which then defaults to ``len(seq_lens)``): stated, nothing excluded for it. With a known
    ``micro_batch_size`` the count is metadata rows (microbatches) x micro_batch_size instead of
    ``lm_samples``: one row per microbatch holds whatever the samples field says.
    """
    expected = None
    source = None
    if "global_batch_size" in iterations.columns and iterations["global_batch_size"].drop_nulls().len():
        logged = (iterations.filter(pl.col("global_batch_size").is_not_null())
                  .select(pl.col("iteration").cast(pl.Int64), pl.col("global_batch_size").cast(pl.Float64)
                          .alias("_expected")).unique("iteration").sort("iteration"))
        keyed = per_iteration.with_columns(pl.col("iteration").cast(pl.Int64).alias("_it")).sort("_it")
        # a logged line's batch size holds for the iterations of its window: the next logged line at or after
        expected = keyed.join_asof(logged.rename({"iteration": "_it"}), on="_it", strategy="forward").with_columns(
            pl.col("_expected").fill_null(strategy="backward").fill_null(strategy="forward"))["_expected"]
        per_iteration = keyed.drop("_it")
        source = "log"
    elif global_batch_size:
        expected = pl.Series("_expected", [float(global_batch_size)] * per_iteration.height)
        source = "run configuration"
    if micro_batch_size and "microbatches" in per_iteration.columns:
        samples = (per_iteration["microbatches"] * micro_batch_size).cast(pl.Float64)
        basis = "microbatches x micro_batch_size"
    else:
        samples = per_iteration["lm_samples"]
        basis = "samples"
    if expected is None or samples.sum() == 0:
        return per_iteration.with_columns(pl.lit(1.0).alias("_covered")), {
            "status": "unknown",
            "message": "the global batch size is unknown (neither the log nor run.yaml states it): samples per "
                       "iteration not checked"}
    short = (samples < expected).fill_null(False)
    excess = (samples > expected).fill_null(False)
    n_short, n_excess = int(short.sum()), int(excess.sum())
    ratio = (samples / expected)
    uniform = n_short == per_iteration.height and ratio.n_unique() == 1
    out = {"source": source, "counted_as": basis, "iterations": per_iteration.height, "iterations_short": n_short,
           "iterations_excess": n_excess, "global_batch_size": _mode(expected),
           "samples_median": float(samples.median())}
    if n_short:
        short_its = per_iteration.filter(short)["iteration"]
        out["short_iterations_first"] = short_its.head(20).to_list()
        out["short_ratio_min"] = float(ratio.filter(short).min())
        out["short_iterations_range"] = [int(short_its.min()), int(short_its.max())]
    if uniform:
        out["status"] = "uniform_short"
        covered = pl.lit(1.0)
    elif n_excess * 2 > per_iteration.height:  # most iterations: a counting difference, not replayed rows
        out["status"] = "excess_most"
        covered = pl.Series("_c", (~short).cast(pl.Float64))
    else:
        out["status"] = "short" if n_short else ("excess" if n_excess else "ok")
        covered = pl.Series("_c", (~short).cast(pl.Float64))
    return per_iteration.with_columns(covered.alias("_covered")), out


def _mode(values: pl.Series) -> float | None:
    values = values.drop_nulls()
    return float(values.mode().sort()[0]) if values.len() else None


def _gaps(iterations: pl.DataFrame, per_iteration: pl.DataFrame, windows: pl.DataFrame, interval: int) -> dict:
    lo, hi = int(iterations["iteration"].min()), int(iterations["iteration"].max())
    meta = per_iteration["iteration"]
    outside = int(((meta < lo - interval) | (meta > hi)).sum())
    incomplete = windows.filter(pl.col("covered_iterations") < pl.col("window_iterations"))
    present = "metadata_iterations_present" if "metadata_iterations_present" in windows.columns else \
        "covered_iterations"
    missing = int((windows["window_iterations"] - windows[present]).clip(lower_bound=0).sum()) if windows.height else 0
    return {"log_iterations": iterations.height, "metadata_iterations": per_iteration.height,
            "log_interval": interval, "metadata_iterations_missing": missing,
            "log_iterations_without_metadata": incomplete.height,
            "incomplete_windows": incomplete.select("iteration").to_series().to_list()[:20],
            "metadata_iterations_outside_log": outside}


def model_title(name: str, source: str = "", model_type: str = "") -> str:
    """A model's name for titles: the preset name, or ``qwen2_vl (run/config.json)`` for a config file
    whose spec is only called "config"."""
    generic = not name or name.lower() in ("config", "config.json", "dict")
    if not generic:
        return name
    if source and source not in ("dict",):
        path = Path(source.removeprefix("preset:"))
        where = f"{path.parent.name}/{path.name}" if path.parent.name else path.name
        return f"{model_type or 'model'} ({where})"
    return model_type or name or "model"
