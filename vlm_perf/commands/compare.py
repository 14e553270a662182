"""``vlm-perf compare RUN_A RUN_B``: two runs side by side (A = before, B = after)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Optional

import typer

from ._options import load_run_arguments, run_options


@run_options("compare")
def compare(
    run_a: str = typer.Argument(..., help="Run A (before): a training log file or a run directory (path or URL)."),
    run_b: str = typer.Argument(..., help="Run B (after): a training log file or a run directory (path or URL)."),
    out: Optional[Path] = typer.Option(None, "-o", "--out", help="Write compare.{json,md,html,png} here."),
    as_json: bool = typer.Option(False, "--json", help="Print one JSON object keyed by convention (a, b, delta, "
                                                       "ratio of TFLOP/s/GPU; mfu the same) and nothing else."),
    options: Optional[dict] = None,
) -> None:
    """Compare two runs: TFLOP/s/GPU and MFU per convention, step time, tokens, and the exact-FLOPs change
    split into "the data changed" and "the system changed"."""
    from ..analysis.compare import compare_summaries
    from ..pipeline import load_run
    from ..report import build_summary
    from ..report.compare_page import (FACT_HEADERS, compare_unit, conv_headers, convention_rows, fact_rows, headline,
                                       lead, write_compare)
    from ..report.content import plain

    summaries = []
    for run, suffix in ((run_a, "_a"), (run_b, "_b")):
        loaded = load_run(run, **load_run_arguments(options or {}, suffix))
        summaries.append(build_summary(loaded.analysis, loaded.context))
    cmp = compare_summaries(*summaries)
    if out is not None:
        write_compare(cmp, out)
    if as_json:
        from ..report.document import _clean

        print(json.dumps(_clean(cmp["conventions"]), indent=2))
        return
    from rich.console import Console
    from rich.markup import escape
    from rich.table import Table

    console = Console()
    verdict, stats = lead(cmp)  # the page's order: the verdict and headline numbers, then the details
    console.print(plain(verdict), highlight=False, markup=False)
    for stat in stats:
        console.print(f"  {stat.label:<20} {stat.value:<24} {plain(stat.detail)}", highlight=False, markup=False)
    for line in headline(cmp):  # input strings (run paths, model, GPU) are text, never rich markup
        console.print(line, highlight=False, markup=False)
    # the rows of compare.md / compare.html (one formatting of every number)
    table = Table(*conv_headers(compare_unit(cmp)))  # one display unit for both runs (report/units.py)
    for row in convention_rows(cmp):
        table.add_row(*map(escape, row))
    console.print(table)
    facts = Table(*FACT_HEADERS)
    for row in fact_rows(cmp):
        facts.add_row(*map(escape, row))
    console.print(facts)
    if out is not None:
        console.print(f"comparison written to {out}/ (compare.html, compare.md, compare.json, compare.png)")


def register(app: typer.Typer) -> None:
    app.command("compare")(compare)
