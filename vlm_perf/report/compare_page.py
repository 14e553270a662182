"""The comparison page of `vlm-perf compare`: compare.json, compare.md, compare.html, compare.png."""

from __future__ import annotations

import json
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402

from .content import (B, Bullets, FigureRef, Inline, Paragraph, SectionContent, Stat, Stats, T, Table,  # noqa: E402
                      Verdict, plain)
from .document import json_safe  # noqa: E402
from .render import render_html as render_page, render_markdown as render_md  # noqa: E402
from .units import RateUnit, rate_unit  # noqa: E402

TITLE = "A vs B"

FACT_LABELS = {
    "seconds_per_iteration": ("step time (s)", 3),
    "exact_flops_per_iteration": ("exact FLOPs / iteration", "e"),
    "exact_vision_flops_per_iteration": ("exact vision FLOPs / iteration", "e"),
    "vision_share": ("vision share of exact FLOPs", "%"),
    "lm_tokens_per_iteration": ("LM tokens / iteration", 0),
    "padded_tokens_per_iteration": ("padded tokens / iteration", 0),
    "visual_token_share": ("visual-token share of LM tokens", "%"),
    "images_and_videos_per_iteration": ("images + videos / iteration", 1),
    "patches_per_frame": ("patches per frame", 1),
}


def _f(x, kind=1) -> str:
    if x is None:
        return "—"
    if kind == "e":
        return f"{x:.4e}"
    if kind == "%":
        return f"{100 * x:.2f}%"
    return f"{x:,.{kind}f}"


def compare_unit(cmp: dict) -> RateUnit:
    """One display unit for both runs' rates (`vlm_perf.report.units`)."""
    return rate_unit(v for e in cmp["conventions"].values() for v in (e["a"], e["b"]))


def conv_headers(unit: RateUnit) -> list[str]:
    return ["convention", f"A {unit.per_gpu}", f"B {unit.per_gpu}", "delta", "B/A", "A MFU", "B MFU", "MFU delta"]


def convention_rows(cmp: dict) -> list[list[str]]:
    rows = []
    unit = compare_unit(cmp)
    for name, e in cmp["conventions"].items():
        m = e["mfu"]
        delta = "—" if e["delta"] is None else f"{e['delta'] / unit.tflops:+,.1f}"
        rows.append([name, unit.fmt(e["a"]), unit.fmt(e["b"]), delta,
                     _f(e["ratio"], 4), _f(m["a"], "%"), _f(m["b"], "%"),
                     "—" if m["delta"] is None else f"{100 * m['delta']:+.2f} pt"])
    return rows


def fact_rows(cmp: dict) -> list[list[str]]:
    rows = []
    for key, (label, kind) in FACT_LABELS.items():
        e = cmp["step"].get(key)
        if e:
            delta = "—" if e["delta"] is None else (f"{100 * e['delta']:+.2f} pt" if kind == "%" else
                                                    (f"{e['delta']:+.4e}" if kind == "e" else f"{e['delta']:+,.3f}"))
            rows.append([label, _f(e["a"], kind), _f(e["b"], kind), delta, _f(e["ratio"], 4)])
    return rows


