"""Which number to quote, and why each convention differs from exact on this run (computed deltas)."""

from __future__ import annotations

from ..content import B, Bullets, Paragraph, SectionContent, Span, T, Table, fmt
from ..units import TFLOPS, RateUnit, run_rate_unit
from . import SectionInputs, register_section

TOP = 3  # components named per convention


@register_section("which_number", order=15)
def which_number(inputs: SectionInputs) -> SectionContent:
    s = inputs.summary
    conv = s["conventions"]
    exact = conv.get("exact", {})
    mfu = fmt(exact.get("mfu_mean"), 1, True) if exact.get("mfu_mean") is not None else "unknown without a GPU peak"
    quote = T("Quote ", B("exact"), f" ({run_rate_unit(s).text(exact.get('tflops_per_gpu_mean'))}, MFU {mfu}) as "
              "this run's achieved throughput and MFU: it counts every FLOP the model performs (vision tower, merger, "
              "language model, causal attention as computed). To compare with the framework's own logs, or with "
              "another run's logged number, use the convention the log uses", compare_clause(s),
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
    blocks += reconcile_blocks(s.get("log_reconcile") or {}, run_rate_unit(s))
    return SectionContent("Which number to quote", blocks)


def compare_clause(s: dict) -> str:
    """Which convention the log uses, as far as the cross-check can tell: `` (here megatron-lm, which the
    cross-check matched)``."""
    cc = s.get("log_crosscheck", {})
    logged_as = cc.get("convention") if cc.get("status") == "ok" else None
    matches = [n for n, r in (cc.get("candidates") or {}).items() if abs(r - 1) <= 0.02]
    if logged_as:
        return f" (here {logged_as}, which the cross-check matched)"
    if matches:
        return f" (the log's number matches {', '.join(matches)})"
    return " (the cross-check could not tell which one the log uses)"


def _mfu_cell(convention: str, mfu: float | None):
    """An MFU cell; over 100% of the peak (no hardware achieves that) with the reason beside it: what the convention
    counts that the run did not compute (its first documented deviation, `vlm_perf.flops` registry)."""
    if mfu is None or mfu <= 1.0:
        return T(fmt(mfu, 1, True))
    from ...flops import get_convention

    try:
        deviations = get_convention(convention).deviations
    except Exception:  # noqa: BLE001 - an unknown name still gets the plain reason
        deviations = ()
    why = f": {deviations[0]}" if deviations else ""
    return T(Span(fmt(mfu, 1, True), bold=True, tone="warn"), f" (over 100% of the peak, not achievable; the "
             f"convention overcounts{why})")


def reconcile_blocks(r: dict, unit_of: RateUnit = TFLOPS) -> list:
    """Every registered convention (variants included) against the log's printed TFLOP/s/GPU
    (`vlm_perf.analysis.log_reconcile`): the matches within print precision and the closest one's
    component differences from exact; rates in the run's unit ``unit_of``."""
    if r.get("status") != "ok":
        if not r:
            return []
        tail = mfu_blocks(r.get("mfu") or {}) + total_flos_blocks(r.get("total_flos") or {})
        return [Paragraph(T("Every registered convention against the log's number: ", r.get("message", "not done"),
                            "."))] + tail
    n, unit = r["windows"], f"{r['printed_decimals']} decimal(s)"
    matches = r["matches"]
    parts: list = ["Every registered convention against the TFLOP/s/GPU the log printed (median ",
                   B(fmt(r["printed_median"], r["printed_decimals"])), f" over {n} windows the means use; printed "
                   f"to {unit}): "]
    parts += (["matches within print precision: ", B(", ".join(matches)), "; "] if matches else
              ["no convention matches within print precision; "])
    intro = T(*parts, "closest: ", B(r["closest"]), ".")
    rows = [[T(c["convention"]), T(unit_of.fmt(c["tflops_per_gpu_mean"])), _mfu_cell(c["convention"], c["mfu_mean"]),
             T("—" if c["rel_diff_median"] is None else f"{100 * c['rel_diff_median']:+.2f}%"),
             T(f"{c['windows_matched']} of {n}"), T("yes" if c["matches"] else "")] for c in r["conventions"]]
    blocks: list = [Paragraph(intro), Table(["convention", unit_of.per_gpu, "MFU", "vs printed (median window)",
                                             "windows within print precision", "matches"], rows),
                    Paragraph(T("TFLOP/s/GPU and MFU: time-weighted means over the windows the means use, as in the "
                                "table by convention; vs printed: the convention's number for each window against "
                                "the log's, the median."))]
    diff = r.get("closest_minus_exact") or []
    if diff:
        blocks.append(Paragraph(T(B(r["closest"]), " minus exact, per component (run totals):")))
        blocks.append(Bullets([T(d["component"], f": {d['delta_flops']:+.4e} FLOPs ("
                                 f"{100 * d['delta_of_exact_total']:+.2f}% of exact)" if d["delta_of_exact_total"]
                                 is not None else "") for d in diff]))
    if r.get("not_defined"):
        blocks.append(Bullets([T(B(name), ": not defined here: ", why) for name, why in r["not_defined"].items()]))
    return blocks + mfu_blocks(r.get("mfu") or {}) + total_flos_blocks(r.get("total_flos") or {})


def _diff_bullets(name: str, diff: list) -> list:
    if not diff:
        return []
    return [Paragraph(T(B(name), " minus exact, per component (run totals):")),
            Bullets([T(d["component"], f": {d['delta_flops']:+.4e} FLOPs (" f"{100 * d['delta_of_exact_total']:+.2f}% "
                       "of exact)" if d["delta_of_exact_total"] is not None else "") for d in diff])]


def mfu_blocks(m: dict) -> list:
    """Every convention's implied MFU against the MFU the log printed (`log_reconcile.mfu_reconcile`)."""
    if m.get("status") != "ok":
        return [Paragraph(T("Every registered convention against the log's MFU: ", m.get("message", "not done"),
                            "."))] if m.get("status") not in (None, "no_logged_value") else []
    n = m["windows"]
    matches = m["matches"]
    intro = T("Every registered convention against the MFU the log printed (median ",
              B(fmt(m["printed_median"], m["printed_decimals"])), f" over {n} window(s) the means use; printed to "
              f"{m['printed_decimals']} decimal(s)), with the peak the framework divided by: ",
              B(f"{m['peak_tflops_per_device']:g} TFLOP/s per device"), f" × {m['devices']} device(s) (peak: "
              f"{m['peak_source']}; devices: {m['devices_source']}); printed MFU read as {m['mode']}: ",
              *(["matches within print precision: ", B(", ".join(matches)), "; "] if matches else
                ["no convention matches within print precision; "]), "closest: ", B(m["closest"]), ".")
    rows = [[T(c["convention"]), T(fmt(c["mfu_median"], m["printed_decimals"] + 1)),
             T("—" if c["rel_diff_median"] is None else f"{100 * c['rel_diff_median']:+.2f}%"),
             T(f"{c['windows_matched']} of {n}"), T("yes" if c["matches"] else "")] for c in m["conventions"]]
    return [Paragraph(intro), Table(["convention", "implied MFU (fraction, median window)", "vs printed (median window)",
                                     "windows within print precision", "matches"], rows),
            *_diff_bullets(m["closest"], m.get("closest_minus_exact") or [])]


def total_flos_blocks(t: dict) -> list:
    """Every convention's run total against the Trainer's printed total_flos (`log_reconcile.total_flos_reconcile`)."""
    if t.get("status") != "ok":
        return []
    blocks: list = []
    for p in t["printed"]:
        low, high = p["interval"]
        matches = p["matches"]
        blocks.append(Paragraph(T("The Trainer's total_flos as the log printed it: ", B(p["printed"]),
                                  f" (reads as [{low:.15g}, {high:.15g}) FLOPs): ",
                                  *(["matches within print precision: ", B(", ".join(matches))] if matches else
                                    ["no convention's run total matches"]), ".")))
        blocks.append(Table(["convention", "run total (FLOPs)", "vs printed", "matches"],
                            [[T(c["convention"]), T(f"{c['flops_total']:.6e}"),
                              T("—" if c["rel_diff"] is None else f"{100 * c['rel_diff']:+.3f}%"),
                              T("yes" if c["matches"] else "")] for c in p["conventions"]]))
    blocks.append(Paragraph(T(t["note"], ".")))
    return blocks
