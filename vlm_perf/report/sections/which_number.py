"""Which number to quote, and why each convention differs from exact on this run (computed deltas)."""

from __future__ import annotations

from ..content import B, Bullets, Paragraph, SectionContent, T, fmt
from ..units import run_rate_unit
from . import SectionInputs, register_section

TOP = 3  # components named per convention


@register_section("which_number", order=15)
def which_number(inputs: SectionInputs) -> SectionContent:
    s = inputs.summary
    conv = s["conventions"]
    exact = conv.get("exact", {})
    cc = s.get("log_crosscheck", {})
    logged_as = cc.get("convention") if cc.get("status") == "ok" else None
    matches = [n for n, r in (cc.get("candidates") or {}).items() if abs(r - 1) <= 0.02]
    mfu = fmt(exact.get("mfu_mean"), 1, True) if exact.get("mfu_mean") is not None else "unknown without a GPU peak"
    quote = T("Quote ", B("exact"), f" ({run_rate_unit(s).text(exact.get('tflops_per_gpu_mean'))}, MFU {mfu}) as this run's achieved throughput and MFU: it counts every "
              "FLOP the model performs (vision tower, merger, language model, causal attention as computed). "
              "To compare with the framework's own logs, or with another run's logged number, use the convention "
              "the log uses", f" (here {logged_as}, which the cross-check matched)" if logged_as else
              (f" (the log's number matches {', '.join(matches)})" if matches else
               " (the cross-check could not tell which one the log uses)"),
              "; never compare numbers of two different conventions.")
    blocks = [Paragraph(quote)]
    items = []
    for name, diff in s.get("convention_differences", {}).items():
        parts = diff["components"][:TOP]
        if not parts:
            items.append(T(B(name), f" {100 * diff['total_vs_exact']:+.1f}% vs exact: the same components as exact."))
            continue
        reasons = []
        for p in parts:
            verb = "counts" if p["convention_flops"] else "leaves out"
            what = (f"{verb} {p['component']} at {p['convention_flops'] / p['exact_flops']:.2f}× exact"
                    if p["convention_flops"] and p["exact_flops"] else f"{verb} {p['component']}")
            reasons.append(f"{what} ({100 * p['delta_of_exact_total']:+.1f}% of exact)")
        rest = diff["total_vs_exact"] - sum(p["delta_of_exact_total"] for p in parts)
        tail = f"; other components {100 * rest:+.1f}%" if abs(rest) >= 0.001 else ""
        items.append(T(B(name), f" {100 * diff['total_vs_exact']:+.1f}% vs exact: " + "; ".join(reasons) + tail + "."))
    if items:
        blocks.append(Paragraph(T("Why each convention differs from exact on this run (run totals, computed per "
                                  "component):")))
        blocks.append(Bullets(items))
    return SectionContent("Which number to quote", blocks)
