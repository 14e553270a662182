"""One RL (GRPO / PPO) step from a log: the phase table, the estimate from mean lengths, and the rollout size.

Pure: no I/O. Input is the iteration frame of ``vlm_perf.ingest.logs`` (its RL columns: ``phase_s_<phase>``
seconds per canonical phase, ``timer_s_<name>`` timers that are not phases, ``elapsed_s`` the step's time,
``prompt_len_mean`` / ``response_len_mean`` / ``step_tokens``), and the step's FLOPs by phase
(:class:`~vlm_perf.flops.generation.RLStepFlops`, or a frame of per-iteration phase FLOPs).

* :func:`phase_table` — per iteration and phase: seconds, FLOPs, TFLOP/s per GPU, share of the step's time,
  and the **unaccounted** time ``step - sum(phases)`` (veRL's ``timing_s/step`` minus its phase timers: the
  driver's own work between phases, metric computation, data loading). Vectorised (one polars plan).
* :func:`rl_samples_expr` — responses per step from the log: veRL / EasyR1 ``perf/total_num_tokens`` is the
  attention-mask token count of the step's batch, ``sum(prompt + response)``, and ``prompt_length/mean`` /
  ``response_length/mean`` are means over the same responses, so ``n = total / (mean_P + mean_N)``.
* :func:`rl_step_flops_estimate` — the step's phases when a log gives only mean lengths (no per-sample
  metadata). An **estimate**: every response is given the mean prompt and the mean response length, and
  attention (quadratic in length) is counted on the mean, so a spread of lengths is under-counted
  (``mean(L^2) >= mean(L)^2``); the result's notes say so.
"""

from __future__ import annotations

from fractions import Fraction
from typing import Any, Sequence

import polars as pl

from ..arch.spec import ModelSpec
from ..errors import ConfigError
from .generation import COMPOSITE_PHASES, PHASES, RLStepFlops, rl_step_flops

#: Iteration-frame column prefixes (``vlm_perf.ingest.logs.vocab.PHASE_PREFIX`` / ``TIMER_PREFIX``; a test keeps
#: them equal: this layer does not import the ingest layer).
PHASE_PREFIX = "phase_s_"
TIMER_PREFIX = "timer_s_"
#: The row of the phase table that holds ``step - sum(phases)``.
UNACCOUNTED = "unaccounted"

PHASE_TABLE_SCHEMA: dict[str, pl.DataType] = {
    "iteration": pl.Int64(), "phase": pl.Utf8(), "kind": pl.Utf8(), "in_sum": pl.Boolean(), "seconds": pl.Float64(),
    "flops": pl.Float64(), "tflops_per_gpu": pl.Float64(), "share_of_step": pl.Float64(), "step_s": pl.Float64(),
}


def _flops_frame(step: RLStepFlops | pl.DataFrame | None) -> pl.DataFrame | None:
    """``(phase, flops)`` for one step used on every iteration, or ``(iteration, phase, flops)`` as given."""
    if step is None:
        return None
    if isinstance(step, RLStepFlops):
        totals = step.phase_totals()
        return pl.DataFrame({"phase": list(totals), "flops": [float(v) for v in totals.values()]},
                            schema={"phase": pl.Utf8, "flops": pl.Float64})
    if isinstance(step, pl.DataFrame):
        missing = {"iteration", "phase", "flops"} - set(step.columns)
        if missing:
            raise ConfigError(f"per-iteration phase FLOPs need columns iteration, phase, flops; missing "
                              f"{', '.join(sorted(missing))}")
        return step.select(pl.col("iteration").cast(pl.Int64), pl.col("phase").cast(pl.Utf8),
                           pl.col("flops").cast(pl.Float64))
    raise ConfigError(f"step FLOPs must be an RLStepFlops or a polars DataFrame, got {type(step).__name__}")


