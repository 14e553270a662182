"""Which files make up a run: ONE rule for `parse`, `report`, `compare`, `metadata` and `trace`.

A run is a log file (its folder holds the rest) or a run folder, a local path or a URL (``s3://``,
``gs://``, any fsspec protocol: the same rule over the URL's filesystem, `vlm_perf.remote`). In the folder:

* **logs**: `vlm_perf.ingest.logs.discover.expand_dir` — the top level and the named sub-folders
  (``logs/``, ``tensorboard/``, ``wandb/``, ...): text logs (``.log``/``.txt``, compressed too),
  JSON(L) logs, ``trainer_state.json``, W&B history exports, TensorBoard event folders; metadata
  shards are never logs. A log file given directly is the only log.
* **metadata**: files named ``metadata*.jsonl|ndjson[.gz|.zst]`` / ``metadata*.parquet`` at the top
  level, and a ``metadata/`` sub-folder of shards.
* **manifest**: ``run.yaml`` / ``run.yml`` / ``run.json`` (`vlm_perf.ingest.runconfig.find_manifest`).
* **checkpoint config**: a ``config.json`` at the top level (the model when no other source names one).
* **profiler traces**: PyTorch profiler / Kineto ``*.pt.trace.json[.gz]`` and Nsight Systems ``*.sqlite``
  at the top level; in a ``trace/``, ``traces/`` or ``profiler/`` sub-folder every ``*.json[.gz]`` and
  ``*.sqlite`` (`TRACE_SUBDIRS`; a plain ``*.json`` at the top level is a config or a log, never a trace).
* **trainability**: ``trainability.json`` at the top level (what `vlm_perf.capture.MetadataCallback` observed
  requiring grad), and a PEFT ``adapter_config.json`` (the folder's own, else the latest ``checkpoint-N``'s,
  `vlm_perf.ingest.adapter_config.find_adapter_config`); `vlm_perf.run.regime` resolves them against the
  command line and run.yaml.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

from ..remote import as_path
from ..errors import InputError
from ..ingest.adapter_config import TRAINABILITY_FILE, find_adapter_config
from ..ingest.logs.discover import LOG_SUBDIRS, expand_dir
from ..ingest.runconfig import find_manifest

__all__ = ["RunFiles", "discover_run", "metadata_of", "traces_of", "METADATA_NAME", "LOOKED_FOR", "TRACE_SUBDIRS"]

METADATA_NAME = re.compile(r"^metadata.*(\.(jsonl|ndjson)(\.gz|\.zst)?|\.parquet)$")
TRACE_SUBDIRS = ("trace", "traces", "profiler")
_TRACE_TOP = re.compile(r"\.(pt\.trace\.json(\.gz)?|sqlite)$", re.IGNORECASE)
_TRACE_SUB = re.compile(r"\.(json(\.gz)?|sqlite)$", re.IGNORECASE)
LOOKED_FOR = ("*.log[.gz|.zst], *.txt, *.jsonl, trainer_state.json, W&B history exports, TensorBoard events; at "
              f"the top level and in {', '.join(s + '/' for s in LOG_SUBDIRS)}")


@dataclass(frozen=True)
class RunFiles:
    """The files of one run, found once."""

    folder: Path
    logs: list[Path]  # log files and TensorBoard folders
    metadata: list[Path] = field(default_factory=list)  # metadata files and shard folders
    manifest: Path | None = None
    checkpoint_config: Path | None = None  # config.json in the run folder
    traces: list[Path] = field(default_factory=list)  # profiler trace files (`traces_of`)
    trainability_record: Path | None = None  # trainability.json written by the callback
    adapter_config: Path | None = None  # adapter_config.json of the run (its own, or the latest checkpoint's)


def metadata_of(folder: Path) -> list[Path]:
    """Metadata files and the ``metadata/`` shard folder of a run folder."""
    found = sorted(p for p in folder.iterdir() if p.is_file() and METADATA_NAME.match(p.name))
    if (folder / "metadata").is_dir():
        found.append(folder / "metadata")
    return found


def traces_of(folder: Path) -> list[Path]:
    """Profiler trace files of a run folder: ``*.pt.trace.json[.gz]`` / ``*.sqlite`` at the top level, every
    ``*.json[.gz]`` / ``*.sqlite`` in the `TRACE_SUBDIRS` sub-folders; sorted, each once."""
    found = [p for p in sorted(folder.iterdir()) if p.is_file() and _TRACE_TOP.search(p.name)]
    for name in TRACE_SUBDIRS:
        sub = folder / name
        if sub.is_dir():
            found += [p for p in sorted(sub.iterdir()) if p.is_file() and _TRACE_SUB.search(p.name)]
    return list(dict.fromkeys(found))


def discover_run(path: str | Path, need_log: bool = True) -> RunFiles:
    """The `RunFiles` of a log file or a run folder; an `InputError` when there is none or (``need_log``) no log
    in it (``vlm-perf trace --run`` reads a folder of run.yaml + metadata + traces that may hold no log)."""
    path = as_path(path)  # a URL: the same rule over its fsspec filesystem (vlm_perf.remote)
    if not path.exists():
        raise InputError("no such log file or run directory", str(path))
    folder = path.parent if path.is_file() else path
    if path.is_file():  # a log file: the metadata and manifest next to it belong to the same run
        logs = [path]
    else:
        logs = expand_dir(path)
        if not logs and need_log:
            raise InputError(f"no training log found (looked for {LOOKED_FOR})", str(path))
    config = folder / "config.json"
    record = folder / TRAINABILITY_FILE
    return RunFiles(folder, logs, metadata_of(folder), find_manifest(path),
                    config if config.is_file() else None, traces_of(folder),
                    record if record.is_file() else None, find_adapter_config(folder))
