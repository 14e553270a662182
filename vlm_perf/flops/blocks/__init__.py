"""Exact forward FLOPs of each block kind, registered beside its formula (pure, no I/O).

``@block_flops(Kind)`` registers the function that turns one :class:`~vlm_perf.arch.blocks.Block` of that
kind (all ``count`` copies) and the batch statistics into :class:`~vlm_perf.flops.terms.Term` s; a second
registration for the same kind is rejected, and :func:`inventory_terms` refuses a block kind without one
(never a silent 0). Every matmul is counted (2 FLOPs per multiply-add), nothing else: norms,
activations, RoPE, interpolation, pooling, pixel shuffle and embedding lookups are not matmuls.

Statistics used (see :class:`vlm_perf.stats.BatchStats`): ``vision_patches`` (patch-embed rows),
``vision_cls_tokens`` (extra tower positions), ``vision_patches_sq_frame`` / ``vision_window_sq`` (sums of
squared attention-sequence lengths), ``vision_merged_tokens`` (projector rows), ``lm_tokens`` and
``lm_tokens_sq``. Attention cores are ``4 * q * sum(len^2)`` (Q K^T and A V); vision attention is
bidirectional (never halved), LM attention is multiplied by the causal factor (0.5 flash-style, 1 eager).

The formulas are filed by kind of block (``attention``, ``mlp``, ``moe``, ``vision``, ``audio``, ...), one module per
module of :mod:`vlm_perf.arch.blocks`; importing the package registers all of them.
"""

from __future__ import annotations

from . import attention, audio, conv, encoder_decoder, heads, hierarchical, mlp, moe, projectors, query_transformer, recurrent, residual_streams, stored, vision, wrappers  # noqa: E402,F401  (registers every kind's formulas)
from .base import BLOCK_FLOPS, BlockFlopsFn, FlopsContext, block_flops, inventory_terms  # noqa: F401

__all__ = ["BLOCK_FLOPS", "BlockFlopsFn", "FlopsContext", "block_flops", "inventory_terms"]
