"""A FLOPs term: one GEMM family (or attention core) with what its backward pass needs.

Formulas return lists of :class:`Term`; :mod:`vlm_perf.flops.training` turns them into
training FLOPs. Values are forward FLOPs (2 per multiply-add) as Python numbers or polars
expressions.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ..arch.parts import LANGUAGE_MODEL, MERGER, STAGES, VISION_TOWER  # noqa: F401  (stages in data-flow order)

# What a term's input is, for deciding whether backward needs its input gradient.
INPUT_PIXELS = "pixels"  # patch embed: input is data, never needs a gradient
INPUT_TOWER = "tower"  # first merger GEMM: input is the (possibly frozen) tower output
INPUT_STAGE = "stage"  # anything else: input comes from earlier ops of its own stage (or upstream)
INPUT_UPSTREAM = "upstream"  # a stage's first op with no trainable op before it in its stage (GLM's downsample
#                               conv, a Linear-first projector): its input gradient is needed only when an upstream stage is trainable
INPUT_OWN = "own"  # its input carries a gradient only from its own stage's weights (Mllama's text path before the
#                    first cross-attention layer): its input gradient is needed only when its own stage trains


@dataclass(frozen=True)
class Term:
    """Forward FLOPs of one GEMM family (``weights=True``) or an attention core (``weights=False``)."""

    component: str  # e.g. "vision.mlp"
    forward: Any  # FLOPs
    stage: str  # one of STAGES
    weights: bool = True
    input_kind: str = INPUT_STAGE
    # input-gradient FLOPs when they are not the usual 1x (weight GEMM) / 2x (attention core) of ``forward``
    # (e.g. the chunked gated-delta rule, whose backward adds the triangular solves' gradient); None: usual
    input_grad: Any = None


def matmul(rows: Any, inner: int, outer: int) -> Any:
    """FLOPs of ``rows`` x ``inner`` times ``inner`` x ``outer``: 2 * rows * inner * outer."""
    return 2 * rows * inner * outer
