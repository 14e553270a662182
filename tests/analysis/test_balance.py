"""DP load balance: the report's `balance` block against hand arithmetic, and LPT against a reference.

The end-to-end run is hand-built (not synthetic-generator output): 4 DP ranks x 2 microbatches per
iteration; every microbatch has the same packed text (so the same LM FLOPs ``a``), and "image"
microbatches add one 32x32-patch image (``b = a + v``). The per-microbatch FLOPs come from the
public `compute_flops` (tested elsewhere against FlopCounterMode); the balance arithmetic below is
done by hand.
"""

from __future__ import annotations

import heapq
import itertools
import json

import numpy as np
import polars as pl
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from vlm_perf.analysis.balance import analyze_balance, balance_by_iteration, lpt_balance, reliable_iterations
from vlm_perf.arch import load_model
from vlm_perf.flops import compute_flops
from vlm_perf.stats import BatchStats
from tests.support import run_main  # the CLI entry point in-process (same exit statuses, one-line errors)

MODEL = "qwen3-vl-30b-a3b"
SEQ = [1000, 1048]
GRID = [1, 32, 32]
RANKS, ITERS, INTERVAL = 4, 20, 5


def _kind(it: int) -> int | None:
    """Rank holding both image microbatches in iteration ``it``; None: text only everywhere."""
    return None if it % 4 == 0 else it % 4


def _write_run(path):
    rows = []
    for it in range(1, ITERS + 1):
        for rank in range(RANKS):
            for mb in range(2):
                grids = [GRID] if _kind(it) == rank else []
                rows.append({"iteration": it, "microbatch": mb, "dp_rank": rank, "samples": 1,
                             "padded_tokens": sum(SEQ), "seq_lens": SEQ, "image_grid_thw": grids,
                             "video_grid_thw": []})
    (path / "metadata.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    log = [f" [2025-01-01 00:00:{i:02d}] iteration {i:8d}/{ITERS:8d} | consumed samples: {8 * i:8d} | "
           f"elapsed time per iteration (ms): 1000.0 | learning rate: 1.0E-05 | global batch size: 8 | "
           f"lm loss: 1.0E+00 |" for i in range(INTERVAL, ITERS + 1, INTERVAL)]
    (path / "train.log").write_text("\n".join(log) + "\n")
    (path / "run.yaml").write_text(f"model: {MODEL}\nnum_gpus: 4\ngpu: H100\nlog_interval: {INTERVAL}\n")


