"""Open many runs for one sweep (`vlm-perf compare RUN1 ... RUNn`): each run through `vlm_perf.pipeline.load_run`
(`vlm_perf.run.core.open_run`, the path `vlm-perf report` opens a run by) and summarised by the report's own
`build_summary`, in this process or one run per task on a Dask cluster (``scheduler``, `vlm_perf.scale.cluster`).

Either way each run is opened and analysed by the same single-process code (a worker runs exactly what this
process would), and the results are put back in the order the runs were given, so the sweep is identical.
A run that cannot be opened is a `RunOutcome` with its one-line reason (not an exception), so that every bad run
of a sweep can be named at once.

    >>> from vlm_perf.sweep import summarize_runs
    >>> outcomes = summarize_runs(["runs/a", "runs/b", "runs/c"], {"peak_tflops": 989.0})
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any, Callable, Mapping, Sequence

from .analysis.sweep import MAX_RUNS
from .errors import ConfigError, VlmPerfError

__all__ = ["RunOutcome", "summarize_run", "summarize_runs", "check_run_list", "MAX_RUNS"]


@dataclass(frozen=True)
class RunOutcome:
    """One run of a sweep: its summary (the dict its ``summary.json`` holds, without ``figures``) or why it could
    not be opened (``error``: one line; ``skippable``: bad metadata lines that skipping would pass)."""

    run: str
    summary: dict | None = None
    error: str | None = None
    skippable: bool = False


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


def summarize_run(run: str, arguments: Mapping[str, Any]) -> RunOutcome:
    """Open ``run`` as `vlm-perf report` does (``arguments``: `load_run` keyword arguments) and summarise it. Bad
    input (a `VlmPerfError`, any ``ValueError`` or ``OSError``, as the command line treats them) is the outcome's
    ``error``; anything else is a bug and propagates."""
    from .pipeline import load_run
    from .report import build_summary

    try:
        loaded = load_run(run, **dict(arguments))
        return RunOutcome(run, build_summary(loaded.analysis, loaded.context))
    except (ValueError, OSError) as exc:  # VlmPerfError is a ValueError
        return RunOutcome(run, error=_first_line(exc), skippable=bool(getattr(exc, "skippable", False)))


def _identity(run: str) -> str:
    """What makes two run arguments the same run: the resolved local path (a URL as written)."""
    return run if "://" in run else os.path.realpath(os.path.expanduser(run))


def check_run_list(runs: Sequence[str]) -> None:
    """At most `MAX_RUNS` runs, each once; a `ConfigError` naming the count or the first repeated run."""
    if len(runs) > MAX_RUNS:
        raise ConfigError(f"{len(runs)} runs given; a sweep compares at most {MAX_RUNS} runs: split it into sweeps "
                          f"of <= {MAX_RUNS} sharing run #1 as the baseline")
    seen: dict[str, int] = {}
    for i, run in enumerate(runs, start=1):
        key = _identity(run)
        if key in seen:
            j = seen[key]
            same = f" ({runs[j - 1]} and {run} are the same run)" if runs[j - 1] != run else ""
            raise ConfigError(f"run {run} is given twice, as #{j} and #{i}{same}; list each run once")
        seen[key] = i


def summarize_runs(runs: Sequence[str], arguments: Mapping[str, Any], scheduler: str | None = None,
                   on_done: Callable[[int, RunOutcome], None] = lambda i, outcome: None) -> list[RunOutcome]:
    """`summarize_run` of each run, in the order given. ``scheduler`` (``local[:N]``, an address or a scheduler
    file): one task per run on that Dask cluster (run paths must be readable by the workers as written).
    ``on_done(index, outcome)`` is called as each run finishes (0-based index, in finishing order)."""
    runs = [str(r) for r in runs]
    check_run_list(runs)
    arguments = dict(arguments)
    if arguments.get("scheduler"):
        raise ConfigError("the sweep's scheduler spreads whole runs over the workers; give it as the sweep's "
                          "scheduler, not as a per-run reading option")
    arguments.pop("scheduler", None)
    if not scheduler:
        out = []
        for i, run in enumerate(runs):
            out.append(summarize_run(run, arguments))
            on_done(i, out[-1])
        return out
    from .scale.cluster import gather_in_order, connect, parse_scheduler

    sched = parse_scheduler(scheduler)  # a typo fails before a cluster is started
    with connect(sched) as client:
        futures = [client.submit(summarize_run, run, arguments, key=f"vlm-perf-sweep-{os.getpid()}-{id(runs)}-{i}",
                                 pure=False) for i, run in enumerate(runs)]
        gathered = gather_in_order(client, futures, lambda i: f"run {runs[i]}",
                                    lambda i: on_done(i, futures[i].result()))
    if any(not isinstance(r, RunOutcome) for r in gathered):  # pragma: no cover - a worker answered something else
        raise VlmPerfError("a Dask worker returned no run summary; install the same vlm-perf on the workers")
    return list(gathered)
