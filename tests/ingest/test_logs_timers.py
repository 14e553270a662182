"""Per-rank timing lines (vlm_perf.ingest.logs.timers) on fixtures shaped like public Megatron / NVRx logs."""

from pathlib import Path

import polars as pl
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from vlm_perf.ingest.logs.timers import extract_rank_timing, read_rank_timing

FIX = Path(__file__).parent / "fixtures" / "timers"


def test_megatron_timer_blocks_attach_to_the_iteration_above():
    t = read_rank_timing([FIX / "megatron_timers.log"])
    timers = t.timers
    assert t.counts["timer_lines"] == 10 and t.counts["timer_lines_before_training"] == 2
    fb = timers.filter(pl.col("timer") == "forward-backward").sort("iteration")
    assert fb.select("iteration", "min_ms", "max_ms").rows() == [(10, 2210.40, 2283.81), (20, 2250.0, 2260.0)]
    setup = timers.filter(pl.col("iteration").is_null())["timer"].to_list()
    assert setup == ["model-and-optimizer-setup", "train/valid/test-data-iterators-setup"]
    # max-only block: no min; the inline checkpoint timer on the save line
    row = timers.filter(pl.col("timer") == "batch-generator").row(0, named=True)
    assert row["min_ms"] is None and row["max_ms"] == 12.5 and row["iteration"] == 20
    row = timers.filter(pl.col("timer") == "save-checkpoint").row(0, named=True)
    assert (row["min_ms"], row["max_ms"], row["iteration"]) == (24895.07, 24895.13, 20)
    # the arguments block ("name ..... value", no colon) is not a timer
    assert "world_size" not in timers["timer"].to_list()


def test_straggler_detector_and_nvrx_reports():
    t = read_rank_timing([FIX / "megatron_timers.log"])
    rtt = t.detector.filter(pl.col("metric") == "Rtt").sort("iteration")
    assert rtt.select("iteration", "min_value", "min_rank", "max_value", "max_rank", "unit").rows() == [
        (10, 2210.40, 3, 2283.81, 5, "ms"), (20, 2250.0, 1, 2260.0, 5, "ms")]
    assert set(t.detector["metric"]) >= {"Rtt", "Pwr", "Tmp", "Utl", "Clk", "DRtt", "Etpt"}
    nv = t.nvrx
    assert nv.filter(pl.col("group") == "worst").select("kind", "rank", "score").rows() == [
        ("relative", 5, 0.64), ("relative", 13, 0.94), ("individual", 5, 0.90)]


def test_rank_prefixed_iteration_lines():
    t = read_rank_timing([FIX / "rank_prefixed.log"])
    s = t.rank_steps.filter(pl.col("iteration") == 5).sort("rank")
    assert s.select("rank", "elapsed_ms").rows() == [(0, 1000.0), (1, 1010.0), (2, 1200.0), (3, 1005.0)]
    assert set(s["rank_kind"]) == {"global"}


def test_gzip_log(tmp_path):
    import gzip

    data = (FIX / "megatron_timers.log").read_bytes()
    (tmp_path / "train.log.gz").write_bytes(gzip.compress(data))
    assert read_rank_timing([tmp_path / "train.log.gz"]).counts == read_rank_timing([FIX / "megatron_timers.log"]).counts


NOISE = st.text(alphabet=st.characters(blacklist_categories=("Cs",), blacklist_characters="\n\r"), max_size=60)


@settings(derandomize=True, deadline=None, max_examples=60)
@given(st.lists(st.one_of(NOISE.map(lambda s: ("noise", s)),
                          st.tuples(st.sampled_from(["forward-backward", "optimizer", "all-grads-sync"]),
                                    st.floats(0, 1e5), st.floats(0, 1e5)).map(lambda x: ("timer", x))),
                max_size=30))
def test_fuzz_only_the_timer_lines_inside_blocks_are_read(items):
    lines, expected = [" [2025-01-01] iteration       10/     100 | elapsed time per iteration (ms): 1.0 |",
                       "(min, max) time across ranks (ms):"], []
    for kind, value in items:
        if kind == "noise":
            if "time across ranks" in value or ".." in value or "iteration" in value:
                continue  # would legitimately change the block state
            lines.append(value)
        else:
            name, lo, hi = value
            lines.append(f"    {(name + ' ').ljust(48, '.')}: ({lo:.2f}, {hi:.2f})")
            expected.append((name, round(lo, 2), round(hi, 2)))
    frame = pl.DataFrame({"file": "f", "line": list(range(1, len(lines) + 1)), "text": lines})
    got = extract_rank_timing(frame).timers
    assert [(n, pytest.approx(a), pytest.approx(b)) for n, a, b in got.select("timer", "min_ms", "max_ms").rows()] \
        == expected
    assert got["iteration"].to_list() == [10] * len(expected)