def _with_composites(flops: pl.DataFrame, timed: set[str]) -> pl.DataFrame:
    """A timed composite phase (OpenRLHF ``make_experience``, ``ppo_train``) gets the FLOPs of the phases inside
    it; those phases, when not timed on their own, are dropped (their time is the composite's)."""
    comps = [c for c in COMPOSITE_PHASES if c in timed]
    if not comps:
        return flops
    by_it = "iteration" in flops.columns
    parts = [flops]
    for c in comps:
        inner = flops.filter(pl.col("phase").is_in(list(COMPOSITE_PHASES[c])))
        total = (inner.group_by("iteration").agg(pl.col("flops").sum()) if by_it
                 else inner.select(pl.col("flops").sum()))
        parts.append(total.with_columns(pl.lit(c).alias("phase")).select(flops.columns))
    inside = {p for c in comps for p in COMPOSITE_PHASES[c]} - timed
    return pl.concat(parts, how="vertical").filter(~pl.col("phase").is_in(sorted(inside)))


def phase_table(iterations: pl.DataFrame, step: RLStepFlops | pl.DataFrame | None = None,
                num_gpus: int | None = None) -> pl.DataFrame:
    """The step's phase table, one row per (iteration, phase), in a single polars plan (no loop over rows).

    Columns (``PHASE_TABLE_SCHEMA``): ``iteration``; ``phase`` (a canonical phase, ``timer:<name>`` for a kept
    timer, or ``unaccounted``); ``kind`` (``phase`` | ``timer`` | ``unaccounted``); ``in_sum`` (the row is one of
    the phases whose sum is compared with the step: canonical phases only — kept timers are nested in a phase,
    outside the step, or unknown, and are listed but never added); ``seconds``; ``flops`` (the phase's FLOPs from
    ``step``: 0 for a phase that does no model FLOPs here (reward, adv, update_weights...), null for timers,
    the unaccounted row, or when ``step`` is None); ``tflops_per_gpu`` = flops / seconds / ``num_gpus`` / 1e12
    (every phase spread over all ``num_gpus``, as in a colocated veRL / EasyR1 / OpenRLHF hybrid engine; null
    without ``num_gpus`` or seconds); ``share_of_step`` = seconds / step; ``step_s`` = ``elapsed_s``.

    The ``unaccounted`` row is ``step - sum(in_sum seconds)`` (null when the iteration has no step time or no
    phase time). ``step``: one :class:`RLStepFlops` used for every iteration, or a frame ``(iteration, phase,
    flops)``; a FLOPs phase without a timer in the log keeps its row with null seconds.
    """
    if num_gpus is not None and num_gpus <= 0:
        raise ConfigError(f"num_gpus must be > 0, got {num_gpus}")
    if "iteration" not in iterations.columns:
        raise ConfigError("the iteration frame has no 'iteration' column")
    phase_cols = [c for c in iterations.columns if c.startswith(PHASE_PREFIX)]
    timer_cols = [c for c in iterations.columns if c.startswith(TIMER_PREFIX)]
    unknown = [c for c in phase_cols if c[len(PHASE_PREFIX):] not in PHASES]
    if unknown:
        raise ConfigError(f"phase columns {', '.join(unknown)} are not canonical phases ({', '.join(PHASES)})")
    base = iterations.select(pl.col("iteration").cast(pl.Int64),
                             (pl.col("elapsed_s").cast(pl.Float64) if "elapsed_s" in iterations.columns
                              else pl.lit(None, pl.Float64)).alias("step_s"),
                             *[pl.col(c).cast(pl.Float64) for c in phase_cols + timer_cols])
    long = base.unpivot(index=["iteration", "step_s"], on=phase_cols + timer_cols, variable_name="column",
                        value_name="seconds") if phase_cols or timer_cols else pl.DataFrame(
        schema={"iteration": pl.Int64, "step_s": pl.Float64, "column": pl.Utf8, "seconds": pl.Float64})
    is_phase = pl.col("column").str.starts_with(PHASE_PREFIX)
    long = long.with_columns(
        pl.when(is_phase).then(pl.col("column").str.slice(len(PHASE_PREFIX)))
        .otherwise(pl.lit("timer:") + pl.col("column").str.slice(len(TIMER_PREFIX))).alias("phase"),
        pl.when(is_phase).then(pl.lit("phase")).otherwise(pl.lit("timer")).alias("kind"),
        is_phase.alias("in_sum")).drop("column")
    flops = _flops_frame(step)
    if flops is not None:
        flops = _with_composites(flops, {c[len(PHASE_PREFIX):] for c in phase_cols})
        if "iteration" in flops.columns:
            keys = flops.select("iteration", "phase")
        else:  # one step for every iteration: each iteration gets every FLOPs phase
            keys = base.select("iteration").unique().join(flops.select("phase"), how="cross")
        missing = (keys.join(long.select("iteration", "phase"), on=["iteration", "phase"], how="anti")
                   .join(base.select("iteration", "step_s"), on="iteration", how="left")
                   .with_columns(pl.lit(None, pl.Float64).alias("seconds"), pl.lit("phase").alias("kind"),
                                 pl.lit(True).alias("in_sum")))
        long = pl.concat([long, missing.select(long.columns)], how="vertical")
        on = ["iteration", "phase"] if "iteration" in flops.columns else ["phase"]
        long = long.join(flops, on=on, how="left").with_columns(
            pl.when(pl.col("kind") == "phase").then(pl.col("flops").fill_null(0.0)).otherwise(None).alias("flops"))
    else:
        long = long.with_columns(pl.lit(None, pl.Float64).alias("flops"))
    summed = (long.filter(pl.col("in_sum"))
              .group_by("iteration")
              .agg(pl.col("seconds").sum().alias("_sum"), pl.col("seconds").is_not_null().any().alias("_any")))
    unacc = (base.select("iteration", "step_s").join(summed, on="iteration", how="left")
             .select("iteration", "step_s",
                     pl.when(pl.col("_any").fill_null(False)).then(pl.col("step_s") - pl.col("_sum"))
                     .otherwise(None).alias("seconds"),
                     pl.lit(UNACCOUNTED).alias("phase"), pl.lit(UNACCOUNTED).alias("kind"), pl.lit(False).alias("in_sum"),
                     pl.lit(None, pl.Float64).alias("flops")))
    out = pl.concat([long.select(unacc.columns), unacc], how="vertical_relaxed")
    rate = (pl.col("flops") / pl.col("seconds") / num_gpus / 1e12) if num_gpus else pl.lit(None, pl.Float64)
    out = out.with_columns(
        pl.when(pl.col("seconds") > 0).then(rate).otherwise(None).alias("tflops_per_gpu"),
        pl.when(pl.col("step_s") > 0).then(pl.col("seconds") / pl.col("step_s")).otherwise(None).alias("share_of_step"))
    order = {name: i for i, name in enumerate(PHASES)}
    out = out.with_columns(pl.col("phase").replace_strict(order, default=len(order), return_dtype=pl.Int64)
                           .alias("_o"),
                           (pl.col("kind") == UNACCOUNTED).alias("_u"))
    return out.sort("iteration", "_u", "_o", "phase").select(
        [pl.col(c).cast(t) for c, t in PHASE_TABLE_SCHEMA.items()])


