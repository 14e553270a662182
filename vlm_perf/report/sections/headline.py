"""The report's lead, the first screen: the verdict in one line, the headline numbers large (rate and MFU
before -> after vision accounting, the number to quote and why, the vision share), the checks as one
summary line with every failed or warned check spelled out, the before/after figure, then the context
(regime, RL, what the log printed). Every number is summary.json's, formatted by `fmt` / the run's unit."""

from __future__ import annotations

from ...analysis.run import BEFORE
from ..content import (B, Bullets, Details, FigureRef, Inline, L, Paragraph, SectionContent, Span, Stat, Stats, T,
                       Verdict, fmt, plain)
from ..parts import ReportPart, register_part
from ..units import run_rate_unit
from . import SectionInputs
from .figures import LEAD_FIGURE, caption_of
from .which_number import compare_clause

MARK = {"fail": "FAIL", "warn": "WARN", "ok": "ok", "skip": "skip"}


def _by_status(checks: list[dict]) -> dict[str, list[dict]]:
    return {status: [c for c in checks if c["status"] == status] for status in MARK}


def _n(count: int, word: str) -> str:
    return f"{count} {word}" + ("" if count == 1 else "s")


def checks_state(checks: list[dict]) -> str:
    """``1 warning, none failed``: the state of the checks in one phrase."""
    by = _by_status(checks)
    failed, warned = len(by["fail"]), len(by["warn"])
    return (f"{failed} FAILED, {_n(warned, 'warning')}" if failed else
            f"{_n(warned, 'warning')}, none failed" if warned else "all passed")


def checks_count(checks: list[dict]) -> str:
    """``1 warning, none failed (12 ok, 4 skipped)``: the state of every check in one phrase."""
    by = _by_status(checks)
    return checks_state(checks) + f" ({len(by['ok'])} ok, {len(by['skip'])} skipped)"


def _with_vision(s: dict) -> bool:
    return bool(s.get("vision_share_mean"))


def verdict(s: dict) -> tuple[Inline, str]:
    """The answer in one line, and its tone (fail / warn / ok)."""
    by = _by_status(s["checks"])
    tone = "fail" if by["fail"] else ("warn" if by["warn"] else "ok")
    if by["fail"]:
        return T(Span(f"{len(by['fail'])} check(s) FAILED", bold=True, tone="fail"),
                 f" ({', '.join(c['name'] for c in by['fail'])}): the numbers below are not trustworthy as they "
                 "stand; read the failed checks first."), tone
    conv, unit = s["conventions"], run_rate_unit(s)
    exact = conv.get("exact", {})
    after, before = exact.get("tflops_per_gpu_mean"), conv.get(BEFORE, {}).get("tflops_per_gpu_mean")
    if after is None:
        missing = next((c for c in s["checks"] if c["name"] == "headline_numbers"), None)
        return T(B("No headline number"), ": ", missing["summary"] if missing else "nothing to compute from",
                 f"; checks: {checks_state(s['checks'])}."), "warn"
    mfu = exact.get("mfu_mean")
    counted = "exact, vision counted" if _with_vision(s) else "exact"
    parts: list = ["Quote ", B(unit.text(after))]
    parts += [" at ", B(f"MFU {fmt(mfu, 1, True)}"), f" ({counted})"] if mfu is not None else \
        [f" ({counted}; no GPU peak, no MFU)"]
    if before:
        parts += [": ", B(f"{100 * (after / before - 1):+.1f}%"), " vs LM-only"]
    parts.append(f"; {checks_state(s['checks'])}.")
    factor = (s.get("attention_kernel") or {}).get("full_over_half")
    if factor:  # the number to quote itself is low: said where it is quoted (the warning says why, below)
        parts += [" ", Span("Eager attention counted causal half", bold=True, tone="warn"),
                  f": these read {100 * (1 - 1 / factor):.1f}% low; rerun with --causal full."]
        tone = "warn" if tone == "ok" else tone
    return T(*parts), tone


