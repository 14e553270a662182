"""Exact forward FLOPs of the mlp block kinds (:mod:`vlm_perf.arch.blocks.mlp`): dense MLPs of the LM (gated SwiGLU,
the cross-attention layers' MLPs, non-gated MLPs).
"""

from __future__ import annotations

from ...arch.blocks import CrossLayerMLP, DenseMLP, PlainMLP
from ...stats.batch import BatchStats
from ..terms import Term
from .base import FlopsContext, block_flops


@block_flops(DenseMLP)
def _dense_mlp(b: DenseMLP, s: BatchStats, ctx: FlopsContext) -> list[Term]:
    """per layer 2·S·3·h·F"""
    return [Term("lm.dense_mlp", b.count * b.per_token() * s.lm_tokens, b.part)]


@block_flops(CrossLayerMLP)
def _cross_layer_mlp(b: CrossLayerMLP, s: BatchStats, ctx: FlopsContext) -> list[Term]:
    """per layer 2·S·3·h·F, S = LM tokens of microbatches with images (lm_tokens - lm_tokens_no_vision)"""
    return [Term("lm.dense_mlp", b.count * b.per_token() * (s.lm_tokens - s.lm_tokens_no_vision), b.part)]


@block_flops(PlainMLP)
def _plain_mlp(b: PlainMLP, s: BatchStats, ctx: FlopsContext) -> list[Term]:
    """per layer 2·2·h·w·S"""
    return [Term("lm.dense_mlp", b.count * b.per_token() * s.lm_tokens, b.part)]