STEP_SUMMARY_SCHEMA: dict[str, pl.DataType] = {
    "iteration": pl.Int64(), "step_s": pl.Float64(), "phases_s": pl.Float64(), "unaccounted_s": pl.Float64(),
    "flops": pl.Float64(), "tflops_per_gpu": pl.Float64(), "update_actor_s": pl.Float64(),
    "update_actor_share": pl.Float64(),
}


def step_summary(table: pl.DataFrame, num_gpus: int) -> pl.DataFrame:
    """One row per iteration of a :func:`phase_table`: the step time, the sum of the summed phases, the
    unaccounted time, all phases' FLOPs and the STEP's rate ``flops / step_s / num_gpus / 1e12`` (every phase's
    work over the whole step — what a per-step TFLOP/s is for an RL step), and the actor update's seconds and
    share of the step (the only time veRL's ``perf/mfu/actor`` divides by). ``flops`` is null when the table has
    none."""
    if num_gpus <= 0:
        raise ConfigError(f"num_gpus must be > 0, got {num_gpus}")
    missing = set(PHASE_TABLE_SCHEMA) - set(table.columns)
    if missing:
        raise ConfigError(f"not a phase table: missing {', '.join(sorted(missing))}")
    summed = pl.col("in_sum")
    is_update = (pl.col("phase") == "update_actor") | (pl.col("phase") == "ppo_train")
    out = table.group_by("iteration", maintain_order=True).agg(
        pl.col("step_s").first(),
        pl.col("seconds").filter(summed).sum().alias("phases_s"),
        pl.col("seconds").filter(pl.col("kind") == UNACCOUNTED).first().alias("unaccounted_s"),
        pl.when(pl.col("flops").filter(summed).is_not_null().any())
        .then(pl.col("flops").filter(summed).sum()).otherwise(None).alias("flops"),
        pl.col("seconds").filter(is_update).first().alias("update_actor_s"))
    return out.with_columns(
        pl.when(pl.col("step_s") > 0).then(pl.col("flops") / pl.col("step_s") / num_gpus / 1e12).otherwise(None)
        .alias("tflops_per_gpu"),
        pl.when(pl.col("step_s") > 0).then(pl.col("update_actor_s") / pl.col("step_s")).otherwise(None)
        .alias("update_actor_share")).select([pl.col(c).cast(t) for c, t in STEP_SUMMARY_SCHEMA.items()])


