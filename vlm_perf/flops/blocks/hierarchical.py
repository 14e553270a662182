"""Exact forward FLOPs of the hierarchical-tower block kinds (:mod:`vlm_perf.arch.blocks.hierarchical`): DaViT
stages on the processor's fixed image size, a per-image constant times ``vision_frames``.
"""

from __future__ import annotations

from ...arch.blocks.hierarchical import DaViTStage
from ...stats.batch import BatchStats
from ..terms import INPUT_PIXELS, INPUT_STAGE, Term, matmul
from .base import FlopsContext, block_flops


@block_flops(DaViTStage)
def _davit_stage(b: DaViTStage, s: BatchStats, ctx: FlopsContext) -> list[Term]:
    """per image (N = side² positions, R = padded window positions, w width, m MLP, G groups, W window):
    conv 2·N·k²·c_in·w + depth · [4 x depthwise 2·N·9·w + 2 x MLP 2·N·2·w·m
    + spatial qkv / proj 2·R·4·w² + window core 4·R·W²·w + channel qkv / proj 2·N·4·w² + channel core 4·N·w²/G].

    A depthwise conv's weight gradient is one multiply-add per (position, channel, tap), as its forward (torch's
    FlopCounterMode over-counts it by the groups; the measuring harness corrects that). The first stage reads
    pixels (no input gradient)."""
    n, images = b.positions, s.vision_frames
    w, m = b.width, b.mlp_width
    rows, padded = images * n, images * b.padded_positions
    blocks = b.count * b.depth
    return [
        Term("vision.patch_embed", b.count * matmul(rows, b.kernel * b.kernel * b.in_width, w), b.part,
             input_kind=INPUT_PIXELS if b.reads_pixels else INPUT_STAGE),
        Term("vision.mlp", blocks * (4 * matmul(rows, 9, w) + 2 * 2 * matmul(rows, w, m)), b.part),
        Term("vision.attn_proj", blocks * (matmul(padded, w, 4 * w) + matmul(rows, w, 4 * w)), b.part),
        Term("vision.attn_core", blocks * 4 * padded * b.window * b.window * w, b.part, weights=False),
        Term("vision.attn_core", blocks * 4 * rows * w * (w // b.num_groups), b.part, weights=False),
    ]
