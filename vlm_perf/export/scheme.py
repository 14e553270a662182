"""The export's metric naming scheme and the series it exports, defined once.

Every number an export writes is read from what the report writes — the per-window table
(`vlm_perf.report.output.windows_table`, the report's ``windows.parquet``) and the summary
(`vlm_perf.report.document.build_summary`, the report's ``summary.json``); nothing is computed here.
`METRICS` declares each metric: its name (under `PREFIX`, with ``{convention}`` / ``{phase}`` filled in), unit,
meaning and the column or summary key it comes from; `export_data` turns a loaded run into an `ExportData`
(the points, the run-level values and the run's facts), which every backend (`vlm_perf.export.backends`) writes
as it is. docs/export.md's metric table is `metrics_markdown()` (``python -m vlm_perf.export.docs``).

Step axis: the run's own iteration numbers (the window's last iteration, where the training log printed its
line), so the series overlay the run's original curves. The report's window table holds one window per iteration
(after a restart, the later segment's: the log's last write); should it hold two, the later segment's window is
exported and ``superseded_windows`` counts the others, so that every backend gets one point per step (W&B drops a
step that goes back).
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from typing import Any, Iterable

import polars as pl

from ..errors import VlmPerfError

__all__ = ["PREFIX", "Metric", "METRICS", "RUN_VALUES", "ExportData", "export_data", "metric_segment",
           "metrics_markdown", "facts_of"]

PREFIX = "vlm_perf"


@dataclass(frozen=True)
class Metric:
    """One exported metric. ``name``: below `PREFIX`, with ``{convention}`` / ``{phase}`` placeholders;
    ``source``: the windows table's column (``window`` metrics, same placeholders), or the summary.json key path
    (``rl_step`` and ``run`` metrics, dots between keys)."""

    name: str
    unit: str
    meaning: str
    per: str  # window | rl_step | run
    source: str

    def full(self, **parts: str) -> str:
        return f"{PREFIX}/{self.name.format(**{k: metric_segment(v) for k, v in parts.items()})}"


_W, _R = "window", "run"
METRICS: tuple[Metric, ...] = (
    Metric("tflops_per_gpu/{convention}", "TFLOP/s/GPU", "the window's FLOPs under the convention / (window "
           "seconds x GPUs)", _W, "{convention}_tflops_per_gpu"),
    Metric("mfu/{convention}", "fraction", "tflops_per_gpu / the GPU's dense peak (absent without a peak)", _W,
           "{convention}_mfu"),
    Metric("vision_share", "fraction", "exact vision FLOPs / exact training FLOPs of the window", _W, "vision_share"),
    Metric("step_time_s", "s", "window seconds / window iterations", _W, "step_time_s"),
    Metric("logged/tflops_per_gpu", "TFLOP/s/GPU", "the training log's own number for the window (where it prints "
           "one)", _W, "tflops_per_gpu_logged"),
    Metric("window/in_means", "0 or 1", "1 when the run's means use the window (analysis.selection), 0 when they "
           "do not (first window after a (re)start, incomplete, step-time outlier)", _W, "reliable"),
    Metric("rl/phase_s/{phase}", "s", "seconds of the RL step's phase (generation, old_log_prob, ref, values, "
           "update_actor, update_critic, other)", "rl_step", "rl.per_iteration[].seconds.{phase}"),
    Metric("rl/step_s", "s", "seconds of the whole RL step", "rl_step", "rl.per_iteration[].step_s"),
)

#: run-level values (one number per run: W&B summary, MLflow metric at the last step, TensorBoard hparams metric)
RUN_VALUES: tuple[Metric, ...] = (
    Metric("mean/tflops_per_gpu/{convention}", "TFLOP/s/GPU", "time-weighted mean over the windows the means use",
           _R, "conventions.{convention}.tflops_per_gpu_mean"),
    Metric("mean/mfu/{convention}", "fraction", "mean TFLOP/s/GPU / the GPU's dense peak", _R,
           "conventions.{convention}.mfu_mean"),
    Metric("mean/vision_share", "fraction", "Σ exact vision FLOPs / Σ exact training FLOPs over the windows the "
           "means use", _R, "vision_share_mean"),
    Metric("mean/step_time_s", "s", "Σ window seconds / Σ window iterations over the windows the means use", _R,
           "step.seconds_per_iteration"),
    Metric("mean/logged/tflops_per_gpu", "TFLOP/s/GPU", "the log's own number, time-weighted over the same windows",
           _R, "logged_tflops_per_gpu_mean"),
)


def metric_segment(name: str) -> str:
    """A convention or phase name as one segment of a metric name: ``@`` becomes ``.`` (``verl@v0.7.1`` ->
    ``verl.v0.7.1``) and any other character outside letters, digits, ``_ . -`` becomes ``_``, so that every
    backend accepts the name as it is (MLflow allows only letters, digits, ``_ - . /``, spaces and, off Windows,
    ``:``)."""
    return re.sub(r"[^A-Za-z0-9_.-]", "_", name.replace("@", "."))


@dataclass
class ExportData:
    """What an export writes, the same for every backend.

    ``points``: one row per (metric, step) with columns ``metric`` (str), ``step`` (Int64, the run's iteration)
    and ``value`` (Float64), sorted by step then metric; ``run_values``: metric -> the run's number
    (`RUN_VALUES`); ``facts``: the run's facts (model, GPUs, peak, regime, conventions and their pins, ...),
    flat, str / int / float / bool, facts the run does not state left out; ``name``: the run's name in the
    trackers; ``notes``: what the caller should say (windows superseded after a restart)."""

    name: str
    points: pl.DataFrame
    run_values: dict[str, float]
    facts: dict[str, Any]
    notes: list[str] = field(default_factory=list)
    superseded_windows: int = 0

    @property
    def metrics(self) -> list[str]:
        """Every exported series' name, sorted."""
        return sorted(self.points["metric"].unique().to_list())

    def series(self, metric: str) -> list[tuple[int, float]]:
        """(step, value) of one metric, by step."""
        rows = self.points.filter(pl.col("metric") == metric).sort("step")
        return list(zip(rows["step"].to_list(), rows["value"].to_list()))

    def last_step(self) -> int:
        return int(self.points["step"].max()) if self.points.height else 0


def _finite(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def _dig(summary: dict, path: str) -> Any:
    value: Any = summary
    for key in path.split("."):
        if not isinstance(value, dict) or key not in value:
            return None
        value = value[key]
    return value


def _window_points(windows: pl.DataFrame, conventions: list[str]) -> tuple[list[pl.DataFrame], int]:
    """The window metrics' points (last segment wins per iteration) and how many windows were superseded."""
    if "iteration" not in windows.columns:
        raise VlmPerfError("the run's window table has no iteration column: nothing to export")
    order = [c for c in ("segment", "iteration") if c in windows.columns]
    rows = windows.filter(pl.col("iteration").is_not_null()).sort(order)
    kept = rows.unique(subset="iteration", keep="last", maintain_order=True)
    frames = []
    for metric in METRICS:
        if metric.per != _W:
            continue
        variants = [{"convention": c} for c in conventions] if "{convention}" in metric.name else [{}]
        for parts in variants:
            column = metric.source.format(**parts)
            if column not in kept.columns:
                continue
            value = pl.col(column).cast(pl.Float64)
            frames.append(kept.select(pl.lit(metric.full(**parts)).alias("metric"),
                                      pl.col("iteration").cast(pl.Int64).alias("step"), value.alias("value"))
                          .filter(pl.col("value").is_not_null() & pl.col("value").is_finite()))
    return frames, rows.height - kept.height


def _rl_points(summary: dict) -> list[pl.DataFrame]:
    rl = summary.get("rl") or {}
    rows: list[tuple[str, int, float]] = []
    by_name = {m.name: m for m in METRICS if m.per == "rl_step"}
    for entry in rl.get("per_iteration") or []:
        step = entry.get("iteration")
        if step is None:
            continue
        if _finite(entry.get("step_s")):
            rows.append((by_name["rl/step_s"].full(), int(step), float(entry["step_s"])))
        for phase, seconds in (entry.get("seconds") or {}).items():
            if _finite(seconds):
                rows.append((by_name["rl/phase_s/{phase}"].full(phase=phase), int(step), float(seconds)))
    if not rows:
        return []
    return [pl.DataFrame(rows, schema={"metric": pl.Utf8, "step": pl.Int64, "value": pl.Float64}, orient="row")]


def _run_values(summary: dict, conventions: list[str]) -> dict[str, float]:
    out: dict[str, float] = {}
    for metric in RUN_VALUES:
        variants = [{"convention": c} for c in conventions] if "{convention}" in metric.name else [{}]
        for parts in variants:
            value = _dig(summary, metric.source.format(**parts))
            if _finite(value):
                out[metric.full(**parts)] = float(value)
    return out


def facts_of(summary: dict, conventions: Iterable[str]) -> dict[str, Any]:
    """The run's facts as flat key -> str / int / float / bool (run config, tags, hparams): from the summary,
    and each convention's pin from the convention registry (`vlm_perf.flops`); None values left out."""
    from .. import __version__
    from ..flops import get_convention

    regime = summary.get("regime") or {}
    peak = summary.get("peak") or {}
    rl = summary.get("rl") or {}
    inputs = summary.get("inputs") or {}
    conventions = list(conventions)
    facts: dict[str, Any] = {
        "vlm_perf_version": __version__, "run": summary.get("run"), "model": summary.get("model"),
        "model_config": inputs.get("model"), "gpus": summary.get("world_size"), "gpu": summary.get("gpu"),
        "dtype": summary.get("dtype"), "peak_tflops": summary.get("peak_tflops"),
        "peak_source": peak.get("source_short"), "regime": regime.get("description"),
        "regime_source": regime.get("source"), "estimated": summary.get("estimated"),
        "synthetic": summary.get("synthetic"), "causal": inputs.get("causal"),
        "conventions": ", ".join(conventions), "checks_status": summary.get("checks_status"),
        "iterations": summary.get("iterations"), "logged_windows": summary.get("logged_windows"),
        "windows_used": summary.get("windows_used"),
        "rl_algorithm": rl.get("algorithm"), "rl_framework": rl.get("framework"),
    }
    for name in conventions:
        pin = get_convention(name).pin
        facts[f"pin/{metric_segment(name)}"] = pin.describe() if pin is not None else "vlm-perf (no framework pin)"
    return {k: v for k, v in facts.items() if v is not None and v != ""}


def _check_names(names: Iterable[str], what: str) -> None:
    seen: dict[str, str] = {}
    for name in names:
        segment = metric_segment(name)
        if segment in seen and seen[segment] != name:
            raise VlmPerfError(f"{what} {seen[segment]!r} and {name!r} have the same metric name segment {segment!r}; "
                               "export one of them")
        seen[segment] = name


def export_data(windows: pl.DataFrame, summary: dict, conventions: list[str], name: str) -> ExportData:
    """The `ExportData` of a run: ``windows``, the report's window table (`report.output.windows_table`);
    ``summary``, its summary (`report.document.build_summary`); ``conventions``: the run's (in report order)."""
    _check_names(conventions, "conventions")
    frames, superseded = _window_points(windows, conventions)
    frames += _rl_points(summary)
    flag = next(m.full() for m in METRICS if m.source == "reliable")  # a window's flag alone is not a number
    if not any(f.filter(pl.col("metric") != flag).height for f in frames):
        raise VlmPerfError(f"{summary.get('run') or name}: no logged window has a number to export (the log has no "
                           "step times)")
    points = pl.concat(frames).sort("step", "metric")
    notes = []
    if not summary.get("peak_tflops"):
        notes.append("no GPU peak for this run: no MFU series (state the GPU type or its dense peak)")
    if superseded:
        notes.append(f"{superseded} window(s) of iterations logged again after a restart are superseded by the later "
                     "segment's (last write wins)")
    return ExportData(name, points, _run_values(summary, conventions), facts_of(summary, conventions), notes,
                      superseded)


def metrics_markdown() -> str:
    """The metric table of docs/export.md."""
    rows = ["| metric | unit | per | meaning | from |", "|---|---|---|---|---|"]
    for m in METRICS + RUN_VALUES:
        where = f"windows.parquet `{m.source}`" if m.per == _W else f"summary.json `{m.source}`"
        rows.append(f"| `{PREFIX}/{m.name}` | {m.unit} | {m.per.replace('_', ' ')} | {m.meaning} | {where} |")
    return "\n".join(rows) + "\n"
