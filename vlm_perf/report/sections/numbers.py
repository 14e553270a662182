"""TFLOP/s/GPU and MFU by convention (time-weighted means over usable windows)."""

from __future__ import annotations

from ...analysis.run import BEFORE
from ..content import Paragraph, SectionContent, T, Table, fmt
from ..parts import ReportPart, register_part
from ..units import run_rate_unit
from . import SectionInputs


def conventions(inputs: SectionInputs) -> SectionContent:
    s = inputs.summary
    before = s["conventions"].get(BEFORE, {}).get("tflops_per_gpu_mean")
    unit = run_rate_unit(s)
    rows = []
    for name, entry in s["conventions"].items():
        tf = entry["tflops_per_gpu_mean"]
        delta = f"{100 * (tf / before - 1):+.1f}%" if tf and before else "—"
        rows.append([T(name), T(unit.fmt(tf)), T(fmt(entry["mfu_mean"], 1, pct=True)), T(delta),
                     T(f"{entry['flops_total']:.4e}")])
    excluded = s["logged_windows"] - s["windows_used"]
    note = T(f"Means are time-weighted over {s['windows_used']} of {s['logged_windows']} windows"
             + (f" ({excluded} excluded: the first after each (re)start, incomplete metadata, or an excluded step "
                "time; see the checks)." if excluded else "."))
    return SectionContent(f"{unit.per_gpu} and MFU by convention",
                          [Table(["convention", unit.per_gpu, "MFU", "vs LM-only", "FLOPs (run total)"], rows),
                           Paragraph(note)])


def convention_lines(summary: dict) -> list[str]:
    """Terminal lines: TFLOP/s/GPU and MFU per convention, in the report's unit."""
    lines = []
    unit = run_rate_unit(summary)  # the report's unit: a tiny CPU run reads GFLOP/s, not 0.0 TFLOP/s
    for name, entry in summary.get("conventions", {}).items():
        tf, mfu = entry["tflops_per_gpu_mean"], entry["mfu_mean"]
        if tf is not None:
            lines.append(f"  {name:16s} {unit.fmt(tf):>8} {unit.per_gpu}" + (f"   MFU {fmt(mfu, 1, True):>6}"
                                                                             if mfu is not None else ""))
    return lines


# after the peak's terminal line (the MFUs' denominator), before HFU
register_part(ReportPart("conventions", order=10, section=conventions, terminal=convention_lines, terminal_order=1))
