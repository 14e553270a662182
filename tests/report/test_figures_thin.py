"""Long runs: line figures drawn from means of consecutive windows, never across a gap; numbers unchanged."""

import numpy as np
import polars as pl

from vlm_perf.report import figures
from vlm_perf.report.figures import thin_windows


def test_short_runs_are_drawn_unchanged():
    w = pl.DataFrame({"iteration": [2, 4], "window_start": [0, 2], "v": [1.0, 2.0]})
    same, k = thin_windows(w, ["v"], max_points=2)
    assert k == 1 and same.equals(w)


def test_bins_are_means_and_never_span_a_gap():
    # windows (0,1] ... (4,5], then a gap (missing window (5,6]), then (6,7] ... (8,9]
    ends = [1, 2, 3, 4, 5, 7, 8, 9]
    w = pl.DataFrame({"iteration": ends, "window_start": [0, 1, 2, 3, 4, 6, 7, 8],
                      "v": [1.0, 3.0, 5.0, None, 9.0, 2.0, float("nan"), 4.0]})
    got, k = thin_windows(w, ["v"], max_points=3)
    assert k == 3  # ceil(8 / 3)
    # run 1: bins {1,2,3} and {4,5}; run 2: bin {7,8,9}; null and NaN left out of the means
    assert got["iteration"].to_list() == [3.0, 5.0, 9.0]
    assert got["window_start"].to_list() == [0.0, 3.0, 6.0]
    assert got["v"].to_list() == [(1 + 3 + 5) / 3, 9.0, (2 + 4) / 2]
    # the drawn line still breaks at the gap (start 6 != previous end 5)
    d = figures._with_breaks(got, ["v"])
    assert np.isnan(d["x"]).sum() == 1


def test_thinned_figures_keep_the_report_numbers(tmp_path, monkeypatch):
    import json

    from vlm_perf.cli import main as cli

    sample = figures.Path(__file__).resolve().parents[2] / "sample_logs" / "qwen3-vl-30b-a3b-sft"

    def report(out):
        try:
            cli(["report", str(sample), "-o", str(out)])
        except SystemExit as exc:
            assert not exc.code
        return json.loads((out / "summary.json").read_text())

    full = report(tmp_path / "full")
    monkeypatch.setattr(figures, "MAX_LINE_POINTS", 3)
    monkeypatch.setattr(figures, "MAX_SCATTER_POINTS", 3)
    thinned = report(tmp_path / "thin")
    assert full == thinned
    assert (tmp_path / "thin" / "tflops.png").stat().st_size > 0


def test_thinning_is_said_on_the_figure(monkeypatch, tmp_path):
    drawn = []
    monkeypatch.setattr(figures, "MAX_LINE_POINTS", 2)
    monkeypatch.setattr(figures, "_note", lambda fig, text: drawn.append(text))
    from vlm_perf.pipeline import load_run

    sample = figures.Path(__file__).resolve().parents[2] / "sample_logs" / "qwen3-vl-30b-a3b-sft"
    run = load_run(sample).analysis
    figures.tflops_over_time(run, tmp_path / "t.png")
    assert any("drawn as means of" in t for t in drawn), drawn