def rl_samples_expr(total: str = "step_tokens", prompt_mean: str = "prompt_len_mean",
                    response_mean: str = "response_len_mean") -> pl.Expr:
    """Responses in the step: ``total / (prompt_mean + response_mean)``, rounded to the nearest integer (the
    log prints the means rounded; the quotient is a count). Null where a column is null or the sum is 0. A log
    that prints the count itself (OpenRLHF ``rollout/num_samples``) has it as the column ``rl_samples``."""
    per = pl.col(prompt_mean).cast(pl.Float64) + pl.col(response_mean).cast(pl.Float64)
    return (pl.when(per > 0).then(pl.col(total).cast(pl.Float64) / per).otherwise(None)
            .round(0).cast(pl.Int64).alias("rl_samples"))


def step_samples(iterations: pl.DataFrame, samples: int | None = None) -> pl.Expr:
    """Responses per step, one rule for every log-based RL estimate: ``samples`` when given (a positive integer),
    else the log's ``rl_samples`` column, else :func:`rl_samples_expr` from ``step_tokens``; none of them is an
    error naming what to give."""
    if samples is not None:
        if int(samples) != samples or samples < 1:
            raise ConfigError(f"samples must be a positive integer, got {samples!r}")
        return pl.lit(int(samples), pl.Int64)
    if "rl_samples" in iterations.columns:
        return pl.col("rl_samples").cast(pl.Int64)
    if "step_tokens" in iterations.columns:
        return rl_samples_expr()
    raise ConfigError("no sample count: the log has no rl_samples / step_tokens column; give samples=")


ESTIMATE_NOTE = ("ESTIMATE from the log's mean lengths (no per-sample metadata): every response counted with the "
                 "mean prompt ({p}) and mean response ({n}) length; attention is quadratic in length, so a spread "
                 "of lengths is under-counted (mean(L^2) >= mean(L)^2), and generation's KV-cache attention too")


