"""The terminal summary `vlm-perf report` prints: the numbers of ``summary.json``, formatted by the same
`fmt` and the same display unit (`vlm_perf.report.units.run_rate_unit`) as report.md / report.html (one
value, one spelling, wherever it is shown)."""

from __future__ import annotations

from .content import fmt
from .units import run_rate_unit

__all__ = ["number_lines"]


def number_lines(summary: dict) -> list[str]:
    """Peak, TFLOP/s/GPU and MFU per convention, HFU and the vision share, from a summary.json dict."""
    lines = []
    peak = summary.get("peak")
    if peak:
        lines.append(f"peak:    {fmt(peak['tflops'])} TFLOP/s/GPU (--peak-tflops override)" if peak.get("override")
                     else f"peak:    {fmt(peak['tflops'])} TFLOP/s/GPU {peak['dtype']} dense, {peak['device']} "
                     f"({peak['source_short']})")
    unit = run_rate_unit(summary)  # the report's unit: a tiny CPU run reads GFLOP/s, not 0.0 TFLOP/s
    for name, entry in summary.get("conventions", {}).items():
        tf, mfu = entry["tflops_per_gpu_mean"], entry["mfu_mean"]
        if tf is not None:
            lines.append(f"  {name:16s} {unit.fmt(tf):>8} {unit.per_gpu}" + (f"   MFU {fmt(mfu, 1, True):>6}" if mfu is not None
                                                                      else ""))
    hfu = summary.get("hfu")
    if hfu and hfu.get("hfu_mean") is not None:
        lines.append(f"  HFU (exact + recompute {hfu['recompute']}) {fmt(hfu['hfu_mean'], 1, True):>6}   "
                     f"MFU (exact) {fmt(hfu['mfu_mean'], 1, True)}   hardware/model FLOPs "
                     f"{hfu['hardware_over_model']:.4f}")
    rl = summary.get("rl")
    if rl:  # the RL regime (analysis.rl): every phase of the steps, the training-only accounting beside it
        lines.append(f"  {rl['headline']}; every phase {unit.fmt(rl['tflops_per_gpu'])} {unit.per_gpu}"
                     + (f"; training-only accounting {fmt(rl['training_only_share'], 1, True)} of the RL FLOPs"
                        if rl.get("training_only_share") is not None else ""))
    if summary.get("vision_share_mean") is not None:
        lines.append(f"  vision share of exact training FLOPs {fmt(summary['vision_share_mean'], 1, True)} "
                     "(Σ vision / Σ total over the windows the means use)")
    return lines
