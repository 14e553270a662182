"""Exact forward FLOPs of the moe block kinds (:mod:`vlm_perf.arch.blocks.moe`): mixture-of-experts MLPs: router, top-k
routed experts, shared experts (gated or not), biased routers.
"""

from __future__ import annotations

from typing import Any

from ...arch.blocks import BiasedMoEMLP, ModalityMoEMLP, MoEMLP, PlainMoEMLP, SharedGateMoEMLP
from ...stats.batch import BatchStats
from ..terms import Term, matmul
from .base import FlopsContext, block_flops


@block_flops(MoEMLP)
def _moe_mlp(b: MoEMLP, s: BatchStats, ctx: FlopsContext) -> list[Term]:
    """per layer 2·S·(3·h·(k·F_e + n_sh·F_sh) + h·E)"""
    per = b.per_token()
    return [Term("lm.routed_experts", b.count * per["routed"] * s.lm_tokens, b.part),
            Term("lm.shared_experts", b.count * per["shared"] * s.lm_tokens, b.part),
            Term("lm.router", b.count * per["router"] * s.lm_tokens, b.part)]


block_flops(SharedGateMoEMLP)(_moe_mlp)


block_flops(BiasedMoEMLP)(_moe_mlp)  # expert and router biases are adds


@block_flops(PlainMoEMLP)
def _plain_moe_mlp(b: PlainMoEMLP, s: BatchStats, ctx: FlopsContext) -> list[Term]:
    """per layer 2·S·(2·in·F·k + 2·h·L + 2·h·F_sh + h·E) (in = L or h; top-k routed, as the kernels run)"""
    per = b.per_token()
    return [Term("lm.routed_experts", b.count * per["routed"] * s.lm_tokens, b.part),
            Term("lm.shared_experts", b.count * per["shared"] * s.lm_tokens, b.part),
            Term("lm.router", b.count * per["router"] * s.lm_tokens, b.part)]


def vision_routed_tokens(b: ModalityMoEMLP, s: BatchStats):
    """LM tokens the vision pool takes: the resampler's output rows (``vision_merged_tokens``: one per folded token
    of an image, one per pair of video frames) plus the start / end markers of every image or video."""
    return s.vision_merged_tokens + b.markers_per_item * s.vision_items


@block_flops(ModalityMoEMLP)
def _modality_moe_mlp(b: ModalityMoEMLP, s: BatchStats, ctx: FlopsContext) -> list[Term]:
    """per layer 2·S·3·h·F_sh + 2·S·h·E (both routers) + 2·k·3·h·(T·F_text + V·F_vision) (V vision tokens, T = S - V)"""
    h, k = b.hidden, b.top_k
    vision = vision_routed_tokens(b, s)
    text = s.lm_tokens - vision
    return [Term("lm.routed_experts", b.count * 2 * k * 3 * h * (text * b.expert_width + vision * b.vision_width),
                 b.part),
            Term("lm.shared_experts", b.count * 2 * 3 * h * b.shared_width * b.num_shared * s.lm_tokens, b.part),
            Term("lm.router", b.count * 2 * h * b.num_experts * s.lm_tokens, b.part)]


def moe_weight_forward(b: MoEMLP, role: str, tokens: Any) -> Any:
    """Forward FLOPs of one weight of ONE MoE MLP over the tokens that reach it (what a regime counts when only
    that weight's gradient runs): each token's top-k experts (``gate_up``: h -> 2F, ``down``: F -> h), the
    ``router`` (h -> E) on every token, the shared experts' down projections (``shared_down``)."""
    h, f, k = b.hidden, b.expert_width, b.top_k
    if role == "shared_down":
        return b.num_shared * matmul(tokens, b.shared_width, h)
    if role == "router":
        return matmul(tokens, h, b.num_experts)
    return {"gate_up": matmul(tokens * k, h, 2 * f), "down": matmul(tokens * k, f, h)}[role]
