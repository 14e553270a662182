"""``torchtitan@pr4300``: torchtitan after PR #4300 (``torchtitan/models/utils.py`` @ 01c01c88fe7a, per-model
``get_nparams_and_flops``), the per-token re-derivation.

Per token (training): 6 * N_act + sum over softmax-attention layers of 6 * H * (d_qk + d_v) * min(s_cfg, W)
(``quadratic_attention_flops_per_token``: no causal discount, a sliding window as min(s, W)) + sum over
gated-delta-net layers of 18 * Hv * dk * dv (``delta_rule_flops_per_token``: three dk x dv state products, the
value heads). N_act (``get_nparams_and_active_nparams``): every parameter at weight 1 (norms, conv taps, A_log,
dt_bias included), routed experts at top_k / num_experts (exact fraction), embedding tables at 0 unless shared
with the head, the vision encoder at 0. Tokens: labels.numel() (padding included); s_cfg: the configured length.
"""

from __future__ import annotations

from fractions import Fraction
from typing import Any

from ...arch.blocks import (DecoderAttention, DenseMLP, GatedDeltaNet, LMHead, MLAttention, MoEMLP, MTPModules,
                            TokenEmbedding)
from ...arch.parts import LANGUAGE_MODEL
from ...arch.spec import ModelSpec
from ...stats.batch import BatchStats
from ..breakdown import Options
from .base import Convention, Pin, register_convention
from .others import TORCHTITAN


def _min(a: Any, b: int | None) -> Any:
    if b is None:
        return a
    if isinstance(a, (int, float, Fraction)):
        return min(a, b)
    import polars as pl

    return pl.min_horizontal(pl.lit(float(b)), a)


def _forward(spec: ModelSpec, s: BatchStats, _: Options) -> dict[str, Any]:
    tokens = s.lm_padded_tokens
    seq = s.lm_padded_tokens / s.lm_samples
    n = dict.fromkeys(("lm.attn_proj", "lm.dense_mlp", "lm.routed_experts", "lm.shared_experts", "lm.router",
                       "lm.logits"), Fraction(0))
    core: Any = 0
    for b in spec.blocks:
        if b.part != LANGUAGE_MODEL or isinstance(b, MTPModules):
            continue
        p = b.count * b.params()
        if isinstance(b, TokenEmbedding):
            if spec.lm.tie_word_embeddings:
                n["lm.logits"] += p
        elif isinstance(b, MoEMLP):
            h = b.hidden
            routed = b.count * b.num_experts * 3 * h * b.expert_width
            router = b.count * (b.num_experts * h + (b.num_experts if b.router_bias else 0))
            n["lm.routed_experts"] += Fraction(routed * b.top_k, b.num_experts)
            n["lm.router"] += router
            n["lm.shared_experts"] += p - routed - router
        elif isinstance(b, DenseMLP):
            n["lm.dense_mlp"] += p
        elif isinstance(b, LMHead):
            n["lm.logits"] += p
        else:
            n["lm.attn_proj"] += p
        if isinstance(b, GatedDeltaNet):
            core = core + b.count * 6 * b.value_heads * b.key_head_dim * b.value_head_dim
        elif isinstance(b, DecoderAttention):
            core = core + b.count * 2 * b.num_heads * 2 * b.head_dim * _min(seq, b.window)
        elif isinstance(b, MLAttention):
            core = core + b.count * 2 * b.num_heads * (b.qk_nope_head_dim + b.qk_rope_head_dim + b.v_head_dim) * seq
    assert all(v.denominator == 1 for v in n.values()), "active parameters must be whole"
    out: dict[str, Any] = {k: 2 * int(v) * tokens for k, v in n.items()}
    out["lm.attn_core"] = core * tokens
    out["lm.mtp"] = 0
    return out


TORCHTITAN_PR4300 = register_convention(Convention(
    name="torchtitan@pr4300",
    variant_of="torchtitan",
    pin=Pin("torchtitan", "pytorch/torchtitan", "torchtitan/models/utils.py (+ models/*/model.py)",
            "get_nparams_and_active_nparams, quadratic_attention_flops_per_token, delta_rule_flops_per_token "
            "(PR #4300)", "01c01c88fe7a (2026-09, after PR #4300)",
            verified="tests/flops/test_framework_conventions.py: the cited rule applied to transformers' own "
                     "parameters (meta device) of Llama-3-8B and both Qwen3.5-MoE presets"),
    formula=("per token 6*N_act + sum_softmax 6*H*(d_qk + d_v)*min(s_cfg, W) + sum_GDN 18*Hv*dk*dv, times padded "
             "tokens; N_act = every decoder parameter, routed experts x top_k/E, embedding 0 unless tied, vision 0"),
    deviations=("vision tower and mergers not counted",
                "attention core: no causal half, configured length (sliding window as min(s, W))",
                "gated-delta rule as 3 state products per token (18*Hv*dk*dv), not the chunked algorithm",
                "linear terms on padded tokens; norms and other non-matmul parameters billed as 6 x params",
                "always x3"),
    forward=_forward,
    counts_vision=False,
    families=TORCHTITAN.families,
    refuses=TORCHTITAN.refuses,  # the model list of main b5bcd76c66d0 (PR #4300 re-derives FLOPs, adds no model)
))
