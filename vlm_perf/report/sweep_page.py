"""The sweep page of `vlm-perf compare RUN1 ... RUNn` (more than two runs, or ``--sweep``): compare.json,
compare.md, compare.html, the table as compare.csv and compare.parquet, and three figures (MFU vs vision share,
TFLOP/s/GPU per convention, step time vs media tokens), written by the report's output rule (`report.output`)
into a ``compare`` folder. Two runs without ``--sweep`` stay the A-vs-B page (`compare_page`)."""

from __future__ import annotations

import json
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import polars as pl  # noqa: E402

from ..analysis.sweep import sweep_frame_rows  # noqa: E402
from .content import B, Bullets, C, FigureRef, Inline, Paragraph, SectionContent, T, Table, plain  # noqa: E402
from .document import json_safe  # noqa: E402
from .render import render_html as render_page, render_markdown as render_md  # noqa: E402
from .units import RateUnit, rate_unit  # noqa: E402

FIGURES = {"sweep_mfu_vs_vision.png": "MFU vs vision share (each point a run, #index)",
           "sweep_conventions.png": "TFLOP/s/GPU by convention, per run",
           "sweep_step_time.png": "Step time vs media tokens per iteration (each point a run, #index)"}
TABLE_FILES = ("compare.csv", "compare.parquet")
#: every file a sweep folder holds (`report.output.COMPARE_FILES` allows them in a compare folder)
SWEEP_FILES = ("compare.json", "compare.md", "compare.html", *TABLE_FILES, *FIGURES)
#: the convention the headline ranks by (the run's achieved throughput), when the runs have it
RANK_BY = "exact"
_COLORS = ("#d62728", "#1f77b4", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f")


def _f(x, kind=1) -> str:
    if x is None:
        return "—"
    if kind == "%":
        return f"{100 * x:.2f}%"
    return f"{x:,.{kind}f}"


def sweep_unit(sweep: dict) -> RateUnit:
    """One display unit for every run's rates (`vlm_perf.report.units`)."""
    return rate_unit(e.get("tflops_per_gpu_mean") for r in sweep["runs"] for e in r["conventions"].values())


def _rate(unit: RateUnit, tflops: float | None) -> str:
    """A rate in the sweep's unit; a non-zero rate that unit would show as 0.0 (a tiny run among large ones)
    carries its own unit instead, e.g. ``35.2 GFLOP/s/GPU``."""
    text = unit.fmt(tflops)
    if tflops and text in ("0.0", "-0.0"):
        return rate_unit([tflops]).text(tflops)
    return text


def _notes(row: dict) -> str:
    notes = []
    if row["synthetic"]:
        notes.append("SYNTHETIC" + (f" ({row['generator']}, seed {row['seed']})" if row["generator"] else ""))
    if row["estimated"]:
        notes.append("ESTIMATE")
    if row["checks_failed"]:
        notes.append(f"checks FAILED: {', '.join(row['checks_failed'])}")
    return "; ".join(notes)


def table_headers(sweep: dict, unit: RateUnit | None = None) -> list[str]:
    unit = unit or sweep_unit(sweep)
    convs = [h for c in sweep["conventions"] for h in (f"{c} {unit.per_gpu}", f"{c} MFU")]
    return ["#", "run", "model", "GPUs", "regime", *convs, "vision share", "step time (s)",
            "media tokens / iteration", "changed vs #1", "notes"]


def table_rows(sweep: dict) -> list[list[str]]:
    """The rows of the sweep table (one formatting of every number: page, terminal)."""
    unit = sweep_unit(sweep)
    rows = []
    for r in sweep["runs"]:
        convs = []
        for c in sweep["conventions"]:
            e = r["conventions"].get(c) or {}
            convs += [_rate(unit, e.get("tflops_per_gpu_mean")), _f(e.get("mfu_mean"), "%")]
        gpus = f"{r['world_size'] if r['world_size'] is not None else '—'} × {r['gpu'] or '—'}"
        changed = "baseline" if r["index"] == 1 else ("; ".join(r["changed"]) or "nothing stated")
        rows.append([str(r["index"]), r["name"], str(r["model"]), gpus, r["regime"], *convs,
                     _f(r["vision_share"], "%"), _f(r["seconds_per_iteration"], 3),
                     _f(r["media_tokens_per_iteration"], 0), changed, _notes(r)])
    return rows


def terminal_table(sweep: dict) -> tuple[list[str], list[list[str]]]:
    """The terminal's narrower table (headers, rows): the page's cells for #, run, GPUs, the ranking convention's
    TFLOP/s/GPU, every convention's MFU, vision share and step time (the page and compare.csv have every column)."""
    unit = sweep_unit(sweep)
    headers, rows = table_headers(sweep, unit), table_rows(sweep)
    rank = _rank_convention(sweep)
    keep = ["#", "run", "GPUs"] + ([f"{rank} {unit.per_gpu}"] if rank else []) + \
        [f"{c} MFU" for c in sweep["conventions"]] + ["vision share", "step time (s)"]
    at = [headers.index(h) for h in keep]
    return keep, [[row[i] for i in at] for row in rows]


def _rank_convention(sweep: dict) -> str | None:
    convs = sweep["conventions"]
    return RANK_BY if RANK_BY in convs else (convs[0] if convs else None)


def headline_inline(sweep: dict) -> list[Inline]:
    runs = sweep["runs"]
    lines: list[Inline] = [T(f"{len(runs)} run(s); #1 ", B(runs[0]["name"]), " is the baseline each row's "
                             "\"changed vs #1\" refers to. Every number is that run's own ", C("vlm-perf report"),
                             " number (time-weighted means over the windows its report uses).")]
    conv = _rank_convention(sweep)
    ranked = [(r["conventions"][conv]["mfu_mean"], r) for r in runs
              if conv and (r["conventions"].get(conv) or {}).get("mfu_mean") is not None]
    if ranked:
        best, worst = max(ranked, key=lambda x: x[0]), min(ranked, key=lambda x: x[0])
        lines.append(T(f"{conv} MFU: highest ", B(f"#{best[1]['index']} {best[1]['name']}"),
                       f" {_f(best[0], '%')}; lowest ", B(f"#{worst[1]['index']} {worst[1]['name']}"),
                       f" {_f(worst[0], '%')}" + (f"; {len(runs) - len(ranked)} run(s) without an MFU (no peak)"
                                                  if len(ranked) < len(runs) else "") + "."))
    synthetic = [r for r in runs if r["synthetic"]]
    if synthetic:
        lines.append(T(B(f"{len(synthetic)} SYNTHETIC run(s)"), ": ", ", ".join(f"#{r['index']}" for r in synthetic),
                       " (generated, not real training runs; see notes)."))
    if sweep["left_out"]:
        lines.append(T(B(f"{len(sweep['left_out'])} run(s) left out"), " (could not be opened; listed below)."))
    return lines


def headline(sweep: dict) -> list[str]:
    return [plain(line) for line in headline_inline(sweep)]


# ------------------------------------------------------------------------------------ figures
def _label_points(ax, xs, ys, labels) -> None:
    for x, y, label in zip(xs, ys, labels):
        ax.annotate(label, (x, y), textcoords="offset points", xytext=(3, 3), fontsize=7)


def figure_mfu_vs_vision(sweep: dict, path: Path) -> Path:
    fig, ax = plt.subplots(figsize=(7.5, 4.5))
    for k, conv in enumerate(sweep["conventions"]):
        pts = [(100 * r["vision_share"], 100 * r["conventions"][conv]["mfu_mean"], f"#{r['index']}")
               for r in sweep["runs"] if r["vision_share"] is not None
               and (r["conventions"].get(conv) or {}).get("mfu_mean") is not None]
        if not pts:
            continue
        xs, ys, labels = zip(*pts)
        ax.scatter(xs, ys, s=22, color=_COLORS[k % len(_COLORS)], label=conv, zorder=3)
        if conv == _rank_convention(sweep):
            _label_points(ax, xs, ys, labels)
    ax.set(xlabel="vision share of exact FLOPs (%)", ylabel="MFU (%)", title="MFU vs vision share")
    ax.grid(alpha=0.3)
    if ax.get_legend_handles_labels()[0]:
        ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def figure_conventions(sweep: dict, path: Path) -> Path:
    unit = sweep_unit(sweep)
    runs, convs = sweep["runs"], sweep["conventions"]
    width = min(24.0, max(8.0, 2.0 + 0.12 * len(runs) * max(1, len(convs))))
    fig, ax = plt.subplots(figsize=(width, 4.2))
    x = np.arange(len(runs))
    bar = 0.8 / max(1, len(convs))
    for k, conv in enumerate(convs):
        values = [unit.value((r["conventions"].get(conv) or {}).get("tflops_per_gpu_mean")) for r in runs]
        ax.bar(x - 0.4 + bar * (k + 0.5), [np.nan if v is None else v for v in values], bar, label=conv,
               color=_COLORS[k % len(_COLORS)])
    ax.set_xticks(x, [f"#{r['index']}" for r in runs], fontsize=7 if len(runs) > 30 else 9,
                  rotation=90 if len(runs) > 30 else 0)
    ax.set(ylabel=unit.per_gpu, title=f"{unit.per_gpu} by convention, per run")
    ax.grid(axis="y", alpha=0.3)
    if convs:
        ax.legend(fontsize=8, ncol=min(4, len(convs)))
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def figure_step_time(sweep: dict, path: Path) -> Path:
    fig, ax = plt.subplots(figsize=(7.5, 4.5))
    pts = [(r["media_tokens_per_iteration"], r["seconds_per_iteration"], f"#{r['index']}") for r in sweep["runs"]
           if r["media_tokens_per_iteration"] is not None and r["seconds_per_iteration"] is not None]
    if pts:
        xs, ys, labels = zip(*pts)
        ax.scatter(xs, ys, s=22, color="#333333", zorder=3)
        _label_points(ax, xs, ys, labels)
    ax.set(xlabel="media tokens per iteration", ylabel="step time (s)", title="Step time vs media tokens")
    ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


_DRAW = {"sweep_mfu_vs_vision.png": figure_mfu_vs_vision, "sweep_conventions.png": figure_conventions,
         "sweep_step_time.png": figure_step_time}


# ------------------------------------------------------------------------------------ page
def sweep_sections(sweep: dict) -> list[SectionContent]:
    """The sweep page as typed sections, rendered by the report's own templates (`render`)."""
    unit = sweep_unit(sweep)
    sections = [SectionContent("", [Bullets(headline_inline(sweep))], anchor="headline"),
                SectionContent("Runs", [
                    Table(table_headers(sweep, unit), [[T(c) for c in row] for row in table_rows(sweep)]),
                    Paragraph(T("The same table, unrounded: ", B("compare.csv"), " and ", B("compare.parquet"),
                                " (one row per run, a TFLOP/s/GPU and an MFU column per convention)."))],
                               anchor="runs"),
                SectionContent("Figures", [FigureRef(name, caption) for name, caption in FIGURES.items()],
                               anchor="figures")]
    if sweep["left_out"]:
        sections.append(SectionContent("Runs left out", [Bullets([T(B(e["run"]), ": ", e["reason"])
                                                                  for e in sweep["left_out"]])], anchor="left-out"))
    if sweep["messages"]:
        sections.append(SectionContent("Gaps and warnings", [Bullets([T(m) for m in sweep["messages"]])],
                                       anchor="messages"))
    return sections


def title(sweep: dict) -> str:
    return f"sweep of {len(sweep['runs'])} runs"


def render_markdown(sweep: dict) -> str:
    return render_md(title(sweep), sweep_sections(sweep), kind="compare")


def render_html(sweep: dict, out_dir: Path) -> str:
    return render_page(title(sweep), sweep_sections(sweep), out_dir, kind="compare")


def sweep_frame(sweep: dict) -> pl.DataFrame:
    """The table of compare.csv / compare.parquet (`vlm_perf.analysis.sweep.sweep_frame_rows`)."""
    return pl.DataFrame(sweep_frame_rows(sweep), infer_schema_length=None)


def write_sweep(sweep: dict, out_dir: Path) -> dict[str, Path]:
    """Every sweep file into ``out_dir`` by the report's output rule (`vlm_perf.report.output`: a fresh folder
    renamed into place, never written through a symlink, a foreign folder refused)."""
    from .output import COMPARE, atomic_report_dir

    with atomic_report_dir(out_dir, COMPARE) as tmp:
        for name, draw in _DRAW.items():
            draw(sweep, tmp / name)
        frame = sweep_frame(sweep)
        frame.write_csv(tmp / "compare.csv")
        frame.write_parquet(tmp / "compare.parquet")
        (tmp / "compare.json").write_text(json.dumps(json_safe(sweep), indent=2) + "\n")
        (tmp / "compare.md").write_text(render_markdown(sweep))
        (tmp / "compare.html").write_text(render_html(sweep, tmp))
    return {name: out_dir / name for name in SWEEP_FILES}
