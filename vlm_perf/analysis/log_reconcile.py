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

The same is done for the other numbers a log prints about its FLOPs:

* a **logged MFU** (``mfu_logged``): each convention's implied MFU, F_conv / (seconds x devices x peak x 1e12),
  against the printed one within its print precision. The peak is the one the framework divided by where the
  log states it (ms-swift's ``perf_log``: ``DEVICE_TFLOPS`` or its measured matmul rate, times the device count
  it prints; `vlm_perf.ingest.log_facts`), else the run's GPU datasheet peak. ms-swift's MFU is a running
  average since the process started (``round(state.total_flos / elapsed / (peak x devices x 1e12), 6)``,
  ``swift/callbacks/perf_log.py``): for an ms-swift log the FLOPs are summed over every iteration up to the
  logged one (total_flos is restored on resume) and the seconds are its cumulative mean step time
  (``train_speed``) x the steps since the segment started; other logs print a per-window MFU.
* the Hugging Face Trainer's **total_flos** (end-of-run metrics dict, or the console ``total_flos = nGF`` with
  n = int(total_flos) >> 30): every convention's run total against it, the dict value within its print
  precision, the console value as the interval [n, n + 1) x 2**30. ``hf-trainer`` reproduces it exactly.
"""

from __future__ import annotations

import math
from dataclasses import replace
from typing import Sequence
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

__all__ = ["log_reconcile", "extended_analysis", "closest_minus_exact", "printed_decimals", "mfu_reconcile", "total_flos_reconcile",
           "MAX_DECIMALS", "CUMULATIVE_MFU_FRAMEWORKS", "GF"]

MAX_DECIMALS = 6
#: log formats (`vlm_perf.ingest.logs`) whose printed MFU is a running average since the process started
CUMULATIVE_MFU_FRAMEWORKS = {"swift": "ms-swift perf_log: round(total_flos / summed step seconds / (peak x devices "
                                      "x 1e12), 6), cumulative since the process started"}
#: transformers' metrics_format prints total_flos as int(total_flos) >> 30 "GF"
GF = 2 ** 30


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


def log_reconcile(analysis: RunAnalysis, spec: ModelSpec, log_facts: Sequence = (),
                  raw: pl.DataFrame | None = None) -> dict:
    """The ``log_reconcile`` block of summary.json (see the module docstring): the TFLOP/s/GPU reconciliation
    at the top level, the logged MFU's under ``mfu`` and the Trainer's total_flos under ``total_flos``.
    ``log_facts``: `vlm_perf.ingest.log_facts.FileFacts` of the run's logs; ``raw``: the parsed records (summary
    rows carry ``total_flos``)."""
    cache: dict = {}

    def extended() -> tuple[RunAnalysis, dict[str, str]]:
        if "x" not in cache:
            cache["x"] = extended_analysis(analysis, spec)
        return cache["x"]

    out = _tflops_reconcile(analysis, spec, extended)
    out["mfu"] = mfu_reconcile(analysis, extended, log_facts)
    if out["mfu"]["status"] == "ok" and out["mfu"]["closest"] != "exact":
        out["mfu"]["closest_minus_exact"] = closest_minus_exact(analysis, spec, out["mfu"]["closest"])
    out["total_flos"] = total_flos_reconcile(analysis, extended, log_facts, raw)
    return out


def _tflops_reconcile(analysis: RunAnalysis, spec: ModelSpec, get_extended) -> dict:
    if "tflops_per_gpu_logged" not in analysis.windows.columns:
        return {"status": "no_logged_value", "message": "the log prints no TFLOP/s/GPU to reconcile"}
    if not analysis.world_size:
        return {"status": "no_world_size", "message": "the world size is unknown: no TFLOP/s/GPU to reconcile"}
    logged = pl.col("tflops_per_gpu_logged")
    if analysis.selection.windows.filter(logged.is_not_null() & logged.is_finite() & (logged > 0)).height == 0:
        return {"status": "no_windows", "message": "no window the means use has a logged TFLOP/s/GPU"}
    extended, not_defined = get_extended()
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
        out["closest_minus_exact"] = closest_minus_exact(analysis, spec, best)
    return out


def closest_minus_exact(analysis: RunAnalysis, spec: ModelSpec, best: str) -> list[dict]:
    """``best`` minus exact per component, run totals: exact's are the analysis's own flops.<component> columns
    (its frozen and causal settings), the convention's from the FLOPs library over the same iterations."""
    per_it = analysis.per_iteration
    exact = {c.removeprefix("flops."): float(per_it[c].sum()) for c in per_it.columns if c.startswith("flops.")}
    diff = component_difference(Breakdown(best, component_totals(per_it, spec, best)), Breakdown("exact", exact))
    total = sum(exact.values())
    return [{"component": c, "delta_flops": d, "delta_of_exact_total": d / total if total else None}
            for c, d in diff.items()]


