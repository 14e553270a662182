"""Exact forward FLOPs of the conv block kinds (:mod:`vlm_perf.arch.blocks.conv`): convolutions that are not patch
embeddings: strided and downsampling Conv2d chains and the SAM neck.
"""

from __future__ import annotations

from ...arch.blocks import DownsampleConv, SamNeck, StridedConvs
from ...stats.batch import BatchStats
from ..terms import INPUT_STAGE, INPUT_UPSTREAM, Term, matmul
from .base import FlopsContext, block_flops
from .vision import fixed_tiles


@block_flops(DownsampleConv)
def _downsample_conv(b: DownsampleConv, s: BatchStats, ctx: FlopsContext) -> list[Term]:
    """2·M·(m²·h_v)·d_out (M = merged tokens; the projector's first op: input gradient only if the tower trains)"""
    return [Term("vision.merger", b.count * matmul(s.vision_merged_tokens, b.in_width, b.out_width), b.part,
                 input_kind=INPUT_UPSTREAM)]


@block_flops(SamNeck)
def _sam_neck(b: SamNeck, s: BatchStats, ctx: FlopsContext) -> list[Term]:
    """per tile 2·side²·(width·c + 9·c²) (reported as vision.mlp)"""
    positions = fixed_tiles(b, s) * b.side * b.side * b.count
    return [Term("vision.mlp", matmul(positions, b.width, b.channels) + matmul(positions, 9 * b.channels, b.channels),
                 b.part)]


@block_flops(StridedConvs)
def _strided_convs(b: StridedConvs, s: BatchStats, ctx: FlopsContext) -> list[Term]:
    """per tile and run Σ_i 2·side_i²·9·c_i·c_(i+1) (side_i: output side of conv i) [+ 2·side_n²·c_n·linear]"""
    tiles = fixed_tiles(b, s) * (b.count * b.runs)
    terms = [Term(b.component, matmul(tiles * side * side, 9 * c_in, c_out), b.part,
                  input_kind=b.first_input if i == 0 else INPUT_STAGE)
             for i, (c_in, c_out, side) in enumerate(zip(b.channels[:-1], b.channels[1:], b.sides()))]
    if b.linear:
        terms.append(Term(b.component, matmul(tiles * b.out_tokens, b.channels[-1], b.linear), b.part))
    return terms
