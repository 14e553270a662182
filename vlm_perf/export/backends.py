"""The export backends: each writes one `ExportData` (`vlm_perf.export.scheme`) as it is, with the backend's own
library, into a folder that `vlm_perf.report.output.atomic_report_dir` renames into place when complete.

* ``tensorboard``: event files (tensorboard's own writer, no TensorFlow): one scalar per point (TensorBoard
  scalars are 32-bit floats: 7 significant digits), the run values as scalars at the last step, the facts as
  hparams (with the run values as the hparams metrics).
* ``wandb``: an offline W&B run (``wandb/offline-run-*``; nothing goes over the network), one ``run.log`` per
  step with ``step=`` the iteration, the facts as the run config, the run values in the run summary; upload
  it later with ``wandb sync``.
* ``mlflow``: an MLflow run, in a local file store ``mlruns/`` in the folder (MLflow's file store is in
  maintenance mode: it is enabled for this write only) or at ``tracking_uri``; metrics with their steps, the
  facts as params, the run values as metrics at the last step.
* ``parquet`` / ``csv``: ``metrics.parquet`` / ``metrics.csv``, one row per point (metric, step, value).

Every backend's library is optional (`EXTRAS`); a missing one is a one-line `MissingBackend` naming the extra
and the install command.
"""

from __future__ import annotations

import contextlib
import importlib
import os
import time
from pathlib import Path
from typing import Any, Callable, Iterator

from ..errors import VlmPerfError
from ..extras import install_hint
from .scheme import ExportData

__all__ = ["BACKENDS", "EXTRAS", "MissingBackend", "require", "write"]

#: backend -> (module that must import, extra, the package the extra installs)
EXTRAS: dict[str, tuple[str, str, str]] = {
    "tensorboard": ("tensorboard.summary.writer.event_file_writer", "export-tensorboard", "tensorboard"),
    "wandb": ("wandb", "export-wandb", "wandb"),
    "mlflow": ("mlflow.tracking", "export-mlflow", "mlflow-skinny"),
}
BACKENDS = ("tensorboard", "wandb", "mlflow", "parquet", "csv")


class MissingBackend(VlmPerfError):
    """The backend's library is not installed."""


def require(backend: str) -> None:
    """Fail fast (before the run is read): an unknown backend, or a backend whose library is missing."""
    if backend not in BACKENDS:
        raise VlmPerfError(f"export backend {backend!r} is unknown; choose one of {', '.join(BACKENDS)}")
    if backend in EXTRAS:
        module, extra, package = EXTRAS[backend]
        try:
            importlib.import_module(module)
        except ImportError:
            raise MissingBackend(f"exporting to {backend} needs {package} (the {extra} extra): "
                                 f"{install_hint(extra)}") from None


def _rows_by_step(data: ExportData) -> Iterator[tuple[int, dict[str, float]]]:
    """(step, {metric: value}) in step order (the points are sorted by step): one pass over three lists."""
    step, row = None, {}
    for s, metric, value in zip(*(data.points[c].to_list() for c in ("step", "metric", "value"))):
        if s != step:
            if row:
                yield int(step), row
            step, row = s, {}
        row[metric] = value
    if row:
        yield int(step), row


# ------------------------------------------------------------------------------------------------ TensorBoard

def _tensorboard(data: ExportData, folder: Path, final: Path, options: dict) -> dict[str, Any]:
    from tensorboard.compat.proto.event_pb2 import Event
    from tensorboard.compat.proto.summary_pb2 import Summary
    from tensorboard.plugins.hparams import summary_v2 as hp
    from tensorboard.summary.writer.event_file_writer import EventFileWriter

    writer = EventFileWriter(str(folder))
    now = time.time()
    last = data.last_step()

    def scalars(step: int, values: dict[str, float]) -> None:
        writer.add_event(Event(wall_time=now, step=step, summary=Summary(value=[
            Summary.Value(tag=tag, simple_value=value) for tag, value in values.items()])))

    try:
        facts = {k: v for k, v in data.facts.items()}
        writer.add_event(Event(wall_time=now, step=0, summary=hp.hparams_config_pb(
            hparams=[hp.HParam(k) for k in facts], metrics=[hp.Metric(tag) for tag in data.run_values])))
        writer.add_event(Event(wall_time=now, step=0, summary=hp.hparams_pb(facts, trial_id=data.name,
                                                                            start_time_secs=now)))
        for step, values in _rows_by_step(data):
            scalars(step, values)
        if data.run_values:
            scalars(last, data.run_values)
    finally:
        writer.close()
    files = sorted(p.name for p in folder.iterdir() if p.name.startswith("events.out.tfevents."))
    return {"logdir": str(final), "event_files": files, "open": f"tensorboard --logdir {final}"}


# ------------------------------------------------------------------------------------------------ W&B

def _wandb(data: ExportData, folder: Path, final: Path, options: dict) -> dict[str, Any]:
    """The run is written by `vlm_perf.export.wandb_child` in a process of its own (why: its docstring)."""
    import json
    import subprocess
    import sys
    import tempfile

    with tempfile.TemporaryDirectory(prefix="vlm-perf-wandb-") as work:
        spec = {"dir": str(folder), "project": options.get("project") or "vlm-perf", "name": data.name,
                "facts": dict(data.facts), "run_values": data.run_values, "points": str(Path(work) / "points.parquet"),
                "result": str(Path(work) / "result.json")}
        data.points.select("metric", "step", "value").write_parquet(spec["points"])
        (Path(work) / "spec.json").write_text(json.dumps(spec))
        done = subprocess.run([sys.executable, "-m", "vlm_perf.export.wandb_child", str(Path(work) / "spec.json")],
                              capture_output=True, text=True)
        result = Path(spec["result"])
        if done.returncode != 0 or not result.exists():
            last = (done.stderr.strip().splitlines() or ["no output"])[-1]
            raise VlmPerfError(f"W&B could not write the offline run (exit status {done.returncode}): {last}")
        run_id = json.loads(result.read_text())["run_id"]
    runs = sorted(p.name for p in (folder / "wandb").glob("offline-run-*"))
    if len(runs) != 1:
        raise VlmPerfError(f"W&B wrote {len(runs)} offline runs into {final / 'wandb'}, expected one")
    run_dir = final / "wandb" / runs[0]
    return {"run_id": run_id, "run_dir": str(run_dir), "open": f"wandb sync {run_dir}"}


