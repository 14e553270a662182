"""Write ``summary.json``, ``report.md`` and a self-contained ``report.html`` (+ PNG figures).

One typed summary feeds everything: `build_summary` (the JSON contract, ``checks`` and ``health``
blocks included, then the block of every registered report part, `vlm_perf.report.parts`) and the
parts' sections (`vlm_perf.report.sections`), rendered to Markdown and HTML by one Jinja template each
(`vlm_perf.report.render`); the parts' figures are drawn first (`figures.draw_all`). The folder is written by
`vlm_perf.report.output.atomic_report_dir`: complete or not at all.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import polars as pl

from ..analysis.compare import step_facts
from ..analysis.run import RunAnalysis
from . import figures
from .context import ReportContext
from .output import atomic_report_dir, write_windows_table
from .parts import all_parts
from .render import render_html, render_markdown
from .sections import SectionInputs, build_sections

__all__ = ["ReportContext", "build_summary", "write_report"]


def json_safe(value: Any) -> Any:
    """JSON-safe: NaN/inf -> None, numpy scalars -> Python."""
    if isinstance(value, dict):
        return {str(k): json_safe(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [json_safe(v) for v in value]
    if hasattr(value, "to_dict") and not isinstance(value, (str, bytes, dict)) and hasattr(value, "status"):
        return json_safe(value.to_dict())
    if hasattr(value, "item") and not isinstance(value, (str, bytes)):
        value = value.item()
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value


def build_summary(run: RunAnalysis, ctx: ReportContext) -> dict:
    """The summary.json contract. ``checks`` come first: the state of every check, most severe first."""
    conventions = run.convention_summary()
    checks = [c.to_dict() for c in run.checks]
    failed = [c["name"] for c in checks if c["status"] == "fail"]
    return json_safe({
        "checks_status": "fail" if failed else ("warn" if any(c["status"] == "warn" for c in checks) else "ok"),
        "checks_failed": failed,
        "checks": checks,
        "run": ctx.run,
        "model": run.model,
        "synthetic": ctx.synthetic,
        "estimated": run.estimated,
        "iterations": int(run.per_iteration.height),
        "logged_windows": int(run.windows.height),
        "windows_used": int(run.reliable_windows().height),
        "world_size": run.world_size,
        "gpu": ctx.gpu,
        "dtype": ctx.dtype,
        "peak_tflops": run.peak_tflops,
        "vision_share_mean": run.vision_share_mean(),
        "conventions": conventions,
        "convention_differences": run.differences,
        "logged_tflops_per_gpu_mean": _logged_mean(run),
        "step": step_facts(run),
        "log_crosscheck": run.crosscheck,
        "metadata_coverage": run.coverage,
        "health": run.health,
        "attribution": run.attribution.to_dict(),
        "gaps": run.gaps,
        "messages": run.messages,
        "run_config": ctx.run_config,
        "inputs": ctx.inputs,
        "diagnostics": ctx.diagnostics,
        # every report part computed for this run (peak, regime, hfu, balance, ...: `report.parts`), in report order
        **{part.name: part.summary(ctx.results[part.name]) for part in all_parts() if part.name in ctx.results},
    })


def _logged_mean(run: RunAnalysis) -> float | None:
    w = run.reliable_windows()
    if "tflops_per_gpu_logged" not in w.columns:
        return None
    good = w.filter(pl.col("tflops_per_gpu_logged").is_not_null() & pl.col("tflops_per_gpu_logged").is_finite())
    if not good.height or good["window_seconds"].sum() <= 0:
        return None
    return float((good["tflops_per_gpu_logged"] * good["window_seconds"]).sum() / good["window_seconds"].sum())


def write_report(run: RunAnalysis, out_dir: Path, ctx: ReportContext) -> dict[str, Path]:
    """Write the report folder ``out_dir`` atomically; returns the final path of every file."""
    out_dir = Path(out_dir)
    with atomic_report_dir(out_dir) as tmp:
        drawn = figures.draw_all(run, ctx, tmp)  # name -> None when drawn, else the reason it was skipped
        summary = build_summary(run, ctx)
        summary["figures"] = {name: ("drawn" if why is None else f"skipped: {why}") for name, why in drawn.items()}
        sections = build_sections(SectionInputs(run, ctx, summary, drawn, out_dir=tmp))
        title = run.model
        (tmp / "summary.json").write_text(json.dumps(summary, indent=2) + "\n")
        (tmp / "report.md").write_text(render_markdown(title, sections))
        (tmp / "report.html").write_text(render_html(title, sections, tmp))
        names = [name for name, why in drawn.items() if why is None]
        names += [b.file for s in sections for b in s.blocks if b.kind == "figure" and b.file not in names]
        names += ["summary.json", "report.md", "report.html"]
        names += write_windows_table(run, tmp)  # per-window table (report/output.py)
    return {name: out_dir / name for name in names}