def headline_inline(cmp: dict) -> list[Inline]:
    """The comparison's headline lines as typed spans (input strings stay plain text in every format)."""
    ra, rb = cmp["runs"]["a"], cmp["runs"]["b"]
    unit = compare_unit(cmp)  # one display unit for both runs (report/units.py)
    lines: list[Inline] = []
    for label, r in (("A", ra), ("B", rb)):
        peak = r.get("peak") or {}
        src = f"; {peak.get('clock', '')} — {peak.get('source_short', '')}" if peak else ""
        parts: list = [f"{label}: ", r["run"], " — ", r["model"], f" on {r['world_size']} × ", r["gpu"],
                       f" (peak {_f(r['peak_tflops'], 0)} TFLOP/s dense ", r["dtype"], f"{src})"]
        if r.get("synthetic"):
            parts += [" — ", B("SYNTHETIC")]
        if r.get("estimated"):
            parts += [" — ", B("ESTIMATE")]
        parts += [f"; the log printed {unit.text(r.get('logged_tflops_per_gpu_mean'))}: ", r["logged"]["note"], "."]
        lines.append(T(*parts))
    ga, gb = ra.get("regime") or {}, rb.get("regime") or {}
    if ga or gb:  # each run's exact FLOPs count what its own regime runs (vlm_perf.run.regime)
        line: list = []
        for label, g in (("A", ga), ("B", gb)):
            ratio = g.get("full_training_over_regime")
            line += [f"{'; ' if line else 'Regime: '}{label} ", B(g.get("description") or "—"),
                     f" (full-training accounting ×{ratio:.3f})" if ratio and ratio != 1.0 else ""]
        same = ga.get("description") == gb.get("description")
        line.append("." if same else ": the regimes differ, so the exact FLOPs change includes what the regime change "
                                     "adds or removes.")
        lines.append(T(*line))
    h = cmp.get("hfu") or {}
    if h.get("hfu", {}).get("a") is not None or h.get("hfu", {}).get("b") is not None:
        lines.append(T(f"HFU (exact + recompute): A {_f(h['hfu']['a'], '%')} (recompute ", h["a"]["recompute"],
                       f"), B {_f(h['hfu']['b'], '%')} (recompute ", h["b"]["recompute"], ")."))
    d = cmp.get("decomposition")
    if d:
        lines.append(T(f"Step time {d['step_time_delta_s']:+.3f} s ({100 * (d['step_time_ratio'] - 1):+.1f}%) = ",
                       B(f"data changed {d['data_changed_s']:+.3f} s"),
                       f" (exact FLOPs/iteration ×{d['flops_per_iteration_ratio']:.4f}, at A's time per FLOP) + ",
                       B(f"system changed {d['system_changed_s']:+.3f} s"),
                       f" (GPU-seconds per FLOP ×{d['gpu_seconds_per_flop_ratio']:.4f}, GPUs ×{d['gpus_ratio']:.3g})."))
    return lines


def lead(cmp: dict) -> tuple[Inline, list[Stat]]:
    """The page's answer first, as a report's lead: one verdict line and the headline numbers, A -> B (exact)."""
    unit = compare_unit(cmp)
    exact = cmp["conventions"].get("exact") or {}
    a, b, mfu = exact.get("a"), exact.get("b"), exact.get("mfu") or {}
    step = cmp["step"].get("seconds_per_iteration") or {}
    d = cmp.get("decomposition")
    parts: list = ["B vs A, exact: ", B(f"{unit.fmt(a)} → {unit.fmt(b)} {unit.per_gpu}")]
    if exact.get("ratio") is not None:
        parts.append(f" ({100 * (exact['ratio'] - 1):+.1f}%)")
    if mfu.get("a") is not None or mfu.get("b") is not None:
        parts += [", MFU ", B(f"{_f(mfu.get('a'), '%')} → {_f(mfu.get('b'), '%')}")]
    if d:
        parts += [f"; step time {d['step_time_delta_s']:+.3f} s = data changed ", B(f"{d['data_changed_s']:+.3f} s"),
                  " + system changed ", B(f"{d['system_changed_s']:+.3f} s")]
    parts.append(".")
    stats = [Stat(f"exact {unit.per_gpu}", f"{unit.fmt(a)} → {unit.fmt(b)}", T("A → B" + (
        f", {100 * (exact['ratio'] - 1):+.1f}%" if exact.get("ratio") is not None else ""))),
             Stat("MFU (exact)", f"{_f(mfu.get('a'), '%')} → {_f(mfu.get('b'), '%')}", T("A → B"))]
    if step:
        stats.append(Stat("step time (s)", f"{_f(step.get('a'), 3)} → {_f(step.get('b'), 3)}", T("A → B")))
    share = cmp["step"].get("vision_share") or {}
    if share:
        stats.append(Stat("vision share", f"{_f(share.get('a'), '%')} → {_f(share.get('b'), '%')}",
                          T("of the exact FLOPs, A → B")))
    return T(*parts), stats