def test_report_balance_block_equals_hand_arithmetic(tmp_path):
    run, out = tmp_path / "run", tmp_path / "out"
    run.mkdir()
    _write_run(run)
    r = run_main("report", str(run), "-o", str(out))
    assert r.returncode == 0, r.stderr
    bal = json.loads((out / "summary.json").read_text())["balance"]

    spec = load_model(MODEL)
    text = compute_flops(spec, BatchStats.from_batch(seq_lens=SEQ, spec=spec))
    image = compute_flops(spec, BatchStats.from_batch(seq_lens=SEQ, image_grids=[GRID], spec=spec))
    a, b, v = text.total, image.total, image.vision
    assert a < b < 2 * a  # the LPT hand derivation below assumes it

    # the means skip the first window (iterations 1-5): iterations 6..20 count
    used = range(INTERVAL + 1, ITERS + 1)
    imaged = [i for i in used if _kind(i) is not None]  # 11 iterations: one rank holds b, b
    balanced = [i for i in used if _kind(i) is None]  # 4 iterations: a, a on every rank
    assert (len(imaged), len(balanced)) == (11, 4)
    ratio = 2 * b / ((2 * b + 6 * a) / 4)  # loads 2b, 2a, 2a, 2a
    idle = 1 - ((2 * b + 6 * a) / 4) / (2 * b)
    assert bal["dp_ranks"] == 4 and bal["iterations"] == 15
    assert bal["flops_max_over_mean_median"] == pytest.approx(ratio, rel=1e-9)  # 11 of 15 iterations
    assert bal["idle_fraction_median"] == pytest.approx(idle, rel=1e-9)
    assert bal["vision_max_over_mean_median"] == pytest.approx(2 * v / (2 * v / 4), rel=1e-9)  # = 4
    assert bal["iterations_without_vision"] == 4
    weighted = 11 * (2 * b + 6 * a) * idle / (11 * (2 * b + 6 * a) + 4 * 8 * a)  # weights: iteration FLOPs
    assert bal["idle_fraction_mean"] == pytest.approx(weighted, rel=1e-9)
    overall = 1 - (11 * (2 * b + 6 * a) / 4 + 4 * 2 * a) / (11 * 2 * b + 4 * 2 * a)
    assert bal["idle_fraction_overall"] == pytest.approx(overall, rel=1e-9)
    # heaviest rank: rank 1 holds the images in 9, 13, 17; rank 2 in 6, 10, 14, 18; rank 3 in 7, 11, 15, 19
    assert bal["imbalanced_iterations"] == 11
    assert [(r["dp_rank"], r["iterations"]) for r in bal["slowest_ranks"]] == [(2, 4), (3, 4), (1, 3)]
    assert bal["slowest_is_most_vision_fraction"] == 1.0
    # LPT on {b, b, a x 6} over 4 ranks: b | b | a a | a a, then the last two a's go to the b ranks
    lpt = bal["lpt"]
    assert lpt["flops_max_over_mean_median"] == pytest.approx((a + b) / ((2 * b + 6 * a) / 4), rel=1e-9)
    saving = 1 - (11 * (a + b) + 4 * 2 * a) / (11 * 2 * b + 4 * 2 * a)
    assert lpt["critical_flops_saving"] == pytest.approx(saving, rel=1e-9)
    # at most 2 microbatches per rank: the same b+a | b+a | a a | a a, so the same numbers here
    assert lpt["equal_counts"]["flops_max_over_mean_median"] == pytest.approx(lpt["flops_max_over_mean_median"])
    assert lpt["equal_counts"]["critical_flops_saving"] == pytest.approx(saving, rel=1e-9)
    assert (out / "balance.png").stat().st_size > 0
    assert "DP load balance" in (out / "report.md").read_text()


def test_missing_rank_is_excluded_and_said():
    ranks = pl.DataFrame({"iteration": [1, 1, 2, 2, 3], "dp_rank": [0, 1, 0, 1, 0],
                          "lm_flops": [1.0, 1.0, 1.0, 1.0, 1.0], "vision_flops": [0.0, 1.0, 0.0, 0.0, 0.0]})
    ranks = ranks.with_columns((pl.col("lm_flops") + pl.col("vision_flops")).alias("flops"))
    res = analyze_balance(ranks)
    s = res.summary
    assert s["iterations"] == 2 and s["iterations_excluded_missing_ranks"] == 1
    assert any("fewer than 2 DP ranks" in n for n in s["notes"])
    # iteration 1: loads 1, 2 -> ratio 2 / 1.5; iteration 2: balanced -> 1
    per = balance_by_iteration(ranks)
    assert per["flops_max_over_mean"].to_list()[:2] == pytest.approx([2 / 1.5, 1.0])
    assert per["slowest_rank"].to_list()[:2] == [1, None]


def test_reliable_iterations_skip_first_and_incomplete_windows():
    windows = pl.DataFrame({"segment": [0, 0, 0, 1], "iteration": [5, 10, 15, 20], "window_start": [0, 5, 10, 15],
                            "window_iterations": [5, 5, 5, 5], "covered_iterations": [5, 5, 4, 5],
                            "first_in_segment": [True, False, False, True]})
    assert reliable_iterations(windows).to_list() == [6, 7, 8, 9, 10]


