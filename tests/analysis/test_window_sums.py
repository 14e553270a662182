"""`window_sums` (per-column running sums read at the window bounds) against the join-based reference.

The reference (`window_sums_reference`) is the formulation the report used before; the two must
agree bit for bit (`frame.equals`), on hand-made windows, on fuzzed ones (gaps, restarts, missing
iterations, nulls, integer and float columns) and on a whole estimate-mode report.
"""

import json

import numpy as np
import polars as pl
from hypothesis import given, settings, strategies as st

from vlm_perf.analysis.windows import build_windows, window_sums, window_sums_reference


def test_hand_arithmetic():
    windows = pl.DataFrame({"segment": [0, 0, 1], "iteration": [2, 4, 7], "elapsed_s": [1.0, 1.0, 1.0]})
    windows = build_windows(windows, 2)
    per = pl.DataFrame({"iteration": [1, 2, 3, 6, 7, 9], "x": [1.5, 2.0, None, 4.0, 8.0, 16.0],
                        "n": [1, 1, 1, 1, 1, 1]})
    got = window_sums(windows, per, ["x", "n"])
    # windows (0, 2], (2, 4], (5, 7]: x = 1.5 + 2, null (0) + nothing at 4, 4 + 8
    assert got["x"].to_list() == [3.5, 0.0, 12.0]
    assert got["n"].to_list() == [2, 1, 2] and got["n"].dtype == pl.Int64
    assert got["covered_iterations"].to_list() == [2, 1, 2]
    assert got.equals(window_sums_reference(windows, per, ["x", "n"]))


@st.composite
def runs(draw):
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    n_lines = draw(st.integers(1, 60))
    interval = draw(st.integers(1, 5))
    segments = np.sort(rng.integers(0, 3, n_lines))
    its = np.cumsum(rng.integers(1, 2 * interval + 1, n_lines))
    # a restart may redo iterations: segment k starts a little before where k-1 ended
    its = its - segments * rng.integers(0, interval + 1)
    log = (pl.DataFrame({"segment": segments, "iteration": its, "elapsed_s": rng.uniform(0.5, 2.0, n_lines)})
           .unique(["segment", "iteration"]))
    top = int(its.max()) + interval
    kept = np.flatnonzero(rng.random(top) < draw(st.floats(0.3, 1.0))) + 1
    x = rng.uniform(0, 1e17, kept.size) * rng.choice([1.0, 1e-9], kept.size)
    x[rng.random(kept.size) < 0.1] = np.nan
    per = pl.DataFrame({"iteration": kept, "x": x, "k": rng.integers(-5, 10**12, kept.size)}).with_columns(
        pl.when(pl.col("x").is_nan()).then(None).otherwise(pl.col("x")).alias("x"),
        pl.lit(3.3e15).alias("const"))
    return build_windows(log, interval), per


@settings(derandomize=True, deadline=None, max_examples=150)
@given(runs())
def test_fuzzed_runs_match_the_reference_bit_for_bit(case):
    windows, per = case
    cols = ["x", "k", "const"]
    assert window_sums(windows, per, cols).equals(window_sums_reference(windows, per, cols))


def test_long_constant_run_matches_the_reference():
    """Estimate mode: one constant value per iteration over many iterations (running sums round)."""
    n = 200_000
    log = pl.DataFrame({"segment": 0, "iteration": np.arange(10, n + 1, 10), "elapsed_s": 1.0})
    per = pl.DataFrame({"iteration": np.arange(1, n + 1)}).with_columns(
        pl.lit(1.234567891e17).alias("a"), pl.lit(7.0e-3).alias("b"))
    windows = build_windows(log, 10)
    assert window_sums(windows, per, ["a", "b"]).equals(window_sums_reference(windows, per, ["a", "b"]))


def test_estimate_report_summary_identical_to_the_reference_path(tmp_path, monkeypatch):
    """A whole estimate-mode report: summary.json from the optimised path equals the reference one's."""
    import vlm_perf.analysis.hfu as hfu
    import vlm_perf.analysis.run as run_mod
    from vlm_perf.cli import main as cli

    run = tmp_path / "run"
    run.mkdir()
    lines = [f"[2026-01-01 00:{i // 60:02d}:{i % 60:02d}] iteration {i:8d}/ 3000 | consumed samples: {i * 64} | "
             f"elapsed time per iteration (ms): {900 + (i * 37) % 200:.1f} | learning rate: 1.0E-05 | "
             f"global batch size:    64 | lm loss: 2.0E+00 | loss scale: 1.0 | grad norm: 1.000 |"
             for i in range(1, 3001)]
    (run / "train.log").write_text("\n".join(lines) + "\n")
    (run / "run.yaml").write_text("# SYNTHETIC: tests/analysis/test_window_sums.py\nmodel: qwen2.5-vl-7b\n"
                                  "num_gpus: 16\ngpu: H100-SXM\nseq_length: 4096\nglobal_batch_size: 64\n"
                                  "image_grid: [1, 28, 28]\n")

    def report(out):
        try:
            cli(["report", str(run), "-o", str(out)])
        except SystemExit as exc:
            assert not exc.code
        return json.loads((out / "summary.json").read_text())

    fast = report(tmp_path / "fast")
    monkeypatch.setattr(run_mod, "window_sums", window_sums_reference)
    monkeypatch.setattr(hfu, "window_sums", window_sums_reference)
    slow = report(tmp_path / "slow")
    assert fast["estimated"] and fast == slow
