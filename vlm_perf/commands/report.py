"""``vlm-perf report RUN``: parse a finished run, recompute, write summary.json/report.md/report.html."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import List, Optional

import typer
from rich.console import Console
from rich.progress import BarColumn, Progress, SpinnerColumn, TextColumn, TimeElapsedColumn


def report(
    run: Path = typer.Argument(..., help="A training log file or a run directory (log + metadata + run.yaml)."),
    out: Path = typer.Option(..., "-o", "--out", help="Output directory."),
    metadata: List[Path] = typer.Option([], "--metadata", help="Metadata JSONL file(s), directory or glob."),
    model: Optional[str] = typer.Option(None, "--model", help="Preset or config.json (overrides run.yaml)."),
    gpus: Optional[int] = typer.Option(None, "--gpus", help="World size (number of GPUs)."),
    gpu: Optional[str] = typer.Option(None, "--gpu", help="GPU type, e.g. H100, GB200, MI300X."),
    peak_tflops: Optional[float] = typer.Option(None, "--peak-tflops", help="Dense peak TFLOP/s per GPU (override)."),
    dtype: Optional[str] = typer.Option(None, "--dtype", help="Training dtype for the peak (default bf16)."),
    convention: List[str] = typer.Option([], "--convention", help="Conventions to show (repeatable)."),
    log_format: str = typer.Option("auto", "--format", help="Log format (auto-detected per line by default)."),
    skip_bad: bool = typer.Option(False, "--skip-bad", help="Skip (and count) bad metadata lines."),
) -> None:
    """Recompute TFLOP/s/GPU and MFU of a finished run before/after vision accounting."""
    from ..pipeline import load_run
    from ..report import write_report

    from ._progress import want_progress

    console = Console(stderr=True)
    with Progress(SpinnerColumn(), TextColumn("{task.description}"), BarColumn(), TimeElapsedColumn(),
                  console=console, transient=True, disable=not sys.stderr.isatty()) as progress:
        task = progress.add_task("loading run", total=None)
        bar: list = []

        def metadata_progress(done: int, total: int) -> None:  # a bar only for large metadata on a terminal
            if not bar and want_progress(sys.stderr, total):
                bar.append(progress.add_task("metadata bytes read", total=total))
            if bar:
                progress.update(bar[0], completed=done, total=total)

        loaded = load_run(run, metadata=metadata, model=model, gpus=gpus, gpu=gpu, peak_tflops=peak_tflops,
                          dtype=dtype, conventions=convention, log_format=log_format, skip_bad=skip_bad,
                          on_step=lambda text: progress.update(task, description=text),
                          metadata_progress=metadata_progress)
        progress.update(task, description="writing report and figures")
        paths = write_report(loaded.analysis, out, loaded.context)
    console.print(f"report written to {out}/")
    for message in loaded.analysis.messages:
        console.print(f"[yellow]warning:[/] {message}")
    summary = loaded.analysis.convention_summary()
    print(f"report:  {out / 'report.html'}  (also report.md, summary.json)")
    print(f"figures: {', '.join(str(out / name) for name in paths if name.endswith('.png'))}")
    for name, entry in summary.items():
        tf, mfu = entry["tflops_per_gpu_mean"], entry["mfu_mean"]
        if tf is not None:
            print(f"  {name:16s} {tf:8.1f} TFLOP/s/GPU" + (f"   MFU {100 * mfu:5.1f}%" if mfu is not None else ""))


def register(app: typer.Typer) -> None:
    app.command("report")(report)