def _lpt_reference(costs: list[float], ranks: int, cap: int | None = None) -> float:
    """Textbook LPT with a heap: largest job first onto the least-loaded machine (lowest index on ties);
    with ``cap``, a machine holding ``cap`` jobs takes no more."""
    heap = [(0.0, r) for r in range(ranks)]
    held = [0] * ranks
    full = []
    for c in sorted(costs, reverse=True):
        load, r = heapq.heappop(heap)
        held[r] += 1
        if cap is not None and held[r] >= cap:
            full.append(load + c)
        else:
            heapq.heappush(heap, (load + c, r))
    return max([load for load, _ in heap] + full)


def test_equal_count_cap_by_hand():
    # 2 ranks, costs 10, 1, 1, 1: free LPT puts the three 1s together (max 10); with 2 per rank the last 1
    # must join the 10 (max 11)
    out = lpt_balance(pl.DataFrame({"iteration": [1] * 4, "flops": [1.0, 10.0, 1.0, 1.0]}),
                      pl.DataFrame({"iteration": [1], "ranks": [2]})).row(0, named=True)
    assert (out["lpt_max"], out["lpt_equal_max"], out["lower_bound"]) == (10.0, 11.0, 10.0)


def _optimum(costs: list[float], ranks: int) -> float:
    best = float("inf")
    for assignment in itertools.product(range(ranks), repeat=len(costs)):
        loads = np.zeros(ranks)
        np.add.at(loads, list(assignment), costs)
        best = min(best, loads.max())
    return best


@settings(derandomize=True, deadline=None, max_examples=60)
@given(st.lists(st.tuples(st.integers(2, 4), st.lists(st.integers(1, 1000), min_size=1, max_size=7)),
                min_size=1, max_size=5))