def headline(cmp: dict) -> list[str]:
    """The headline lines as plain text (the terminal)."""
    return [plain(line) for line in headline_inline(cmp)]


def figure(cmp: dict, path: Path) -> Path:
    names = list(cmp["conventions"])
    unit = compare_unit(cmp)
    a = [(cmp["conventions"][n]["a"] or 0) / unit.tflops for n in names]
    b = [(cmp["conventions"][n]["b"] or 0) / unit.tflops for n in names]
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(11, 3.8), gridspec_kw={"width_ratios": [2, 1]})
    x = np.arange(len(names))
    ax1.bar(x - 0.2, a, 0.4, label="A", color="#7f7f7f")
    ax1.bar(x + 0.2, b, 0.4, label="B", color="#d62728")
    ax1.set_xticks(x, names, rotation=15)
    ax1.set(ylabel=unit.per_gpu, title=f"{unit.per_gpu} by convention")
    ax1.legend()
    d = cmp.get("decomposition")
    if d:
        parts = [d["data_changed_s"], d["system_changed_s"], d["step_time_delta_s"]]
        ax2.bar(["data\nchanged", "system\nchanged", "step time\ndelta"], parts,
                color=["#1f77b4", "#ff7f0e", "#333333"])
        ax2.axhline(0, color="#999", lw=0.8)
    ax2.set(ylabel="seconds / iteration", title="Step-time change, B − A")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


CONV_HEADERS = conv_headers(RateUnit())  # (TFLOP/s; a run's own unit: conv_headers(compare_unit(cmp)))
FACT_HEADERS = ["per iteration", "A", "B", "delta", "B/A"]


def compare_sections(cmp: dict) -> list[SectionContent]:
    """The comparison page as typed sections, rendered by the report's own templates (`render`)."""
    unit = compare_unit(cmp)
    verdict, stats = lead(cmp)
    sections = [SectionContent("", [Verdict(verdict), Stats(stats), FigureRef("compare.png", "A vs B"),
                                    Bullets(headline_inline(cmp))], anchor="headline"),
                SectionContent(f"{unit.per_gpu} and MFU by convention", [
                    Table(conv_headers(unit), [[T(c) for c in row] for row in convention_rows(cmp)]),
                    Paragraph(T("Means are time-weighted over the windows each run's report uses, exactly as in "
                                "each run's report."))], anchor="conventions"),
                SectionContent("Step time, tokens and media", [
                    Table(FACT_HEADERS, [[T(c) for c in row] for row in fact_rows(cmp)])], anchor="step")]
    if cmp["messages"]:
        sections.append(SectionContent("Gaps and warnings", [Bullets([T(m) for m in cmp["messages"]])],
                                       anchor="messages"))
    return sections


def render_markdown(cmp: dict) -> str:
    return render_md(TITLE, compare_sections(cmp), kind="compare")


def render_html(cmp: dict, out_dir: Path) -> str:
    return render_page(TITLE, compare_sections(cmp), out_dir, kind="compare")


def write_compare(cmp: dict, out_dir: Path) -> dict[str, Path]:
    """compare.{json,md,html,png} into ``out_dir`` by the report's output rule (`vlm_perf.report.output`: a fresh
    folder renamed into place, never written through a symlink, a foreign folder refused)."""
    from .output import COMPARE, atomic_report_dir

    names = ("compare.json", "compare.md", "compare.html", "compare.png")
    with atomic_report_dir(out_dir, COMPARE) as tmp:
        figure(cmp, tmp / "compare.png")
        (tmp / "compare.json").write_text(json.dumps(json_safe(cmp), indent=2) + "\n")
        (tmp / "compare.md").write_text(render_markdown(cmp))
        (tmp / "compare.html").write_text(render_html(cmp, tmp))
    return {name: out_dir / name for name in names}