def rl_step_flops_estimate(spec: ModelSpec, samples: int, prompt_len_mean: float, response_len_mean: float,
                           image_grids_per_sample: Sequence[Sequence[int]] = (), **rl_kwargs: Any) -> RLStepFlops:
    """An ESTIMATE of one RL step's phases when the log gives only mean lengths: ``samples`` responses, each
    with ``round(prompt_len_mean)`` prompt positions (visual placeholder tokens included, as veRL's
    ``prompt_length`` counts them) and ``round(response_len_mean)`` generated tokens, each with the media of
    ``image_grids_per_sample`` (``image_grid_thw`` rows; none: the vision tower is not counted). ``rl_kwargs``
    go to :func:`~vlm_perf.flops.generation.rl_step_flops` (``trainability``, ``ppo_epochs``, ``reference``,
    ``critic``, ``causal``...).

    Under-counts attention whenever lengths vary (quadratic terms on the mean; see the module docstring), and
    rounds the means; the returned notes start with the word ESTIMATE. Use per-sample lengths
    (:func:`rl_step_flops`) whenever the run's metadata has them."""
    if int(samples) != samples or samples < 1:
        raise ConfigError(f"samples must be a positive integer, got {samples!r}")
    p, n = round(float(prompt_len_mean)), round(float(response_len_mean))
    if p < 1 or n < 0:
        raise ConfigError(f"mean prompt length must round to >= 1 and mean response length to >= 0, got "
                          f"{prompt_len_mean!r} and {response_len_mean!r}")
    grids = [tuple(g) for g in image_grids_per_sample]
    step = rl_step_flops(spec, [p] * int(samples), [n] * int(samples), image_grids=grids * int(samples),
                         **rl_kwargs)
    note = ESTIMATE_NOTE.format(p=prompt_len_mean, n=response_len_mean)
    extra = () if grids else ("no image grids given: the vision tower and projector are not counted",)
    return RLStepFlops(step.phases, step.generation, (note, *extra, *step.notes))


# ---- the estimate over every iteration of a log, in one polars plan ------------------------------------------

#: the monomials of one sample's phase FLOPs in (P, N) = (prompt positions, generated tokens): with the media
#: fixed, every phase is a polynomial of degree 2 (linear terms, causal attention over P + N, the KV-cache sum
#: sum_{j<N} (P + j)), which :func:`rl_estimate_flops_frame` fits exactly and checks
_MONOMIALS = ((0, 0), (1, 0), (0, 1), (2, 0), (0, 2), (1, 1))


def _solve(rows: list[list[Fraction]], rhs: list[Fraction]) -> list[Fraction] | None:
    """Exact Gaussian elimination (a 6 x 6 system); None when singular."""
    n = len(rows)
    a = [r[:] + [b] for r, b in zip(rows, rhs)]
    for col in range(n):
        piv = next((i for i in range(col, n) if a[i][col] != 0), None)
        if piv is None:
            return None
        a[col], a[piv] = a[piv], a[col]
        for i in range(n):
            if i != col and a[i][col] != 0:
                f = a[i][col] / a[col][col]
                a[i] = [x - f * y for x, y in zip(a[i], a[col])]
    return [a[i][n] / a[i][i] for i in range(n)]


def _exact(v: Any) -> Fraction:
    """A FLOP count (int or float) as an exact fraction (a float's exact binary value)."""
    return Fraction(v)