def headline_stats(s: dict) -> list[Stat]:
    """The headline numbers: rate and MFU before -> after, the number to quote, the vision share."""
    conv, unit = s["conventions"], run_rate_unit(s)
    exact, lm = conv.get("exact", {}), conv.get(BEFORE, {})
    after, before = exact.get("tflops_per_gpu_mean"), lm.get("tflops_per_gpu_mean")
    if after is None:
        return []
    both = before is not None
    stats = [Stat(unit.per_gpu, f"{unit.fmt(before)} → {unit.fmt(after)}" if both else unit.fmt(after),
                  T(f"LM-only ({BEFORE}) → exact with vision" + (f", {100 * (after / before - 1):+.1f}%" if before
                                                                else "") if both else "exact, every part counted"))]
    peak = s.get("peak_tflops")
    if exact.get("mfu_mean") is not None:
        value = (f"{fmt(lm.get('mfu_mean'), 1, True)} → {fmt(exact['mfu_mean'], 1, True)}" if both
                 else fmt(exact["mfu_mean"], 1, True))
        stats.append(Stat("MFU", value, T(f"of {fmt(peak, 0)} TFLOP/s per GPU (", s.get("gpu") or "GPU", ", ",
                                          s.get("dtype") or "", f" dense peak), {s.get('world_size')} GPUs")))
    else:
        stats.append(Stat("MFU", "—", T("GPU peak unknown: pass ", Span("--gpu TYPE", code=True), " or ",
                                        Span("--peak-tflops X", code=True))))
    ran = s.get("regime") or {}
    ratio = ran.get("full_training_over_regime")
    regime = ran.get("description") if ratio and abs(ratio - 1) > 1e-9 else None  # named where it is not full training
    stats.append(Stat("quote", f"exact {unit.fmt(after)}", T(
        "every FLOP the model performs", f" as it ran ({regime})" if regime else "",
        "; to compare with the framework's log, use the log's convention", compare_clause(s))))
    if s.get("vision_share_mean") is not None:
        stats.append(Stat("vision share", fmt(s["vision_share_mean"], 1, True), T("of the exact training FLOPs")))
    return stats


def provenance(s: dict) -> list[Inline]:
    """What kind of numbers these are, before anything else: a synthetic run, an estimate."""
    lines = []
    if s.get("synthetic"):
        lines.append(T(B("SYNTHETIC RUN"), " — generated data, not a real training job."))
    if s.get("estimated"):
        lines.append(T(B("ESTIMATE"), " — no per-microbatch metadata; statistics come from the run configuration."))
    return lines


def context_lines(s: dict) -> list[Inline]:
    """The lines under the figure: the headline in words, regime, RL, the log's number, the vision share."""
    lines = []
    conv = s["conventions"]
    unit = run_rate_unit(s)
    b, a = conv.get(BEFORE, {}).get("tflops_per_gpu_mean"), conv.get("exact", {}).get("tflops_per_gpu_mean")
    if b and a:
        peak = (f"{fmt(s['peak_tflops'], 0)} TFLOP/s peak" if s.get("peak_tflops") is not None else "peak unknown")
        lines.append(T(f"LM-only ({BEFORE}) ", B(unit.fmt(b)), f" {unit.per_gpu} → exact with vision ", B(unit.fmt(a)),
                       f" {unit.per_gpu} ({100 * (a / b - 1):+.1f}%); MFU {fmt(conv[BEFORE]['mfu_mean'], 1, True)} → "
                       f"{fmt(conv['exact']['mfu_mean'], 1, True)} on {s['world_size']} × ", s["gpu"] or "unknown GPU",
                       f" ({peak}, ", s["dtype"], ")."))
    regime = s.get("regime")
    if regime:  # the regime in words, full-training accounting beside it where it differs (pipeline.regime_summary)
        ratio = regime.get("full_training_over_regime")
        line = [B("Regime: " + regime["description"]), " (", regime["source"], ")."]
        if ratio and abs(ratio - 1) > 1e-9:  # a regime that trains every weight has no other accounting to name
            line += [" Full-training accounting would count ×", B(f"{ratio:.3f}"), " these FLOPs",
                     f" ({100 * (ratio - 1):+.1f}%)"]
            if regime.get("full_training_tflops_per_gpu_mean") is not None:
                line += [": ", unit.text(regime["full_training_tflops_per_gpu_mean"])]
                if regime.get("full_training_mfu_mean") is not None:
                    line += [", MFU ", fmt(regime["full_training_mfu_mean"], 1, True)]
            line.append(" — not what ran.")
        lines.append(T(*line))
        for text in regime.get("contradictions", []):
            lines.append(T(Span("Regime contradiction: ", bold=True, tone="warn"), text))
    rl = s.get("rl")
    if rl:  # the RL regime first, the training-only accounting beside it (analysis.rl, report.sections.rl)
        line = [B(rl["headline"]), f" ({rl['iterations']} RL steps)."]
        if rl.get("training_only_share") is not None:
            line += [" Training-only accounting counts ", B(fmt(rl["training_only_share"], 1, True)),
                     " of the RL steps' FLOPs (the update alone; generation and log-prob forwards not counted)."]
        lines.append(T(*line))
    if s.get("logged_tflops_per_gpu_mean"):
        lines.append(T("The log printed ", B(unit.fmt(s["logged_tflops_per_gpu_mean"])), f" {unit.per_gpu} on average."))
    if s.get("vision_share_mean") is not None:
        lines.append(T("Vision share of exact training FLOPs: ", B(fmt(s["vision_share_mean"], 1, True)),
                       " (Σ vision / Σ total over the windows the means use)."))
    return lines


