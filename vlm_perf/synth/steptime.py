"""Step-time model: per-component FLOPs / per-component efficiency, slowest DP rank, plus overhead.

For one iteration, DP rank r computes its microbatches with ``gpus_per_replica`` = TP x PP x CP
GPUs. Its compute time is

    T_r = (1 + bubble) * sum_c F_c(r) / (eff(c) * peak * gpus_per_replica)

with F_c the ``exact`` training FLOPs of component c (``compute_flops(spec, stats_r, "exact")``,
frozen parts respected) and bubble = (pp - 1) / (vpp * num_microbatches). The iteration takes the
slowest rank's time (gradient reduction waits for everyone) plus a fixed ``overhead_ms``
(optimizer step, exposed communication, data loading), times log-normal noise. The vision tower
is assumed spread over the pipeline like the LM (a simplification: in Megatron it sits on the
first stage).
"""

from __future__ import annotations

import math

import numpy as np

from ..arch.spec import ModelSpec
from ..flops import compute_flops
from ..stats import BatchStats
from .spec import RunSpec, StepTimeModel

COMPONENT_GROUPS: dict[str, str] = {
    "lm.attn_proj": "lm_gemm", "lm.dense_mlp": "lm_gemm", "lm.shared_experts": "lm_gemm",
    "lm.logits": "lm_gemm", "lm.mtp": "lm_gemm",
    "lm.altup": "lm_gemm", "lm.laurel": "lm_gemm", "lm.per_layer_input": "lm_gemm",  # Gemma 3n
    "lm.routed_experts": "lm_moe", "lm.router": "lm_moe",
    "lm.attn_core": "lm_attn",
    "vision.patch_embed": "vit_gemm", "vision.attn_proj": "vit_gemm", "vision.mlp": "vit_gemm",
    "vision.merger": "vit_gemm", "vision.deepstack_merger": "vit_gemm",
    "vision.attn_core": "vit_attn",
}


def efficiency(model: StepTimeModel, group: str) -> float:
    return getattr(model, f"eff_{group}")


def compute_seconds(spec: ModelSpec, run: RunSpec, stats: BatchStats) -> float:
    """Compute time (s) of one DP rank's share of an iteration, bubble included, no overhead."""
    components = compute_flops(spec, stats, "exact", frozen=run.frozen).components
    model, par = run.timing, run.parallel
    rate = model.peak_tflops * 1e12 * par.gpus_per_replica
    seconds = sum(flops / (efficiency(model, COMPONENT_GROUPS[name]) * rate)
                  for name, flops in components.items() if flops)
    bubble = (par.pp - 1) / (par.vpp * run.num_microbatches)
    return seconds * (1 + bubble)


def iteration_seconds(spec: ModelSpec, run: RunSpec, rank_stats: list[BatchStats], rng: np.random.Generator) -> float:
    """Wall time of one iteration (s): slowest rank + overhead, with seeded noise and hiccups."""
    model = run.timing
    base = max(compute_seconds(spec, run, s) for s in rank_stats) + model.overhead_ms / 1e3
    noise = math.exp(rng.normal(0.0, model.noise_sigma))
    if rng.random() < model.hiccup_prob:
        noise *= model.hiccup_factor
    return base * noise
