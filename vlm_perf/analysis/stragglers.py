"""Stragglers from the logs' per-rank timing, and whether the slow rank is the one with the heavy vision load.

Inputs are the frames of `vlm_perf.ingest.logs.timers.RankTiming` (pure functions, no I/O):

* Megatron timers give, per logged iteration and phase, the (min, max) over ALL ranks of the time per
  iteration in the window (ms). ``relative_spread = (max - min) / max`` is the share of the slowest
  rank's time the fastest one did not need. Ranks of different pipeline stages run different layers,
  so with PP > 1 part of a compute timer's spread is structural, not data.
* Megatron's StragglerDetector names the min / max rank of each metric (round-trip time ``Rtt``,
  estimated throughput ``Etpt``, clock, power, temperature) per report.
* NVRx reports per-rank performance scores; below ``NVRX_THRESHOLD`` (its default 0.7) a rank is a
  straggler.
* Rank-prefixed iteration lines give each rank's own step time.

Correlation with the DP load balance (`vlm_perf.analysis.balance`): a global rank is mapped to its
DP rank with Megatron's default rank order ``tp-cp-ep-dp-pp`` (tensor-parallel fastest):
``dp_rank = (rank // (tp * cp)) % dp``. For every report the heaviest DP rank of that window's
microbatches (sum of exact training FLOPs over the window's iterations) is compared with the slow
rank; the match rate is shown next to chance (1 / dp). Timer spreads are compared with the spread
the FLOPs predict, ``(max_r F_r - min_r F_r) / max_r F_r`` over the same window.
"""

from __future__ import annotations

import numpy as np
import polars as pl

__all__ = ["NVRX_THRESHOLD", "timer_spread", "dp_rank_of", "window_rank_flops", "straggler_summary"]

NVRX_THRESHOLD = 0.7
COMPUTE_TIMERS = ("forward-backward", "forward-compute", "backward-compute")


def timer_spread(timers: pl.DataFrame) -> pl.DataFrame:
    """Per (iteration, timer) with both min and max: spread_ms and relative_spread; training only.
    An iteration logged twice (replayed after a restart) keeps its last block."""
    return (timers.filter(pl.col("iteration").is_not_null() & pl.col("min_ms").is_not_null())
            .unique(subset=["iteration", "timer"], keep="last", maintain_order=True)  # replayed after a restart
            .with_columns((pl.col("max_ms") - pl.col("min_ms")).alias("spread_ms"))
            .with_columns(pl.when(pl.col("max_ms") > 0).then(pl.col("spread_ms") / pl.col("max_ms"))
                          .alias("relative_spread")))


