"""``vlm-perf compare RUN_A RUN_B``: two runs side by side (A = before, B = after)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import List, Optional

import typer


def compare(
    run_a: Path = typer.Argument(..., help="Run A (before): a training log file or a run directory."),
    run_b: Path = typer.Argument(..., help="Run B (after): a training log file or a run directory."),
    out: Optional[Path] = typer.Option(None, "-o", "--out", help="Write compare.{json,md,html,png} here."),
    as_json: bool = typer.Option(False, "--json", help="Print one JSON object keyed by convention (a, b, delta, "
                                                       "ratio of TFLOP/s/GPU; mfu the same) and nothing else."),
    model_a: Optional[str] = typer.Option(None, "--model-a", help="Model of run A (overrides its run.yaml)."),
    model_b: Optional[str] = typer.Option(None, "--model-b", help="Model of run B (overrides its run.yaml)."),
    gpus_a: Optional[int] = typer.Option(None, "--gpus-a", help="World size of run A."),
    gpus_b: Optional[int] = typer.Option(None, "--gpus-b", help="World size of run B."),
    peak_tflops: Optional[float] = typer.Option(None, "--peak-tflops", help="Dense peak TFLOP/s per GPU (both)."),
    convention: List[str] = typer.Option([], "--convention", help="Conventions to show (repeatable)."),
    skip_bad: bool = typer.Option(False, "--skip-bad", help="Skip (and count) bad metadata lines."),
    recompute_a: Optional[str] = typer.Option(None, "--recompute-a", help="Recompute of run A for HFU: none, "
                                              "selective, full or full:N (default: what its log / run.yaml state)."),
    recompute_b: Optional[str] = typer.Option(None, "--recompute-b", help="Recompute of run B (as --recompute-a)."),
    causal: str = typer.Option("half", "--causal",
                               help="exact's LM attention core in both runs: half (causal kernels) or full."),
) -> None:
    """Compare two runs: TFLOP/s/GPU and MFU per convention, step time, tokens, and the exact-FLOPs change
    split into "the data changed" and "the system changed"."""
    from ..analysis.compare import compare_summaries
    from ..pipeline import load_run
    from ..report import build_summary
    from ..report.compare_page import fact_rows, headline, write_compare

    summaries = []
    for run, model, gpus, recompute in ((run_a, model_a, gpus_a, recompute_a), (run_b, model_b, gpus_b, recompute_b)):
        loaded = load_run(run, model=model, gpus=gpus, peak_tflops=peak_tflops, conventions=convention,
                          skip_bad=skip_bad, recompute=recompute, causal=causal)
        summaries.append(build_summary(loaded.analysis, loaded.context))
    cmp = compare_summaries(*summaries)
    if out is not None:
        write_compare(cmp, out)
    if as_json:
        from ..report.document import _clean

        print(json.dumps(_clean(cmp["conventions"]), indent=2))
        return
    from rich.console import Console
    from rich.table import Table

    console = Console()
    for line in headline(cmp):
        console.print(line.replace("**", ""), highlight=False)
    from ..report.compare_page import compare_unit, conv_headers

    unit = compare_unit(cmp)  # one display unit for both runs (report/units.py)
    table = Table(*conv_headers(unit)[:-1])
    for name, e in cmp["conventions"].items():
        m = e["mfu"]
        table.add_row(name, *[unit.fmt(x) for x in (e["a"], e["b"])],
                      f"{e['delta'] / unit.tflops:+,.1f}" if e["delta"] is not None else "—",
                      f"{e['ratio']:.4f}" if e["ratio"] is not None else "—",
                      *[f"{100 * x:.1f}%" if x is not None else "—" for x in (m["a"], m["b"])])
    console.print(table)
    facts = Table("per iteration", "A", "B", "delta", "B/A")
    for row in fact_rows(cmp):
        facts.add_row(*row)
    console.print(facts)
    if out is not None:
        console.print(f"comparison written to {out}/ (compare.html, compare.md, compare.json, compare.png)")


def register(app: typer.Typer) -> None:
    app.command("compare")(compare)
