"""``vlm-perf report RUN``: parse a finished run, recompute, write summary.json/report.md/report.html."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import List, Optional

import typer
from rich.console import Console
from rich.markup import escape
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
    causal: str = typer.Option("half", "--causal",
                               help="exact's LM attention core: half (causal kernels) or full (eager/masked)."),
    seq_length: Optional[int] = typer.Option(None, "--seq-length", help="Estimate mode: LM tokens per sample "
                                             "(run.yaml seq_length)."),
    global_batch_size: Optional[int] = typer.Option(
        None, "--global-batch-size", help="Estimate mode: samples per iteration (run.yaml global_batch_size; else "
        "what the log prints); also what metadata coverage is checked against."),
    image_size: Optional[str] = typer.Option(None, "--image-size", help="Estimate mode: H,W pixels of each sample's "
                                             "image (run.yaml image_size)."),
    grid: Optional[str] = typer.Option(None, "--grid", help="Estimate mode: T,H,W patches of each sample's image, "
                                       "as image_grid_thw (run.yaml image_grid)."),
    images_per_sample: Optional[int] = typer.Option(None, "--images-per-sample", help="Estimate mode: images per "
                                                    "sample (default 1; run.yaml images_per_sample)."),
    strict: bool = typer.Option(False, "--strict", help="Exit with status 4 when any check fails (the report is "
                                "still written)."),
    log: List[Path] = typer.Option([], "--log", help="Read only these log file(s) of the run (repeatable); "
                                   "the run folder still gives the metadata and run.yaml."),
    merge_logs: bool = typer.Option(False, "--merge-logs", help="Merge log files that look like two different runs "
                                    "(refused by default; the checks then say so)."),
    recompute: Optional[str] = typer.Option(None, "--recompute", help="Activation recompute for HFU: none, selective, "
                                            "full or full:N layers (default: what the log / run.yaml state)."),
) -> None:
    """Recompute TFLOP/s/GPU and MFU of a finished run before/after vision accounting.

    Exit status: 0 report written; 2 bad input (one error line); 3 internal error; 4 with --strict,
    report written but at least one check failed (the checks head the report and the terminal summary).
    """
    from ..pipeline import load_run
    from ..report import write_report

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

        loaded = load_run(run, metadata=metadata, model=model, gpus=gpus, gpu=gpu, peak_tflops=peak_tflops,
                          dtype=dtype, conventions=convention, log_format=log_format, skip_bad=skip_bad,
                          causal=causal, on_step=lambda text: progress.update(task, description=text),
                          seq_length=seq_length, global_batch_size=global_batch_size, image_size=image_size,
                          image_grid=grid, images_per_sample=images_per_sample, recompute=recompute,
                          metadata_progress=metadata_progress, logs=log, merge_logs=merge_logs)
        progress.update(task, description="writing report and figures")
        paths = write_report(loaded.analysis, out, loaded.context)
    checks = loaded.analysis.checks
    mark = {"fail": "[red]FAIL[/]", "warn": "[yellow]WARN[/]", "ok": "[green]ok[/]  ", "skip": "[dim]skip[/]"}
    for check in checks:
        console.print(f"{mark[check.status]} {escape(check.summary)}")
    console.print(f"report written to {out}/")
    for message in loaded.analysis.messages:
        console.print(f"[yellow]warning:[/] {escape(message)}")
    summary = loaded.analysis.convention_summary()
    bad = [c for c in checks if c.status == "fail"]
    warned = [c for c in checks if c.status == "warn"]
    print(f"checks:  {len(bad)} FAILED ({', '.join(c.name for c in bad)}), {len(warned)} warning(s)" if bad else
          f"checks:  none failed, {len(warned)} warning(s)" + (f" ({', '.join(c.name for c in warned)})" if warned
                                                                else ""))
    print(f"report:  {out / 'report.html'}  (also report.md, summary.json)")
    print(f"windows: {out / 'windows.csv'}  (also windows.parquet: every window, every convention)")
    print(f"figures: {', '.join(str(out / name) for name in paths if name.endswith('.png'))}")
    peak = next((p.summary for p in loaded.context.sections if p.key == "peak"), None)
    if peak:
        print(f"peak:    {peak['tflops']:,.1f} TFLOP/s/GPU {peak['dtype']} dense, {peak['device']} "
              f"({peak['source_short']})" if not peak["override"] else f"peak:    {peak['tflops']:,.1f} TFLOP/s/GPU "
              "(--peak-tflops override)")
    from ..report.units import rate_unit

    unit = rate_unit(e["tflops_per_gpu_mean"] for e in summary.values())  # the report's unit (report/units.py)
    for name, entry in summary.items():
        tf, mfu = entry["tflops_per_gpu_mean"], entry["mfu_mean"]
        if tf is not None:
            print(f"  {name:16s} {unit.fmt(tf):>8s} {unit.per_gpu}" + (f"   MFU {100 * mfu:5.1f}%" if mfu is not None
                                                                       else ""))
    hfu = next((p.summary for p in loaded.context.sections if p.key == "hfu"), None)
    if hfu and hfu.get("hfu_mean") is not None:
        print(f"  HFU (exact + recompute {hfu['recompute']}) {100 * hfu['hfu_mean']:5.1f}%   "
              f"hardware/model FLOPs {hfu['hardware_over_model']:.4f}")
    if bad:
        print(f"checks: {len(bad)} FAILED ({', '.join(c.name for c in bad)}); see the top of report.md")
        if strict:
            raise typer.Exit(STRICT_FAILURE)


#: exit status of ``vlm-perf report --strict`` when a check failed (2: bad input, 3: internal error)
STRICT_FAILURE = 4


def register(app: typer.Typer) -> None:
    app.command("report")(report)
