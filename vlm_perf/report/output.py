"""Atomic report folders: a report is complete or absent, never a mix of two runs.

`atomic_report_dir(out)` yields a fresh temporary folder next to ``out`` (same file system);
when the block finishes, the previous ``out`` (if any) is renamed aside and the temporary folder
renamed to ``out`` under an exclusive lock, then the old one is deleted. If the block raises, the
temporary folder is removed and ``out`` is left as it was. Nothing is ever written through a
symlink: files are created new in the temporary folder, ``out`` itself may not be a symlink,
and a folder that exists but does not look like a report (other files in it) is refused rather
than replaced, so a mistyped ``-o`` cannot delete unrelated data.

The same rule serves every command that writes a folder of results (`OutputKind`: ``report``, ``trace``,
``compare``, ``export``):
each kind names the files its folder may hold, so one kind's folder is never replaced by another's.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

import polars as pl

from ..errors import VlmPerfError

MARKER = ".vlm-perf-report"  # written into every report folder; what makes a folder replaceable
WINDOWS_FILES = ("windows.parquet", "windows.csv")
REPORT_FILES = {"summary.json", "report.md", "report.html", MARKER, *WINDOWS_FILES}
TRACE_FILES = {"trace_parts.json", "trace_parts.md", "trace_parts.png", "per_step.csv", MARKER}
COMPARE_FILES = {"compare.json", "compare.md", "compare.html", "compare.png", "compare.csv", "compare.parquet",
                 MARKER}  # csv / parquet: the table of a sweep (report.sweep_page)
EXPORT_FILES = {"export.json", "metrics.parquet", "metrics.csv", "wandb", "mlruns", MARKER}


@dataclass(frozen=True)
class OutputKind:
    """A command's output folder: ``what`` wrote it, the ``files`` it may hold (and PNG figures), and the
    ``signature`` files that mark an older folder of this kind written before the marker existed."""

    what: str  # the command, in messages and the marker
    label: str  # what its folder is called in messages
    files: frozenset[str]
    signature: frozenset[str]
    prefixes: tuple[str, ...] = ()  # names it may hold that start so (TensorBoard's event files)


REPORT = OutputKind("report", "report", frozenset(REPORT_FILES), frozenset({"summary.json", "report.md"}))
TRACE = OutputKind("trace", "trace -o folder", frozenset(TRACE_FILES), frozenset({"trace_parts.json", "trace_parts.md"}))
COMPARE = OutputKind("compare", "compare -o folder", frozenset(COMPARE_FILES), frozenset({"compare.json", "compare.md"}))
EXPORT = OutputKind("export", "export -o folder", frozenset(EXPORT_FILES), frozenset({"export.json"}),
                    ("events.out.tfevents.",))


def _is_replaceable(folder: Path, kind: OutputKind = REPORT) -> bool:
    entries = {p.name for p in folder.iterdir()}
    if not entries:
        return True
    if MARKER in entries or kind.signature <= entries:  # ours (older folders had no marker)
        return all(name in kind.files or name.endswith(".png") or name.startswith(kind.prefixes) for name in entries)
    return False


@contextlib.contextmanager
def _locked(folder: Path) -> Iterator[None]:
    """An exclusive lock on ``folder`` itself (no lock file left behind)."""
    try:
        import fcntl
    except ImportError:  # pragma: no cover - Windows: the renames alone are still atomic per folder
        yield
        return
    fd = os.open(folder, os.O_RDONLY)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        fcntl.flock(fd, fcntl.LOCK_UN)
        os.close(fd)


def make_folder(folder: Path, what: str = "output") -> None:
    """``folder`` and its parents created (``mkdir -p``); one line naming the first part of the path that is a
    file (or not writable) instead of ``[Errno 17] File exists`` / ``[Errno 20] Not a directory``."""
    try:
        folder.mkdir(parents=True, exist_ok=True)
        return
    except (FileExistsError, NotADirectoryError):
        pass
    except PermissionError as exc:
        raise VlmPerfError(f"{exc.filename or folder}: cannot create the {what} folder there (permission denied)") \
            from None
    blocker = next((p for p in [folder, *folder.parents] if p.exists() and not p.is_dir()), folder)
    if blocker == folder:
        raise VlmPerfError(f"{folder}: is a file, not a folder: the {what} cannot be written into it; give another "
                           "path")
    raise VlmPerfError(f"{blocker}: is a file, so the {what} folder {folder} cannot be created under it; give "
                       "another path")


@contextlib.contextmanager
def atomic_report_dir(out: Path, kind: OutputKind = REPORT) -> Iterator[Path]:
    """A fresh folder to write ``kind``'s files into, renamed to ``out`` when the block ends (module docstring)."""
    out = Path(os.path.abspath(out))  # "." or "out/" -> a named folder with a parent (symlinks kept as links)
    cwd = Path.cwd()
    if out == cwd or out in cwd.parents:
        raise VlmPerfError(f"{out}: the output folder would replace the current directory (or one above it); give a "
                           "subfolder, e.g. -o report/")
    parent = out.parent
    make_folder(parent)
    # checked under the lock: another writer's rename pair (out -> aside, tmp -> out) leaves ``out`` briefly
    # absent, which unlocked exists()/is_dir() calls could see half-way and misreport as "not a folder"
    with _locked(parent):
        if out.is_symlink():
            raise VlmPerfError(f"{out}: the output folder is a symlink; give the real folder (a {kind.label} is "
                               "never written through a symlink)")
        if out.exists() and not out.is_dir():
            raise VlmPerfError(f"{out}: exists and is not a folder")
        if out.is_dir() and not _is_replaceable(out, kind):
            raise VlmPerfError(f"{out}: exists and holds files that are not a vlm-perf {kind.label}; choose a new or "
                               "empty output folder")
    tmp = Path(tempfile.mkdtemp(prefix=f".{out.name}.tmp-", dir=parent))
    try:
        yield tmp
        (tmp / MARKER).write_text(f"written by vlm-perf {kind.what}; this folder is replaced as a whole on the next "
                                  "run\n")
        os.chmod(tmp, 0o755)
        with _locked(parent):
            old = None
            if out.is_symlink():
                raise VlmPerfError(f"{out}: became a symlink while the {kind.label} was written; not replaced")
            if out.exists():
                if not _is_replaceable(out, kind):
                    raise VlmPerfError(f"{out}: files that are not a vlm-perf {kind.label} appeared while it was "
                                       "written; not replaced")
                old = Path(tempfile.mkdtemp(prefix=f".{out.name}.old-", dir=parent))
                os.replace(out, old / "report")
            os.replace(tmp, out)
        if old is not None:
            shutil.rmtree(old, ignore_errors=True)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise


