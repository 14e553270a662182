"""Which registered convention (or variant) reproduces the TFLOP/s/GPU the log printed, window by window.

Every registered convention (`vlm_perf.flops.conventions.names`: variants included) is computed for the
run's iterations; the conventions the analysis already computed are reused from its per-iteration frame
(one truth). Over the windows the means use (`vlm_perf.analysis.selection`) that carry a logged value,
each window's number per convention, F_conv / (window seconds x GPUs x 1e12), is set against the
printed value by `vlm_perf.flops.conventions.reconcile.reconcile` (within the print precision). The
printed text is not kept by the log readers, so the precision is inferred from the values: the fewest
decimals (0..6) that every logged value of those windows has. A convention matches the log when it is
within print precision in at least half of the windows (a window's step time is printed rounded too);
the closest is the one with the smallest median relative difference. For the closest, the run-total
component difference from exact (`reconcile.component_difference`) says where it departs from what
the model executes.
"""

from __future__ import annotations

import math
from dataclasses import replace
from statistics import median

import polars as pl

from ..arch.spec import ModelSpec
from ..errors import ConventionNotDefined
from ..flops.breakdown import Breakdown
from ..flops.conventions import get_convention, names
from ..flops.conventions.reconcile import component_difference, reconcile
from .differences import component_totals
from .flops_frame import flops_columns, with_flops
from .run import RunAnalysis
from .windows import window_sums

__all__ = ["log_reconcile", "extended_analysis", "printed_decimals", "MAX_DECIMALS"]

MAX_DECIMALS = 6


def printed_decimals(values) -> int:
    """The fewest decimals (0..`MAX_DECIMALS`) every value has when printed (554.3 and 12.25 -> 2)."""
    for d in range(MAX_DECIMALS + 1):
        if all(abs(round(v, d) - v) <= 1e-9 * max(1.0, abs(v)) for v in values):
            return d
    return MAX_DECIMALS


def extended_analysis(analysis: RunAnalysis, spec: ModelSpec) -> tuple[RunAnalysis, dict[str, str]]:
    """The analysis with every registered convention defined for the model (its own ones reused, the others'
    ``<name>_total`` columns added to its per-iteration and window frames), and the reasons of the refusals.
    Its `RunAnalysis.convention_summary` is then the one place every convention's mean is computed."""
    family = spec.family or spec.model_type
    not_defined: dict[str, str] = {}
    defined = []
    for name in names():
        if name in analysis.conventions:
            continue
        if not get_convention(name).covers(family):
            not_defined[name] = f"{name} does not cover the {family} family"
            continue
        try:  # a convention may refuse this model's configuration: a reason, not a crash
            with_flops(analysis.per_iteration.head(1), spec, [name])
            defined.append(name)
        except ConventionNotDefined as exc:
            not_defined[name] = str(exc)
    if not defined:
        return analysis, not_defined
    columns = [f"{n}_total" for n in defined]
    per_it = analysis.per_iteration.with_columns(flops_columns(spec, defined))
    per_it = per_it.drop([c for c in per_it.columns if c.startswith(tuple(f"{n}_" for n in defined))
                          and c not in columns])
    sums = window_sums(analysis.windows.select("segment", "iteration", "window_start"), per_it, columns).select(
        "segment", "iteration", *columns)
    windows = analysis.windows.join(sums, on=["segment", "iteration"], how="left", maintain_order="left")
    return replace(analysis, conventions=[*analysis.conventions, *defined], per_iteration=per_it,
                   windows=windows), not_defined


def log_reconcile(analysis: RunAnalysis, spec: ModelSpec) -> dict:
    """The ``log_reconcile`` block of summary.json (see the module docstring)."""
    if "tflops_per_gpu_logged" not in analysis.windows.columns:
        return {"status": "no_logged_value", "message": "the log prints no TFLOP/s/GPU to reconcile"}
    if not analysis.world_size:
        return {"status": "no_world_size", "message": "the world size is unknown: no TFLOP/s/GPU to reconcile"}
    logged = pl.col("tflops_per_gpu_logged")
    if analysis.selection.windows.filter(logged.is_not_null() & logged.is_finite() & (logged > 0)).height == 0:
        return {"status": "no_windows", "message": "no window the means use has a logged TFLOP/s/GPU"}
    extended, not_defined = extended_analysis(analysis, spec)
    means = extended.convention_summary()
    windows = extended.selection.windows.filter(logged.is_not_null() & logged.is_finite() & (logged > 0)
                                                & (pl.col("window_seconds") > 0))
    computed = list(extended.conventions)
    printed = windows["tflops_per_gpu_logged"].to_list()
    decimals = printed_decimals(printed)
    world = analysis.world_size
    per_conv: dict[str, list] = {n: [] for n in computed}
    for row in windows.select("window_seconds", "tflops_per_gpu_logged",
                              *(f"{n}_total" for n in computed)).iter_rows(named=True):
        results = {n: Breakdown(n, {"total": row[f"{n}_total"]}) for n in computed}
        for r in reconcile(results, f"{row['tflops_per_gpu_logged']:.{decimals}f}",
                           1 / (row["window_seconds"] * world * 1e12)):
            per_conv[r.convention].append(r)
    rows = []
    for name, readings in per_conv.items():
        rel = [r.rel_diff for r in readings if math.isfinite(r.rel_diff)]
        hits = sum(r.matches for r in readings)
        rows.append({"convention": name, "tflops_per_gpu_mean": means[name]["tflops_per_gpu_mean"],
                     "mfu_mean": means[name]["mfu_mean"], "rel_diff_median": median(rel) if rel else None,
                     "windows_matched": hits, "matches": 2 * hits >= len(readings)})
    rows.sort(key=lambda r: math.inf if r["rel_diff_median"] is None else abs(r["rel_diff_median"]))
    out = {"status": "ok", "windows": windows.height, "printed_decimals": decimals,
           "printed_median": median(printed), "conventions": rows, "not_defined": not_defined,
           "matches": [r["convention"] for r in rows if r["matches"]], "closest": rows[0]["convention"]}
    best = rows[0]["convention"]
    if best != "exact":
        # run totals per component: exact's are the analysis's own flops.<component> columns (its frozen and
        # causal settings), the convention's from the FLOPs library over the same iterations
        per_it = analysis.per_iteration
        exact = {c.removeprefix("flops."): float(per_it[c].sum()) for c in per_it.columns if c.startswith("flops.")}
        diff = component_difference(Breakdown(best, component_totals(per_it, spec, best)), Breakdown("exact", exact))
        total = sum(exact.values())
        out["closest_minus_exact"] = [{"component": c, "delta_flops": d, "delta_of_exact_total": d / total if total
                                       else None} for c, d in diff.items()]
    return out
