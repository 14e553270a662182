"""Hardware FLOPs utilisation (HFU) under activation recompute.

MFU counts the model's training FLOPs (exact convention). With activation recompute the GPUs also
run parts of the forward pass a second time during backward; those FLOPs count towards hardware
FLOPs (HFU) but not model FLOPs (MFU):

    hardware FLOPs = exact training FLOPs + recomputed forward FLOPs,   HFU = MFU x hardware / model

Rules (LM decoder layers; the vision tower's own recompute is not modelled):

* ``none``: nothing is recomputed, HFU = MFU.
* ``selective`` (Megatron ``--recompute-granularity selective``, default module ``core_attn``): the
  attention core (QK^T, softmax, x V) of every LM layer runs forward again: + forward FLOPs of
  ``lm.attn_core``.
* ``full`` (Megatron ``full``, HF ``gradient_checkpointing``): the whole layer's forward runs again
  (attention projections and core, MLP / experts, router) for ``N`` of the ``L`` decoder layers:
  + N/L x forward FLOPs of those components (recomputed layers taken to cost the average layer).
  Megatron ``--recompute-method uniform`` recomputes every layer (``--recompute-num-layers`` is
  the chunk size); ``block`` recomputes the first ``recompute_num_layers`` layers of each pipeline
  stage, i.e. N = recompute_num_layers x pipeline_parallel (at most L; virtual stages ignored).

Nothing is recomputed where no backward pass runs through the LM (LM and vision frozen). Forward
FLOPs per component come from `compute_flops(..., mode="forward")` with the run's frozen parts.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any, Iterable

import polars as pl

from ..arch.spec import ModelSpec
from ..errors import ConfigError
from ..flops.regime import exact_flops
from ..stats import BatchStats
from .run import RunAnalysis
from .windows import window_sums

__all__ = ["Recompute", "parse_recompute", "recompute_from_config", "recompute_expr", "hfu_summary",
           "LAYER_COMPONENTS"]

LAYER_COMPONENTS = ("lm.attn_proj", "lm.attn_core", "lm.dense_mlp", "lm.routed_experts", "lm.shared_experts",
                    "lm.router")
GRANULARITIES = ("none", "selective", "full")


@dataclass(frozen=True)
class Recompute:
    """What is recomputed: ``granularity`` none|selective|full; ``layers`` for full (None = all)."""

    granularity: str = "none"
    layers: int | None = None
    source: str = "default (no recompute stated)"

    def fraction(self, total_layers: int) -> float:
        if self.granularity != "full":
            return 0.0
        return 1.0 if self.layers is None else min(self.layers, total_layers) / total_layers

    def rule(self, total_layers: int) -> str:
        if self.granularity == "none":
            return "no activation recompute: hardware FLOPs = model FLOPs, HFU = MFU"
        if self.granularity == "selective":
            return ("selective recompute: the attention core (QK^T, softmax, xV) of every LM layer runs forward "
                    "again in backward")
        n = total_layers if self.layers is None else min(self.layers, total_layers)
        return (f"full recompute: the whole layer's forward (attention, MLP/experts, router) runs again for {n} of "
                f"{total_layers} LM decoder layers")

    def label(self) -> str:
        return self.granularity if self.granularity != "full" or self.layers is None else f"full:{self.layers}"


def parse_recompute(text: str, source: str = "recompute") -> Recompute:
    """``none`` | ``selective`` | ``full`` | ``full:N`` (N decoder layers in total)."""
    raw = str(text).strip().lower()
    head, _, tail = raw.partition(":")
    if head not in GRANULARITIES or (tail and head != "full"):
        raise ConfigError(f"{source}: expected none, selective, full or full:N, got {text!r}")
    layers = None
    if tail:
        if not tail.isdigit() or int(tail) <= 0:
            raise ConfigError(f"{source}: full:N needs a positive number of layers, got {text!r}")
        layers = int(tail)
    return Recompute(head, layers, source)


def recompute_from_config(granularity: Any = None, method: Any = None, num_layers: Any = None,
                          gradient_checkpointing: Any = None, pipeline_parallel: int | None = None,
                          source: str = "run configuration") -> Recompute | None:
    """Megatron's recompute_granularity / recompute_method / recompute_num_layers, or HF
    ``gradient_checkpointing``, -> `Recompute`; None when nothing is stated."""
    g = None if granularity is None else str(granularity).strip().lower()
    if g in (None, "", "none", "null"):
        if gradient_checkpointing in (True, "true", "True", 1):
            return Recompute("full", None, f"{source}: gradient_checkpointing (every layer)")
        if g in ("none", "null") or gradient_checkpointing is not None:
            return Recompute("none", None, f"{source}: recompute off")
        return None
    if g == "selective":
        return Recompute("selective", None, f"{source}: recompute_granularity selective")
    if g != "full":
        raise ConfigError(f"{source}: recompute_granularity must be full, selective or none, got {granularity!r}")
    m = None if method is None else str(method).strip().lower()
    if m in (None, "", "none", "uniform"):
        return Recompute("full", None, f"{source}: full, method {m or 'uniform'} (every layer, in chunks)")
    if m != "block":
        raise ConfigError(f"{source}: recompute_method must be uniform or block, got {method!r}")
    if num_layers is None:
        raise ConfigError(f"{source}: recompute_method block needs recompute_num_layers")
    per_stage = int(num_layers)
    pp = int(pipeline_parallel or 1)
    return Recompute("full", per_stage * pp,
                     f"{source}: full, method block, {per_stage} layer(s) per pipeline stage x {pp} stage(s)")


def _has_lm_backward(spec: ModelSpec, frozen: Iterable[str]) -> bool:
    """Does a backward pass run through the LM layers? (probe: any LM layer term costs more than forward)"""
    probe = BatchStats.from_batch(seq_lens=[16], spec=spec)
    train = exact_flops(spec, probe, frozen, mode="training").components
    fwd = exact_flops(spec, probe, frozen, mode="forward").components
    return any(train.get(c, 0) > fwd.get(c, 0) for c in LAYER_COMPONENTS)


def recompute_expr(spec: ModelSpec, policy: Recompute, frozen: Iterable[str] = (), causal: str = "half") -> pl.Expr:
    """Recomputed forward FLOPs per row of a frame of `BatchStats` columns (FLOPs); ``causal`` as the
    run's exact FLOPs count the attention core."""
    if policy.granularity == "none" or not _has_lm_backward(spec, frozen):
        return pl.lit(0.0)
    fwd = exact_flops(spec, BatchStats.columns(), frozen, mode="forward", causal=causal).components
    if policy.granularity == "selective":
        parts = ["lm.attn_core"]
        scale = 1.0
    else:
        parts = list(LAYER_COMPONENTS)
        scale = policy.fraction(spec.lm.num_layers)
    expr = pl.lit(0.0)
    for name in parts:
        value = fwd.get(name, 0)
        expr = expr + (value if isinstance(value, pl.Expr) else pl.lit(float(value)))
    return (expr * scale).cast(pl.Float64)


