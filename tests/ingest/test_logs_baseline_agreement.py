"""The vectorised Megatron path agrees with a plain per-line regex loop (property test)."""

from __future__ import annotations

import math
import tempfile
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from vlm_perf.ingest.logs import parse_logs
from vlm_perf.ingest.logs.baseline import parse_file

NOISE = [
    "time (ms) | forward-compute: 812.34 | backward-compute: 1620.11",
    "[Rank 0] (after 10 iterations) memory (MB) | allocated: 100.0 | max allocated: 200.0",
    "  warnings.warn(",
    "",
    "saving checkpoint at iteration      10 to /ckpt",
]

floats = st.floats(min_value=1e-8, max_value=1e6, allow_nan=False, allow_infinity=False)


@st.composite
def megatron_line(draw, iteration: int) -> str:
    parts = []
    if draw(st.booleans()):
        parts.append(f" [2024-05-01 12:{iteration % 60:02d}:{draw(st.integers(0, 59)):02d}]")
    parts.append(f" iteration {iteration:8d}/{draw(st.integers(iteration, 10**7)):8d} |")
    parts.append(f" consumed samples: {draw(st.integers(0, 10**9)):12d} |")
    parts.append(f" elapsed time per iteration (ms): {draw(floats):.1f} |")
    if draw(st.booleans()):
        parts.append(f" throughput per GPU (TFLOP/s/GPU): {draw(floats):.1f} |")
    if draw(st.booleans()):
        parts.append(f" learning rate: {draw(floats):.6E} |")
    parts.append(f" global batch size: {draw(st.integers(1, 99999)):5d} |")
    if draw(st.booleans()):  # NaN drops the loss key
        parts.append(f" lm loss: {draw(floats):.6E} |")
    parts.append(f" loss scale: {draw(floats):.1f} |")
    grad = draw(st.one_of(st.just("nan"), floats.map(lambda v: f"{v:.3f}"), st.none()))
    if grad is not None:
        parts.append(f" grad norm: {grad} |")
    parts.append(f" number of skipped iterations: {draw(st.integers(0, 999)):3d} |")
    parts.append(f" number of nan iterations: {draw(st.integers(0, 999)):3d} |")
    return "".join(parts)


@st.composite
def log_text(draw) -> str:
    n = draw(st.integers(1, 25))
    lines = []
    for i in range(1, n + 1):
        lines.append(draw(megatron_line(i * 10)))
        lines.extend(draw(st.lists(st.sampled_from(NOISE), max_size=2)))
    return "\n".join(lines) + "\n"


def _same(a, b) -> bool:
    if a is None or b is None:
        return a is None and b is None
    if isinstance(a, float) and math.isnan(a):
        return isinstance(b, float) and math.isnan(b)
    return math.isclose(float(a), float(b), rel_tol=1e-12, abs_tol=0.0)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(log_text())
def test_vectorised_matches_per_line_baseline(text):
    with tempfile.TemporaryDirectory() as d:
        p = Path(d) / "gen.log"
        p.write_text(text)
        expected = parse_file(p)
        raw = parse_logs([p]).raw.sort("line")
    assert raw.height == len(expected)
    fields = ["iteration", "consumed_samples", "elapsed_s", "tflops_per_gpu_logged", "lr", "global_batch_size",
              "loss", "loss_scale", "grad_norm", "skipped_iterations", "nan_iterations", "train_iters"]
    for row, exp in zip(raw.iter_rows(named=True), expected):
        for f in fields:
            assert _same(row.get(f), exp.get(f)), (f, row.get(f), exp.get(f))
        assert (row["timestamp"] is None) == (exp["timestamp"] is None)


def test_large_mixed_log_matches_baseline(tmp_path):
    """> PROBE_ROWS lines with layouts changing mid-file (fractional timestamps, dropped loss,
    throughput appearing late, a prefix) so the probe/redo machinery is exercised."""
    import random

    rng = random.Random(7)
    lines = []
    for i in range(1, 9001):
        ts = f" [2025-01-01 00:{i // 60 % 60:02d}:{i % 60:02d}{'.123456' if i > 7000 else ''}]"
        loss = "" if i % 97 == 0 else f" lm loss: {rng.random() * 5:.6E} |"
        thr = f" throughput per GPU (TFLOP/s/GPU): {rng.random() * 500:.1f} |" if i > 6000 else ""
        pre = "[rank0]:" if i > 8500 else ""
        lines.append(f"{pre}{ts} iteration {i:8d}/    9000 | consumed samples: {i * 16:12d} |"
                     f" elapsed time per iteration (ms): {rng.random() * 3000:.1f} |{thr}"
                     f" learning rate: {rng.random() * 1e-3:.6E} | global batch size:    16 |{loss}"
                     f" loss scale: 1.0 | grad norm: {rng.random():.3f} | number of skipped iterations:   0 |"
                     f" number of nan iterations:   0 |")
        if i % 3 == 0:
            lines.append(NOISE[i % len(NOISE)])
    p = tmp_path / "big.log"
    p.write_text("\n".join(lines) + "\n")
    expected = parse_file(p)
    raw = parse_logs([p]).raw.sort("line")
    assert raw.height == len(expected) == 9000
    for row, exp in zip(raw.iter_rows(named=True), expected):
        for f in ("iteration", "consumed_samples", "elapsed_s", "tflops_per_gpu_logged", "lr", "loss", "grad_norm"):
            assert _same(row.get(f), exp.get(f)), (row["iteration"], f, row.get(f), exp.get(f))
    last = raw.row(-1, named=True)
    assert last["rank_label"] == "rank0" and last["timestamp"].microsecond == 123456