def _summarise(per_conv: dict[str, list], extra: dict[str, float] | None = None) -> list[dict]:
    rows = []
    for name, readings in per_conv.items():
        rel = [r.rel_diff for r in readings if math.isfinite(r.rel_diff)]
        hits = sum(r.matches for r in readings)
        row = {"convention": name, "rel_diff_median": median(rel) if rel else None, "windows_matched": hits,
               "matches": bool(readings) and 2 * hits >= len(readings)}
        if extra is not None:
            row.update({k: v[name] for k, v in extra.items()})
        rows.append(row)
    rows.sort(key=lambda r: math.inf if r["rel_diff_median"] is None else abs(r["rel_diff_median"]))
    return rows


def _device_peak(log_facts: Sequence) -> tuple[float, int | None, str, str] | None:
    """(TFLOP/s per device, printed device count or None, source, file:line) of the last peak line the logs print."""
    found = None
    for f in log_facts:
        for tflops, devices, source, line in getattr(f, "device_peaks", ()):
            found = (tflops, devices, source, f"{f.path}:{line}")
    return found


def mfu_reconcile(analysis: RunAnalysis, get_extended, log_facts: Sequence = ()) -> dict:
    """Every convention's implied MFU against the log's printed MFU (``mfu_logged``), see the module docstring.
    ``get_extended``: a callable returning `extended_analysis` (computed once)."""
    windows = analysis.windows
    if "mfu_logged" not in windows.columns:
        return {"status": "no_logged_value", "message": "the log prints no MFU to reconcile"}
    logged = pl.col("mfu_logged")
    ok = logged.is_not_null() & logged.is_finite() & (logged > 0)
    if analysis.selection.windows.filter(ok).height == 0:
        return {"status": "no_windows", "message": "no window the means use has a logged MFU"}
    peak = _device_peak(log_facts)
    if peak is not None:
        peak_tflops, printed_devices, source, where = peak
        peak_source = (f"{source} ({where}): "
                       + ("the DEVICE_TFLOPS environment variable" if source == "DEVICE_TFLOPS" else
                          "ms-swift's measured 8192x8192 matmul rate, not a datasheet peak"))
    elif analysis.peak_tflops:
        peak_tflops, printed_devices = analysis.peak_tflops, None
        peak_source = "the run's GPU datasheet peak (the log does not say which peak its MFU divides by)"
    else:
        return {"status": "no_peak", "message": "neither the log nor the run configuration gives the peak the "
                "printed MFU divides by (set gpu in run.yaml or --peak-tflops)"}
    devices = printed_devices or analysis.world_size
    if not devices:
        return {"status": "no_world_size", "message": "the device count is unknown: no MFU to reconcile"}
    devices_source = "printed by the log (ms-swift: Device count)" if printed_devices else "the run's world size"
    frameworks = set(windows["framework"].drop_nulls().unique().to_list()) if "framework" in windows.columns else set()
    cumulative = sorted(frameworks & set(CUMULATIVE_MFU_FRAMEWORKS))
    extended, not_defined = get_extended()
    computed = list(extended.conventions)
    columns = [f"{n}_total" for n in computed]
    win = extended.windows.sort("segment", "iteration")
    if cumulative:
        # FLOPs since the first iteration (total_flos is restored on resume); seconds: the cumulative mean step
        # time x the steps since the segment started (elapsed restarts at 0 in every process)
        per_it = extended.per_iteration.sort("iteration").select(
            "iteration", *(pl.col(c).fill_null(0).cum_sum().alias(c) for c in columns))
        win = win.with_columns(pl.col("window_start").min().over("segment").alias("_start"))
        win = win.drop(columns).join_asof(per_it, on="iteration", strategy="backward")
        seconds = pl.col("elapsed_s") * (pl.col("iteration") - pl.col("_start"))
        mode = CUMULATIVE_MFU_FRAMEWORKS[cumulative[0]]
    else:
        seconds = pl.col("window_seconds")
        mode = "per logging window: the window's FLOPs / its seconds"
    win = win.with_columns(seconds.alias("_seconds"))
    keep = extended.selection.windows.select("segment", "iteration")
    rows_frame = win.join(keep, on=["segment", "iteration"], how="semi").filter(ok & (pl.col("_seconds") > 0))
    if rows_frame.height == 0:
        return {"status": "no_windows", "message": "no window the means use has a logged MFU and a step time"}
    printed = rows_frame["mfu_logged"].to_list()
    decimals = printed_decimals(printed)
    per_conv: dict[str, list] = {n: [] for n in computed}
    implied: dict[str, list[float]] = {n: [] for n in computed}
    for row in rows_frame.select("_seconds", "mfu_logged", *columns).iter_rows(named=True):
        results = {n: Breakdown(n, {"total": row[f"{n}_total"] or 0.0}) for n in computed}
        scale = 1 / (row["_seconds"] * devices * peak_tflops * 1e12)
        for r in reconcile(results, f"{row['mfu_logged']:.{decimals}f}", scale):
            per_conv[r.convention].append(r)
            implied[r.convention].append(r.value)
    mfu_median = {n: (median(v) if v else None) for n, v in implied.items()}
    rows = _summarise(per_conv, {"mfu_median": mfu_median})
    return {"status": "ok", "mode": mode, "peak_tflops_per_device": peak_tflops, "peak_source": peak_source,
            "devices": devices, "devices_source": devices_source, "windows": rows_frame.height,
            "printed_decimals": decimals, "printed_median": median(printed), "conventions": rows,
            "not_defined": not_defined, "matches": [r["convention"] for r in rows if r["matches"]],
            "closest": rows[0]["convention"]}


