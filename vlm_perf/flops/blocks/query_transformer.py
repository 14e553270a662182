"""Exact forward FLOPs of the query-transformer block kinds (:mod:`vlm_perf.arch.blocks.query_transformer`): BLIP-2's
Q-Former, per image, on the image's learned queries and its tower rows.
"""

from __future__ import annotations

from ...arch.blocks.query_transformer import QueryTransformer
from ...stats.batch import BatchStats
from ..terms import INPUT_OWN, INPUT_UPSTREAM, Term, matmul
from .base import FlopsContext, block_flops


@block_flops(QueryTransformer)
def _query_transformer(b: QueryTransformer, s: BatchStats, ctx: FlopsContext) -> list[Term]:
    """per image (F = vision_frames images, R = Q·F query rows, P = patches + CLS tower rows):
    L·2·R·(4·w² + 2·w·i) + L·4·w·Q²·F (self) + C·(2·R·2·w² + 2·P·2·kv·w + 4·w·Q·P) (cross) + 2·R·w·out.

    Gradient flow: layer 0's self-attention and its cross-attention query read only the learned queries (input
    gradient only when the Q-Former trains: ``own``); the cross-attention keys / values read the tower
    (``upstream``); everything after the first cross-attention carries the tower's gradient too (``stage``). Eager
    cross-attention cores compute dK, dP, dV (3 halves) whenever the keys / values need a gradient and dQ only when
    the queries do (as :class:`~vlm_perf.arch.blocks.CrossAttention`); a fused kernel (``--causal half``)
    computes them together."""
    n, w, q, c = b.count, b.width, b.queries, b.cross_layers
    rows = q * s.vision_frames
    tower_rows = s.vision_patches + s.vision_cls_tokens
    self_core = 2 * 2 * w * q * q * s.vision_frames  # QKᵀ and AV over the image's queries
    half = 2 * w * q * tower_rows  # one of the cross core's two matmuls
    rest = b.layers - 1
    terms = [
        # layer 0 up to its cross-attention query: reads only the learned queries
        Term("vision.merger", n * (matmul(rows, w, 3 * w) + matmul(rows, w, w) + matmul(rows, w, w)), b.part,
             input_kind=INPUT_OWN),
        Term("vision.merger", n * self_core, b.part, weights=False, input_kind=INPUT_OWN),
        # cross-attention keys / values on the tower rows
        Term("vision.merger", n * c * 2 * matmul(tower_rows, b.kv_width, w), b.part, input_kind=INPUT_UPSTREAM),
        # cross-attention output dense, every FFN, the other layers' self-attention and cross queries
        Term("vision.merger", n * (c * matmul(rows, w, w) + b.layers * 2 * matmul(rows, w, b.mlp_width)
                                   + rest * 4 * matmul(rows, w, w) + (c - 1) * matmul(rows, w, w)), b.part),
        Term("vision.merger", n * rest * self_core, b.part, weights=False),
        Term("vision.merger", n * matmul(rows, w, b.out_width), b.part),  # language_projection
    ]
    if ctx.causal == "half":  # fused kernels compute dQ, dK, dV together
        return terms + [Term("vision.merger", n * c * 2 * half, b.part, weights=False)]
    return terms + [
        Term("vision.merger", n * c * 2 * half, b.part, weights=False, input_grad=n * (4 * c - 1) * half),
        Term("vision.merger", 0 * half, b.part, weights=False, input_kind=INPUT_OWN, input_grad=n * half)]
