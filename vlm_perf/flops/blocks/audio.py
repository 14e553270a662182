"""Exact forward FLOPs of the audio block kinds (:mod:`vlm_perf.arch.blocks.audio`): audio-encoder blocks:
convolutional front ends (Whisper-style, Parakeet, SSCP, NeMo), encoder and conformer
"""

from __future__ import annotations

from ...arch.blocks import (
    AudioConvFrontEnd,
    AudioEmbedder,
    AudioHead,
    AudioLayers,
    AudioMlpProjector,
    AudioProjection,
    ChunkedConformerLayers,
    ConformerFrontEnd,
    ConformerLayers,
    NemoConformerLayers,
    ParakeetSubsampling,
    SSCPFrontEnd,
)
from ...stats.batch import BatchStats
from ..terms import INPUT_PIXELS, Term, matmul
from .base import FlopsContext, block_flops


@block_flops(AudioConvFrontEnd)
def _audio_conv(b: AudioConvFrontEnd, s: BatchStats, ctx: FlopsContext) -> list[Term]:
    """conv1d: 2·N0·(3·mel)·d + 2·N1·(3·d)·d; conv2d: 2·N1·F1·c·9 + 2·(N2·F2 + N3·F3)·c·9c + 2·N3·(c·F3)·d
    (N0 = audio_conv_frames, N_k = audio_conv_frames_s{2^k}: the padded chunks' positions)"""
    d, mel = b.width, b.mel_bins
    if b.style == "conv1d":
        return [Term("audio.conv", b.count * matmul(s.audio_conv_frames, 3 * mel, d), b.part,
                     input_kind=INPUT_PIXELS),  # reads the mel features: no input gradient
                Term("audio.conv", b.count * matmul(s.audio_conv_frames_s2, 3 * d, d), b.part)]
    c = b.channels
    return [Term("audio.conv", b.count * matmul(s.audio_conv_frames_s2 * b.freq_bins(1), 9, c), b.part,
                 input_kind=INPUT_PIXELS),
            Term("audio.conv", b.count * matmul(s.audio_conv_frames_s4 * b.freq_bins(2), 9 * c, c), b.part),
            Term("audio.conv", b.count * matmul(s.audio_conv_frames_s8 * b.freq_bins(3), 9 * c, c), b.part),
            Term("audio.conv", b.count * matmul(s.audio_conv_frames_s8, c * b.freq_bins(3), d), b.part)]


@block_flops(AudioLayers)
def _audio_layers(b: AudioLayers, s: BatchStats, ctx: FlopsContext) -> list[Term]:
    """per layer 2·A·(4·d·q + 2·d·f) + 4·q·Σlen² (A = audio_tokens; bidirectional within chunks/windows)"""
    rows, width, q = s.audio_tokens, b.width, b.attn_width
    return [Term("audio.attn_proj", b.count * (matmul(rows, width, 3 * q) + matmul(rows, q, width)), b.part),
            Term("audio.attn_core", 4 * q * (b.count * s.audio_tokens_sq), b.part, weights=False),
            Term("audio.mlp", b.count * 2 * matmul(rows, width, b.mlp_width), b.part)]


@block_flops(AudioHead)
def _audio_head(b: AudioHead, s: BatchStats, ctx: FlopsContext) -> list[Term]:
    """Σ_i 2·O·w_i·w_{i+1} (O = audio_out_tokens)"""
    return [Term("audio.proj", b.count * matmul(s.audio_out_tokens, i, o), b.part) for i, o in b.linears()]


@block_flops(ParakeetSubsampling)
def _parakeet_subsampling(b: ParakeetSubsampling, s: BatchStats, ctx: FlopsContext) -> list[Term]:
    """2·N1·F1·9·c + Σ_{k=2,3} 2·N_k·F_k·(9·c + c²) + 2·N3·(c·F3)·d (N_k = audio_conv_frames_s{2^k}, F_k = mel
    bins halved k times; depthwise 3x3 convs: 9 taps per channel)"""
    c = b.channels
    terms = [Term("audio.conv", b.count * matmul(s.audio_conv_frames_s2 * b.freq_bins(1), 9, c), b.part,
                  input_kind=INPUT_PIXELS)]  # reads the mel features: no input gradient
    for rows, k in ((s.audio_conv_frames_s4, 2), (s.audio_conv_frames_s8, 3)):
        terms.append(Term("audio.conv", b.count * (matmul(rows * b.freq_bins(k), 9, c)
                                                   + matmul(rows * b.freq_bins(k), c, c)), b.part))
    terms.append(Term("audio.conv", b.count * matmul(s.audio_conv_frames_s8, c * b.freq_bins(3), b.width), b.part))
    return terms


@block_flops(ConformerLayers)
def _conformer_layers(b: ConformerLayers, s: BatchStats, ctx: FlopsContext) -> list[Term]:
    """per layer 2·A·(2·2·d·f + d·(2q + 2kv) + 3d² + k·d) + 2·(2A − n)·d·q + 4·q·Σ T² + 2·q·(2·Σ T² − A)
    (A = audio_tokens, n = audio_items: each clip's 2T − 1 relative positions go through relative_k_proj)"""
    rows, d, q = s.audio_tokens, b.width, b.num_heads * b.head_dim
    kv = b.num_kv_heads * b.head_dim
    return [
        Term("audio.mlp", b.count * 2 * (matmul(rows, d, b.ffn) + matmul(rows, b.ffn, d)), b.part),
        Term("audio.attn_proj", b.count * (matmul(rows, d, q + 2 * kv) + matmul(rows, q, d)), b.part),
        Term("audio.attn_proj", b.count * matmul(2 * rows - s.audio_items, d, q), b.part,
             input_kind=INPUT_PIXELS),  # relative_k_proj reads the sinusoidal table: no input gradient
        Term("audio.attn_core", b.count * (4 * q * s.audio_tokens_sq + 2 * q * (2 * s.audio_tokens_sq - rows)), b.part,
             weights=False),
        Term("audio.conv", b.count * (matmul(rows, d, 2 * d) + matmul(rows, b.conv_kernel, d) + matmul(rows, d, d)),
             b.part),
    ]


