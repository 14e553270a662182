"""Data-parallel load balance: how much of every step the lighter ranks spend waiting.

Every DP rank (one model replica: TP x PP x CP GPUs) runs its own microbatches, then all ranks
meet in the gradient all-reduce, so a step lasts as long as its heaviest rank. With exact training
FLOPs ``F_r`` per rank and iteration (vision and LM separately; frozen parts as the run):

* ``max_over_mean = max_r F_r / mean_r F_r``  (1 = perfectly balanced);
* ``idle_fraction = 1 - mean_r F_r / max_r F_r``: the share of the step a rank carrying the mean
  load would have idled waiting for the heaviest one, when time is proportional to FLOPs.

When the step-time attribution was fitted, the same is computed on modelled compute seconds
``F_lm / R_lm + F_vis / R_vis`` (rates per GPU times the GPUs of one replica), since vision FLOPs
usually run at a different rate than LM FLOPs.

What-if (``lpt_balance``): the same microbatches of each iteration reassigned greedily, longest
processing time first, to the least-loaded rank. Microbatches stay whole (images do not move between
them) and the equal-count-per-rank constraint of a pipeline schedule is dropped, so it is an upper
bound on what sorting / packing microbatches by cost could win (LPT is within 4/3 of the optimum).
The absolute lower bound of any assignment, ``max(mean, largest microbatch)``, is given too.

Everything here is a pure function of polars frames (no I/O). Inputs:

* per-(iteration, dp_rank) frame of additive `BatchStats` columns (+ optional ``microbatches``);
* optionally the per-microbatch frame (``iteration, dp_rank, microbatch`` + `BatchStats` columns).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Iterable

import numpy as np
import polars as pl

from ..arch.spec import ModelSpec
from .flops_frame import with_flops

__all__ = ["BalanceResult", "TimeModel", "rank_flops", "microbatch_costs", "balance_by_iteration", "lpt_balance",
           "analyze_balance", "reliable_iterations", "microbatch_vision_share", "ranks_from_microbatches"]

RANK_KEYS = ("iteration", "dp_rank")
TIE = 1e-9  # relative: an iteration with max/mean below 1 + TIE is balanced (no slowest rank)
LPT_CELLS = 1_000_000  # matrix cells (iterations x microbatches) per block of lpt_balance (8 MB)


@dataclass(frozen=True)
class TimeModel:
    """Fitted achieved rates (TFLOP/s per GPU, from the attribution) and GPUs per DP replica."""

    lm_tflops_per_gpu: float
    vision_tflops_per_gpu: float
    gpus_per_replica: float

    def seconds(self, lm_flops: pl.Expr, vision_flops: pl.Expr) -> pl.Expr:
        """Modelled compute seconds of one rank (no fixed overhead: it is the same on every rank)."""
        scale = 1e12 * self.gpus_per_replica
        return lm_flops / (self.lm_tflops_per_gpu * scale) + vision_flops / (self.vision_tflops_per_gpu * scale)


def _exact(stats: pl.DataFrame | pl.LazyFrame, spec: ModelSpec, frozen: Iterable[str],
           keys: tuple[str, ...], causal: str = "half") -> pl.DataFrame | pl.LazyFrame:
    out = with_flops(stats, spec, ["exact"], frozen, causal=causal).select(
        *keys, pl.col("exact_language").alias("lm_flops"), pl.col("exact_vision").alias("vision_flops"))
    return out.with_columns((pl.col("lm_flops") + pl.col("vision_flops")).alias("flops"))


def rank_flops(rank_stats: pl.DataFrame, spec: ModelSpec, frozen: Iterable[str] = (),
               causal: str = "half") -> pl.DataFrame:
    """Exact training FLOPs per (iteration, dp_rank): ``lm_flops``, ``vision_flops``, ``flops`` (FLOPs)."""
    keys = RANK_KEYS + (("microbatches",) if "microbatches" in rank_stats.columns else ())
    return _exact(rank_stats, spec, frozen, keys, causal).sort(RANK_KEYS)


def microbatch_costs(micro_stats: pl.DataFrame | pl.LazyFrame, spec: ModelSpec, frozen: Iterable[str] = (),
                     keep_unranked: bool = False, causal: str = "half") -> pl.DataFrame:
    """Exact training FLOPs per microbatch (``iteration, dp_rank, lm_flops, vision_flops, flops``).

    Only these five columns are materialised, 32 bytes per microbatch (iteration and dp_rank as
    Int32; a LazyFrame is evaluated by the streaming engine). Rows without ``dp_rank`` are dropped
    unless ``keep_unranked`` (then the caller counts and drops them). ``causal`` as in `with_flops`.
    """
    out = _exact(micro_stats, spec, frozen, RANK_KEYS, causal).with_columns(pl.col("iteration").cast(pl.Int32),
                                                                    pl.col("dp_rank").cast(pl.Int32))
    if not keep_unranked:
        out = out.filter(pl.col("dp_rank").is_not_null())
    return out.collect(engine="streaming") if isinstance(out, pl.LazyFrame) else out


def microbatch_cost_columns(spec: ModelSpec, frozen: Iterable[str] = (), causal: str = "half") -> dict:
    """``row_columns`` for `MetadataSource`: the `microbatch_costs` columns computed chunk by chunk in
    the metadata's single pass (each function maps a chunk of per-microbatch statistics, with
    ``iteration`` and ``dp_rank``, to one column)."""
    frozen = frozen if hasattr(frozen, "stage_level") else tuple(frozen)  # parts, or a Trainability
    last: list = [None, None]  # (chunk, its exact FLOPs): the two FLOPs columns share one evaluation

    def flops(rows: pl.DataFrame, column: str) -> pl.Series:
        if last[0] is not rows:  # lazily: only the two totals are computed (2-6x faster, the same values)
            last[0], last[1] = rows, _exact(rows.lazy(), spec, frozen, (), causal).collect().rechunk()
        return last[1][column]

    # every column one chunk per batch: columns chunked alike stay zero-copy in later selects over the run
    # (a batch whose keys arrive in two pieces would otherwise make polars realign - copy - all four)
    return {"iteration": lambda rows: rows["iteration"].cast(pl.Int32).rechunk(),
            "dp_rank": lambda rows: rows["dp_rank"].cast(pl.Int32).rechunk(),
            "lm_flops": lambda rows: flops(rows, "lm_flops"),
            "vision_flops": lambda rows: flops(rows, "vision_flops")}


def costs_from_row_values(values: dict, total: bool = True) -> pl.DataFrame:
    """The `microbatch_costs` frame from the row values `microbatch_cost_columns` produced (no copy of
    the columns). ``total=False`` leaves out the ``flops`` column (8 bytes per microbatch): every
    function here that needs it computes ``lm_flops + vision_flops`` itself, with the same result."""
    frame = pl.DataFrame({name: values[name] for name in ("iteration", "dp_rank", "lm_flops", "vision_flops")})
    return frame.with_columns(_total(frame).alias("flops")) if total else frame


def _total(costs: pl.DataFrame) -> pl.Expr:
    """Training FLOPs of each microbatch: the ``flops`` column, else ``lm_flops + vision_flops`` (the
    same floating-point sum `microbatch_costs` stores, so either gives bit-identical results)."""
    return pl.col("flops") if "flops" in costs.columns else pl.col("lm_flops") + pl.col("vision_flops")


def microbatch_vision_share(costs: pl.DataFrame, rows_per_slice: int = 1 << 20) -> pl.Series:
    """Vision share of each microbatch's training FLOPs (``vision_flops / flops``; null without FLOPs).

    Computed slice by slice (zero-copy slices of ``rows_per_slice`` rows), so the intermediates are
    bounded and only the result (8 bytes per microbatch) grows with the run."""
    share = pl.when(_total(costs) > 0).then(pl.col("vision_flops") / _total(costs)).alias("vision_share")
    parts = [part.select(share)["vision_share"] for part in costs.iter_slices(rows_per_slice)]
    return pl.concat(parts) if parts else pl.Series("vision_share", [], pl.Float64)


def ranks_from_microbatches(costs: pl.DataFrame) -> pl.DataFrame:
    """Per-(iteration, dp_rank) sums of microbatch costs (FLOPs are additive over microbatches).

    ``costs`` needs ``iteration, dp_rank, lm_flops, vision_flops`` (``flops`` optional: computed per
    microbatch inside the aggregation when absent, never materialised)."""
    return (costs.group_by(RANK_KEYS).agg(pl.len().alias("microbatches"), pl.col("lm_flops").sum(),
                                          pl.col("vision_flops").sum(), _total(costs).sum().alias("flops"))
            .sort(RANK_KEYS))


def _ratio(num: pl.Expr, den: pl.Expr) -> pl.Expr:
    return pl.when(den > 0).then(num / den)


def balance_by_iteration(ranks: pl.DataFrame, time_model: TimeModel | None = None) -> pl.DataFrame:
    """One row per iteration: ``ranks``, FLOPs mean/max, ``slowest_rank``, ``flops_max_over_mean``,
    ``idle_fraction``, the vision and LM ratios, the slowest rank's vision share; with a time model
    also ``time_max_over_mean`` and ``time_idle_fraction``. One group_by (vectorised)."""
    # rows in (iteration, dp_rank) order, so that the first maximum of a group is its lowest rank: arg_max
    # then picks what sorting each group by (FLOPs descending, rank) would, at a fraction of the memory
    step = pl.col("iteration").diff()
    ordered = ranks.height < 2 or bool(ranks.select(((step > 0) | ((step == 0) & (pl.col("dp_rank").diff() > 0)))
                                                    .slice(1).all()).item())
    frame = ranks if ordered else ranks.sort(list(RANK_KEYS))
    aggs = [pl.len().alias("ranks"), pl.col("flops").sum().alias("flops_sum"),
            pl.col("flops").mean().alias("flops_mean"), pl.col("flops").max().alias("flops_max"),
            pl.col("vision_flops").mean().alias("vision_mean"), pl.col("vision_flops").max().alias("vision_max"),
            pl.col("lm_flops").mean().alias("lm_mean"), pl.col("lm_flops").max().alias("lm_max"),
            # slowest rank: most FLOPs, ties to the lowest rank number
            pl.col("dp_rank").get(pl.col("flops").arg_max()).alias("slowest_rank"),
            pl.col("dp_rank").get(pl.col("vision_flops").arg_max()).alias("most_vision_rank"),
            (pl.col("vision_flops").get(pl.col("flops").arg_max()) / pl.col("flops").max())
            .alias("slowest_vision_share")]
    if time_model is not None:
        frame = frame.with_columns(time_model.seconds(pl.col("lm_flops"), pl.col("vision_flops")).alias("_t"))
        aggs += [pl.col("_t").mean().alias("time_mean"), pl.col("_t").max().alias("time_max")]
    out = frame.group_by("iteration").agg(aggs).sort("iteration")
    cols = [_ratio(pl.col("flops_max"), pl.col("flops_mean")).alias("flops_max_over_mean"),
            (1 - _ratio(pl.col("flops_mean"), pl.col("flops_max"))).alias("idle_fraction"),
            _ratio(pl.col("vision_max"), pl.col("vision_mean")).alias("vision_max_over_mean"),
            _ratio(pl.col("lm_max"), pl.col("lm_mean")).alias("lm_max_over_mean")]
    if time_model is not None:
        cols += [_ratio(pl.col("time_max"), pl.col("time_mean")).alias("time_max_over_mean"),
                 (1 - _ratio(pl.col("time_mean"), pl.col("time_max"))).alias("time_idle_fraction")]
    out = out.with_columns(cols)
    balanced = pl.col("flops_max_over_mean").fill_null(1) < 1 + TIE
    return out.with_columns(pl.when(balanced).then(None).otherwise(pl.col("slowest_rank")).alias("slowest_rank"))


def _lpt_block(matrix: np.ndarray, items: np.ndarray, n_ranks: np.ndarray, rank_width: int
               ) -> tuple[np.ndarray, np.ndarray]:
    """Free and equal-count LPT of one block of iterations: ``matrix`` (microbatch index x iteration,
    each column descending, zero padding last), ``items`` and ``n_ranks`` per iteration. Returns the
    heaviest rank's load of each iteration for both.

    One step per microbatch index j, all iterations at once: microbatch j of every iteration goes to
    its least-loaded rank (lowest rank on ties). Loads are kept ranks-contiguous per iteration
    (iterations x ranks) when there are many ranks, where ``argmin`` along the last axis is fastest,
    and iterations-contiguous (ranks x iterations) for few ranks, where two ufunc reductions along the
    rows are (the minimum, then the largest of the weights R, R-1, ..., 1 among the ranks that reach it);
    a flat index addresses one cell per iteration either way."""
    n = matrix.shape[1]
    by_rank = rank_width > 16  # layout: (iterations x ranks) when True, else (ranks x iterations)
    rank_axis = 1 if by_rank else 0
    if by_rank:
        absent = np.arange(rank_width)[None, :] >= n_ranks[:, None]  # ranks an iteration lacks

        def cell(loads: np.ndarray) -> np.ndarray:
            return index * rank_width + np.argmin(loads, axis=1)
    else:
        absent = np.arange(rank_width)[:, None] >= n_ranks[None, :]
        weights = (rank_width - np.arange(rank_width))[:, None]

        def cell(loads: np.ndarray) -> np.ndarray:
            hit = loads == loads.min(axis=0)
            return (rank_width - (hit * weights).max(axis=0)) * n + index
    index = np.arange(n)
    loads = np.where(absent, np.inf, 0.0)
    equal = loads.copy()  # the same, at most ceil(items / ranks) microbatches per rank
    open_ = loads.copy()  # = equal, but inf once a rank holds its cap
    counts = np.zeros(loads.shape, dtype=np.int64)
    cap = -(-items // n_ranks)
    flat_loads, flat_equal, flat_open, flat_counts = (a.reshape(-1) for a in (loads, equal, open_, counts))
    for j in range(int(items.max())):
        cost = matrix[j]
        flat_loads[cell(loads)] += cost
        where = cell(open_)
        flat_equal[where] += cost
        flat_open[where] += cost
        flat_counts[where] += j < items
        flat_open[where[flat_counts[where] >= cap]] = np.inf
    return (np.where(absent, -np.inf, loads).max(axis=rank_axis), np.where(absent, -np.inf, equal).max(axis=rank_axis))


def lpt_balance(costs: pl.DataFrame, ranks_per_iteration: pl.DataFrame) -> pl.DataFrame:
    """Greedy longest-processing-time-first reassignment of each iteration's microbatches.

    ``costs``: ``iteration, flops`` (or ``lm_flops, vision_flops``) per microbatch;
    ``ranks_per_iteration``: ``iteration, ranks``.
    Returns ``iteration, lpt_max`` (heaviest rank after LPT), ``lpt_equal_max`` (the same with at most
    ceil(microbatches / ranks) microbatches per rank, as a pipeline schedule with a fixed number of
    microbatches per rank needs) and ``lower_bound`` (max of the mean load and the largest microbatch:
    no assignment can do better).

    Vectorised over iterations (`_lpt_block`): the costs of a block of iterations become a (microbatch
    index x iterations) matrix, each column sorted descending, and the Python loop runs once per
    microbatch *index* of the block (e.g. num_microbatches x dp steps). Blocks hold at most
    ``LPT_CELLS`` matrix cells and are cut from the polars frame (a stable sort by iteration first,
    through a row index, when the rows are not grouped by iteration), so nothing of O(microbatches) is
    copied into numpy. Every iteration is computed on its own: the blocking cannot change a result.
    """
    known = ranks_per_iteration.select("iteration", "ranks").sort("iteration")
    used = costs.select("iteration", *(["flops"] if "flops" in costs.columns else ["lm_flops", "vision_flops"]))
    keep = used["iteration"].is_in(known["iteration"].implode())
    if not keep.any():
        return pl.DataFrame(schema={"iteration": pl.Int64, "lpt_max": pl.Float64, "lpt_equal_max": pl.Float64,
                                    "lower_bound": pl.Float64})
    # no filtered copy of the frame: rows already grouped by iteration are read in place (iterations not asked
    # for are computed too, then dropped: usually a handful); otherwise a row index of the kept rows, sorted
    # stably by iteration, says which rows to gather
    order = None
    if not used["iteration"].is_sorted():
        index = used.select("iteration").with_row_index("_row")
        order = (index if keep.all() else index.filter(keep)).sort("iteration", maintain_order=True)["_row"]
        del index
    del keep
    its = used["iteration"] if order is None else used["iteration"].gather(order)
    runs = its.rle()  # one run per iteration once sorted
    del its
    iterations = runs.struct.field("value").to_numpy()
    n_items = runs.struct.field("len").to_numpy().astype(np.int64)
    starts = np.concatenate([[0], np.cumsum(n_items)[:-1]])
    known_its = known["iteration"].to_numpy()
    at = np.minimum(np.searchsorted(known_its, iterations), len(known_its) - 1)
    asked = known_its[at] == iterations
    n_ranks = np.where(asked, known["ranks"].to_numpy().astype(int)[at], 1)
    n_its, width, rank_width = len(iterations), int(n_items.max()), int(n_ranks.max())
    sums, big = np.empty(n_its), np.empty(n_its)
    lpt_max, equal_max = np.empty(n_its), np.empty(n_its)
    total = _total(used).cast(pl.Float64)
    step = max(1, LPT_CELLS // max(width, rank_width))
    for lo in range(0, n_its, step):  # blocks of iterations, bounded memory
        hi = min(lo + step, n_its)
        n = hi - lo
        first = int(starts[lo])
        items, offsets = n_items[lo:hi], starts[lo:hi] - first
        length = int(items.sum())
        rows_of = used.slice(first, length) if order is None else used[order.slice(first, length)]
        block = rows_of.select(total.alias("flops"))["flops"].to_numpy()
        del rows_of
        rows = np.repeat(np.arange(n, dtype=np.int32), items)  # each microbatch's iteration (column of the block)
        sums[lo:hi] = np.bincount(rows, weights=block, minlength=n)  # in row order, as over the whole run
        big[lo:hi] = np.maximum.reduceat(block, offsets)
        matrix = np.zeros((n, int(items.max())))
        matrix[rows, np.arange(length, dtype=np.int32) - offsets[rows].astype(np.int32)] = block
        del rows, block
        matrix.sort(axis=1)  # in place, ascending: FLOPs are >= 0, so reversed it is descending with the zeros last
        matrix = np.ascontiguousarray(matrix[:, ::-1].T)  # matrix[j]: the j-th largest of every iteration
        lpt_max[lo:hi], equal_max[lo:hi] = _lpt_block(matrix, items, n_ranks[lo:hi], rank_width)
    return pl.DataFrame({"iteration": iterations, "lpt_max": lpt_max, "lpt_equal_max": equal_max,
                         "lower_bound": np.maximum(sums / n_ranks, big)}).filter(pl.Series(asked)).with_columns(
        pl.col("iteration").cast(costs.schema["iteration"]))


def reliable_iterations(windows: pl.DataFrame) -> pl.Series:
    """Iterations inside the windows the report's means use (`vlm_perf.analysis.selection`: complete,
    not first after a (re)start, usable step time)."""
    from .selection import select_windows

    return select_windows(windows).iterations()


@dataclass
class BalanceResult:
    """Per-rank FLOPs, per-iteration balance, the LPT what-if and the summary block (``summary``)."""

    ranks: pl.DataFrame  # iteration, dp_rank, lm_flops, vision_flops, flops (+ microbatches)
    per_iteration: pl.DataFrame  # balance_by_iteration, + lpt_max, lower_bound, used
    summary: dict
    notes: list[str] = field(default_factory=list)


def _median(series: pl.Series) -> float | None:
    s = series.drop_nulls()
    return float(s.median()) if s.len() else None


def _summary(per_it: pl.DataFrame, ranks: pl.DataFrame, dp_ranks: int, time_model: TimeModel | None,
             excluded_missing: int, rows_without_rank: int, notes: list[str]) -> dict:
    used = per_it.filter(pl.col("used"))
    n = used.height
    out: dict = {"dp_ranks": dp_ranks, "iterations": n, "iterations_excluded_missing_ranks": excluded_missing,
                 "rows_without_dp_rank": rows_without_rank,
                 "flops": "exact training FLOPs per DP rank (frozen parts as in the run)",
                 "notes": notes}
    if n == 0:
        out.update(flops_max_over_mean_median=None, vision_max_over_mean_median=None, idle_fraction_median=None,
                   idle_fraction_mean=None)
        return out
    weight = used["flops_sum"]
    sum_max, sum_mean = float(used["flops_max"].sum()), float(used["flops_mean"].sum())
    no_vision = int(used["vision_max_over_mean"].null_count())
    out.update(
        flops_max_over_mean_median=_median(used["flops_max_over_mean"]),
        flops_max_over_mean_p90=float(used["flops_max_over_mean"].quantile(0.9)),
        flops_max_over_mean_max=float(used["flops_max_over_mean"].max()),
        vision_max_over_mean_median=_median(used["vision_max_over_mean"]),
        iterations_without_vision=no_vision,
        lm_max_over_mean_median=_median(used["lm_max_over_mean"]),
        idle_fraction_median=_median(used["idle_fraction"]),
        idle_fraction_mean=float((used["idle_fraction"] * weight).sum() / weight.sum()) if weight.sum() else None,
        # 1 - sum(mean)/sum(max): rank-time idle over the whole run if time is proportional to FLOPs
        idle_fraction_overall=1 - sum_mean / sum_max if sum_max else None,
    )
    slow = used.filter(pl.col("slowest_rank").is_not_null())
    counts = slow.group_by("slowest_rank").agg(pl.len().alias("n")).sort(["n", "slowest_rank"],
                                                                        descending=[True, False])
    out["imbalanced_iterations"] = slow.height
    out["slowest_ranks"] = [{"dp_rank": int(r), "iterations": int(c), "share": c / slow.height}
                            for r, c in counts.head(5).iter_rows()]
    worst = slow.sort(["idle_fraction", "iteration"], descending=[True, False]).head(5)  # imbalanced only
    out["worst_iterations"] = [
        {"iteration": int(row["iteration"]), "idle_fraction": row["idle_fraction"],
         "flops_max_over_mean": row["flops_max_over_mean"], "slowest_rank": row["slowest_rank"],
         "slowest_rank_vision_share": row["slowest_vision_share"]} for row in worst.iter_rows(named=True)]
    with_vision = slow.filter(pl.col("vision_max").fill_null(0) > 0)
    out["slowest_is_most_vision_fraction"] = (
        float((with_vision["slowest_rank"] == with_vision["most_vision_rank"]).mean()) if with_vision.height else None)
    out["vision_load_correlation"] = _vision_correlation(ranks, used["iteration"])
    if time_model is not None and "time_max_over_mean" in used.columns:
        t_max, t_mean = float(used["time_max"].sum()), float(used["time_mean"].sum())
        out["time_model"] = {"lm_tflops_per_gpu": time_model.lm_tflops_per_gpu,
                             "vision_tflops_per_gpu": time_model.vision_tflops_per_gpu,
                             "gpus_per_replica": time_model.gpus_per_replica,
                             "max_over_mean_median": _median(used["time_max_over_mean"]),
                             "idle_fraction_median": _median(used["time_idle_fraction"]),
                             "idle_fraction_overall": 1 - t_mean / t_max if t_max else None}
    else:
        out["time_model"] = None
    if "lpt_max" in used.columns and used["lpt_max"].null_count() < n:
        lpt = used.filter(pl.col("lpt_max").is_not_null())
        lpt_ratio = lpt["lpt_max"] / lpt["flops_mean"]
        out["lpt"] = {"iterations": lpt.height,
                      "flops_max_over_mean_median": _median(lpt_ratio),
                      "idle_fraction_overall": 1 - float(lpt["flops_mean"].sum() / lpt["lpt_max"].sum()),
                      # share of the heaviest rank's FLOPs (the step's critical path) LPT would remove
                      "critical_flops_saving": 1 - float(lpt["lpt_max"].sum() / lpt["flops_max"].sum()),
                      "lower_bound_saving": 1 - float(lpt["lower_bound"].sum() / lpt["flops_max"].sum()),
                      "equal_counts": {
                          "flops_max_over_mean_median": _median(lpt["lpt_equal_max"] / lpt["flops_mean"]),
                          "critical_flops_saving": 1 - float(lpt["lpt_equal_max"].sum() / lpt["flops_max"].sum())}}
    else:
        out["lpt"] = None
    return out


def _vision_correlation(ranks: pl.DataFrame, iterations: pl.Series) -> float | None:
    """Pearson correlation, pooled over iterations, of each rank's deviation from its iteration's mean
    in vision FLOPs and in total FLOPs: near 1 when the vision load is what makes a rank heavy."""
    dev = (ranks.filter(pl.col("iteration").is_in(iterations.implode()))
           .with_columns((pl.col(c) - pl.col(c).mean().over("iteration")).alias(f"_d{c}")
                         for c in ("vision_flops", "flops")))
    x, y = dev["_dvision_flops"].to_numpy(), dev["_dflops"].to_numpy()
    if len(x) < 3 or np.std(x) == 0 or np.std(y) == 0:
        return None
    return float(np.corrcoef(x, y)[0, 1])


def analyze_balance(ranks: pl.DataFrame, *, costs: pl.DataFrame | None = None,
                    iterations: pl.Series | None = None, time_model: TimeModel | None = None,
                    rows_without_rank: int = 0) -> BalanceResult:
    """Balance of a run. ``ranks``: `rank_flops` output; ``costs``: `microbatch_costs` (for LPT);
    ``iterations``: those the report's means use (`reliable_iterations`; all when None).

    Iterations with fewer ranks than the run's ``dp_ranks`` (the largest count seen) are excluded
    from the summary and counted: a missing rank would otherwise look like an idle one.
    """
    notes: list[str] = []
    per_it = balance_by_iteration(ranks, time_model)
    dp_ranks = int(per_it["ranks"].max()) if per_it.height else 0
    complete = pl.col("ranks") == dp_ranks
    in_means = pl.col("iteration").is_in(iterations.implode()) if iterations is not None else pl.lit(True)
    excluded = int(per_it.filter(in_means & ~complete).height)
    if excluded:
        notes.append(f"{excluded} iteration(s) have metadata from fewer than {dp_ranks} DP ranks: excluded from the "
                     "balance summary (a missing rank would look idle)")
    if rows_without_rank:
        notes.append(f"{rows_without_rank} microbatch row(s) have no dp_rank: left out of the balance")
    per_it = per_it.with_columns((in_means & complete).alias("used"))
    if costs is not None and costs.height:
        used_its = per_it.filter(pl.col("used")).select("iteration", "ranks")
        per_it = per_it.join(lpt_balance(costs, used_its), on="iteration", how="left")
    summary = _summary(per_it, ranks, dp_ranks, time_model, excluded, rows_without_rank, notes)
    return BalanceResult(ranks, per_it, summary, notes)


def balance_of(costs: pl.DataFrame, analysis: Any) -> "BalanceResult | None":
    """DP load balance from the per-microbatch exact FLOPs (``costs``: iteration, dp_rank, LM and vision FLOPs),
    over the iterations the report's means use (``analysis``: the run's `RunAnalysis`); the step-time model comes
    from the attribution when it was fitted. None when no microbatch names its DP rank."""
    unranked = int(costs["dp_rank"].null_count())
    if unranked:  # (a filter copies every column: only when there is something to drop)
        costs = costs.filter(costs["dp_rank"].is_not_null())
    if costs.height == 0:
        return None
    ranks = ranks_from_microbatches(costs)
    att, dp = analysis.attribution, ranks["dp_rank"].n_unique()
    model = (TimeModel(att.lm_tflops_per_gpu, att.vision_tflops_per_gpu, analysis.world_size / dp)
             if att.ok and att.lm_tflops_per_gpu and att.vision_tflops_per_gpu and analysis.world_size else None)
    return analyze_balance(ranks, costs=costs, iterations=analysis.selection.iterations(), time_model=model,
                           rows_without_rank=unranked)
