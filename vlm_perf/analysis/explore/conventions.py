"""One run under every convention: per-component comparisons and stated deviations."""

from __future__ import annotations

from typing import Iterable

import polars as pl

from ...arch.spec import ModelSpec
from ...errors import ConfigError
from ...flops import COMPONENTS, CONVENTIONS, compute_flops, get_convention
from ...stats import BatchStats


def components_by_convention(spec: ModelSpec, per_iteration: pl.DataFrame, conventions: Iterable[str] | None = None,
                             frozen: Iterable[str] = ()) -> pl.DataFrame:
    """Training FLOPs per (convention, component), summed over the rows of ``per_iteration``.

    Each convention is evaluated row by row (iteration by iteration) and then summed, exactly as
    :func:`vlm_perf.analysis.analyze_run` does for totals; ``frozen`` applies to ``exact`` only (the
    named conventions ignore it, as the run analysis does). Long format: convention, component, part
    (vision|language), flops.
    """
    convs = list(conventions) if conventions is not None else list(CONVENTIONS)
    cols = BatchStats.columns()
    frame = per_iteration.with_columns([pl.lit(0).alias(c) for c in BatchStats.field_names()
                                        if c not in per_iteration.columns])
    frame = frame.with_columns([pl.col(c).cast(pl.Float64) for c in BatchStats.field_names()])
    rows = []
    for conv in convs:
        c = get_convention(conv)
        if spec.lm.family in c.unsupported or not c.covers(spec.family or spec.model_type):
            continue
        b = compute_flops(spec, cols, conv, frozen=tuple(frozen) if conv == "exact" else ())
        exprs = [(v if isinstance(v, pl.Expr) else pl.lit(float(v))).cast(pl.Float64).sum().alias(k)
                 for k, v in b.components.items()]
        sums = frame.select(exprs).row(0, named=True)
        for comp in COMPONENTS:
            if comp in sums:
                rows.append({"convention": conv, "component": comp,
                             "part": "vision" if comp.startswith("vision.") else
                             "audio" if comp.startswith("audio.") else "language",
                             "flops": float(sums[comp] or 0.0)})
    return pl.DataFrame(rows)


def components_vs_reference(frame: pl.DataFrame, reference: str = "exact") -> pl.DataFrame:
    """Each (convention, component) of :func:`components_by_convention` next to ``reference``'s value:
    adds ``reference_flops``, ``delta`` (= flops - reference_flops) and ``ratio`` (null where the
    reference counts nothing). Sorted by convention, then largest absolute delta first."""
    ref = frame.filter(pl.col("convention") == reference).select("component", pl.col("flops").alias("reference_flops"))
    if ref.height == 0:
        raise ConfigError(f"reference convention {reference!r} is not in the frame")
    # every (convention, component) pair that either side counts; a component a convention leaves out is 0
    pairs = frame.select("convention").unique().join(frame.select("component", "part").unique(), how="cross")
    out = (pairs.join(frame.select("convention", "component", "flops"), on=["convention", "component"], how="left")
           .join(ref, on="component", how="left")
           .with_columns(pl.col("flops").fill_null(0.0), pl.col("reference_flops").fill_null(0.0)))
    out = out.with_columns((pl.col("flops") - pl.col("reference_flops")).alias("delta"),
                           pl.when(pl.col("reference_flops") > 0).then(pl.col("flops") / pl.col("reference_flops"))
                           .otherwise(None).alias("ratio"))
    order = {c: i for i, c in enumerate(dict.fromkeys(frame["convention"].to_list()))}
    return (out.with_columns(pl.col("convention").replace_strict(order, return_dtype=pl.Int64).alias("_o"),
                             pl.col("delta").abs().alias("_a"))
            .sort(["_o", "_a"], descending=[False, True]).drop("_o", "_a"))


def convention_summary_frame(run) -> pl.DataFrame:
    """``RunAnalysis.convention_summary()`` as a frame: convention, counts_vision, mean TFLOP/s/GPU, MFU,
    total FLOPs of the run, and the ratio of each rate to the LM-only ``megatron-lm`` one."""
    summary = run.convention_summary()
    base = (summary.get("megatron-lm") or {}).get("tflops_per_gpu_mean")
    rows = []
    for conv, entry in summary.items():
        rate = entry["tflops_per_gpu_mean"]
        rows.append({"convention": conv, "counts_vision": get_convention(conv).counts_vision,
                     "tflops_per_gpu_mean": rate, "mfu_mean": entry["mfu_mean"],
                     "flops_total": entry["flops_total"],
                     "vs_megatron_lm": rate / base if rate is not None and base else None})
    return pl.DataFrame(rows, schema_overrides={"tflops_per_gpu_mean": pl.Float64, "mfu_mean": pl.Float64,
                                                "vs_megatron_lm": pl.Float64})


def deviation_table(conventions: Iterable[str] | None = None) -> pl.DataFrame:
    """Name, source, formula and the stated deviations from ``exact`` of each convention."""
    convs = list(conventions) if conventions is not None else list(CONVENTIONS)
    return pl.DataFrame([{"convention": c.name, "counts_vision": c.counts_vision, "source": c.source,
                          "formula": c.formula,
                          "deviations": "; ".join(c.deviations) if c.deviations else "(reference)"}
                         for c in (get_convention(n) for n in convs)])
