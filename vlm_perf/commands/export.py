"""``vlm-perf export RUN --to BACKEND``: the run's recomputed series as TensorBoard event files, an offline W&B run,
an MLflow run, or Parquet / CSV (`vlm_perf.export`; docs/export.md)."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer

from ._options import load_run_arguments, run_options


@run_options("report")
def export(
    run: str = typer.Argument(..., help="A training log file or a run directory, as for `vlm-perf report` (path or "
                              "URL); or a report folder `vlm-perf report` wrote, exported as written (not read "
                              "again)."),
    to: str = typer.Option(..., "--to", metavar="tensorboard|wandb|mlflow|parquet|csv",
                           help="The backend: TensorBoard event files, an offline W&B run (upload it with `wandb "
                                "sync`), an MLflow run, or a plain Parquet / CSV table."),
    out: Optional[Path] = typer.Option(None, "-o", "--out", help="Output folder, written whole or not at all (default: "
                                       "vlm-perf-export/BACKEND/NAME)."),
    name: Optional[str] = typer.Option(None, "--name", help="The run's name in the tracker (default: the run "
                                       "folder's name)."),
    project: str = typer.Option("vlm-perf", "--project", help="W&B project / MLflow experiment."),
    tracking_uri: Optional[str] = typer.Option(None, "--tracking-uri", metavar="URI",
                                               help="MLflow only: log to this tracking server or store (http://..., "
                                                    "sqlite:///..., file:...) instead of a file store in the output "
                                                    "folder."),
    options: Optional[dict] = None,
) -> None:
    """Export the recomputed per-window series (TFLOP/s/GPU and MFU per convention, vision share, step time, RL
    phase seconds) on the run's own iteration axis, with the run's facts as config / params / hparams.

    The run is opened as `vlm-perf report` opens it and takes the same options. Exit status: 0 written; 2 bad
    input or a missing backend library (one error line naming the extra to install); 3 internal error.
    """
    import sys

    from ..export import export_run

    result = export_run(run, to, out, name=name, project=project, tracking_uri=tracking_uri,
                        **load_run_arguments(options or {}))
    data = result.data
    for note in data.notes:
        hint = " — pass --gpu TYPE or --peak-tflops X" if note.startswith("no GPU peak") else ""
        print(f"note: {note}{hint}", file=sys.stderr)
    print(f"export:  {result.out}/ ({to}: {len(data.metrics)} series, {data.points.height} points, steps "
          f"{int(data.points['step'].min())}..{data.last_step()}; {len(data.run_values)} run values, "
          f"{len(data.facts)} facts)")
    details = result.written
    if "run_id" in details:
        print(f"run id:  {details['run_id']}")
    if "open" in details:
        print(f"open:    {details['open']}")
    print(f"what:    {result.manifest}")


def register(app: typer.Typer) -> None:
    app.command("export")(export)
