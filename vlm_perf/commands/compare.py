"""``vlm-perf compare RUN_A RUN_B``: two runs side by side (A = before, B = after); ``vlm-perf compare RUN1 ...
RUNn`` (more than two, or ``--sweep``): a sweep, one row per run (`vlm_perf.sweep`, `vlm_perf.report.sweep_page`)."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import List, Optional

import typer

from ..errors import ConfigError
from ._options import load_run_arguments, run_options


@run_options("compare")
def compare(
    runs: List[str] = typer.Argument(..., help="The runs: training log files or run directories (paths or URLs). "
                                     "Two: A (before) and B (after). More (up to 100): a sweep, #1 the baseline."),
    out: Optional[Path] = typer.Option(None, "-o", "--out", help="Write compare.{json,md,html,png} here (a sweep: "
                                       "compare.{json,md,html,csv,parquet} and sweep_*.png)."),
    as_json: bool = typer.Option(False, "--json", help="Print one JSON object keyed by convention (a, b, delta, "
                                                       "ratio of TFLOP/s/GPU; mfu the same) and nothing else (a "
                                                       "sweep: its compare.json)."),
    sweep: bool = typer.Option(False, "--sweep", help="Write the sweep table and figures even for two runs."),
    skip_bad_runs: bool = typer.Option(False, "--skip-bad-runs", help="Sweep: leave out runs that cannot be opened "
                                       "(each named with its reason on stderr and on the page) instead of failing."),
    options: Optional[dict] = None,
) -> None:
    """Compare runs. Two runs: TFLOP/s/GPU and MFU per convention, step time, tokens, and the exact-FLOPs change
    split into "the data changed" and "the system changed". More runs (a sweep, up to 100): one row per run
    (model, GPUs, regime, TFLOP/s/GPU and MFU per convention, vision share, step time, media tokens, what changed
    vs run #1) and the figures of a sweep; --scheduler spreads the runs over Dask workers (same result).

    Exit status: 0 written; 2 bad input (one error line per run that cannot be opened).
    """
    if len(runs) < 2:
        raise ConfigError("compare needs at least two runs (A and B, or the runs of a sweep)")
    if sweep or len(runs) > 2:
        _sweep(runs, out, as_json, skip_bad_runs, options or {})
        return
    if skip_bad_runs:
        raise ConfigError("--skip-bad-runs applies to a sweep (more than two runs, or --sweep)")
    run_a, run_b = runs
    from ..analysis.compare import compare_summaries
    from ..pipeline import load_run
    from ..report import build_summary
    from ..run.options import RunOptions
    from ..report.compare_page import (FACT_HEADERS, compare_unit, conv_headers, convention_rows, fact_rows, headline,
                                       lead, write_compare)
    from ..report.content import plain

    summaries = []
    for run, suffix in ((run_a, "_a"), (run_b, "_b")):
        loaded = load_run(run, RunOptions.from_command(options or {}, suffix))
        summaries.append(build_summary(loaded.analysis, loaded.context))
    cmp = compare_summaries(*summaries)
    if out is not None:
        write_compare(cmp, out)
    if as_json:
        from ..report.document import json_safe

        print(json.dumps(json_safe(cmp["conventions"]), indent=2))
        return
    from rich.console import Console
    from rich.markup import escape

    from ._common import name_table

    console = Console()
    verdict, stats = lead(cmp)  # the page's order: the verdict and headline numbers, then the details
    console.print(plain(verdict), highlight=False, markup=False)
    for stat in stats:
        console.print(f"  {stat.label:<20} {stat.value:<24} {plain(stat.detail)}", highlight=False, markup=False)
    for line in headline(cmp):  # input strings (run paths, model, GPU) are text, never rich markup
        console.print(line, highlight=False, markup=False)
    # the rows of compare.md / compare.html (one formatting of every number)
    # one display unit for both runs (report/units.py); convention names whole at any width (the numbers fold)
    console.print(name_table(conv_headers(compare_unit(cmp)), [list(map(escape, r)) for r in convention_rows(cmp)],
                             width=console.width))
    console.print(name_table(FACT_HEADERS, [list(map(escape, r)) for r in fact_rows(cmp)], names=(),
                             width=console.width))
    if out is not None:
        console.print(f"comparison written to {out}/ (compare.html, compare.md, compare.json, compare.png)")


def _sweep_arguments(options: dict) -> tuple[dict, str | None]:
    """`load_run` keyword arguments shared by every run of a sweep, and the sweep's scheduler. Per-run flags
    (``--NAME-a`` / ``--NAME-b``) name run A or B of a two-run compare; a sweep refuses them."""
    from ..run.options import option

    per_run = sorted({name[:-2] for name, value in options.items() if name.endswith(("_a", "_b"))
                      and value not in (None, False, [], ()) and option(name[:-2]).per_run})
    if per_run:
        flags = ", ".join(f"{option(n).flag}-a/-b" for n in per_run)
        raise ConfigError(f"{flags} set run A or B of a two-run compare; in a sweep each run states its own "
                                 "settings in its run.yaml (or its log)")
    shared = {name: value for name, value in options.items() if not name.endswith(("_a", "_b"))}
    scheduler = shared.pop("scheduler", None)
    return load_run_arguments(shared), scheduler


def _sweep(runs: list[str], out: Optional[Path], as_json: bool, skip_bad_runs: bool, options: dict) -> None:
    from rich.console import Console
    from rich.markup import escape

    from ..analysis.sweep import sweep_table
    from ..report.document import json_safe
    from ..report.sweep_page import headline, terminal_table, write_sweep
    from ..sweep import check_run_list, summarize_runs
    from ._common import name_table

    check_run_list(runs)  # too many runs, or one run twice: refused before any is opened
    arguments, scheduler = _sweep_arguments(options)
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    with Progress(TextColumn("opening runs"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                  console=Console(stderr=True), transient=True, disable=not sys.stderr.isatty()) as progress:
        task = progress.add_task("runs", total=len(runs))  # a bar only on a terminal, gone when done
        outcomes = summarize_runs(runs, arguments, scheduler=scheduler,
                                  on_done=lambda i, outcome: progress.advance(task))
    bad = [(i, o) for i, o in enumerate(outcomes, start=1) if o.error is not None]
    for i, outcome in bad:  # one line per run that cannot be opened, naming the run and the reason
        hint = " — pass --skip-bad to skip and count bad rows" if outcome.skippable else ""
        line = f"run #{i} {outcome.run}: {outcome.error}{hint}"
        print(f"{'warning: left out' if skip_bad_runs else 'error:'} {line}", file=sys.stderr)
    if bad and not skip_bad_runs:
        print(f"error: {len(bad)} of {len(runs)} run(s) could not be opened (listed above); fix them, remove them, "
              "or pass --skip-bad-runs to leave them out", file=sys.stderr)
        raise typer.Exit(2)
    good = [o.summary for o in outcomes if o.summary is not None]
    if not good:
        print("error: none of the runs could be opened (listed above)", file=sys.stderr)
        raise typer.Exit(2)
    table = sweep_table(good, [(o.run, o.error or "") for _, o in bad])
    if out is not None:
        write_sweep(table, out)
    if as_json:
        print(json.dumps(json_safe(table), indent=2))
        return
    # a pipe or file gets the whole table's width; a terminal its own, with cells folded (never cut with "…")
    console = Console() if sys.stdout.isatty() else Console(width=200)
    for line in headline(table):
        console.print(line, highlight=False, markup=False)
    headers, cells = terminal_table(table)  # the page's cells, fewer columns (compare.md / .csv: all of them)
    console.print(name_table(headers, [list(map(escape, row)) for row in cells], names=(1,),  # runs whole
                             width=console.width))
    if out is not None:
        console.print(f"sweep written to {out}/ (compare.html, compare.md, compare.json, compare.csv, "
                      "compare.parquet, sweep_*.png)", highlight=False, markup=False)


def register(app: typer.Typer) -> None:
    app.command("compare")(compare)
