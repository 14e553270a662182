"""The vectorised generic lane (generic_lane.py) gives exactly what the per-line generic extractor
gives: same raw table (values bit for bit, columns, order) and diagnostics, lane on or off."""

from __future__ import annotations

from pathlib import Path

import pytest

from vlm_perf.ingest.logs import generic_lane, parse_logs

PUBLIC = Path(__file__).resolve().parent / "fixtures" / "public"

TRICKY = "\n".join([
    "2024/05/07 12:12:19 - mmengine - INFO - Iter(train) [  10/2046]  lr: 1.0704e-04  eta: 0:56:54  time: 1.9265  "
    "data_time: 0.0600  memory: 15266  loss: 0.7775  grad_norm: nan",
    "2024/05/07 12:12:29 - mmengine - INFO - Iter(train) [  20/2046]  lr: 1.0604e-04  eta: 0:56:44  time: 1.8265  "
    "data_time: 0.0500  memory: 15266  loss: 0.7675  grad_norm: nan",
    "[rank1]: step: 3 | loss: -0.0 | step_time_ms: 5.2K | tokens_per_sec_per_gpu: 1,234 | mfu: 41.5% | foo: 7",
    "[rank1]: step: 4 | loss: 0.25 | step_time_ms: 5.1K | tokens_per_sec_per_gpu: 1,230 | mfu: 41.2% | foo: 8",
    "[rank1]: step: 5 | loss: 0.24 | step_time_ms: 5.1K | tokens_per_sec_per_gpu: 12,345 | mfu: 41.2% | foo: 8",
    "global_step=6, loss=1.5, dt=523.45ms, tok/sec=1,001,234",
    "global_step=7, loss=1.4, dt=520ms, tok/sec=1,001,235",
    "iter 8: loss 3.2202, time 893.76ms, mfu 16.68%",
    "step 00010/05000 (0.20%) | loss: 6.912345 | grad_norm: 0.51234 | lrm: 1.00 | dt: 523.45ms | tok/sec: 1,001,234 | "
    "mfu: 45.23 | total time: 0.10m",
    "step 9: val/loss: 2.5, val/acc: 0.5",
]) + "\n"


@pytest.mark.parametrize("name", sorted(p.name for p in PUBLIC.glob("*.log")) + ["tricky"])
def test_lane_equals_per_line_path(tmp_path, name, monkeypatch):
    if name == "tricky":
        path = tmp_path / "tricky.log"
        path.write_text(TRICKY * 3, encoding="utf-8")
    else:
        path = PUBLIC / name
    monkeypatch.setattr(generic_lane, "ENABLED", True)
    a = parse_logs([path])
    monkeypatch.setattr(generic_lane, "ENABLED", False)
    b = parse_logs([path])
    assert a.raw.columns == b.raw.columns
    assert a.raw.equals(b.raw)
    assert a.diagnostics.to_dict() == b.diagnostics.to_dict()


def test_lane_takes_the_common_shapes(tmp_path):
    path = tmp_path / "t.log"
    path.write_text(TRICKY * 3, encoding="utf-8")
    lane = generic_lane.Lane()
    import polars as pl

    lines = (TRICKY * 3).splitlines()
    taken = lane.take(pl.DataFrame({"line": list(range(1, len(lines) + 1)), "text": lines}))
    assert int(taken.sum()) >= len(lines) - 6  # all but shapes it does not cover / cannot verify
    assert {t.framework for t in lane.templates.values() if t is not None} >= {"generic", "mmengine"}
