"""Exact forward FLOPs of the attention block kinds (:mod:`vlm_perf.arch.blocks.attention`): attention sublayers of the
LM: GQA (and its gated, sink, chunked and shared-KV variants), multi-head latent
"""

from __future__ import annotations

from typing import Any

from ...arch.blocks import (
    ChunkedDecoderAttention,
    CrossAttention,
    DecoderAttention,
    GatedDecoderAttention,
    ImageBlockAttention,
    MLAttention,
    PrefixLMSquare,
    SharedKVDecoderAttention,
    SinkDecoderAttention,
)
from ...stats.batch import BatchStats
from ..terms import INPUT_OWN, INPUT_STAGE, INPUT_UPSTREAM, Term, matmul
from .base import FlopsContext, block_flops


def causal_core(per_sq: int, s: BatchStats, ctx: FlopsContext, window: int | None = None) -> Any:
    """An LM attention core: ``per_sq`` FLOPs per squared position times the batch's sum of squared sequence lengths
    (less what a sliding ``window`` masks, under a causal flash kernel), times the causal factor."""
    if window and ctx.causal == "half":
        return per_sq * (s.lm_tokens_sq - s.lm_tokens_sq_beyond_window) * ctx.causal_factor
    return per_sq * s.lm_tokens_sq * ctx.causal_factor


@block_flops(DecoderAttention)
@block_flops(MLAttention)
def _attention(b: DecoderAttention | MLAttention, s: BatchStats, ctx: FlopsContext) -> list[Term]:
    """per layer projections·S + 2·H·(d_qk + d_v)·Σs²·(½ causal half, windowed if sliding | 1 eager)"""
    window = getattr(b, "window", None)
    return [Term("lm.attn_proj", b.count * b.proj_per_token() * s.lm_tokens, b.part),
            Term("lm.attn_core", b.count * causal_core(b.core_per_token_sq(), s, ctx, window), b.part, weights=False)]


@block_flops(ImageBlockAttention)
def _image_block_attention(b: ImageBlockAttention, s: BatchStats, ctx: FlopsContext) -> list[Term]:
    """per layer 4·H·d·n²/2 per image block (vision_frames) under causal half; 0 under causal full"""
    if ctx.causal != "half":
        return []
    per_block = 2 * b.num_heads * b.head_dim * b.tokens * b.tokens  # (2·H·2d) x n²/2
    return [Term("lm.attn_core", b.count * per_block * s.vision_frames, b.part, weights=False)]


block_flops(GatedDecoderAttention)(_attention)


@block_flops(PrefixLMSquare)
def _prefix_lm_square(b: PrefixLMSquare, s: BatchStats, ctx: FlopsContext) -> list[Term]:
    """per layer 4·H·d·Σs²·½ under causal half (the other half of the square); 0 under causal full"""
    if ctx.causal != "half":
        return []
    return [Term("lm.attn_core", b.count * 2 * b.num_heads * 2 * b.head_dim * s.lm_tokens_sq * ctx.causal_factor,
                 b.part, weights=False)]


block_flops(SinkDecoderAttention)(_attention)  # the sink column is a softmax input, not a matmul


@block_flops(CrossAttention)
def _cross_attention(b: CrossAttention, s: BatchStats, ctx: FlopsContext) -> list[Term]:
    """per layer 2·S·2·h·H·d (q, o; S: LM tokens of microbatches with images) + 2·V·2·h·kv·d (k, v on V vision
    tokens) + 4·H·d·Σ S·V (whole rectangle)"""
    n, h, q = b.count, b.hidden, b.q_width
    text = s.lm_tokens - s.lm_tokens_no_vision  # the layer is skipped in microbatches without images
    vision_rows = s.vision_patches + b.kv_tokens_per_frame * s.vision_frames
    cross = s.lm_x_vision_patches + b.kv_tokens_per_frame * s.lm_x_vision_frames
    half = n * 2 * q * cross  # one of the two core matmuls (QKᵀ or AV)
    query_input = INPUT_STAGE if b.query_from_vision else INPUT_OWN
    terms = [Term("lm.attn_proj", n * matmul(text, h, q), b.part, input_kind=query_input),
             Term("lm.attn_proj", n * 2 * matmul(vision_rows, h, b.kv_width), b.part, input_kind=INPUT_UPSTREAM),
             Term("lm.attn_proj", n * matmul(text, q, h), b.part)]
    if b.query_from_vision or ctx.causal == "half":  # fused kernels compute dQ, dK, dV together
        return terms + [Term("lm.attn_core", 2 * half, b.part, weights=False)]
    # eager: dK, dP, dV (3 halves) whenever k/v need a gradient; dQ only when the queries do (the LM trains)
    return terms + [Term("lm.attn_core", 2 * half, b.part, weights=False, input_grad=3 * half),
                    Term("lm.attn_core", 0 * half, b.part, weights=False, input_kind=INPUT_OWN, input_grad=half)]


@block_flops(ChunkedDecoderAttention)
def _chunked_attention(b: ChunkedDecoderAttention, s: BatchStats, ctx: FlopsContext) -> list[Term]:
    """per layer projections·S + 2·H·(d_qk + d_v)·(Σs² − beyond chunks)·½ (causal half) | Σs² (eager)"""
    if ctx.causal == "half":
        core = b.core_per_token_sq() * (s.lm_tokens_sq - s.lm_tokens_sq_beyond_chunks) * ctx.causal_factor
    else:
        core = b.core_per_token_sq() * s.lm_tokens_sq * ctx.causal_factor
    return [Term("lm.attn_proj", b.count * b.proj_per_token() * s.lm_tokens, b.part),
            Term("lm.attn_core", b.count * core, b.part, weights=False)]


block_flops(SharedKVDecoderAttention)(_attention)  # q/o projections (proj_per_token), the usual core