@block_flops(AudioMlpProjector)
def _audio_mlp_projector(b: AudioMlpProjector, s: BatchStats, ctx: FlopsContext) -> list[Term]:
    """2·A·(d·hidden + hidden·out) (A = audio_tokens, padding rows included)"""
    return [Term("audio.proj", b.count * (matmul(s.audio_tokens, b.in_width, b.hidden_width)
                                          + matmul(s.audio_tokens, b.hidden_width, b.out_width)), b.part)]


@block_flops(SSCPFrontEnd)
def _sscp(b: SSCPFrontEnd, s: BatchStats, ctx: FlopsContext) -> list[Term]:
    """2·N1·F1·c0·k0 + 2·N2·F2·c1·c0·k1 + 2·N2·(c1·F2)·d (N1 = audio_conv_frames_s2, N2 = audio_conv_frames_s4)"""
    (c0, c1), (k0, k1) = b.channels, b.kernels
    f1, f2 = b.freq_bins(1), b.freq_bins(2)
    return [Term("audio.conv", b.count * matmul(s.audio_conv_frames_s2 * f1, k0[0] * k0[1], c0), b.part,
                 input_kind=INPUT_PIXELS),  # reads the mel features
            Term("audio.conv", b.count * matmul(s.audio_conv_frames_s4 * f2, c0 * k1[0] * k1[1], c1), b.part),
            Term("audio.conv", b.count * matmul(s.audio_conv_frames_s4, c1 * f2, b.width), b.part)]


@block_flops(ChunkedConformerLayers)
def _conformer(b: ChunkedConformerLayers, s: BatchStats, ctx: FlopsContext) -> list[Term]:
    """per layer 2·R·(4d² + 8d² + 8d² + 2d² + d² + d·K) + 2·calls·(P+F+1)·d² + 2·Q·d·(2C + P+F+1)
    (R = audio_tokens, Q = audio_tokens_sq: block-padded query rows)"""
    rows, d, n = s.audio_tokens, b.width, b.count
    return [Term("audio.attn_proj", n * 4 * matmul(rows, d, d), b.part),
            Term("audio.attn_proj", n * matmul(s.audio_calls * b.positions, d, d), b.part,
                 input_kind=INPUT_PIXELS),  # pos_proj on the sinusoids: constants, no input gradient
            Term("audio.attn_core", n * 2 * d * (2 * b.context + b.positions) * s.audio_tokens_sq, b.part,
                 weights=False),
            Term("audio.mlp", n * (4 * matmul(rows, d, 4 * d) + matmul(rows, d, 2 * d) + matmul(rows, d, d)), b.part),
            Term("audio.conv", n * matmul(rows, b.conv_kernel, d), b.part)]  # depthwise: K taps per channel


@block_flops(AudioEmbedder)
def _audio_embedder(b: AudioEmbedder, s: BatchStats, ctx: FlopsContext) -> list[Term]:
    """2·O·d·h (O = audio_out_tokens)"""
    return [Term("audio.proj", b.count * matmul(s.audio_out_tokens, b.width, b.out_width), b.part)]


@block_flops(ConformerFrontEnd)
def _conformer_front_end(b: ConformerFrontEnd, s: BatchStats, ctx: FlopsContext) -> list[Term]:
    """The NeMo ``dw_striding`` subsampling: Parakeet's formula (one rule for both)."""
    return _parakeet_subsampling(b, s, ctx)


@block_flops(NemoConformerLayers)
def _nemo_conformer_layers(b: NemoConformerLayers, s: BatchStats, ctx: FlopsContext) -> list[Term]:
    """per layer 2·A·(2·3·d·f + 4·d² + 2·d·e + d·e) + 2·P·d·m·(k + p) + 4·d·Σlen² (A = audio_tokens, P = A + (k−1)·
    audio_sequences: the depthwise conv's padded outputs, trimmed after the pointwise conv)"""
    rows, d, m, n = s.audio_tokens, b.width, b.multiplier, b.count
    padded = rows + (b.kernel - 1) * s.audio_sequences
    return [Term("audio.mlp", n * 2 * (matmul(rows, d, 2 * b.mlp_width) + matmul(rows, b.mlp_width, d)), b.part),
            Term("audio.attn_proj", n * 4 * matmul(rows, d, d), b.part),
            Term("audio.attn_core", 4 * d * (n * s.audio_tokens_sq), b.part, weights=False),
            Term("audio.conv", n * (matmul(rows, d, 2 * b.glu_width) + matmul(rows, d, b.glu_width)), b.part),
            Term("audio.conv", n * matmul(padded, d * m, b.kernel), b.part),  # depthwise: k taps per channel
            Term("audio.conv", n * matmul(padded, d * m, b.sep_width), b.part)]


@block_flops(AudioProjection)
def _audio_projection(b: AudioProjection, s: BatchStats, ctx: FlopsContext) -> list[Term]:
    """Σ_i 2·O·w_i·w_{i+1} (O = audio_out_tokens: every encoder output row)"""
    return [Term("audio.proj", b.count * matmul(s.audio_out_tokens, i, o), b.part) for i, o in b.linears()]
