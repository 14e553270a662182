"""The report's memory-lean balance path (issue 12) against a straightforward computation.

`load_run` keeps only 24 bytes per microbatch (iteration, dp_rank, LM and vision FLOPs), never
materialises the per-microbatch total, cuts the LPT what-if into blocks straight from the polars
frame and builds the heat map without a pivot. None of that may change a number. The reference below
is written independently and plainly: one `compute_flops` call per microbatch (the public API, tested
elsewhere against FlopCounterMode), Python dictionaries for the per-rank sums (`math.fsum`), a heap for
LPT and `statistics.median`.

The generated run is SYNTHETIC (numpy seed 0, `_write_run`): 4 DP ranks, 1-3 microbatches per rank
and iteration, 1-3 packed documents and 0-2 images per microbatch, lines shuffled over three shards so
that no shard is grouped by iteration (the LPT takes its sorting path).
"""

from __future__ import annotations

import heapq
import json
import math
import statistics

import numpy as np
import polars as pl
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from vlm_perf.analysis import balance
from vlm_perf.analysis.balance import lpt_balance, microbatch_cost_columns
from vlm_perf.arch import load_model
from vlm_perf.flops import compute_flops
from vlm_perf.ingest.metadata_source import MetadataSource
from vlm_perf.report.providers import relative_load_matrix
from vlm_perf.stats import BatchStats

MODEL = "qwen3-vl-30b-a3b"
RANKS, ITERS, INTERVAL = 4, 12, 3


def _write_run(path) -> list[dict]:
    rng = np.random.default_rng(0)
    rows = []
    for it in range(1, ITERS + 1):
        for rank in range(RANKS):
            for mb in range(int(rng.integers(1, 4))):
                seq = [int(s) for s in rng.integers(60, 500, int(rng.integers(1, 4)))]
                grids = [[1, 2 * int(rng.integers(2, 9)), 2 * int(rng.integers(2, 9))]
                         for _ in range(int(rng.integers(0, 3)))]
                rows.append({"iteration": it, "microbatch": mb, "dp_rank": rank, "samples": len(seq),
                             "padded_tokens": sum(seq), "seq_lens": seq, "image_grid_thw": grids,
                             "video_grid_thw": []})
    order = rng.permutation(len(rows))
    (path / "metadata").mkdir()
    for shard in range(3):
        lines = [json.dumps(rows[i]) + "\n" for i in order[shard::3]]
        (path / "metadata" / f"metadata-{shard:05d}.jsonl").write_text("".join(lines))
    log = [f" [2025-01-01 00:00:{i:02d}] iteration {i:8d}/{ITERS:8d} | consumed samples: {8 * i:8d} | "
           f"elapsed time per iteration (ms): 1000.0 | learning rate: 1.0E-05 | global batch size: 8 | "
           f"lm loss: 1.0E+00 |" for i in range(INTERVAL, ITERS + 1, INTERVAL)]
    (path / "train.log").write_text("\n".join(log) + "\n")
    (path / "run.yaml").write_text(f"# SYNTHETIC: {__name__} (numpy seed 0)\nmodel: {MODEL}\nnum_gpus: {RANKS}\n"
                                   f"gpu: H100\nlog_interval: {INTERVAL}\n")
    return rows


def _heap_lpt(costs: list[float], ranks: int, cap: int | None = None) -> float:
    """Largest microbatch first onto the least-loaded rank (lowest rank on ties); ``cap`` jobs at most."""
    heap, held, full = [(0.0, r) for r in range(ranks)], [0] * ranks, []
    for c in sorted(costs, reverse=True):
        load, r = heapq.heappop(heap)
        held[r] += 1
        (full.append(load + c) if cap is not None and held[r] >= cap else heapq.heappush(heap, (load + c, r)))
    return max([load for load, _ in heap] + full)


