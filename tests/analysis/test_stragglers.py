"""Stragglers summary and its correlation with the DP load balance (hand arithmetic)."""

from pathlib import Path

import polars as pl
import pytest

from vlm_perf.analysis.stragglers import dp_rank_of, straggler_summary, window_rank_flops
from vlm_perf.ingest.logs.timers import read_rank_timing

FIX = Path(__file__).parents[1] / "ingest" / "fixtures" / "timers"


def _ranks(heavy_by_window):
    """4 DP ranks, iterations 1..20, every rank 1.0 FLOP per iteration except the window's heavy rank (2.0)."""
    rows = []
    for it in range(1, 21):
        heavy = heavy_by_window[0 if it <= 10 else 1]
        rows += [(it, r, 2.0 if r == heavy else 1.0) for r in range(4)]
    return pl.DataFrame(rows, schema=["iteration", "dp_rank", "flops"], orient="row")


def test_dp_rank_mapping_megatron_default_order():
    ranks = pl.DataFrame({"r": list(range(16))})
    got = ranks.select(dp_rank_of(pl.col("r"), tp=2, cp=1, dp=4))["r"].to_list()
    assert got == [0, 0, 1, 1, 2, 2, 3, 3] * 2  # tp fastest, then dp; the second half is pipeline stage 1


def test_window_sums():
    w = window_rank_flops(_ranks((2, 0)), [10, 20], interval=10)
    assert w.filter(pl.col("report_iteration") == 10).sort("dp_rank")["flops"].to_list() == [10, 10, 20, 10]
    assert w.filter(pl.col("report_iteration") == 20).sort("dp_rank")["flops"].to_list() == [20, 10, 10, 10]


@pytest.mark.parametrize("heavy,expected", [((2, 2), 1.0), ((2, 0), 0.5), ((1, 3), 0.0)])
def test_slow_rank_is_heaviest(heavy, expected):
    # the fixture's detector names global rank 5 as slowest at iterations 10 and 20; tp 2 -> dp rank 2
    t = read_rank_timing([FIX / "megatron_timers.log"])
    s = straggler_summary(t, ranks=_ranks(heavy), tp=2, cp=1, dp=4, interval=10)
    c = s["vision_correlation"]
    assert c["straggler_detector"] == {"reports": 2, "slow_is_heaviest_fraction": expected}
    assert c["chance"] == 0.25
    # FLOPs predict a spread of (20 - 10) / 20 in each window; forward-compute observed (698.07 - 600.10) / 698.07
    # and (660 - 650) / 660
    fc = next(e for e in c["timer_vs_flops_spread"] if e["timer"] == "forward-compute")
    assert fc["predicted_from_flops_median"] == pytest.approx(0.5)
    assert fc["observed_median"] == pytest.approx(((698.07 - 600.10) / 698.07 + 10 / 660) / 2)


def test_summary_blocks():
    t = read_rank_timing([FIX / "megatron_timers.log"])
    s = straggler_summary(t)
    fb = next(e for e in s["timers"]["timers"] if e["timer"] == "forward-backward")
    assert fb["iterations"] == 2 and fb["spread_ms_median"] == pytest.approx(((2283.81 - 2210.40) + 10) / 2)
    assert fb["worst_iteration"] == 10
    assert s["detector"]["slowest_ranks_rtt"][0] == {"rank": 5, "reports": 2, "share": 1.0}
    assert s["nvrx"]["stragglers"] == [5]
    assert "before the first iteration" in s["notes"][0]
    r = straggler_summary(read_rank_timing([FIX / "rank_prefixed.log"]))["rank_steps"]
    assert r["slowest_rank"] == 2 and r["ranks"] == 4
    # medians per rank: 1000.5, 1006, 1190, 1004 -> median of those (1004 + 1006) / 2
    assert r["slowest_over_median_rank"] == pytest.approx(1190 / 1005)


def test_rank_steps_correlate_with_balance():
    t = read_rank_timing([FIX / "rank_prefixed.log"])  # global rank 2 is slowest at iterations 5 and 10
    rows = [(it, r, 2.0 if r == 2 else 1.0) for it in range(1, 11) for r in range(4)]
    ranks = pl.DataFrame(rows, schema=["iteration", "dp_rank", "flops"], orient="row")
    c = straggler_summary(t, ranks=ranks, tp=1, cp=1, dp=4, interval=5)["vision_correlation"]
    assert c["rank_steps"] == {"reports": 2, "slow_is_heaviest_fraction": 1.0}
