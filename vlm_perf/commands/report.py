"""``vlm-perf report RUN``: parse a finished run, recompute, write summary.json/report.md/report.html."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import List, Optional

import typer
from rich.console import Console
from rich.markup import escape
from rich.progress import BarColumn, Progress, SpinnerColumn, TextColumn, TimeElapsedColumn

from ._options import run_options


@run_options("report")
def report(
    run: str = typer.Argument(..., help="A training log file or a run directory (log + metadata + run.yaml); a path "
                              "or a URL (s3://, gs://, any fsspec protocol)."),
    out: Path = typer.Option(..., "-o", "--out", help="Output directory."),
    metadata: List[str] = typer.Option([], "--metadata", help="Metadata JSONL file(s), directory or glob (paths or "
                                       "URLs)."),
    strict: bool = typer.Option(False, "--strict", help="Exit with status 4 when any check fails (the report is "
                                "still written)."),
    options: Optional[dict] = None,
) -> None:
    """Recompute TFLOP/s/GPU and MFU of a finished run before/after vision accounting.

    Exit status: 0 report written; 2 bad input (one error line); 3 internal error; 4 with --strict,
    report written but at least one check failed (the checks head the report and the terminal summary).
    """
    from ..pipeline import load_run
    from ..report import write_report
    from ..report.sections.headline import stats_terminal, verdict_terminal
    from ..report.terminal import number_lines
    from ..run.options import RunOptions

    from ._progress import want_progress

    console = Console(stderr=True, soft_wrap=True)
    with Progress(SpinnerColumn(), TextColumn("{task.description}"), BarColumn(), TimeElapsedColumn(),
                  console=console, transient=True, disable=not sys.stderr.isatty()) as progress:
        task = progress.add_task("loading run", total=None)
        bar: list = []

        def metadata_progress(done: int, total: int) -> None:  # a bar only for large metadata on a terminal
            if not bar and want_progress(sys.stderr, total):
                bar.append(progress.add_task("metadata bytes read", total=total))
            if bar:
                progress.update(bar[0], completed=done, total=total)

        loaded = load_run(run, RunOptions.from_command(options or {}), metadata=metadata,
                          on_step=lambda text: progress.update(task, description=text),
                          metadata_progress=metadata_progress)
        progress.update(task, description="writing report and figures")
        paths = write_report(loaded.analysis, out, loaded.context)
    # the terminal summary in the report's order: the verdict and the headline numbers, the checks (failed and
    # warned ones spelled out, once, on stderr), where the files are, then every number (summary.json's, formatted
    # by the report's own functions)
    summary = json.loads(paths["summary.json"].read_text())
    checks = loaded.analysis.checks
    bad = [c for c in checks if c.status == "fail"]
    warned = [c for c in checks if c.status == "warn"]
    for line in verdict_terminal(summary) + ([] if bad else stats_terminal(summary)):
        print(line)
    rest = f"{sum(c.status == 'ok' for c in checks)} ok, {sum(c.status == 'skip' for c in checks)} skipped"
    print(f"checks:  {len(bad)} FAILED ({', '.join(c.name for c in bad)}), {len(warned)} warning(s); {rest}" if bad
          else f"checks:  none failed, {len(warned)} warning(s)" + (f" ({', '.join(c.name for c in warned)})" if warned
                                                                   else "") + f"; {rest}", flush=True)
    mark = {"fail": "[red]FAIL[/]", "warn": "[yellow]WARN[/]"}
    for check in bad + warned:
        console.print(f"{mark[check.status]} {escape(check.summary)}")
    for message in loaded.analysis.messages:
        console.print(f"[yellow]warning:[/] {escape(message)}")
    for line in stats_terminal(summary) if bad else []:  # a failed check comes before the numbers it taints
        print(line)
    print(f"report:  {out / 'report.html'}  (also report.md, summary.json; every check listed there)")
    print(f"windows: {out / 'windows.csv'}  (also windows.parquet: every window, every convention)")
    print(f"figures: {', '.join(str(out / name) for name in paths if name.endswith('.png'))}")
    for line in number_lines(summary):
        print(line)
    if bad:
        print(f"checks: {len(bad)} FAILED ({', '.join(c.name for c in bad)}); see the top of report.md")
        if strict:
            raise typer.Exit(STRICT_FAILURE)


#: exit status of ``vlm-perf report --strict`` when a check failed (2: bad input, 3: internal error)
STRICT_FAILURE = 4


def register(app: typer.Typer) -> None:
    app.command("report")(report)
