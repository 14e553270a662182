"""Run health: where the wall-clock time of a run went, from the log alone.

Inputs are the log's windows (`windows.build_windows`: segment, iteration, seconds, exclusions)
and, when the log prints them, the timestamps of its lines. Conventions (all times in seconds,
timeline positions in minutes from the start of the first window):

* a window ends at its line's ``timestamp`` and starts ``window_seconds`` earlier;
* **productive** time: seconds of windows with a usable step time, minus replayed work;
* **replayed** work: iterations of a segment beyond the iteration the next segment restarted from
  (done, then thrown away by the restart), at that window's seconds per iteration;
* **restart downtime**: from the last line of a segment to the start of the next segment's first
  window (crash detection, watchdog timeout, relaunch, checkpoint load);
* **stall** time: the excess of an outlier window over the median step time (a hang that
  resolved); **untimed** time: the part of the gap between two consecutive lines of a segment
  that the iteration timer did not count (checkpoint saves, validation, stalls outside the timer)
  when larger than ``UNTIMED_MIN_S``;
* **goodput** = productive / wall clock (first window start to last line), only with timestamps.

Step-time percentiles are over window means of seconds per iteration (what logs print), per segment,
without each segment's first window (start-up and warm-up).
"""

from __future__ import annotations

import numpy as np
import polars as pl

#: a gap between two log lines this much longer than their step time is named as untimed
UNTIMED_MIN_S = 5.0


def run_health(windows: pl.DataFrame, rated: pl.DataFrame | None = None, world_size: int | None = None) -> dict:
    """The ``health`` block of summary.json (see the module docstring).

    ``windows``: `build_windows` of the per-(segment, iteration) log table, so iterations a restart
    redid are still there; ``rated``: the analysis windows (``reliable``, ``lm_tokens`` sums) for
    tokens/s/GPU.
    """
    # only the columns used here (the windows of a long run are wide; every filter / sort below copies)
    used = ["segment", "iteration", "window_start", "window_seconds", "window_iterations", "elapsed_s",
            "step_time_excluded", "first_in_segment", "timestamp"]
    w = windows.select([c for c in used if c in windows.columns]).sort("segment", "iteration")
    usable = pl.col("step_time_excluded").is_null() & pl.col("window_seconds").is_finite()
    has_ts = "timestamp" in w.columns and w["timestamp"].null_count() < w.height and w.height > 0
    w = w.with_columns(_replayed_iterations(w).alias("_replayed"))
    w = w.with_columns((pl.col("_replayed") * pl.col("elapsed_s")).fill_nan(0.0).alias("_replayed_s"))
    timed = w.filter(usable)
    median = float(timed["elapsed_s"].median()) if timed.height else None
    out: dict = {"timestamps": bool(has_ts), "segments": int(w["segment"].n_unique()) if w.height else 0,
                 "step_time_median_s": median}
    trained_s = float(timed["window_seconds"].sum()) if timed.height else 0.0
    replayed_s = float(timed["_replayed_s"].sum()) if timed.height else 0.0
    stall = w.filter(pl.col("step_time_excluded") == "outlier")
    stall_s = float((stall["window_seconds"] - median * stall["window_iterations"]).clip(lower_bound=0).sum()) \
        if median and stall.height else 0.0
    out.update(trained_s=trained_s, replayed_s=replayed_s, replayed_iterations=int(w["_replayed"].sum() or 0),
               stall_s=stall_s, productive_s=trained_s - replayed_s)
    events: list[dict] = []
    origin = None
    if has_ts:
        events, wall, origin, spans = _timeline(w, median, events)
        out["segment_spans"] = spans
        out.update(wall_clock_s=wall, restart_downtime_s=sum(e["seconds"] for e in events if e["kind"] == "restart"),
                   untimed_s=sum(e["seconds"] for e in events if e["kind"] == "untimed"),
                   goodput=(trained_s - replayed_s) / wall if wall > 0 else None)
    else:
        out.update(wall_clock_s=None, restart_downtime_s=None, untimed_s=None, goodput=None,
                   note="the log prints no timestamps: wall-clock time, downtime and goodput are unknown")
    events += _replay_events(w, origin) + _stall_events(w, median, origin)
    out["lost"] = sorted(events, key=lambda e: -e["seconds"])[:50]
    out["tokens_per_s_per_gpu"] = _tokens_rate(rated if rated is not None else windows, world_size)
    out["step_time_by_segment"] = _percentiles(w.filter(usable & ~pl.col("first_in_segment")))
    return out


def _replayed_iterations(w: pl.DataFrame) -> pl.Expr:
    """Iterations of each window redone later: beyond the lowest restart point of any later segment."""
    starts = w.group_by("segment").agg(pl.col("window_start").min().alias("_s")).sort("segment", descending=True)
    later_min = starts.with_columns(pl.col("_s").cum_min().shift(1).alias("_restart")).select("segment", "_restart")
    restart = w.select("segment").join(later_min, on="segment", how="left", maintain_order="left")["_restart"]
    lo = pl.max_horizontal(pl.col("window_start"), pl.lit(restart))
    return pl.when(pl.lit(restart).is_not_null()).then((pl.col("iteration") - lo).clip(lower_bound=0)).otherwise(0)


