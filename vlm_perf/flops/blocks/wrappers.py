"""Exact forward FLOPs of the wrappers block kinds (:mod:`vlm_perf.arch.blocks.wrappers`): blocks that wrap another
block and change how it is billed (not what it is): a module whose output reaches no
"""

from __future__ import annotations

from dataclasses import replace

from ...arch.blocks import FoldedTokens, ForwardOnly, TextOnly
from ...stats.batch import BatchStats
from ..terms import INPUT_OWN, INPUT_PIXELS, INPUT_STAGE, INPUT_UPSTREAM, Term
from .base import FlopsContext, block_flops, inventory_terms


@block_flops(ForwardOnly)
def _forward_only(b: ForwardOnly, s: BatchStats, ctx: FlopsContext) -> list[Term]:
    """the wrapped module's forward FLOPs x count; no weight or input gradient in training"""
    terms = inventory_terms((b.module,), s, ctx)
    return [replace(t, forward=b.count * t.forward if b.count != 1 else t.forward, weights=False,
                    input_kind=INPUT_PIXELS, input_grad=None) for t in terms]


@block_flops(TextOnly)
def _text_only(b: TextOnly, s: BatchStats, ctx: FlopsContext) -> list[Term]:
    """the wrapped module's terms; input gradients only when the LM trains (no vision gradient reaches them)"""
    return [replace(t, input_kind=INPUT_OWN) if t.input_kind in (INPUT_STAGE, INPUT_UPSTREAM) else t
            for t in inventory_terms((b.module,), s, ctx)]


@block_flops(FoldedTokens)
def _folded_tokens(b: FoldedTokens, s: BatchStats, ctx: FlopsContext) -> list[Term]:
    """the wrapped layers on P / f² rows and Σ len² / f⁴ (every slice side a multiple of f: exact)"""
    f2 = b.fold * b.fold
    folded = replace(s, vision_patches=s.vision_patches // f2,
                     vision_patches_sq_frame=s.vision_patches_sq_frame // (f2 * f2))
    return inventory_terms((b.module,), folded, ctx)
