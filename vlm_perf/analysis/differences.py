"""Why a convention's number differs from exact on THIS run: per-component FLOPs deltas.

Every convention splits its training FLOPs into the same named components as ``exact``
(``vision.attn_core``, ``lm.dense_mlp`` ...). Summed over the run's iterations, the difference
``convention - exact`` per component says where a convention counts more or less, in FLOPs and
as a fraction of exact's run total; the largest contributors are what the report names.
"""

from __future__ import annotations

from typing import Iterable

import polars as pl

from ..arch.spec import ModelSpec
from ..flops import compute_flops
from ..flops.regime import exact_flops
from ..stats import BatchStats
from .flops_frame import as_expr

#: components whose |delta| is below this fraction of exact's total are not named
NEGLIGIBLE = 0.001


def component_totals(per_iteration: pl.DataFrame, spec: ModelSpec, convention: str,
                     frozen: Iterable[str] = ()) -> dict[str, float]:
    """Run totals (FLOPs) per component of ``convention`` over the rows of ``per_iteration``."""
    b = exact_flops(spec, BatchStats.columns(), frozen) if convention == "exact" else \
        compute_flops(spec, BatchStats.columns(), convention)
    exprs = [as_expr(v).cast(pl.Float64).sum().alias(k) for k, v in b.components.items()]
    if not exprs or per_iteration.height == 0:
        return {}
    return {k: float(v) for k, v in per_iteration.select(exprs).row(0, named=True).items()}


def convention_differences(per_iteration: pl.DataFrame, spec: ModelSpec, conventions: Iterable[str],
                           frozen: Iterable[str] = ()) -> dict[str, dict]:
    """Per convention: total delta vs exact (fraction) and per-component deltas, largest first.

    ``frozen`` applies to exact only (as in the analysis: conventions do not model frozen parts).
    """
    exact = component_totals(per_iteration, spec, "exact", frozen)
    exact_total = sum(exact.values())
    out: dict[str, dict] = {}
    if not exact_total:
        return out
    for name in conventions:
        if name == "exact":
            continue
        comps = component_totals(per_iteration, spec, name)
        total = sum(comps.values())
        deltas = []
        for key in dict.fromkeys([*exact, *comps]):
            delta = comps.get(key, 0.0) - exact.get(key, 0.0)
            if abs(delta) >= NEGLIGIBLE * exact_total:
                deltas.append({"component": key, "convention_flops": comps.get(key, 0.0),
                               "exact_flops": exact.get(key, 0.0), "delta_flops": delta,
                               "delta_of_exact_total": delta / exact_total})
        deltas.sort(key=lambda d: -abs(d["delta_flops"]))
        out[name] = {"total_vs_exact": total / exact_total - 1, "components": deltas}
    return out