# ------------------------------------------------------------------------------------------------ MLflow

@contextlib.contextmanager
def _file_store_allowed() -> Iterator[None]:
    """MLflow >= 3.x refuses its file store unless MLFLOW_ALLOW_FILE_STORE is set: set for this write only."""
    old = os.environ.get("MLFLOW_ALLOW_FILE_STORE")
    os.environ["MLFLOW_ALLOW_FILE_STORE"] = "true"
    try:
        yield
    finally:
        if old is None:
            os.environ.pop("MLFLOW_ALLOW_FILE_STORE", None)
        else:
            os.environ["MLFLOW_ALLOW_FILE_STORE"] = old


def _chunks(items: list, size: int) -> Iterator[list]:
    for i in range(0, len(items), size):
        yield items[i:i + size]


def _mlflow(data: ExportData, folder: Path, final: Path, options: dict) -> dict[str, Any]:
    from mlflow.exceptions import MlflowException

    try:
        return _mlflow_run(data, folder, final, options)
    except MlflowException as exc:  # a bad tracking URI, a refused write: one line, not a traceback
        text = str(exc).strip().splitlines()
        raise VlmPerfError(f"MLflow ({options.get('tracking_uri') or 'file store'}): "
                           f"{text[0] if text else type(exc).__name__}") from None


def _mlflow_run(data: ExportData, folder: Path, final: Path, options: dict) -> dict[str, Any]:
    from mlflow.entities import Metric, Param, RunStatus
    from mlflow.tracking import MlflowClient
    from mlflow.utils.file_utils import path_to_local_file_uri

    project = options.get("project") or "vlm-perf"
    uri = options.get("tracking_uri")
    local = uri is None
    file_store = local or str(uri).startswith("file:") or "://" not in str(uri) and ":" not in str(uri)[:8]
    with _file_store_allowed() if file_store else contextlib.nullcontext():
        if local:
            from mlflow.store.tracking.file_store import FileStore

            # the store is written here and renamed into place: its artifact locations name the final folder
            store = FileStore(str(folder / "mlruns"), path_to_local_file_uri(str(final / "mlruns")))
            experiment = store.get_experiment_by_name(project)
            experiment_id = experiment.experiment_id if experiment else store.create_experiment(project)
            uri = path_to_local_file_uri(str(folder / "mlruns"))
        client = MlflowClient(tracking_uri=uri)
        if not local:
            experiment = client.get_experiment_by_name(project)
            experiment_id = experiment.experiment_id if experiment else client.create_experiment(project)
        note = (f"vlm-perf export of {data.facts.get('run', data.name)}: recomputed TFLOP/s/GPU, MFU per convention, "
                "vision share and step time per logged window (metrics vlm_perf/...; step = the run's iteration).")
        run = client.create_run(experiment_id, run_name=data.name,
                                tags={"vlm_perf.export": "1", "mlflow.note.content": note})
        run_id = run.info.run_id
        try:
            params = [Param(k, str(v)) for k, v in data.facts.items()]
            for chunk in _chunks(params, 100):
                client.log_batch(run_id, params=chunk)
            stamp = int(time.time() * 1000)
            metrics = [Metric(m, v, stamp, s) for m, s, v in data.points.select("metric", "step", "value").iter_rows()]
            metrics += [Metric(m, v, stamp, data.last_step()) for m, v in data.run_values.items()]
            for chunk in _chunks(metrics, 1000):
                client.log_batch(run_id, metrics=chunk)
        except BaseException:
            client.set_terminated(run_id, RunStatus.to_string(RunStatus.FAILED))
            raise
        client.set_terminated(run_id, RunStatus.to_string(RunStatus.FINISHED))
    shown = path_to_local_file_uri(str(final / "mlruns")) if local else uri
    view = f"{'MLFLOW_ALLOW_FILE_STORE=true ' if file_store else ''}mlflow ui --backend-store-uri {shown}"
    return {"tracking_uri": shown, "experiment_id": experiment_id, "run_id": run_id, "open": view}


# ------------------------------------------------------------------------------------------------ tables

def _table(suffix: str) -> Callable[[ExportData, Path, Path, dict], dict[str, Any]]:
    def write(data: ExportData, folder: Path, final: Path, options: dict) -> dict[str, Any]:
        name = f"metrics.{suffix}"
        frame = data.points.select("metric", "step", "value")
        frame.write_parquet(folder / name) if suffix == "parquet" else frame.write_csv(folder / name)
        return {"file": str(final / name)}
    return write


_WRITERS: dict[str, Callable[[ExportData, Path, Path, dict], dict[str, Any]]] = {
    "tensorboard": _tensorboard, "wandb": _wandb, "mlflow": _mlflow, "parquet": _table("parquet"),
    "csv": _table("csv")}


def write(backend: str, data: ExportData, folder: Path, final: Path, options: dict) -> dict[str, Any]:
    """Write ``data`` with ``backend`` into ``folder`` (renamed to ``final`` afterwards); what was written."""
    require(backend)
    return _WRITERS[backend](data, folder, final, options)
