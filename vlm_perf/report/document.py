"""Write ``summary.json``, ``report.md`` and a self-contained ``report.html`` (+ PNG figures)."""

from __future__ import annotations

import base64
import html
import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import polars as pl

from ..analysis.compare import step_facts
from ..analysis.run import BEFORE, RunAnalysis
from . import figures

FIGURES = (
    ("tflops.png", "TFLOP/s/GPU over iterations, before vs after vision accounting"),
    ("mfu.png", "MFU before/after vision accounting"),
    ("components.png", "Stacked component breakdown (exact)"),
    ("vision_share.png", "Vision share of FLOPs per microbatch and per iteration"),
    ("step_time.png", "Step time vs FLOPs with the attribution fit"),
)


@dataclass
class ReportContext:
    """What the analysis does not know: inputs, configuration, diagnostics."""

    run: str
    gpu: str | None = None
    dtype: str = "bf16"
    inputs: dict = field(default_factory=dict)
    run_config: dict = field(default_factory=dict)
    diagnostics: dict = field(default_factory=dict)
    synthetic: bool = False
    microbatch_vision_share: pl.Series | None = None
    sections: list = field(default_factory=list)  # report.sections.SectionProvider: own summary block + section


def _clean(value: Any) -> Any:
    """JSON-safe: NaN/inf -> None, numpy scalars -> Python."""
    if isinstance(value, dict):
        return {str(k): _clean(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_clean(v) for v in value]
    if hasattr(value, "item") and not isinstance(value, (str, bytes)):
        value = value.item()
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value


def build_summary(run: RunAnalysis, ctx: ReportContext) -> dict:
    conventions = run.convention_summary()
    return _clean({
        "run": ctx.run,
        "model": run.model,
        "synthetic": ctx.synthetic,
        "estimated": run.estimated,
        "iterations": int(run.per_iteration.height),
        "logged_windows": int(run.windows.height),
        "world_size": run.world_size,
        "gpu": ctx.gpu,
        "dtype": ctx.dtype,
        "peak_tflops": run.peak_tflops,
        "vision_share_mean": run.vision_share_mean(),
        "conventions": conventions,
        "logged_tflops_per_gpu_mean": _logged_mean(run),
        "step": step_facts(run),
        "log_crosscheck": run.crosscheck,
        "attribution": run.attribution.to_dict(),
        "gaps": run.gaps,
        "messages": run.messages,
        "run_config": ctx.run_config,
        "inputs": ctx.inputs,
        "diagnostics": ctx.diagnostics,
        **{p.key: p.summary for p in ctx.sections},
    })


def _logged_mean(run: RunAnalysis) -> float | None:
    w = run.reliable_windows()
    if "tflops_per_gpu_logged" not in w.columns or not w["tflops_per_gpu_logged"].drop_nulls().len():
        return None
    good = w.filter(pl.col("tflops_per_gpu_logged").is_not_null())
    return float((good["tflops_per_gpu_logged"] * good["window_seconds"]).sum() / good["window_seconds"].sum())


def write_report(run: RunAnalysis, out_dir: Path, ctx: ReportContext) -> dict[str, Path]:
    out_dir.mkdir(parents=True, exist_ok=True)
    share_iter = run.per_iteration.select(
        pl.when(pl.col("exact_total") > 0).then(pl.col("exact_vision") / pl.col("exact_total")))[:, 0]
    paths = {
        "tflops.png": figures.tflops_over_time(run, out_dir / "tflops.png"),
        "mfu.png": figures.mfu_over_time(run, out_dir / "mfu.png"),
        "components.png": figures.component_stack(run, out_dir / "components.png"),
        "vision_share.png": figures.vision_share_hist(ctx.microbatch_vision_share, share_iter,
                                                      out_dir / "vision_share.png"),
        "step_time.png": figures.step_time_fit(run, out_dir / "step_time.png"),
    }
    summary = build_summary(run, ctx)
    (out_dir / "summary.json").write_text(json.dumps(summary, indent=2) + "\n")
    sections = [provider.render(out_dir) for provider in ctx.sections]
    for section in sections:
        paths.update({name: out_dir / name for name, _ in section.figures})
    markdown = render_markdown(summary, run, sections)
    (out_dir / "report.md").write_text(markdown)
    (out_dir / "report.html").write_text(render_html(summary, run, out_dir, sections))
    paths.update({"summary.json": out_dir / "summary.json", "report.md": out_dir / "report.md",
                  "report.html": out_dir / "report.html"})
    return paths


def _fmt(value: Any, digits: int = 1, pct: bool = False) -> str:
    if value is None:
        return "—"
    return f"{100 * value:.{digits}f}%" if pct else f"{value:,.{digits}f}"


def _convention_rows(summary: dict) -> list[list[str]]:
    rows = []
    before = summary["conventions"].get(BEFORE, {}).get("tflops_per_gpu_mean")
    for name, entry in summary["conventions"].items():
        tf = entry["tflops_per_gpu_mean"]
        delta = f"{100 * (tf / before - 1):+.1f}%" if tf and before else "—"
        rows.append([name, _fmt(tf), _fmt(entry["mfu_mean"], 1, pct=True), delta,
                     f"{entry['flops_total']:.4e}"])
    return rows


def _headline(summary: dict) -> list[str]:
    conv = summary["conventions"]
    lines = []
    if summary.get("synthetic"):
        lines.append("**SYNTHETIC RUN** — generated data, not a real training job.")
    if summary.get("estimated"):
        lines.append("**ESTIMATE** — no per-microbatch metadata; statistics come from the run configuration.")
    b, a = conv.get(BEFORE, {}).get("tflops_per_gpu_mean"), conv.get("exact", {}).get("tflops_per_gpu_mean")
    if b and a:
        lines.append(f"LM-only ({BEFORE}) **{b:,.1f}** TFLOP/s/GPU → exact with vision **{a:,.1f}** TFLOP/s/GPU "
                     f"({100 * (a / b - 1):+.1f}%); MFU {_fmt(conv[BEFORE]['mfu_mean'], 1, True)} → "
                     f"{_fmt(conv['exact']['mfu_mean'], 1, True)} on {summary['world_size']} × {summary['gpu']} "
                     f"({_fmt(summary['peak_tflops'], 0)} TFLOP/s dense peak, {summary['dtype']}; clock and source under "
                     "'Peak used for MFU').")
    if summary.get("logged_tflops_per_gpu_mean"):
        lines.append(f"The log printed **{summary['logged_tflops_per_gpu_mean']:,.1f}** TFLOP/s/GPU on average.")
    if summary.get("vision_share_mean") is not None:
        lines.append(f"Vision share of exact training FLOPs: **{100 * summary['vision_share_mean']:.1f}%**.")
    return lines


def _crosscheck_lines(cc: dict) -> list[str]:
    if cc.get("status") in ("ok", "mismatch", "world_size_inferred"):
        out = [f"status **{cc['status']}** over {cc['windows']} windows; the log's number implies a world size of "
               f"{cc['implied_world_size']:.2f} GPUs (stated: {cc.get('world_size')})."]
        if "ratio_logged_to_recomputed" in cc:
            out.append(f"logged / recomputed ({cc['convention']}) = {cc['ratio_logged_to_recomputed']:.4f}")
        out += [f"likely cause: {c}" for c in cc.get("likely_causes", [])]
        return out
    return [cc.get("message", str(cc))]


def _attribution_lines(a: dict) -> list[str]:
    if not a.get("ok"):
        return [f"not fitted: {a.get('reason')}"]
    vis = a.get("vision_tflops_per_gpu")
    overhead = f"{a['overhead_s']:.3f} s + " if a.get("model") != "no_overhead" else ""
    lines = [f"seconds/iteration ≈ {overhead}LM FLOPs at **{a['lm_tflops_per_gpu']:.0f}** TFLOP/s/GPU"
             + (f" + vision FLOPs at **{vis:.0f}** TFLOP/s/GPU" if vis else "")
             + f" (R² {a['r2']:.3f}, {a['windows']} windows)."]
    if a.get("model") == "no_overhead":
        lines.append(a["reason"])
    if vis and a["lm_tflops_per_gpu"]:
        lines.append(f"The vision part runs at {100 * vis / a['lm_tflops_per_gpu']:.0f}% of the LM's achieved rate.")
    return lines


def render_markdown(summary: dict, run: RunAnalysis, sections: list = ()) -> str:
    out = [f"# vlm-perf report: {summary['model']}", ""]
    out += [f"- {line}" for line in _headline(summary)] + [""]
    out += ["## TFLOP/s/GPU and MFU by convention", "",
            "| convention | TFLOP/s/GPU | MFU | vs LM-only | FLOPs (run total) |", "|---|---|---|---|---|"]
    out += ["| " + " | ".join(r) + " |" for r in _convention_rows(summary)] + [""]
    out += ["Means are time-weighted over complete windows (first window after each (re)start excluded).", ""]
    out += ["## Log cross-check", ""] + [f"- {line}" for line in _crosscheck_lines(summary["log_crosscheck"])] + [""]
    out += ["## Step-time attribution", ""] + [f"- {line}" for line in _attribution_lines(summary["attribution"])]
    out += [""]
    out += [section.markdown() for section in sections]
    if summary["messages"]:
        out += ["## Gaps and warnings", ""] + [f"- {m}" for m in summary["messages"]] + [""]
    out += ["## Figures", ""]
    for name, caption in FIGURES:
        out += [f"![{caption}]({name})", "", f"*{caption}*", ""]
    out += ["## Inputs and diagnostics", "", "```json", json.dumps({"inputs": summary["inputs"],
                                                                     "run_config": summary["run_config"],
                                                                     "diagnostics": summary["diagnostics"]},
                                                                    indent=2, default=str), "```", ""]
    return "\n".join(out)


def render_html(summary: dict, run: RunAnalysis, out_dir: Path, sections: list = ()) -> str:
    esc = html.escape

    def md_inline(text: str) -> str:
        parts = esc(text).split("**")
        return "".join(f"<b>{p}</b>" if i % 2 else p for i, p in enumerate(parts))

    rows = "".join("<tr>" + "".join(f"<td>{esc(c)}</td>" for c in r) + "</tr>" for r in _convention_rows(summary))
    figs = ""
    for name, caption in FIGURES:
        data = base64.b64encode((out_dir / name).read_bytes()).decode()
        figs += f'<figure><img alt="{esc(caption)}" src="data:image/png;base64,{data}"><figcaption>{esc(caption)}' \
                f"</figcaption></figure>"
    lists = {title: "".join(f"<li>{md_inline(x)}</li>" for x in items) for title, items in (
        ("head", _headline(summary)), ("cc", _crosscheck_lines(summary["log_crosscheck"])),
        ("attr", _attribution_lines(summary["attribution"])), ("msg", summary["messages"]))}
    extra = ""
    for section in sections:
        extra += f"<h2>{esc(section.title)}</h2><ul>" + "".join(f"<li>{md_inline(x)}</li>" for x in section.lines) + "</ul>"
        if section.table:
            headers, rows_ = section.table
            extra += ("<table><tr>" + "".join(f"<th>{esc(h)}</th>" for h in headers) + "</tr>"
                      + "".join("<tr>" + "".join(f"<td>{esc(c)}</td>" for c in r) + "</tr>" for r in rows_) + "</table>")
        for name, caption in section.figures:
            data = base64.b64encode((out_dir / name).read_bytes()).decode()
            extra += f'<figure><img alt="{esc(caption)}" src="data:image/png;base64,{data}"><figcaption>' \
                     f"{esc(caption)}</figcaption></figure>"
    details = esc(json.dumps({"inputs": summary["inputs"], "run_config": summary["run_config"],
                              "diagnostics": summary["diagnostics"]}, indent=2, default=str))
    return f"""<!doctype html><html><head><meta charset="utf-8"><title>vlm-perf: {esc(summary['model'])}</title>
<style>body{{font-family:system-ui,sans-serif;max-width:1000px;margin:2em auto;color:#222}}
table{{border-collapse:collapse}}td,th{{border:1px solid #ccc;padding:4px 10px;text-align:right}}
td:first-child{{text-align:left}}figure{{margin:1.5em 0}}img{{max-width:100%}}pre{{background:#f6f6f6;padding:1em;
overflow:auto}}</style></head><body>
<h1>vlm-perf report: {esc(summary['model'])}</h1><ul>{lists['head']}</ul>
<h2>TFLOP/s/GPU and MFU by convention</h2><table><tr><th>convention</th><th>TFLOP/s/GPU</th><th>MFU</th>
<th>vs LM-only</th><th>FLOPs (run total)</th></tr>{rows}</table>
<p>Means are time-weighted over complete windows (first window after each (re)start excluded).</p>
<h2>Log cross-check</h2><ul>{lists['cc']}</ul><h2>Step-time attribution</h2><ul>{lists['attr']}</ul>
{extra}
{('<h2>Gaps and warnings</h2><ul>' + lists['msg'] + '</ul>') if summary['messages'] else ''}
<h2>Figures</h2>{figs}<h2>Inputs and diagnostics</h2><pre>{details}</pre></body></html>
"""