def test_report_balance_path_equals_a_straightforward_computation(tmp_path):
    from vlm_perf.pipeline import load_run

    rows = _write_run(tmp_path)
    loaded = load_run(tmp_path)
    got = loaded.context.block("balance")
    share = loaded.context.microbatch_vision_share

    spec = load_model(MODEL)
    per_rank: dict[tuple[int, int], list[tuple[float, float]]] = {}
    for r in rows:
        f = compute_flops(spec, BatchStats.from_batch(seq_lens=r["seq_lens"], image_grids=[tuple(g) for g in
                                                                                          r["image_grid_thw"]],
                                                      spec=spec))
        per_rank.setdefault((r["iteration"], r["dp_rank"]), []).append((f.total, f.vision))
    # the means skip the first window (iterations 1-3)
    used = range(INTERVAL + 1, ITERS + 1)
    ratio, idle, means, maxes, lpt, lpt_eq, bound, slowest = [], [], [], [], [], [], [], []
    for it in used:
        loads = [math.fsum(t for t, _ in per_rank[(it, r)]) for r in range(RANKS)]
        mean, top = sum(loads) / RANKS, max(loads)
        ratio.append(top / mean)
        idle.append(1 - mean / top)
        means.append(mean)
        maxes.append(top)
        slowest.append(loads.index(top))
        costs = [t for r in range(RANKS) for t, _ in per_rank[(it, r)]]
        lpt.append(_heap_lpt(costs, RANKS))
        lpt_eq.append(_heap_lpt(costs, RANKS, cap=-(-len(costs) // RANKS)))
        bound.append(max(mean, max(costs)))

    close = dict(rel=1e-12)
    assert got["dp_ranks"] == RANKS and got["iterations"] == len(used) and got["rows_without_dp_rank"] == 0
    assert got["flops_max_over_mean_median"] == pytest.approx(statistics.median(ratio), **close)
    assert got["flops_max_over_mean_max"] == pytest.approx(max(ratio), **close)
    assert got["idle_fraction_median"] == pytest.approx(statistics.median(idle), **close)
    assert got["idle_fraction_overall"] == pytest.approx(1 - sum(means) / sum(maxes), **close)
    assert got["imbalanced_iterations"] == len(used)
    top_rank, top_count = max(((r, slowest.count(r)) for r in range(RANKS)), key=lambda rc: (rc[1], -rc[0]))
    assert (got["slowest_ranks"][0]["dp_rank"], got["slowest_ranks"][0]["iterations"]) == (top_rank, top_count)
    lpt_block = got["lpt"]
    assert lpt_block["iterations"] == len(used)
    assert lpt_block["flops_max_over_mean_median"] == pytest.approx(
        statistics.median(x / m for x, m in zip(lpt, means)), **close)
    assert lpt_block["critical_flops_saving"] == pytest.approx(1 - sum(lpt) / sum(maxes), **close)
    assert lpt_block["lower_bound_saving"] == pytest.approx(1 - sum(bound) / sum(maxes), **close)
    assert lpt_block["equal_counts"]["critical_flops_saving"] == pytest.approx(1 - sum(lpt_eq) / sum(maxes), **close)

    # one vision share per microbatch of the iterations the means use (file order differs: compare sorted)
    expected = sorted(v / t for (it, _), mbs in per_rank.items() if it in used for t, v in mbs)
    assert len(share) == len([r for r in rows if r["iteration"] in used]) and share.null_count() == 0
    assert sorted(share.to_list()) == pytest.approx(expected, **close)


def test_take_row_values_hands_the_columns_over(tmp_path):
    rows = _write_run(tmp_path)
    spec = load_model(MODEL)
    src = MetadataSource(tmp_path / "metadata", spec, row_columns=microbatch_cost_columns(spec)).read()
    values = src.take_row_values()
    assert set(values) == {"iteration", "dp_rank", "lm_flops", "vision_flops"}
    assert all(len(v) == len(rows) for v in values.values())
    with pytest.raises(ValueError, match="handed over"):
        src.row_values
    assert src.per_iteration["microbatches"].sum() == len(rows)  # the other outputs stay


def test_relative_load_matrix_by_hand():
    # iteration 1: loads 1, 3 (mean 2); iteration 2: 4, 4; iteration 5: rank 1 missing; iteration 3 not asked for
    ranks = pl.DataFrame({"iteration": [1, 1, 2, 2, 3, 3, 5], "dp_rank": [3, 7, 3, 7, 3, 7, 3],
                          "flops": [1.0, 3.0, 4.0, 4.0, 9.0, 1.0, 2.0]})
    matrix, its, dp_ranks = relative_load_matrix(ranks, pl.Series([5, 2, 1]))
    assert its == [1, 2, 5] and dp_ranks == [3, 7]
    np.testing.assert_array_equal(matrix, np.array([[0.5, 1.0, 1.0], [1.5, 1.0, np.nan]]))


def _costs_strategy():
    per_iteration = st.tuples(st.integers(1, 24), st.lists(st.integers(0, 50), min_size=1, max_size=40))
    return st.lists(per_iteration, min_size=1, max_size=12)


@settings(derandomize=True, deadline=None, max_examples=60)
@given(_costs_strategy(), st.integers(0, 2**32 - 1), st.sampled_from([1, 7, 64, 2_000_000]))
def test_lpt_blocks_and_inputs_do_not_change_results(iterations, seed, cells):
    """Block size, row order and whether the total is a column or lm + vision: the same frame, bit for bit."""
    rng = np.random.default_rng(seed)
    its, lm, vis, ranks = [], [], [], []
    for it, (n_ranks, costs) in enumerate(iterations):
        its += [it * 2] * len(costs)
        lm += [c * 1e12 / 3 for c in costs]  # not integers: order matters to sums
        vis += [c * 1e11 / 7 for c in costs]
        ranks.append((it * 2, n_ranks))
    per = pl.DataFrame(ranks, schema=["iteration", "ranks"], orient="row")
    split = pl.DataFrame({"iteration": its, "lm_flops": lm, "vision_flops": vis})
    total = split.with_columns((pl.col("lm_flops") + pl.col("vision_flops")).alias("flops"))
    reference = lpt_balance(total.select("iteration", "flops"), per)
    shuffled = split[rng.permutation(split.height).tolist()]
    shuffled_total = shuffled.with_columns((pl.col("lm_flops") + pl.col("vision_flops")).alias("flops"))
    before = balance.LPT_CELLS
    try:
        balance.LPT_CELLS = cells
        assert lpt_balance(split, per).equals(reference)
        assert lpt_balance(shuffled, per).equals(  # sorted inside, stably: as if sorted before
            lpt_balance(shuffled_total.sort("iteration", maintain_order=True).select("iteration", "flops"), per))
        some = per.filter(pl.col("iteration") % 3 != 0)  # iterations not asked for: as if their rows were dropped
        for frame in (split, shuffled):
            assert lpt_balance(frame, some).equals(
                lpt_balance(frame.filter(pl.col("iteration").is_in(some["iteration"].implode())), some))
    finally:
        balance.LPT_CELLS = before
    for (n_ranks, costs), row in zip(iterations, reference.sort("iteration").iter_rows(named=True)):
        loads = [c * 1e12 / 3 + c * 1e11 / 7 for c in costs]
        assert row["lpt_max"] == pytest.approx(_heap_lpt(loads, n_ranks), rel=1e-12, abs=1e-3)
        assert row["lpt_equal_max"] == pytest.approx(_heap_lpt(loads, n_ranks, -(-len(costs) // n_ranks)),
                                                     rel=1e-12, abs=1e-3)


def test_share_histogram_counts_like_one_np_histogram(monkeypatch):
    from vlm_perf.report import figures

    rng = np.random.default_rng(5)
    shares = pl.Series([*rng.random(5000) * 0.37, None, 0.0, 0.37, 0.05])
    monkeypatch.setattr(figures, "HIST_SLICE", 333)  # many slices
    edges, counts, mean = figures.share_histogram(shares)
    data = 100 * shares.drop_nulls().to_numpy()
    assert edges[-1] == 40.0 and len(edges) == 41  # 37% rounded up to a multiple of 5
    np.testing.assert_array_equal(counts, np.histogram(data, bins=np.linspace(0, 40.0, 41))[0])
    assert counts.sum() == shares.len() - 1 and mean == pytest.approx(data.mean(), rel=1e-12)


def test_microbatch_vision_share_by_slices():
    from vlm_perf.analysis.balance import microbatch_vision_share

    costs = pl.DataFrame({"lm_flops": [3.0, 0.0, 1.0, 2.0, 5.0], "vision_flops": [1.0, 0.0, 1.0, 0.0, 5.0]})
    for rows in (1, 2, 100):
        assert microbatch_vision_share(costs, rows_per_slice=rows).to_list() == [0.25, None, 0.5, 0.0, 0.5]


def test_cost_columns_are_chunked_alike(tmp_path):
    """Three shards, small read chunks: every row column has the same chunk lengths (else polars copies
    all of them to realign on the first select over the run)."""
    _write_run(tmp_path)
    spec = load_model(MODEL)
    src = MetadataSource(tmp_path / "metadata", spec, row_columns=microbatch_cost_columns(spec),
                         chunk_bytes=4096).read()
    layouts = {name: [len(c) for c in values.get_chunks()] for name, values in src.take_row_values().items()}
    assert len({tuple(v) for v in layouts.values()}) == 1 and len(layouts["lm_flops"]) > 3, layouts


@settings(derandomize=True, deadline=None, max_examples=40)
@given(st.lists(st.lists(st.tuples(st.integers(0, 3), st.integers(0, 3)), min_size=1, max_size=6), min_size=1,
                max_size=6), st.integers(0, 2**32 - 1))
def test_slowest_rank_ties_to_the_lowest_rank_in_any_row_order(iterations, seed):
    """balance_by_iteration's slowest / most-vision rank against a plain max with ties to the lowest rank."""
    from vlm_perf.analysis.balance import balance_by_iteration

    rows = [(it, 10 * rank + 5, float(lm), float(vis)) for it, loads in enumerate(iterations)
            for rank, (lm, vis) in enumerate(loads)]
    ranks = pl.DataFrame(rows, schema=["iteration", "dp_rank", "lm_flops", "vision_flops"], orient="row")
    ranks = ranks.with_columns((pl.col("lm_flops") + pl.col("vision_flops")).alias("flops"))
    shuffled = ranks[np.random.default_rng(seed).permutation(ranks.height).tolist()]
    for frame in (ranks, shuffled):
        out = balance_by_iteration(frame).sort("iteration")
        for it, loads in enumerate(iterations):
            row = out.row(it, named=True)
            totals = [lm + vis for lm, vis in loads]
            top = totals.index(max(totals))
            balanced = max(totals) == 0 or max(totals) / (sum(totals) / len(totals)) < 1 + 1e-9
            assert row["slowest_rank"] == (None if balanced else 10 * top + 5)
            assert row["most_vision_rank"] == 10 * [v for _, v in loads].index(max(v for _, v in loads)) + 5
            expected_share = loads[top][1] / max(totals) if max(totals) > 0 else None
            assert row["slowest_vision_share"] == expected_share or (
                expected_share is None and (row["slowest_vision_share"] is None or math.isnan(row["slowest_vision_share"])))
