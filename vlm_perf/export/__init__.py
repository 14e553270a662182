"""Export a run's recomputed series to the tools its team already looks at: TensorBoard, W&B (offline run),
MLflow, Parquet, CSV (``vlm-perf export RUN --to BACKEND``; docs/export.md).

The run is opened as ``vlm-perf report`` opens it (`vlm_perf.pipeline.load_run`, the same options); the numbers
are the report's own: its per-window table (``windows.parquet``, `vlm_perf.report.output.windows_table`) and its
summary (``summary.json``, `vlm_perf.report.document.build_summary`), named by one scheme
(`vlm_perf.export.scheme`) and written by one backend (`vlm_perf.export.backends`) into a folder that is complete
or absent (`vlm_perf.report.output.atomic_report_dir`, the report's output rules), with ``export.json`` beside
(what was written, the run's facts and values).

    from vlm_perf.export import export_run
    result = export_run("runs/qwen2vl-sft", "tensorboard", "exports/tb/qwen2vl-sft", gpu="H100-SXM")
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .backends import BACKENDS, EXTRAS, MissingBackend, require
from .scheme import METRICS, PREFIX, RUN_VALUES, ExportData, export_data, metric_segment

__all__ = ["BACKENDS", "EXTRAS", "METRICS", "RUN_VALUES", "PREFIX", "ExportData", "ExportResult", "MissingBackend",
           "export_run", "export_loaded", "export_data", "data_of", "data_of_report", "is_report_folder", "default_out",
           "run_name", "metric_segment"]

EXPORT_JSON = "export.json"


@dataclass
class ExportResult:
    """What an export wrote: the folder, the backend, the `ExportData`, the backend's own details (run id, run
    directory, tracking URI, event files, the command that opens it) and ``export.json``'s path."""

    out: Path
    backend: str
    data: ExportData
    written: dict[str, Any]

    @property
    def manifest(self) -> Path:
        return self.out / EXPORT_JSON


def run_name(run: str | Path) -> str:
    """The run's name in the trackers: its folder's name, or a log file's stem (a URL's last part the same)."""
    text = str(run).rstrip("/")
    path = Path(text.split("://", 1)[-1])
    return (path.stem if path.suffix and not Path(text).is_dir() else path.name) or "run"


def default_out(backend: str, name: str) -> Path:
    """``vlm-perf-export/BACKEND/NAME``: ``tensorboard --logdir vlm-perf-export/tensorboard`` shows every
    exported run by its name."""
    return Path("vlm-perf-export") / backend / name


def _check_options(backend: str, tracking_uri: str | None) -> None:
    require(backend)
    if tracking_uri is not None and backend != "mlflow":
        from ..errors import ConfigError

        raise ConfigError(f"a tracking URI is an MLflow setting; the {backend} export does not take one")


def _check_out(out: Path) -> None:
    """What the output rules would refuse, refused before the run is read (the write checks again)."""
    from ..errors import VlmPerfError

    if out.is_symlink():
        raise VlmPerfError(f"{out}: the output folder is a symlink; give the real folder (an export -o folder is "
                           "never written through a symlink)")
    if out.exists() and not out.is_dir():
        raise VlmPerfError(f"{out}: exists and is not a folder")


def data_of(loaded: Any, name: str) -> ExportData:
    """The `ExportData` of a `vlm_perf.pipeline.LoadedRun`: the report's window table and summary, as they are."""
    from ..report import build_summary
    from ..report.output import windows_table

    analysis = loaded.analysis
    return export_data(windows_table(analysis), build_summary(analysis, loaded.context), list(analysis.conventions),
                       name)


def export_loaded(loaded: Any, to: str, out: str | Path | None = None, *, name: str | None = None,
                  project: str = "vlm-perf", tracking_uri: str | None = None) -> ExportResult:
    """Export an already loaded run (`vlm_perf.pipeline.load_run`); see `export_run`."""
    _check_options(to, tracking_uri)
    name = name or run_name(loaded.context.run)
    out = Path(out) if out is not None else default_out(to, name)
    _check_out(out)
    return _write(data_of(loaded, name), to, out, project, tracking_uri)


