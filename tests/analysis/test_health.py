"""Run health against hand arithmetic on a small hand-written log with a checkpoint gap, a stall and a restart."""

from datetime import datetime, timedelta

import polars as pl
import pytest

from vlm_perf.analysis.health import run_health
from vlm_perf.analysis.windows import build_windows

T0 = datetime(2025, 1, 1, 12, 0, 0)


def _log():
    """log_interval 10, 1.0 s/iteration. Segment 0: iterations 10..60; 60 s untimed between 30 and 40
    (a checkpoint save), the window ending at 50 is a 20 s/iteration stall. Crash after 60; the job
    restarts from the checkpoint at 40 after 300 s of downtime and runs 50..80 (so 41..60 are redone)."""
    rows, t = [], T0
    for it, sec in ((10, 1.0), (20, 1.0), (30, 1.0), (40, 1.0), (50, 20.0), (60, 1.0)):
        t += timedelta(seconds=10 * sec + (60 if it == 40 else 0))
        rows.append((0, it, t, sec))
    t += timedelta(seconds=300)
    for it in (50, 60, 70, 80):
        t += timedelta(seconds=10)
        rows.append((1, it, t, 1.0))
    return pl.DataFrame(rows, schema={"segment": pl.Int64, "iteration": pl.Int64, "timestamp": pl.Datetime("us"),
                                      "elapsed_s": pl.Float64}, orient="row")


def test_health_by_hand():
    h = run_health(build_windows(_log(), 10))
    assert h["timestamps"] and h["segments"] == 2
    # wall clock: the first window starts at T0; segment 0 ends at 5 windows x 10 s + 60 s untimed + 200 s
    # stalled window = 310 s, then 300 s down and 4 windows x 10 s
    assert h["wall_clock_s"] == pytest.approx(310 + 300 + 40)
    assert h["restart_downtime_s"] == pytest.approx(300)
    assert h["untimed_s"] == pytest.approx(60)
    # trained: usable windows only (the 200 s stall is an outlier, > 5x the 1 s median): 9 windows x 10 s
    assert h["trained_s"] == pytest.approx(90)
    # iterations 41..60 of segment 0 were redone; 41..50 are in the stalled window (counted as stall, not
    # trained), so the replayed training time is 51..60 at 1 s
    assert h["replayed_iterations"] == 20 and h["replayed_s"] == pytest.approx(10)
    assert h["stall_s"] == pytest.approx(200 - 10)
    assert h["productive_s"] == pytest.approx(90 - h["replayed_s"])
    assert h["goodput"] == pytest.approx(h["productive_s"] / h["wall_clock_s"])
    kinds = {e["kind"] for e in h["lost"]}
    assert kinds == {"restart", "untimed", "replayed", "stall"}
    restart = next(e for e in h["lost"] if e["kind"] == "restart")
    assert restart["at_min"] == pytest.approx(310 / 60) and restart["seconds"] == pytest.approx(300)
    assert "after iteration 60" in restart["what"]
    seg0 = h["step_time_by_segment"][0]
    assert seg0["p50_s"] == pytest.approx(1.0) and seg0["windows"] == 4  # 20..60 minus the stall


def test_no_timestamps_says_so():
    h = run_health(build_windows(_log().drop("timestamp"), 10))
    assert h["wall_clock_s"] is None and h["goodput"] is None and "no timestamps" in h["note"]
    assert h["restart_downtime_s"] is None and h["replayed_iterations"] == 20
