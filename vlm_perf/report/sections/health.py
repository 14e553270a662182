"""Run health: productive time vs time lost (restarts, untimed gaps, stalls, replayed work), step-time spread."""

from __future__ import annotations

from ..content import B, Bullets, Paragraph, SectionContent, T, Table, fmt
from . import SectionInputs, register_section

KIND = {"restart": "restart downtime", "untimed": "untimed", "replayed": "replayed work", "stall": "stall"}


def _min(seconds) -> str:
    return "—" if seconds is None else f"{seconds / 60:,.1f} min"


@register_section("health", order=30)
def health(inputs: SectionInputs) -> SectionContent | None:
    h = inputs.summary.get("health") or {}
    if not h:
        return None
    items = []
    if h.get("goodput") is not None:
        items.append(T("Goodput ", B(fmt(h["goodput"], 1, True)), f": {_min(h['productive_s'])} of productive training "
                       f"in {_min(h['wall_clock_s'])} wall clock (first window to last log line)."))
    else:
        items.append(T(f"Productive training {_min(h.get('productive_s'))}; ", h.get("note", "")))
    lost = [("restart downtime", h.get("restart_downtime_s")), ("untimed (checkpoint saves, validation, stalls "
             "outside the step timer)", h.get("untimed_s")), ("replayed work", h.get("replayed_s")),
            ("stalls (outlier steps beyond the median)", h.get("stall_s"))]
    named = "; ".join(f"{what} {_min(s)}" for what, s in lost if s)
    if named:
        items.append(T("Lost: ", named, f" ({h.get('replayed_iterations', 0)} iterations replayed)."))
    events = h.get("log_events") or {}
    if events:
        items.append(T(f"Log lines: {events.get('checkpoint', 0)} about checkpoints, {events.get('validation', 0)} "
                       f"validation, {events.get('traceback', 0)} traceback, {events.get('restart_banner', 0)} restart "
                       f"banner(s); {h.get('segments', 0)} segment(s)."))
    if h.get("tokens_per_s_per_gpu") is not None:
        items.append(T("LM tokens/s/GPU over usable windows: ", B(f"{h['tokens_per_s_per_gpu']:,.0f}"), "."))
    blocks = [Bullets(items)]
    top = [e for e in h.get("lost", []) if e["seconds"] >= 1][:8]
    if top:
        blocks.append(Table(["lost", "minutes", "at (min)", "what"],
                            [[T(KIND[e["kind"]]), T(f"{e['minutes']:.2f}"),
                              T("—" if e["at_min"] is None else f"{e['at_min']:.1f}"), T(e["what"])] for e in top]))
    rows = [[T(str(r["segment"])), T(f"{r['iterations'][0]}..{r['iterations'][1]}"), T(str(r["windows"])),
             T(fmt(r["p50_s"], 3)), T(fmt(r["p90_s"], 3)), T(fmt(r["p99_s"], 3))]
            for r in h.get("step_time_by_segment", [])]
    if rows:
        blocks.append(Paragraph(T("Seconds per iteration by segment (window means, first window of each segment "
                                  "left out):")))
        blocks.append(Table(["segment", "iterations", "windows", "p50 s", "p90 s", "p99 s"], rows))
    return SectionContent("Run health", blocks)