def _points(values: list[int], low: int) -> list[int]:
    """Three distinct evaluation points spanning ``values`` (at least ``low``)."""
    lo, hi = max(min(values), low), max(max(values), low)
    pts = sorted({lo, max((lo + hi) // 2, low), hi})
    while len(pts) < 3:
        pts.append(pts[-1] + 1)
    return pts[:3]


def rl_estimate_flops_frame(spec: ModelSpec, iterations: pl.DataFrame,
                            image_grids_per_sample: Sequence[Sequence[int]] = (), samples: int | None = None,
                            **rl_kwargs: Any) -> tuple[pl.DataFrame, tuple[str, ...]]:
    """ESTIMATE of every iteration's phase FLOPs from the log's mean lengths, as ``(iteration, phase, flops)``
    rows for :func:`phase_table`, and the notes that say it is an estimate.

    Per iteration: ``rl_samples`` responses (the column, else :func:`rl_samples_expr`, else ``samples``), each
    with ``round(prompt_len_mean)`` prompt positions and ``round(response_len_mean)`` generated tokens and the
    media ``image_grids_per_sample`` — the same estimate as :func:`rl_step_flops_estimate`, with its
    under-count of attention when lengths vary. One sample's phase FLOPs are an exact degree-2 polynomial in
    (P, N); its coefficients are solved exactly from six :func:`rl_step_flops` evaluations spanning the log's
    lengths and checked at three more, then applied to all rows in one polars expression (no Python loop per
    row). A model whose FLOPs are not that polynomial there (sliding-window layers crossing their window) is
    refused with UnsupportedModelError. Rows without lengths, a response length below 1 or no sample count
    get no rows."""
    from ..errors import UnsupportedModelError

    need = {"iteration", "prompt_len_mean", "response_len_mean"}
    missing = need - set(iterations.columns)
    if missing:
        raise ConfigError(f"an estimate from mean lengths needs columns {', '.join(sorted(need))}; missing "
                          f"{', '.join(sorted(missing))}")
    n_expr = step_samples(iterations, samples)
    rows = iterations.select(pl.col("iteration").cast(pl.Int64), n_expr.alias("_n"),
                             pl.col("prompt_len_mean").cast(pl.Float64).round(0).cast(pl.Int64).alias("_p"),
                             pl.col("response_len_mean").cast(pl.Float64).round(0).cast(pl.Int64).alias("_r")
                             ).filter(pl.col("_n").is_not_null() & (pl.col("_n") > 0) & pl.col("_p").is_not_null()
                                      & (pl.col("_p") >= 1) & pl.col("_r").is_not_null() & (pl.col("_r") >= 1))
    notes = (ESTIMATE_NOTE.format(p="per iteration", n="per iteration"),
             *(() if image_grids_per_sample else ("no image grids given: the vision tower and projector are not "
                                                  "counted",)))
    empty = pl.DataFrame(schema={"iteration": pl.Int64, "phase": pl.Utf8, "flops": pl.Float64})
    if rows.height == 0:
        return empty, notes
    grids = [tuple(g) for g in image_grids_per_sample]
    ps = _points(rows.get_column("_p").to_list(), 1)
    ns = _points(rows.get_column("_r").to_list(), 1)

    def one(p: int, n: int) -> dict[str, Any]:
        return rl_step_flops(spec, [p], [n], image_grids=grids, **rl_kwargs).phase_totals()

    fit_pts = [(ps[0], ns[0]), (ps[1], ns[0]), (ps[2], ns[0]), (ps[0], ns[1]), (ps[0], ns[2]), (ps[1], ns[1])]
    check_pts = [(ps[2], ns[2]), (ps[1], ns[2]), (ps[2], ns[1])]
    fits = [one(p, n) for p, n in fit_pts]
    checks = [one(p, n) for p, n in check_pts]
    matrix = [[Fraction(p) ** i * Fraction(n) ** j for i, j in _MONOMIALS] for p, n in fit_pts]
    exprs = []
    for phase in fits[0]:
        coef = _solve(matrix, [_exact(f[phase]) for f in fits])
        if coef is None:
            raise UnsupportedModelError(f"{spec.name}: the mean-length estimate could not be fitted")
        for (p, n), got in zip(check_pts, checks):
            want = sum(c * Fraction(p) ** i * Fraction(n) ** j for c, (i, j) in zip(coef, _MONOMIALS))
            if abs(float(want) - float(got[phase])) > 1e-9 * max(1.0, abs(float(got[phase]))):
                raise UnsupportedModelError(
                    f"{spec.name}: phase {phase!r} FLOPs are not a degree-2 polynomial of the lengths here "
                    "(e.g. sliding-window layers); estimate each step with rl_step_flops_estimate instead")
        poly = sum((float(c) * pl.col("_p").cast(pl.Float64) ** i * pl.col("_r").cast(pl.Float64) ** j
                    for c, (i, j) in zip(coef, _MONOMIALS) if c != 0), pl.lit(0.0))
        exprs.append(pl.struct(pl.lit(phase).alias("phase"), (pl.col("_n").cast(pl.Float64) * poly).alias("flops"))
                     .alias(phase))
    out = rows.select("iteration", *exprs).unpivot(index="iteration", value_name="_s").unnest("_s").drop("variable")
    return out.select("iteration", "phase", pl.col("flops").cast(pl.Float64)), notes


__all__ = ["ESTIMATE_NOTE", "PHASE_PREFIX", "PHASE_TABLE_SCHEMA", "TIMER_PREFIX", "UNACCOUNTED",
           "STEP_SUMMARY_SCHEMA", "phase_table", "rl_estimate_flops_frame", "rl_samples_expr", "step_samples",
           "rl_step_flops_estimate", "step_summary"]