def windows_table(run) -> pl.DataFrame:
    """One row per logged window: where it is, whether the means use it (and why not), its step time,
    every convention's TFLOP/s/GPU and MFU, the exact FLOPs and vision share and the log's own number. The
    ``reliable`` column is the one window selection (`vlm_perf.analysis.selection`) every mean uses."""
    w = run.windows
    cols = [c for c in ("segment", "window_start", "iteration", "window_iterations", "first_in_segment", "complete",
                        "reliable", "step_time_excluded", "window_seconds") if c in w.columns]
    exprs = [pl.col(c) for c in cols]
    exprs.append((pl.col("window_seconds") / pl.col("window_iterations")).alias("step_time_s"))
    for conv in run.conventions:
        for suffix in ("tflops_per_gpu", "mfu"):
            if f"{conv}_{suffix}" in w.columns:
                exprs.append(pl.col(f"{conv}_{suffix}").fill_nan(None))
    if "exact_total" in w.columns and "exact_vision" in w.columns:
        # the window's exact FLOPs too, so that the run's vision share (Σ vision / Σ total over the ``reliable``
        # windows, `vlm_perf.analysis.selection.VISION_SHARE`) can be recomputed from this table
        exprs += [pl.col("exact_total").alias("exact_flops"), pl.col("exact_vision").alias("exact_vision_flops"),
                  pl.when(pl.col("exact_total") > 0).then(pl.col("exact_vision") / pl.col("exact_total"))
                  .alias("vision_share")]
    if "tflops_per_gpu_logged" in w.columns:
        exprs.append(pl.col("tflops_per_gpu_logged"))
    return w.select(exprs)


def write_windows_table(run, folder: Path) -> list[str]:
    """``windows.parquet`` and ``windows.csv`` (the same table, `windows_table`) into ``folder``; their names."""
    table = windows_table(run)
    table.write_parquet(folder / WINDOWS_FILES[0])
    table.write_csv(folder / WINDOWS_FILES[1])
    return list(WINDOWS_FILES)
