"""Exact forward FLOPs of the stored block kinds (:mod:`vlm_perf.arch.blocks.stored`): blocks that hold parameters but
run no matmul: lookup tables (token embeddings, position tables, CLS tokens),
"""

from __future__ import annotations

from ...arch.blocks import (
    Block,
    ClsToken,
    ExtraNorms,
    ExtraParams,
    FinalNorm,
    LMLayerNorms,
    PositionTable,
    StoredOnly,
    TokenEmbedding,
)
from ...stats.batch import BatchStats
from ..terms import Term
from .base import FlopsContext, block_flops


def _no_flops(block: Block, stats: BatchStats, ctx: FlopsContext) -> list[Term]:
    """0 (no matmul)"""
    return []


for _kind in (PositionTable, ClsToken, TokenEmbedding, LMLayerNorms, FinalNorm, StoredOnly, ExtraParams):
    block_flops(_kind)(_no_flops)


block_flops(ExtraNorms)(_no_flops)