def hfu_summary(run: RunAnalysis, spec: ModelSpec, policy: Recompute, frozen: Iterable[str] = (),
                causal: str = "half") -> dict:
    """HFU next to MFU (exact), time-weighted over the windows the means use, with the rule stated."""
    per = run.per_iteration.select("iteration", recompute_expr(spec, policy, frozen, causal).alias("recompute_flops"))
    # the windows every mean uses (one selection: `RunAnalysis.selection`), only the columns used below
    good = window_sums(run.selection.windows.select("segment", "iteration", "window_start", "window_iterations",
                                                    "window_seconds", "exact_total"), per, ["recompute_flops"])
    out: dict[str, Any] = {"recompute": policy.label(), "source": policy.source,
                           "rule": policy.rule(spec.lm.num_layers), "policy": asdict(policy),
                           "model_tflops_per_gpu_mean": None, "hardware_tflops_per_gpu_mean": None,
                           "mfu_mean": None, "hfu_mean": None, "hardware_over_model": None}
    if not good.height:
        return out
    model, extra = float(good["exact_total"].sum()), float(good["recompute_flops"].sum())
    ratio = (model + extra) / model if model else None
    out["hardware_over_model"] = ratio
    out["recompute_flops_share_of_model"] = extra / model if model else None
    # MFU is the headline's own value (one truth); hardware = model x the recompute ratio of the same windows
    exact = run.convention_summary().get("exact", {})
    if exact.get("tflops_per_gpu_mean") is not None and ratio is not None:
        out["model_tflops_per_gpu_mean"] = exact["tflops_per_gpu_mean"]
        out["hardware_tflops_per_gpu_mean"] = exact["tflops_per_gpu_mean"] * ratio
        if exact.get("mfu_mean") is not None:
            out["mfu_mean"] = exact["mfu_mean"]
            out["hfu_mean"] = exact["mfu_mean"] * ratio
    return out


def hfu_of(run: RunAnalysis, spec: ModelSpec, config: Any, trainability: Any, override: Recompute | None = None,
           causal: str = "half") -> dict:
    """The HFU block: the ``override`` policy (--recompute), else what run.yaml / the log state (``config``: the
    resolved `RunConfig`), else no recompute."""
    sources = {config.sources.get(k) for k in ("recompute_granularity", "gradient_checkpointing")} - {None}
    policy = override or recompute_from_config(
        config.recompute_granularity, config.recompute_method, config.recompute_num_layers,
        config.gradient_checkpointing, config.pipeline_parallel,
        source="/".join(sorted(sources)) or "run configuration") or Recompute()
    return hfu_summary(run, spec, policy, trainability, causal)