def _timeline(w: pl.DataFrame, median: float | None, events: list[dict]) -> tuple[list[dict], float]:
    t = w.filter(pl.col("timestamp").is_not_null()).sort("timestamp")
    seconds = t["window_seconds"].fill_nan(None).fill_null(0.0).clip(lower_bound=0).to_numpy()
    end = (t["timestamp"] - t["timestamp"].min()).dt.total_microseconds().to_numpy() / 1e6
    start = end - seconds
    origin = float(start.min()) if len(start) else 0.0
    seg = t["segment"].to_numpy()
    its = t["iteration"].to_numpy()
    gap = start[1:] - end[:-1]
    boundary = seg[1:] != seg[:-1]
    flagged = np.flatnonzero((boundary & (gap > 0)) | (~boundary & (gap > UNTIMED_MIN_S))) + 1
    for i in flagged:  # only the flagged line pairs reach Python: a handful per restart or checkpoint
        if boundary[i - 1]:
            events.append(_event("restart", end[i - 1] - origin, gap[i - 1],
                                 f"restart after iteration {its[i - 1]} (segment {seg[i - 1]} -> {seg[i]})"))
        else:
            events.append(_event("untimed", end[i - 1] - origin, gap[i - 1],
                                 f"untimed between iterations {its[i - 1]} and {its[i]} (checkpoint save, "
                                 "validation or a stall outside the step timer)"))
    wall = float(end.max() - origin) if len(end) else 0.0
    spans = (pl.DataFrame({"segment": seg, "start": start - origin, "end": end - origin}).group_by("segment")
             .agg((pl.col("start").min() / 60).alias("start_min"), (pl.col("end").max() / 60).alias("end_min"))
             .sort("segment").to_dicts())
    return events, wall, (t["timestamp"].min(), origin), spans


def _minutes(w: pl.DataFrame, origin) -> pl.Expr:
    """Minutes from the timeline origin to the END of each window (null without timestamps)."""
    if origin is None:
        return pl.lit(None, pl.Float64)
    t0, offset = origin
    return ((pl.col("timestamp") - t0).dt.total_microseconds() / 1e6 - offset) / 60


def _replay_events(w: pl.DataFrame, origin) -> list[dict]:
    lost = w.filter(pl.col("_replayed") > 0).group_by("segment").agg(
        pl.col("_replayed").sum(), pl.col("_replayed_s").sum(), pl.col("iteration").max(),
        _minutes(w, origin).max().alias("_end_min"))
    return [_event("replayed", None if r["_end_min"] is None else 60 * r["_end_min"] - r["_replayed_s"],
                   float(r["_replayed_s"]), f"{int(r['_replayed'])} iterations of segment {r['segment']} up to "
                   f"iteration {r['iteration']} redone after the restart") for r in lost.iter_rows(named=True)]


def _stall_events(w: pl.DataFrame, median: float | None, origin) -> list[dict]:
    if not median:
        return []
    out = w.filter(pl.col("step_time_excluded") == "outlier").with_columns(_minutes(w, origin).alias("_end_min"))
    events = []
    for r in out.iter_rows(named=True):  # outliers are few by definition
        excess = max(float(r["window_seconds"]) - median * r["window_iterations"], 0.0)
        at = None if r["_end_min"] is None else 60 * r["_end_min"] - float(r["window_seconds"])
        events.append(_event("stall", at, excess, f"window ending at iteration {r['iteration']}: "
                             f"{r['elapsed_s']:.3g} s/iteration vs median {median:.3g} s"))
    return events


def _event(kind: str, at_s: float | None, seconds: float, what: str) -> dict:
    return {"kind": kind, "at_min": None if at_s is None else float(at_s) / 60, "seconds": float(seconds),
            "minutes": float(seconds) / 60, "what": what}


def _tokens_rate(windows: pl.DataFrame, world_size: int | None) -> float | None:
    if not world_size or "lm_tokens" not in windows.columns or "reliable" not in windows.columns:
        return None
    good = windows.select("reliable", "window_seconds", "lm_tokens").filter(pl.col("reliable"))
    seconds = float(good["window_seconds"].sum()) if good.height else 0.0
    return float(good["lm_tokens"].sum()) / (seconds * world_size) if seconds > 0 else None


def _percentiles(w: pl.DataFrame) -> list[dict]:
    rows = []
    for (segment,), part in w.group_by(["segment"], maintain_order=True):
        values = part["elapsed_s"].to_numpy()
        p50, p90, p99 = np.percentile(values, [50, 90, 99]) if len(values) else (None,) * 3
        rows.append({"segment": int(segment), "windows": int(len(values)),
                     "iterations": [int(part["iteration"].min()), int(part["iteration"].max())],
                     "p50_s": _f(p50), "p90_s": _f(p90), "p99_s": _f(p99)})
    return rows


def _f(x) -> float | None:
    return None if x is None else float(x)
