"""Exact forward FLOPs of the residual streams block kinds (:mod:`vlm_perf.arch.blocks.residual_streams`): residual-
stream machinery that is neither attention nor MLP (Gemma 3n's AltUp streams, LAuReL residuals,
"""

from __future__ import annotations

from ...arch.blocks import AltUpLayer, AltUpStreams, LaurelBlock, PerLayerInputGate
from ...stats.batch import BatchStats
from ..terms import Term, matmul
from .base import FlopsContext, block_flops


@block_flops(AltUpLayer)
def _altup_layer(b: AltUpLayer, s: BatchStats, ctx: FlopsContext) -> list[Term]:
    """per layer 2·S·(2·h·n + n³ + n²) (routers, coefficients) + 2·S·h·n² (the stream mix: two activations)"""
    return [Term("lm.altup", b.count * b.weight_per_token() * s.lm_tokens, b.part),
            Term("lm.altup", b.count * b.mix_per_token() * s.lm_tokens, b.part, weights=False)]


@block_flops(LaurelBlock)
def _laurel(b: LaurelBlock, s: BatchStats, ctx: FlopsContext) -> list[Term]:
    """per layer 2·S·2·h·r"""
    return [Term("lm.laurel", b.count * 2 * matmul(s.lm_tokens, b.hidden, b.rank), b.part)]


@block_flops(PerLayerInputGate)
def _per_layer_gate(b: PerLayerInputGate, s: BatchStats, ctx: FlopsContext) -> list[Term]:
    """per layer 2·S·2·h·p"""
    return [Term("lm.per_layer_input", b.count * 2 * matmul(s.lm_tokens, b.hidden, b.width), b.part)]


@block_flops(AltUpStreams)
def _altup_streams(b: AltUpStreams, s: BatchStats, ctx: FlopsContext) -> list[Term]:
    """2·S·h·L·p (per-layer input projection) + 2·S·2·(n - 1)·h² (stream projections in and out)"""
    rows, h = s.lm_tokens, b.hidden
    return [Term("lm.per_layer_input", b.count * matmul(rows, h, b.layers * b.per_layer_width), b.part),
            Term("lm.altup", b.count * 2 * (b.streams - 1) * matmul(rows, h, h), b.part)]
