"""Checks a report states before any number: can the headline be trusted, and if not, why.

Each check is a small function registered where it is defined (``@register_check``; a duplicate
name is an error) that turns a finished `RunAnalysis` plus the readers' diagnostics into one
`Check`: a status and a one-line summary that names the problem and its size.

Statuses, in order of severity:

* ``fail`` - a number in the headline is wrong or unsupported as it stands (the log's own number
  disagrees with the recomputation, MFU above 100%, metadata missing for some iterations ...);
  ``vlm-perf report --strict`` exits with status 4 when any check fails;
* ``warn`` - worth a look, numbers still usable (values excluded from means, restarts, MFU above
  the plausibility threshold);
* ``ok`` - checked and fine; ``skip`` - could not be checked (the input lacks what it needs).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any, Callable

import polars as pl

from .run import RunAnalysis
from .windows import EXCLUSION_REASONS, OUTLIER_FACTOR

#: MFU above this (fraction of the dense peak) is flagged as implausible; above 1.0 it is impossible
MFU_PLAUSIBLE = 0.70
SEVERITY = {"fail": 0, "warn": 1, "ok": 2, "skip": 3}


@dataclass
class Check:
    name: str
    status: str  # fail | warn | ok | skip
    summary: str  # one line, names the problem and its size
    details: dict = field(default_factory=dict)

    def to_dict(self) -> dict:
        return asdict(self)


@dataclass
class CheckInputs:
    run: RunAnalysis
    log_diagnostics: dict = field(default_factory=dict)
    metadata_diagnostics: dict = field(default_factory=dict)
    #: `vlm_perf.analysis.evidence.Evidence` gathered by the pipeline; the evidence checks say nothing without it
    evidence: Any = None


#: a check returns None when it has nothing to examine in this context (the evidence checks without evidence)
CheckFn = Callable[[CheckInputs], "Check | None"]
CHECKS: dict[str, CheckFn] = {}


def register_check(name: str) -> Callable[[CheckFn], CheckFn]:
    """Register a check under ``name`` (in definition order); a duplicate name is an error."""
    def decorate(fn: CheckFn) -> CheckFn:
        if name in CHECKS:
            raise ValueError(f"check {name!r} is already registered")
        CHECKS[name] = fn
        return fn
    return decorate


def run_checks(run: RunAnalysis, log_diagnostics: dict | None = None,
               metadata_diagnostics: dict | None = None, evidence: Any = None) -> list[Check]:
    """Every registered check, most severe first (stable within a severity)."""
    inputs = CheckInputs(run, log_diagnostics or {}, metadata_diagnostics or {}, evidence)
    checks = [c for c in (fn(inputs) for fn in CHECKS.values()) if c is not None]
    return sorted(checks, key=lambda c: SEVERITY[c.status])


def failed(checks: list[Check]) -> list[Check]:
    return [c for c in checks if c.status == "fail"]


# ------------------------------------------------------------------------------------------------
@register_check("log_crosscheck")
def _crosscheck(inputs: CheckInputs) -> Check:
    cc = inputs.run.crosscheck
    basis = " (against the estimate from the run configuration)" if inputs.run.estimated else ""
    status = cc.get("status")
    if status == "ok":
        return Check("log_crosscheck", "ok", f"log cross-check ok{basis}: logged / recomputed "
                     f"{cc['convention']} = {cc['ratio_logged_to_recomputed']:.3f} over {cc['windows']} windows; "
                     f"the log's number implies {cc['implied_world_size']:.1f} GPUs", cc)
    if status == "mismatch":
        causes = cc.get("likely_causes", [])
        return Check("log_crosscheck", "fail", f"log cross-check MISMATCH{basis}: logged / recomputed "
                     f"{cc['convention']} = {cc['ratio_logged_to_recomputed']:.3f} over {cc['windows']} windows; "
                     f"likely: {causes[0] if causes else 'unknown'}", cc)
    if status == "world_size_inferred":
        return Check("log_crosscheck", "warn", f"world size not stated; the log's number implies "
                     f"{cc['implied_world_size']:.1f} GPUs (pass --gpus to check it){basis}", cc)
    return Check("log_crosscheck", "skip", f"log cross-check not possible: {cc.get('message', status)}", cc)


@register_check("mfu_plausibility")
def _mfu(inputs: CheckInputs) -> Check:
    run = inputs.run
    if not run.peak_tflops:
        return Check("mfu_plausibility", "skip", "MFU not checked: the GPU peak is unknown")
    summary = run.convention_summary()
    values = {name: e["mfu_mean"] for name, e in summary.items() if e.get("mfu_mean") is not None}
    if not values:
        return Check("mfu_plausibility", "skip", "MFU not checked: no usable window (or world size unknown)")
    worst_name = max(values, key=values.get)
    worst = values[worst_name]
    details = {"threshold": MFU_PLAUSIBLE, "mfu_mean": values, "peak_tflops": run.peak_tflops}
    where = f"{worst_name} MFU {100 * worst:.1f}% of {run.peak_tflops:g} TFLOP/s"
    if worst > 1.0:
        return Check("mfu_plausibility", "fail", f"MFU IMPOSSIBLE: {where} (> 100%): wrong GPU count, GPU type / "
                     "peak or dtype, or the step time is not per iteration", details)
    if worst > MFU_PLAUSIBLE:
        return Check("mfu_plausibility", "warn", f"MFU implausibly high: {where} (> {100 * MFU_PLAUSIBLE:.0f}%, "
                     "rare for real training); check GPU count, peak and dtype", details)
    return Check("mfu_plausibility", "ok", f"MFU plausible: highest {where} (threshold "
                 f"{100 * MFU_PLAUSIBLE:.0f}%)", details)


@register_check("step_times")
def _step_times(inputs: CheckInputs) -> Check:
    w = inputs.run.windows
    total = w.height
    counts = {r: int((w["step_time_excluded"] == r).sum()) for r in EXCLUSION_REASONS} if total else {}
    counts = {r: n for r, n in counts.items() if n}
    details = {"windows": total, "excluded": counts, "outlier_factor": OUTLIER_FACTOR,
               "excluded_iterations": w.filter(pl.col("step_time_excluded").is_not_null())["iteration"]
               .head(20).to_list() if total else []}
    if total == 0:
        return Check("step_times", "fail", "no logged step time: no TFLOP/s/GPU can be computed", details)
    if not counts:
        return Check("step_times", "ok", f"step times ok: {total} windows, none excluded", details)
    named = {"nan": "NaN", "inf": "inf", "non_positive": "non-positive",
             "outlier": f"outlier (> {OUTLIER_FACTOR:g}x from the median)"}
    listed = ", ".join(f"{n} {named[r]}" for r, n in counts.items())
    usable = int(w["step_time_excluded"].is_null().sum())  # other exclusions belong to their own checks
    status = "fail" if usable == 0 else "warn"
    return Check("step_times", status, f"step times: {sum(counts.values())} of {total} windows excluded from means "
                 f"({listed}; first at iteration {details['excluded_iterations'][0]})", details)


@register_check("metadata_coverage")
def _coverage(inputs: CheckInputs) -> Check:
    run = inputs.run
    if run.estimated:
        return Check("metadata_coverage", "skip", "metadata coverage not checked: no metadata (ESTIMATE)")
    cov, gaps = run.coverage, run.gaps
    problems = []
    if cov.get("iterations_short") and cov.get("status") != "uniform_short":
        lo, hi = cov["short_iterations_range"]
        problems.append(f"{cov['iterations_short']} iterations ({lo}..{hi}) have as few as "
                        f"{100 * cov['short_ratio_min']:.0f}% of the {cov['global_batch_size']:g} samples of the "
                        f"global batch ({cov['source']}): missing DP ranks or microbatches")
    missing = gaps.get("metadata_iterations_missing", 0)
    if missing:
        problems.append(f"{missing} logged iterations have no metadata at all")
    excluded = run.windows.filter(~pl.col("complete") & ~pl.col("first_in_segment")).height
    details = {**cov, "windows_excluded": excluded, "metadata_iterations_missing": missing}
    if cov.get("status") == "uniform_short":
        return Check("metadata_coverage", "fail", f"metadata coverage: EVERY iteration has "
                     f"{100 * cov['short_ratio_min']:.0f}% of the {cov['global_batch_size']:g}-sample global batch: "
                     "a DP rank's metadata missing throughout, or samples counted differently; nothing excluded",
                     details)
    if cov.get("status") == "excess_most" and not problems:
        return Check("metadata_coverage", "warn", f"metadata coverage: {cov['iterations_excess']} of "
                     f"{cov['iterations']} iterations have more samples (median {cov['samples_median']:g}) than the "
                     f"{cov['global_batch_size']:g}-sample global batch: samples counted differently (packed "
                     "documents without a `samples` field?)", details)
    if problems:
        return Check("metadata_coverage", "fail", "metadata coverage: " + "; ".join(problems)
                     + f"; {excluded} windows excluded from means", details)
    if cov.get("status") == "unknown":
        return Check("metadata_coverage", "skip", f"metadata coverage: {cov['message']}", details)
    return Check("metadata_coverage", "ok", f"metadata coverage ok: {cov.get('iterations', 0)} iterations, "
                 f"{cov.get('samples_median', 0):g} samples each = global batch ({cov.get('source')})", details)


@register_check("metadata_replay")
def _replay(inputs: CheckInputs) -> Check:
    run, diag = inputs.run, inputs.metadata_diagnostics
    if run.estimated:
        return Check("metadata_replay", "skip", "replayed metadata not checked: no metadata (ESTIMATE)")
    dropped = int(diag.get("rows_duplicate", 0) or 0)
    undecidable = [n for n in diag.get("notes", []) if "cannot be told apart" in n]
    counting_difference = run.coverage.get("status") == "excess_most"  # not replay: see metadata_coverage
    excess = 0 if counting_difference else int(run.coverage.get("iterations_excess", 0) or 0)
    details = {"rows_deduplicated": dropped, "iterations_with_excess_samples": excess, "notes": undecidable}
    if excess:
        return Check("metadata_replay", "fail", f"replayed metadata: {excess} iterations hold more samples than the "
                     "global batch (rows recorded twice by a resumed job that could not be deduplicated?); their "
                     "FLOPs are overcounted", details)
    if undecidable:
        return Check("metadata_replay", "warn", "replayed metadata could not be deduplicated: " + undecidable[0],
                     details)
    if dropped:
        return Check("metadata_replay", "ok", f"replayed metadata: {dropped} rows recorded twice were deduplicated",
                     details)
    return Check("metadata_replay", "ok", "no replayed metadata rows", details)


@register_check("restarts_and_gaps")
def _restarts(inputs: CheckInputs) -> Check:
    run = inputs.run
    w = run.windows
    segments = int(w["segment"].n_unique()) if w.height else 0
    interval = int(run.gaps.get("log_interval") or 0)
    holes = w.filter(~pl.col("first_in_segment") & (pl.col("window_iterations") > interval)) if interval else w.clear()
    details = {"segments": segments, "restarts": max(segments - 1, 0), "log_interval": interval,
               "unlogged_spans": [[int(a), int(b)] for a, b in holes.select("window_start", "iteration").rows()][:20],
               "metadata_iterations_outside_log": run.gaps.get("metadata_iterations_outside_log", 0)}
    parts = []
    if segments > 1:
        parts.append(f"{segments - 1} restart(s) ({segments} segments; each first window excluded)")
    if holes.height:
        a, b = details["unlogged_spans"][0]
        parts.append(f"{holes.height} window(s) longer than the log interval (first: iterations {a + 1}..{b})")
    if details["metadata_iterations_outside_log"]:
        parts.append(f"{details['metadata_iterations_outside_log']} metadata iterations outside the logged range")
    if parts:
        return Check("restarts_and_gaps", "warn", "restarts/gaps: " + "; ".join(parts), details)
    return Check("restarts_and_gaps", "ok", "no restarts or logging gaps", details)


@register_check("headline_numbers")
def _headline_numbers(inputs: CheckInputs) -> Check:
    """The headline exists: an exact TFLOP/s/GPU (and MFU when a peak is known) was computed."""
    run = inputs.run
    exact = run.convention_summary().get("exact", {})
    tf, mfu = exact.get("tflops_per_gpu_mean"), exact.get("mfu_mean")
    details = {"exact_tflops_per_gpu": tf, "exact_mfu": mfu, "world_size": run.world_size,
               "windows_used": int(run.reliable_windows().height)}
    if tf is None:
        why = ("the GPU count is unknown (state num_gpus)" if not run.world_size else
               "no usable window (see the step-time and coverage checks)")
        status = "warn" if not run.world_size else "fail"
        return Check("headline_numbers", status, f"headline numbers MISSING: no FLOP/s per GPU or MFU computed: {why}",
                     details)
    if mfu is None:
        return Check("headline_numbers", "warn", "headline numbers partial: FLOP/s per GPU computed, MFU missing (the "
                     "GPU peak is unknown: state the GPU type or its peak)", details)
    return Check("headline_numbers", "ok", "headline numbers computed: FLOP/s per GPU and MFU for every window used",
                 details)


from . import evidence as _evidence  # noqa: E402,F401  (registers the evidence checks: analysis/evidence.py)
