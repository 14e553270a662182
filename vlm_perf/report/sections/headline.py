"""The first lines of a report: every check's state, then the headline numbers."""

from __future__ import annotations

from ...analysis.run import BEFORE
from ..content import B, Bullets, Paragraph, SectionContent, Span, T, fmt
from ..parts import ReportPart, register_part
from ..units import run_rate_unit
from . import SectionInputs

MARK = {"fail": "FAIL", "warn": "WARN", "ok": "ok", "skip": "skip"}


def headline(inputs: SectionInputs) -> SectionContent:
    s = inputs.summary
    checks = s["checks"]
    failed = [c for c in checks if c["status"] == "fail"]
    warned = [c for c in checks if c["status"] == "warn"]
    if failed:
        verdict = T(Span(f"Checks: {len(failed)} FAILED", bold=True, tone="fail"), f", {len(warned)} warning(s): the numbers below are not "
                    "trustworthy as they stand; read the failed checks first.")
    elif warned:
        verdict = T(B(f"Checks: {len(warned)} warning(s)"), ", nothing failed.")
    else:
        verdict = T(B("Checks: all passed."))
    blocks = [Paragraph(verdict),
              Bullets([T(Span(MARK[c["status"]], bold=True, tone=c["status"]), " ", c["summary"]) for c in checks])]
    lines = []
    if s.get("synthetic"):
        lines.append(T(B("SYNTHETIC RUN"), " — generated data, not a real training job."))
    if s.get("estimated"):
        lines.append(T(B("ESTIMATE"), " — no per-microbatch metadata; statistics come from the run configuration."))
    conv = s["conventions"]
    unit = run_rate_unit(s)
    b, a = conv.get(BEFORE, {}).get("tflops_per_gpu_mean"), conv.get("exact", {}).get("tflops_per_gpu_mean")
    headline = next((c for c in checks if c["name"] == "headline_numbers"), None)
    if a is None and headline is not None:
        lines.append(T(B("No headline number"), f": {headline['summary']}."))
    if b and a:
        lines.append(T(f"LM-only ({BEFORE}) ", B(unit.fmt(b)), f" {unit.per_gpu} → exact with vision ", B(unit.fmt(a)),
                       f" {unit.per_gpu} ({100 * (a / b - 1):+.1f}%); MFU {fmt(conv[BEFORE]['mfu_mean'], 1, True)} → "
                       f"{fmt(conv['exact']['mfu_mean'], 1, True)} on {s['world_size']} × ", s["gpu"] or "unknown GPU",
                       f" ({fmt(s['peak_tflops'], 0)} TFLOP/s peak, ", s["dtype"], ")."))
    regime = s.get("regime")
    if regime:  # the regime in words, full-training accounting beside it (pipeline.regime_summary)
        ratio = regime.get("full_training_over_regime")
        line = [B("Regime: " + regime["description"]), " (", regime["source"], ")."]
        if ratio:
            line += [" Full-training accounting would count ×", B(f"{ratio:.3f}"), " these FLOPs",
                     f" ({100 * (ratio - 1):+.1f}%)"]
            if regime.get("full_training_tflops_per_gpu_mean") is not None:
                line += [": ", fmt(regime["full_training_tflops_per_gpu_mean"], 2), " TFLOP/s/GPU"]
                if regime.get("full_training_mfu_mean") is not None:
                    line += [", MFU ", fmt(regime["full_training_mfu_mean"], 1, True)]
            line.append(" — not what ran.")
        lines.append(T(*line))
        for text in regime.get("contradictions", []):
            lines.append(T(Span("Regime contradiction: ", bold=True, tone="warn"), text))
    if s.get("logged_tflops_per_gpu_mean"):
        lines.append(T("The log printed ", B(unit.fmt(s["logged_tflops_per_gpu_mean"])), f" {unit.per_gpu} on average."))
    if s.get("vision_share_mean") is not None:
        lines.append(T("Vision share of exact training FLOPs: ", B(fmt(s["vision_share_mean"], 1, True)),
                       " (Σ vision / Σ total over the windows the means use)."))
    if lines:
        blocks.append(Bullets(lines))
    return SectionContent("", blocks)


def vision_share_line(summary: dict) -> list[str]:
    """Terminal line: the run's vision share (after the rates)."""
    if summary.get("vision_share_mean") is None:
        return []
    return [f"  vision share of exact training FLOPs {fmt(summary['vision_share_mean'], 1, True)} "
            "(Σ vision / Σ total over the windows the means use)"]


register_part(ReportPart("headline", order=0, section=headline, terminal=vision_share_line, terminal_order=20))
