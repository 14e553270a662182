"""The regime block of a run (summary.json ``regime``): what trains, from which source, and full-training
accounting beside the run's exact numbers over the windows the means use (`regime_summary`)."""

from __future__ import annotations

from typing import TYPE_CHECKING

import polars as pl

from ..arch.spec import ModelSpec
from ..arch.trainability import Trainability
from ..flops.regime import exact_flops
from ..stats import BatchStats

if TYPE_CHECKING:
    from ..run.regime import Regime
    from .run import RunAnalysis

__all__ = ["regime_summary"]


def regime_summary(regime: "Regime | None", spec: ModelSpec, causal: str, analysis: "RunAnalysis") -> dict | None:
    """The regime block; ``contradictions``: sources that state another regime, with the size of the FLOPs
    difference (the `vlm_perf.analysis.facade.Run` makes them messages). None when no source states a regime."""
    if regime is None or not regime.stated:
        return None
    frame = analysis.per_iteration.filter(pl.col("iteration").is_in(analysis.selection.iterations().implode()))
    if frame.height == 0:
        frame = analysis.per_iteration
    cols = BatchStats.columns()
    used = float(frame["exact_total"].sum())

    def total(t) -> float:
        value = exact_flops(spec, cols, t, causal=causal).total
        expr = value if isinstance(value, pl.Expr) else pl.lit(float(value))
        return float(frame.select(expr.cast(pl.Float64)).to_series().sum())

    full = total(Trainability())
    ratio = full / used if used else None
    exact = analysis.convention_summary().get("exact", {})
    rate, mfu = exact.get("tflops_per_gpu_mean"), exact.get("mfu_mean")
    contradictions = []
    for source, alternative in regime.alternatives:
        try:
            other = total(alternative)
        except Exception as exc:  # noqa: BLE001 - a source that cannot be counted is named, not fatal
            contradictions.append(f"{source} could not be counted ({exc})")
            continue
        if used and abs(other - used) > 1e-9 * used:
            contradictions.append(f"{source} says {alternative.describe()}: {100 * (other / used - 1):+.1f}% FLOPs "
                                  f"({other / max(frame.height, 1):.4g} vs {used / max(frame.height, 1):.4g} per "
                                  f"iteration); using {regime.source}")
    return {"description": regime.description, "source": regime.source, "whole_parts": regime.stage_level,
            "trainability": regime.trainability.describe(),
            "flops_per_iteration": used / frame.height if frame.height else None,
            "full_training_flops_per_iteration": full / frame.height if frame.height else None,
            "full_training_over_regime": ratio,
            "full_training_tflops_per_gpu_mean": rate * ratio if rate is not None and ratio else None,
            "full_training_mfu_mean": mfu * ratio if mfu is not None and ratio else None,
            "contradictions": contradictions}