def headline(inputs: SectionInputs) -> SectionContent:
    s = inputs.summary
    line, tone = verdict(s)
    blocks: list = [Paragraph(p) for p in provenance(s)] + [Verdict(line, tone)]
    stats = [Stats(headline_stats(s))] if headline_stats(s) else []
    by = _by_status(s["checks"])
    checks: list = [Paragraph(T(B("Checks:"), " ", checks_count(s["checks"]), " — ", L("every check", "#checks"),
                                " is listed below."))]
    shown = by["fail"] + by["warn"]  # a failed or warned check is never collapsed
    if shown:
        checks.append(Bullets([T(Span(MARK[c["status"]], bold=True, tone=c["status"]), " ", c["summary"])
                               for c in shown]))
    blocks += checks + stats if by["fail"] else stats + checks  # a failed check comes before the numbers it taints
    if inputs.figures.get(LEAD_FIGURE, "not drawn") is None:
        blocks.append(FigureRef(LEAD_FIGURE, caption_of(LEAD_FIGURE)))
    lines = context_lines(s)
    if lines:
        blocks.append(Bullets(lines))
    return SectionContent("", blocks)


def checks_section(inputs: SectionInputs) -> SectionContent:
    """Every check, most severe first (the lead names the failed and warned ones; here they all are)."""
    checks = inputs.summary["checks"]
    items = [T(Span(MARK[c["status"]], bold=True, tone=c["status"]), " ", c["summary"]) for c in checks]
    return SectionContent("Checks", [Details(T(f"{len(checks)} checks: {checks_count(checks)}"), [Bullets(items)])])


def verdict_terminal(summary: dict) -> list[str]:
    """Terminal lines, first: what these numbers are and the verdict (report.html's first lines)."""
    line, _ = verdict(summary)
    return [plain(p) for p in provenance(summary)] + [plain(line)]


def stats_terminal(summary: dict) -> list[str]:
    """Terminal lines: the headline numbers as the lead's cards show them."""
    return [f"  {stat.label:<13} {stat.value:<20} {plain(stat.detail)}" for stat in headline_stats(summary)]


def vision_share_line(summary: dict) -> list[str]:
    """Terminal line: the run's vision share (after the rates)."""
    if summary.get("vision_share_mean") is None:
        return []
    return [f"  vision share of exact training FLOPs {fmt(summary['vision_share_mean'], 1, True)} "
            "(Σ vision / Σ total over the windows the means use)"]

register_part(ReportPart("headline", order=0, section=headline, terminal=vision_share_line, terminal_order=20))
register_part(ReportPart("checks", order=5, section=checks_section))
