"""Exact forward FLOPs of the projectors block kinds (:mod:`vlm_perf.arch.blocks.projectors`): projectors / mergers
between a tower and the LM, on ``vision_merged_tokens`` rows (MLP, gated, linear, SwiGLU,
"""

from __future__ import annotations

from dataclasses import replace

from ...arch.blocks import (
    GatedMergerMLP,
    HybridAligner,
    LinearProjector,
    MlpProjector,
    NormLinearProjector,
    PooledTokenProjector,
    PooledVideoProjector,
    SeparatorProjector,
    SwiGLUProjector,
    TemporalResampler,
    TowerTokenLinear,
    WindowAttentionMerger,
)
from ...stats.batch import BatchStats
from ..terms import INPUT_STAGE, INPUT_TOWER, INPUT_UPSTREAM, Term, matmul
from .base import FlopsContext, block_flops, inventory_terms


@block_flops(MlpProjector)
def _mlp_projector(b: MlpProjector, s: BatchStats, ctx: FlopsContext) -> list[Term]:
    """2·M·(in·hidden + hidden·out) (M = vision_merged_tokens [+ vision_cls_tokens when the CLS rows are fed])"""
    rows = s.vision_merged_tokens + s.vision_cls_tokens if b.cls_rows else s.vision_merged_tokens
    fc1 = matmul(rows, b.in_width, b.hidden_width)
    fc2 = matmul(rows, b.hidden_width, b.out_width)
    if b.count != 1:
        fc1, fc2 = b.count * fc1, b.count * fc2
    first_input = INPUT_TOWER if b.norm != "none" else INPUT_UPSTREAM  # Linear first: no norm needs its input grad
    return [Term(b.component, fc1, b.part, input_kind=first_input), Term(b.component, fc2, b.part)]


@block_flops(GatedMergerMLP)
def _gated_merger(b: GatedMergerMLP, s: BatchStats, ctx: FlopsContext) -> list[Term]:
    """2·M·(d² + 3·d·F) (M = merged tokens: proj d -> d, gate/up d -> F, down F -> d)"""
    rows, d, f = s.vision_merged_tokens, b.width, b.hidden_width
    return [Term("vision.merger", b.count * matmul(rows, d, d), b.part),
            Term("vision.merger", b.count * 3 * matmul(rows, d, f), b.part)]


@block_flops(NormLinearProjector)
def _norm_linear_projector(b: NormLinearProjector, s: BatchStats, ctx: FlopsContext) -> list[Term]:
    """2·M·in·out (M = vision_merged_tokens: pooled tokens)"""
    first_input = INPUT_TOWER if b.norm != "none" else INPUT_UPSTREAM
    return [Term(b.component, b.count * matmul(s.vision_merged_tokens, b.in_width, b.out_width), b.part,
                 input_kind=first_input)]


@block_flops(LinearProjector)
def _linear_projector(b: LinearProjector, s: BatchStats, ctx: FlopsContext) -> list[Term]:
    """Σ_i 2·M·w_i·w_{i+1} (M = vision_merged_tokens)"""
    rows = s.vision_merged_tokens
    first_input = INPUT_TOWER if b.norm != "none" else INPUT_UPSTREAM
    return [Term("vision.merger", b.count * matmul(rows, n_in, n_out),
                 b.part, input_kind=first_input if i == 0 else INPUT_STAGE)
            for i, (n_in, n_out, _) in enumerate(b.linears())]


@block_flops(PooledVideoProjector)
def _pooled_video_projector(b: PooledVideoProjector, s: BatchStats, ctx: FlopsContext) -> list[Term]:
    """the wrapped projector on M - M_video + M_video / pool² rows (video frames pooled before it)"""
    # frames of side^2 rows with an even side (the family checks it): the division is exact
    rows = s.vision_merged_tokens - s.video_merged_tokens + s.video_merged_tokens // (b.pool * b.pool)
    return inventory_terms((b.module,), replace(s, vision_merged_tokens=rows), ctx)


@block_flops(TowerTokenLinear)
def _tower_token_linear(b: TowerTokenLinear, s: BatchStats, ctx: FlopsContext) -> list[Term]:
    """2·(P + T·F)·in·out (P = vision_patches, F = vision_frames; input gradient only when the tower trains)"""
    rows = s.vision_patches + b.tokens_per_frame * s.vision_frames
    return [Term("vision.merger", b.count * matmul(rows, b.in_width, b.out_width), b.part, input_kind=INPUT_UPSTREAM)]