def total_flos_reconcile(analysis: RunAnalysis, get_extended, log_facts: Sequence = (),
                         raw: pl.DataFrame | None = None) -> dict:
    """Every convention's run total against the Trainer's printed total_flos (see the module docstring)."""
    printed: list[tuple[str, float, float, float]] = []  # (as printed, value, low, high)
    if raw is not None and "total_flos" in raw.columns:
        rows = raw.filter(pl.col("total_flos").is_not_null() & pl.col("total_flos").is_finite())
        for v in rows["total_flos"].to_list()[-1:]:
            half = 0.5 * 10.0 ** -printed_decimals([v])
            printed.append((repr(v), float(v), v - half, v + half))
    gf = [(n, f"{f.path}:{line}") for f in log_facts for n, line in getattr(f, "total_flos_gf", ())]
    if gf:
        n, where = gf[-1]
        printed.append((f"{n}GF ({where})", float(n) * GF, float(n) * GF, float(n + 1) * GF))
    if not printed:
        return {"status": "no_logged_value", "message": "the log prints no total_flos to reconcile"}
    extended, not_defined = get_extended()
    per_it = extended.per_iteration
    totals = {n: float(per_it[f"{n}_total"].sum()) for n in extended.conventions if f"{n}_total" in per_it.columns}
    values = []
    for text, value, low, high in printed:
        rows = [{"convention": n, "flops_total": t, "rel_diff": (t - value) / value if value else None,
                 "matches": low <= t < high or (low == high == t)} for n, t in totals.items()]
        rows.sort(key=lambda r: math.inf if r["rel_diff"] is None else abs(r["rel_diff"]))
        values.append({"printed": text, "value": value, "interval": [low, high], "conventions": rows,
                       "matches": [r["convention"] for r in rows if r["matches"]]})
    resumed = analysis.per_iteration.height and "segment" in analysis.windows.columns \
        and analysis.windows["segment"].n_unique() > 1
    return {"status": "ok", "printed": values, "not_defined": not_defined,
            "note": "total_flos is summed over all processes and cumulative since the first run (restored on "
                    "resume); the run totals are over every iteration with statistics"
                    + ("; this run restarted, so a total_flos printed after a resume may cover iterations the "
                       "logs no longer show" if resumed else "")}
