"""The registry of block FLOPs (``@block_flops(Kind)``, duplicates rejected) and the walker over an inventory.

Every other module here files the formulas of one kind of block, named as its kind's module in
:mod:`vlm_perf.arch.blocks`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Iterable

from ...arch.blocks import Block
from ...stats.batch import BatchStats
from ..terms import Term


@dataclass(frozen=True)
class FlopsContext:
    """How to count what the statistics alone do not say: the LM causal rule.

    ``causal="half"`` (factor 0.5): a causal flash kernel, which also skips what a sliding window masks
    (``lm_tokens_sq - lm_tokens_sq_beyond_window``); ``"full"`` (factor 1): the eager square, which
    computes every score entry whatever the mask.
    """

    causal: str = "half"

    @property
    def causal_factor(self) -> Any:
        return 0.5 if self.causal == "half" else 1


BlockFlopsFn = Callable[[Any, BatchStats, FlopsContext], list]


BLOCK_FLOPS: dict[type, BlockFlopsFn] = {}


def block_flops(kind: type) -> Callable[[BlockFlopsFn], BlockFlopsFn]:
    """Register the FLOPs function of a block kind (duplicates rejected)."""
    def register(fn: BlockFlopsFn) -> BlockFlopsFn:
        if kind in BLOCK_FLOPS:
            raise ValueError(f"FLOPs of block kind {kind.__name__} already registered ({BLOCK_FLOPS[kind].__name__})")
        BLOCK_FLOPS[kind] = fn
        return fn
    return register


def inventory_terms(blocks: Iterable[Block], stats: BatchStats, ctx: FlopsContext) -> list[Term]:
    """Terms of every block, in inventory order."""
    terms: list[Term] = []
    for block in blocks:
        fn = BLOCK_FLOPS.get(type(block))
        if fn is None:
            raise NotImplementedError(f"no FLOPs function registered for block kind {type(block).__name__}")
        if block.count:
            terms += fn(block, stats, ctx)
    return terms