@block_flops(SwiGLUProjector)
def _swiglu_projector(b: SwiGLUProjector, s: BatchStats, ctx: FlopsContext) -> list[Term]:
    """2·M·(in·A + A/2·out) (M = vision_merged_tokens, A = hidden width; the SwiGLU product is elementwise)"""
    rows = s.vision_merged_tokens
    first_input = INPUT_TOWER if b.norm != "none" else INPUT_UPSTREAM
    return [Term("vision.merger", b.count * matmul(rows, b.in_width, b.hidden_width), b.part, input_kind=first_input),
            Term("vision.merger", b.count * matmul(rows, b.hidden_width // 2, b.out_width), b.part)]


@block_flops(WindowAttentionMerger)
def _window_attention_merger(b: WindowAttentionMerger, s: BatchStats, ctx: FlopsContext) -> list[Term]:
    """2·P·4·h·q + 4·q·P·k² (windows of k² patches) + 2·(P/k²)·(k²h·k²i + k²i·h)"""
    rows, u = s.vision_patches, b.unit
    h, q, i = b.width, b.attn_width, b.mlp_width
    merged = rows // u
    return [
        Term("vision.attn_proj", b.count * (matmul(rows, h, 3 * q) + matmul(rows, q, h)), b.part),
        Term("vision.attn_core", b.count * 4 * q * u * rows, b.part, weights=False),
        Term("vision.mlp", b.count * (matmul(merged, u * h, u * i) + matmul(merged, u * i, h)), b.part),
    ]


@block_flops(HybridAligner)
def _hybrid_aligner(b: HybridAligner, s: BatchStats, ctx: FlopsContext) -> list[Term]:
    """2·M·(low·out/2 + high·out/2 + out²) (M = vision_merged_tokens); the two first Linears read the towers"""
    rows, half = s.vision_merged_tokens, b.out_width // 2
    return [Term("vision.merger", b.count * matmul(rows, b.low_width, half), b.part, input_kind=INPUT_UPSTREAM),
            Term("vision.merger", b.count * matmul(rows, b.high_width, half), b.part, input_kind=INPUT_UPSTREAM),
            Term("vision.merger", b.count * matmul(rows, b.out_width, b.out_width), b.part)]


@block_flops(SeparatorProjector)
def _separator_projector(b: SeparatorProjector, s: BatchStats, ctx: FlopsContext) -> list[Term]:
    """Σ_i 2·M·w_i·w_{i+1} (M = vision_merged_tokens: every placeholder row, separators included); the first
    GEMM's input holds trainable separators: its input gradient is due whenever the projector trains"""
    return [Term("vision.merger", b.count * matmul(s.vision_merged_tokens, n_in, n_out), b.part,
                 input_kind=INPUT_TOWER if i == 0 else INPUT_STAGE)
            for i, (n_in, n_out, _) in enumerate(b.linears())]


@block_flops(TemporalResampler)
def _temporal_resampler(b: TemporalResampler, s: BatchStats, ctx: FlopsContext) -> list[Term]:
    """2·F·2·D² (F = folded tokens = M + M_video: an image row is one frame, a video's M counts frame pairs) +
    2·M·(2D·D + D·D + D·out) (M = vision_merged_tokens: frame pairs)"""
    d, pairs = b.folded, s.vision_merged_tokens
    folded = s.vision_merged_tokens + s.video_merged_tokens
    return [Term("vision.merger", b.count * matmul(folded, d, d), b.part, input_kind=INPUT_UPSTREAM),
            Term("vision.merger", b.count * matmul(folded, d, d), b.part),
            Term("vision.merger", b.count * (matmul(pairs, 2 * d, d) + matmul(pairs, d, d) + matmul(pairs, d, b.out_width)),
                 b.part)]


@block_flops(PooledTokenProjector)
def _pooled_token_projector(b: PooledTokenProjector, s: BatchStats, ctx: FlopsContext) -> list[Term]:
    """2·(M + F)·in·out (M = tower output positions, F = images: one mean-pooled token each)"""
    return [Term("vision.merger", b.count * matmul(s.vision_merged_tokens + s.vision_frames, b.in_width, b.out_width),
                 b.part, input_kind=INPUT_TOWER)]
