"""The report's block for a run folder's profiler traces: `TraceParts` -> one JSON-clean summary.

The per-part FLOPs are those of `vlm_perf.analysis.trace_parts` (the FLOPs library's exact components
of the run's metadata for the profiled iterations). ``report_exact_flops`` restates what the report's
own per-iteration exact FLOPs (`RunAnalysis.per_iteration`, column ``exact_total``) credit the same
rank-steps, so the two are comparable in the report and tested equal (tests/report/test_one_truth.py).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Sequence

import polars as pl

from .trace_parts import TraceParts

__all__ = ["trace_summary", "trace_part", "TOP_OPS", "FLOPS_AGREE"]

TOP_OPS = 10  # ops / kernels named in the report
#: relative gap within which the trace's FLOPs and the report's exact FLOPs count as the same number
FLOPS_AGREE = 1e-9


def _f(value) -> float | None:
    return None if value is None else float(value)


def report_exact_flops(result: TraceParts, per_iteration: pl.DataFrame | None, world_size: int | None) -> float | None:
    """The report's exact training FLOPs for the profiled rank-steps: each (rank, iteration) credited the
    iteration's ``exact_total`` / world size (the trace's per-rank rule when its ranks are not DP ranks;
    summed over every rank of an iteration, also the pure-DP rule's total). None without per-iteration
    FLOPs or a profiled iteration."""
    if per_iteration is None or "exact_total" not in per_iteration.columns or result.steps.height == 0:
        return None
    steps = result.steps.filter(pl.col("iteration").is_not_null()).select("rank", "iteration")
    if steps.height == 0:
        return None
    joined = steps.join(per_iteration.select("iteration", "exact_total"), on="iteration", how="inner")
    if joined.height == 0:
        return None
    return float(joined["exact_total"].sum()) / (world_size or 1)


def trace_summary(result: TraceParts, files: Sequence[Path | str], per_iteration: pl.DataFrame | None = None,
                  world_size: int | None = None) -> dict:
    """The ``trace_parts`` block of summary.json: steps, per-part time vs FLOPs (achieved FLOP/s, MFU,
    rate vs the LM), unattributed time, top ops, and the FLOPs join against the report's exact FLOPs."""
    eff = result.summary()
    steps = result.steps.sort("rank", "step")
    step_s = float(steps["step_ns"].sum()) / 1e9 if steps.height else 0.0
    parts = []
    for r in eff.iter_rows(named=True):
        parts.append({k: (r[k] if k == "part" else _f(r.get(k))) for k in (
            "part", "time_s", "time_share", "forward_s", "backward_s", "flops", "flops_share", "flops_per_s",
            "mfu", "rate_vs_lm", "excess_vs_lm_s")})
    unattributed = next((p["time_s"] for p in parts if p["part"] == "unattributed"), 0.0) or 0.0
    ranks = steps["rank"].n_unique() if steps.height else 0
    flops_total = _f(eff["flops"].sum()) if eff["flops"].null_count() < eff.height else None
    exact = report_exact_flops(result, per_iteration, world_size) if result.flops_source == "metadata" else None
    # comparable when every rank of the run was traced (or one GPU): then the trace's per-rank FLOPs sum to the
    # iterations' FLOPs whatever the per-rank rule
    comparable = exact is not None and flops_total is not None and world_size in (None, 1, ranks)
    agree = (abs(flops_total - exact) <= FLOPS_AGREE * max(abs(exact), 1.0)  # type: ignore[operator]
             if comparable else None)
    top = [{"name": r["name"], "part": r["part"], "time_s": r["time_ns"] / 1e9, "count": int(r["count"])}
           for r in result.top.head(TOP_OPS).iter_rows(named=True)]
    return {
        "files": [str(f) for f in files],
        "flops_source": result.flops_source,
        "ranks": int(ranks),
        "iterations": sorted({int(i) for i in steps["iteration"].drop_nulls().to_list()}),
        "steps": [{"rank": int(r["rank"]), "step": int(r["step"]),
                   "iteration": None if r["iteration"] is None else int(r["iteration"]),
                   "step_s": r["step_ns"] / 1e9} for r in steps.iter_rows(named=True)],
        "step_time_s": step_s,
        "max_sum_gap": result.check_sums(),
        "parts": parts,
        "unattributed_s": float(unattributed),
        "unattributed_share": float(unattributed) / step_s if step_s else None,
        "flops_total": flops_total,
        "report_exact_flops": exact,
        "flops_match_report": agree,
        "peak_tflops": result.peak_flops / 1e12 if result.peak_flops else None,
        "top": top,
        "notes": list(result.notes),
    }


def trace_part(files: Sequence[Path | str], partial: Any, *, spec: Any, metadata: Any, causal: str,
               trainability: Any, world_size: int | None, peak_tflops: float | None,
               per_iteration: pl.DataFrame | None) -> tuple[dict | None, TraceParts | None, list[str]]:
    """The report's per-part block when the run folder holds profiler traces: the traces read (``partial``, from
    ``files``) attributed to parts and joined with the exact FLOPs of the run's metadata (``metadata``:
    `vlm_perf.ingest.traces.TraceMetadata`; its model, regime, causal setting, peak and world size). Returns
    (summary block, `TraceParts`, messages); a trace that cannot be analysed is a message, not a failed report."""
    from ..errors import VlmPerfError
    from .trace_parts import analyze_traces

    try:
        result = analyze_traces(partial, spec=spec, metadata=metadata, causal=causal, frozen=trainability,
                                world_size=world_size, peak_flops=peak_tflops * 1e12 if peak_tflops else None)
    except VlmPerfError as exc:
        return None, None, [f"profiler trace not analysed: {exc}"]
    summary = trace_summary(result, files, per_iteration, world_size)
    messages = []
    if summary["flops_match_report"] is False:
        messages.append(f"trace FLOPs per part sum to {summary['flops_total']:.6e}, the report's exact FLOPs "
                        f"of the profiled iterations are {summary['report_exact_flops']:.6e}")
    return summary, result, messages