def test_vectorised_lpt_matches_reference_and_bounds(iterations):
    rows, ranks = [], []
    for it, (n_ranks, costs) in enumerate(iterations):
        rows += [(it, float(c)) for c in costs]
        ranks.append((it, n_ranks))
    costs = pl.DataFrame(rows, schema=["iteration", "flops"], orient="row")
    per = pl.DataFrame(ranks, schema=["iteration", "ranks"], orient="row")
    out = lpt_balance(costs, per).sort("iteration")
    for it, (n_ranks, c) in enumerate(iterations):
        got = out.filter(pl.col("iteration") == it).row(0, named=True)
        assert got["lpt_max"] == pytest.approx(_lpt_reference([float(x) for x in c], n_ranks))
        cap = -(-len(c) // n_ranks)
        assert got["lpt_equal_max"] == pytest.approx(_lpt_reference([float(x) for x in c], n_ranks, cap))
        assert got["lower_bound"] <= got["lpt_equal_max"] + 1e-9
        opt = _optimum(c, n_ranks) if len(c) <= 6 else None
        assert got["lower_bound"] <= got["lpt_max"] + 1e-9
        if opt is not None:
            assert got["lower_bound"] <= opt + 1e-9 and got["lpt_max"] <= 4 / 3 * opt + 1e-9


def test_adapter_rank_sums_equal_the_iteration_reader(tmp_path):
    """The per-(iteration, dp_rank) frames sum back to what the per-iteration reader aggregates."""
    from pathlib import Path

    from vlm_perf.ingest.metadata import iteration_stats, scan_microbatches
    from vlm_perf.ingest.rank_stats import STAT_FIELDS, rank_frames

    meta = Path(__file__).parents[2] / "sample_logs" / "qwen3-vl-30b-a3b-sft" / "metadata.jsonl.gz"
    spec = load_model(MODEL)
    frames = rank_frames(scan_microbatches([meta], spec=spec))
    summed = frames.per_rank.group_by("iteration").agg(pl.col(c).sum() for c in (*STAT_FIELDS, "microbatches"))
    reader = iteration_stats([meta], spec=spec).frame
    joined = reader.join(summed.sort("iteration"), on="iteration", suffix="_ranks")
    assert joined.height == reader.height == 200 and frames.rows_without_rank == 0
    for c in (*STAT_FIELDS, "microbatches"):
        assert (joined[c] == joined[f"{c}_ranks"]).all(), c


def test_time_model_weights_vision_by_its_rate():
    from vlm_perf.analysis.balance import TimeModel

    # rank 0: LM 10, vision 0; rank 1: LM 6, vision 4 (TFLOP). Rates: LM 2, vision 1 TFLOP/s/GPU, 1 GPU/replica
    ranks = pl.DataFrame({"iteration": [1, 1], "dp_rank": [0, 1], "lm_flops": [10e12, 6e12],
                          "vision_flops": [0.0, 4e12]})
    ranks = ranks.with_columns((pl.col("lm_flops") + pl.col("vision_flops")).alias("flops"))
    row = balance_by_iteration(ranks, TimeModel(2.0, 1.0, 1.0)).row(0, named=True)
    assert row["flops_max_over_mean"] == 1.0  # equal FLOPs ...
    t0, t1 = 10 / 2, 6 / 2 + 4 / 1  # ... but 5 s vs 7 s
    assert row["time_max_over_mean"] == pytest.approx(t1 / ((t0 + t1) / 2))
    assert row["time_idle_fraction"] == pytest.approx(1 - ((t0 + t1) / 2) / t1)


def test_rows_without_dp_rank_are_counted_and_said(tmp_path):
    run, out = tmp_path / "run", tmp_path / "out"
    run.mkdir()
    _write_run(run)
    extra = [{"iteration": 12, "microbatch": 9, "samples": 1, "padded_tokens": sum(SEQ), "seq_lens": SEQ,
              "image_grid_thw": [GRID], "video_grid_thw": []}] * 3
    with open(run / "metadata.jsonl", "a") as fh:
        fh.write("".join(json.dumps(r) + "\n" for r in extra))
    r = run_main("report", str(run), "-o", str(out))
    assert r.returncode == 0, r.stderr
    bal = json.loads((out / "summary.json").read_text())["balance"]
    assert bal["rows_without_dp_rank"] == 3 and any("no dp_rank" in n for n in bal["notes"])
    assert bal["iterations"] == 15 and bal["imbalanced_iterations"] == 11  # the ranked rows are unchanged


def test_fitted_attribution_feeds_the_time_model(tmp_path):
    """The video sample's step-time attribution fits: the balance block uses its rates per GPU of a replica."""
    from pathlib import Path

    run = Path(__file__).parents[2] / "sample_logs" / "qwen2.5-vl-7b-video"
    r = run_main("report", str(run), "-o", str(tmp_path))
    assert r.returncode == 0, r.stderr
    s = json.loads((tmp_path / "summary.json").read_text())
    att, tm = s["attribution"], s["balance"]["time_model"]
    assert att["ok"] and tm is not None
    assert tm["lm_tflops_per_gpu"] == att["lm_tflops_per_gpu"]
    assert tm["vision_tflops_per_gpu"] == att["vision_tflops_per_gpu"]
    assert tm["gpus_per_replica"] == s["world_size"] / s["balance"]["dp_ranks"]
    # vision runs slower than the LM here, so the time imbalance exceeds the FLOPs imbalance
    assert att["vision_tflops_per_gpu"] < att["lm_tflops_per_gpu"]
    assert tm["max_over_mean_median"] > s["balance"]["flops_max_over_mean_median"]


def test_lpt_many_ranks_matches_reference():
    """More than 16 ranks takes the np.argmin path of the least-loaded search."""
    rng = np.random.default_rng(3)
    costs = pl.DataFrame({"iteration": np.repeat(np.arange(5), 70), "flops": rng.integers(1, 50, 350).astype(float)})
    out = lpt_balance(costs, pl.DataFrame({"iteration": np.arange(5), "ranks": np.full(5, 20)})).sort("iteration")
    for it in range(5):
        c = costs.filter(pl.col("iteration") == it)["flops"].to_list()
        assert out["lpt_max"][it] == pytest.approx(_lpt_reference(c, 20))
        assert out["lpt_equal_max"][it] == pytest.approx(_lpt_reference(c, 20, cap=4))
