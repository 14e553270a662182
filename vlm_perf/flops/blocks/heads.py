"""Exact forward FLOPs of the heads block kinds (:mod:`vlm_perf.arch.blocks.heads`): output heads of the LM: the logits
projection and DeepSeek's multi-token prediction modules.
"""

from __future__ import annotations

from ...arch.blocks import LMHead, MTPModules
from ...stats.batch import BatchStats
from ..terms import Term
from .attention import causal_core
from .base import FlopsContext, block_flops


@block_flops(LMHead)
def _lm_head(b: LMHead, s: BatchStats, ctx: FlopsContext) -> list[Term]:
    """2·S·h·V (every position, real vocabulary)"""
    return [Term("lm.logits", b.per_token() * s.lm_tokens, b.part)]


@block_flops(MTPModules)
def _mtp(b: MTPModules, s: BatchStats, ctx: FlopsContext) -> list[Term]:
    """per module 2·S·(2h·h + layer + h·V) + its attention core"""
    core = causal_core(b.attention.core_per_token_sq(), s, ctx)
    return [Term("lm.mtp", b.count * b.per_token() * s.lm_tokens, b.part),
            Term("lm.mtp", b.count * core, b.part, weights=False)]