def is_report_folder(path: str | Path) -> bool:
    """A folder ``vlm-perf report`` wrote (its marker, summary.json and windows.parquet)."""
    from ..report.output import MARKER, WINDOWS_FILES

    folder = Path(path)
    return "://" not in str(path) and folder.is_dir() and all(
        (folder / name).is_file() for name in (MARKER, "summary.json", WINDOWS_FILES[0]))


def data_of_report(folder: str | Path, name: str | None = None) -> ExportData:
    """The `ExportData` of a report folder as written: its windows.parquet and summary.json (the numbers of the
    report that was read, without reading the run again; the same as `data_of` the run with the same options)."""
    import polars as pl

    folder = Path(folder)
    summary = json.loads((folder / "summary.json").read_text())
    return export_data(pl.read_parquet(folder / "windows.parquet"), summary, list(summary.get("conventions") or {}),
                       name or run_name(summary.get("run") or folder))


#: `load_run` arguments that state nothing at these values (the command line hands every option over)
_UNSTATED = {"causal": "half", "log_format": "auto"}


def _write(data: ExportData, to: str, out: Path, project: str, tracking_uri: str | None) -> ExportResult:
    from ..report.output import EXPORT, atomic_report_dir
    from .backends import write

    options = {"project": project, "tracking_uri": tracking_uri}
    with atomic_report_dir(out, EXPORT) as tmp:
        written = write(to, data, tmp, out, options)
        manifest = {"backend": to, "name": data.name, "written": written, "metric_prefix": PREFIX,
                    "metrics": data.metrics, "points": data.points.height, "run_values": data.run_values,
                    "facts": data.facts, "notes": data.notes}
        (tmp / EXPORT_JSON).write_text(json.dumps(manifest, indent=2) + "\n")
    return ExportResult(out, to, data, written)


def export_run(run: str | Path, to: str, out: str | Path | None = None, *, name: str | None = None,
               project: str = "vlm-perf", tracking_uri: str | None = None, **load_options: Any) -> ExportResult:
    """Open ``run`` as ``vlm-perf report`` does (``load_options``: `vlm_perf.pipeline.load_run`'s keyword
    arguments, e.g. ``gpu``, ``peak_tflops``, ``convention``, ``metadata``) and export its series to ``to``
    (one of `BACKENDS`) in the folder ``out`` (default `default_out`). ``name``: the run's name in the tracker
    (default `run_name`); ``project``: the W&B project / MLflow experiment; ``tracking_uri``: MLflow only, a
    tracking server or store instead of a file store in ``out``. The backend and ``out`` are checked before the
    run is read. A report folder (`is_report_folder`) is exported as written (`data_of_report`): nothing is read
    again, and run options are refused (they were set when the report was written)."""
    from ..pipeline import load_run

    _check_options(to, tracking_uri)
    if is_report_folder(run):
        stated = sorted(k for k, v in load_options.items() if v not in (None, False, [], ()) and _UNSTATED.get(k) != v)
        if stated:
            from ..errors import ConfigError

            raise ConfigError(f"{run}: a report folder is exported as written; the run options ({', '.join(stated)}) "
                              "apply when a run is read: give the run itself, or write the report with them")
        data = data_of_report(run, name)
        out = Path(out) if out is not None else default_out(to, data.name)
        _check_out(out)
        return _write(data, to, out, project, tracking_uri)
    name = name or run_name(run)
    out = Path(out) if out is not None else default_out(to, name)
    _check_out(out)
    loaded = load_run(run, **load_options)
    return export_loaded(loaded, to, out, name=name, project=project, tracking_uri=tracking_uri)