def dp_rank_of(rank: pl.Expr, tp: int, cp: int, dp: int) -> pl.Expr:
    """DP rank of a global rank under Megatron's default order tp-cp-ep-dp-pp."""
    return (rank // (tp * cp)) % dp


def window_rank_flops(ranks: pl.DataFrame, report_iterations: list[int], interval: int) -> pl.DataFrame:
    """``report_iteration, dp_rank, flops``: each rank's exact FLOPs summed over the window
    (report_iteration - interval, report_iteration] (vectorised with an as-of join)."""
    ends = pl.DataFrame({"report_iteration": sorted(set(report_iterations))}, schema={"report_iteration": pl.Int64})
    rows = (ranks.select(pl.col("iteration").cast(pl.Int64), "dp_rank", "flops").sort("iteration")
            .join_asof(ends, left_on="iteration", right_on="report_iteration", strategy="forward")
            .filter(pl.col("report_iteration").is_not_null()
                    & (pl.col("iteration") > pl.col("report_iteration") - interval)))
    return rows.group_by("report_iteration", "dp_rank").agg(pl.col("flops").sum()).sort("report_iteration", "dp_rank")


def _heaviest(window_flops: pl.DataFrame) -> pl.DataFrame:
    return window_flops.group_by("report_iteration").agg(
        pl.col("dp_rank").sort_by(["flops", "dp_rank"], descending=[True, False]).first().alias("heaviest_dp_rank"),
        ((pl.col("flops").max() - pl.col("flops").min()) / pl.col("flops").max()).alias("predicted_spread"),
        pl.len().alias("_ranks"))


def _timer_block(timers: pl.DataFrame) -> dict:
    spread = timer_spread(timers)
    per_timer = []
    for name, group in spread.group_by("timer", maintain_order=True):  # one row per timer name (a handful)
        worst = group.sort("relative_spread", descending=True, nulls_last=True).row(0, named=True)
        per_timer.append({"timer": name[0], "iterations": group.height,
                          "spread_ms_median": float(group["spread_ms"].median()),
                          "relative_spread_median": group["relative_spread"].median(),
                          "relative_spread_max": worst["relative_spread"], "worst_iteration": worst["iteration"],
                          "max_ms_median": float(group["max_ms"].median())})
    per_timer.sort(key=lambda e: -(e["max_ms_median"] or 0))
    return {"logged_iterations": int(spread["iteration"].n_unique()) if spread.height else 0,
            "timers": per_timer,
            "max_only_timers": sorted(timers.filter(pl.col("min_ms").is_null())["timer"].unique().to_list())}


def _count_ranks(series: pl.Series, top: int = 5) -> list[dict]:
    counts = series.drop_nulls().value_counts().sort(["count", series.name], descending=[True, False])
    total = int(counts["count"].sum()) if counts.height else 0
    return [{"rank": int(r), "reports": int(c), "share": c / total} for r, c in counts.head(top).iter_rows()]


#: a launcher's rank label before a timer name: torchrun ``[default7]:``, ``[rank3]:``, srun -l ``3:``
RANK_PREFIX = r"^\s*(?:\[[^\]]*\]:?|\d+:)\s*"


def plain_timer_names(timers: pl.DataFrame) -> pl.DataFrame:
    """Timer names without the launcher's rank label (``[default7]:    forward-backward`` ->
    ``forward-backward``): the (min, max) a timer line prints is across ranks whichever rank printed it."""
    if not timers.height or "timer" not in timers.columns:
        return timers
    return timers.with_columns(pl.col("timer").str.replace(RANK_PREFIX, "").str.strip_chars())


def straggler_summary(timing, *, ranks: pl.DataFrame | None = None, tp: int | None = None, cp: int | None = None,
                      dp: int | None = None, interval: int | None = None) -> dict:
    """The summary.json ``stragglers`` block. ``timing``: a `RankTiming`; ``ranks``: the balance's
    per-(iteration, dp_rank) FLOPs (``BalanceResult.ranks``), for the correlation."""
    import dataclasses

    if dataclasses.is_dataclass(timing) and getattr(timing, "timers", None) is not None:
        timing = dataclasses.replace(timing, timers=plain_timer_names(timing.timers))
    out: dict = {"counts": dict(timing.counts), "timers": None, "detector": None, "nvrx": None, "rank_steps": None,
                 "vision_correlation": None, "notes": []}
    if timing.timers.height:
        out["timers"] = _timer_block(timing.timers)
        if timing.counts.get("timer_lines_before_training"):
            out["notes"].append(f"{timing.counts['timer_lines_before_training']} timer line(s) before the first "
                                "iteration (setup) left out of the spreads")
    det = timing.detector
    if det.height:
        rtt = det.filter(pl.col("metric") == "Rtt")
        etpt = det.filter(pl.col("metric") == "Etpt")
        out["detector"] = {
            "reports": int(det["line"].n_unique()),
            "rtt_relative_spread_median": float(((rtt["max_value"] - rtt["min_value"]) / rtt["max_value"]).median())
            if rtt.height else None,
            "slowest_ranks_rtt": _count_ranks(rtt["max_rank"].rename("rank")) if rtt.height else [],
            "lowest_throughput_ranks": _count_ranks(etpt["min_rank"].rename("rank")) if etpt.height else []}
    if timing.nvrx.height:
        worst = timing.nvrx.filter(pl.col("group") == "worst")
        below = worst.filter(pl.col("score") < NVRX_THRESHOLD)
        out["nvrx"] = {"threshold": NVRX_THRESHOLD,
                       "stragglers": sorted(below["rank"].unique().to_list()),
                       "worst": [{"kind": k, "rank": r, "node": n, "score": s} for k, r, n, s in
                                 worst.sort("score").select("kind", "rank", "node", "score").head(5).iter_rows()]}
    steps = timing.rank_steps
    if steps.height and steps["rank"].n_unique() > 1:
        per_rank = steps.group_by("rank", "rank_kind").agg(pl.col("elapsed_ms").median().alias("median_ms"),
                                                           pl.len().alias("lines")).sort("median_ms", descending=True)
        per_it = steps.group_by("iteration").agg(((pl.col("elapsed_ms").max() - pl.col("elapsed_ms").min())
                                                  / pl.col("elapsed_ms").max()).alias("spread"),
                                                 pl.col("rank").sort_by("elapsed_ms", descending=True).first()
                                                 .alias("slowest_rank"))
        middle = float(per_rank["median_ms"].median())
        slow = per_rank.row(0, named=True)
        out["rank_steps"] = {"ranks": per_rank.height, "rank_kind": slow["rank_kind"],
                             "iterations": per_it.height,
                             "relative_spread_median": float(per_it["spread"].median()),
                             "slowest_rank": int(slow["rank"]), "slowest_median_ms": slow["median_ms"],
                             "slowest_over_median_rank": slow["median_ms"] / middle if middle else None,
                             "slowest_ranks": _count_ranks(per_it["slowest_rank"].rename("rank"))}
    out["vision_correlation"] = _correlate(timing, ranks, tp, cp, dp, interval, out["notes"])
    return out


def _correlate(timing, ranks, tp, cp, dp, interval, notes: list[str]) -> dict | None:
    """Is the slow rank the one with the heavy vision load? (needs metadata with dp_rank)"""
    if ranks is None or ranks.height == 0:
        return None
    dp = dp or int(ranks["dp_rank"].n_unique())
    tp, cp, interval = tp or 1, cp or 1, interval or 1
    result: dict = {"rank_order": "tp-cp-ep-dp-pp (Megatron default)", "tp": tp, "cp": cp, "dp": dp,
                    "chance": 1 / dp if dp else None}
    sources = []
    if timing.detector.height:
        rtt = timing.detector.filter((pl.col("metric") == "Rtt") & pl.col("iteration").is_not_null())
        sources.append(("straggler_detector", rtt.select(pl.col("iteration").alias("report_iteration"),
                                                         pl.col("max_rank").alias("slow_rank"))))
    steps = timing.rank_steps.filter(pl.col("rank_kind") == "global")
    if steps.height and steps["rank"].n_unique() > 1:
        slow = steps.group_by("iteration").agg(pl.col("rank").sort_by("elapsed_ms", descending=True).first()
                                               .alias("slow_rank"))
        sources.append(("rank_steps", slow.rename({"iteration": "report_iteration"})))
    for name, slow in sources:
        heavy = _heaviest(window_rank_flops(ranks, slow["report_iteration"].to_list(), interval))
        joined = (slow.with_columns(dp_rank_of(pl.col("slow_rank"), tp, cp, dp).alias("slow_dp_rank"))
                  .join(heavy.filter(pl.col("_ranks") == dp), on="report_iteration", how="inner"))
        if joined.height:
            result[name] = {"reports": joined.height,
                            "slow_is_heaviest_fraction": float((joined["slow_dp_rank"]
                                                                == joined["heaviest_dp_rank"]).mean())}
    spread = timer_spread(timing.timers).filter(pl.col("timer").is_in(COMPUTE_TIMERS))
    if spread.height:
        heavy = _heaviest(window_rank_flops(ranks, spread["iteration"].unique().to_list(), interval))
        joined = spread.join(heavy.filter(pl.col("_ranks") == dp).rename({"report_iteration": "iteration"}),
                             on="iteration", how="inner")
        per = []
        for (name,), g in joined.group_by("timer", maintain_order=True):  # a handful of timer names
            x, y = g["predicted_spread"].to_numpy(), g["relative_spread"].to_numpy()
            corr = float(np.corrcoef(x, y)[0, 1]) if len(x) >= 3 and np.std(x) > 0 and np.std(y) > 0 else None
            per.append({"timer": name, "windows": g.height, "observed_median": float(np.median(y)),
                        "predicted_from_flops_median": float(np.median(x)), "correlation": corr})
        result["timer_vs_flops_spread"] = per
    if len(result) == 5:  # nothing to correlate with
        if not timing.empty:
            notes.append("no per-rank timing in the logs to correlate with the DP load balance")
        return None
    return result


def stragglers_of(timing, config, balance, analysis) -> dict:
    """The stragglers block: ``timing`` (the logs' per-rank timing lines, `RankTiming`) correlated with the DP load
    balance (``balance``: a `BalanceResult` or None) when metadata exists; ``config``: the resolved `RunConfig`
    (parallel sizes, log interval), ``analysis``: the run's `RunAnalysis` (its windows give the log interval)."""
    from .windows import infer_log_interval

    interval = config.log_interval or infer_log_interval(analysis.windows.select("segment", "iteration"))
    return straggler_summary(timing, ranks=balance.ranks if balance is not None else None,
                             tp=config.tensor_parallel, cp=config.context_parallel, dp=config.data_parallel,
                             interval=interval)
