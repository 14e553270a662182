"""Exact forward FLOPs of the encoder-decoder block kinds (:mod:`vlm_perf.arch.blocks.encoder_decoder`): an encoder
on the ``lm_*`` sequences, a decoder on the ``lm_decoder_*`` ones with cross-attention to its sample's encoder output.
"""

from __future__ import annotations

from ...arch.blocks.encoder_decoder import DecoderLMHead, EncoderDecoderLayers
from ...stats.batch import BatchStats
from ..terms import INPUT_OWN, Term, matmul
from .base import FlopsContext, block_flops


def _ffn(b: EncoderDecoderLayers, rows, ffn: int):
    return (2 if b.gated else 1) * matmul(rows, b.hidden, ffn) + matmul(rows, ffn, b.hidden)


@block_flops(EncoderDecoderLayers)
def _encoder_decoder(b: EncoderDecoderLayers, s: BatchStats, ctx: FlopsContext) -> list[Term]:
    """E, E2 = encoder tokens, Σ squares; D, D2 = decoder tokens, Σ squares; X = Σ decoder x encoder per sample;
    a = H·d, h = hidden:
    encoder per layer 2·E·4·h·a + 4·a·E2 (never halved: bidirectional) + FFN(E);
    decoder per layer 2·D·4·h·a + 4·a·D2·(causal factor) + cross 2·D·2·h·a + 2·E·2·h·a + 4·a·X + FFN(D).

    Gradient flow: the decoder's first self-attention (and its cross-attention query) reads only the decoder's own
    embeddings, so its input gradients run only when the LM trains (``own``); the cross-attention keys / values read
    the encoder output (the LM's and the vision parts' gradient). An eager cross-attention core in that first decoder
    layer computes dK, dP, dV whenever the keys / values need a gradient and dQ only when the queries do; fused
    kernels (``--causal half``) compute them together. Every later decoder op carries the encoder's gradient too."""
    n, h, a = b.count, b.hidden, b.inner
    enc, dec = s.lm_tokens, s.lm_decoder_tokens
    le, ld = b.encoder_layers, b.decoder_layers
    self_proj = lambda rows: matmul(rows, h, 3 * a) + matmul(rows, a, h)  # noqa: E731
    dec_self_core = 4 * a * s.lm_decoder_tokens_sq * ctx.causal_factor
    half = 2 * a * s.lm_decoder_x_encoder  # one of the cross core's two matmuls
    terms = [
        Term("lm.attn_proj", n * le * self_proj(enc), b.part),
        Term("lm.attn_core", n * le * 4 * a * s.lm_tokens_sq, b.part, weights=False),
        Term("lm.dense_mlp", n * le * _ffn(b, enc, b.encoder_ffn), b.part),
    ]
    if not ld:
        return terms
    rest = ld - 1
    terms += [
        # decoder layer 0 up to its cross-attention query: the decoder's own embeddings only
        Term("lm.attn_proj", n * (self_proj(dec) + matmul(dec, h, a)), b.part, input_kind=INPUT_OWN),
        Term("lm.attn_core", n * dec_self_core, b.part, weights=False, input_kind=INPUT_OWN),
        Term("lm.attn_proj", n * rest * (self_proj(dec) + matmul(dec, h, a)), b.part),
        Term("lm.attn_core", n * rest * dec_self_core, b.part, weights=False),
        # cross-attention keys / values on the encoder output, output projections, FFNs
        Term("lm.attn_proj", n * ld * (matmul(enc, h, 2 * a) + matmul(dec, a, h)), b.part),
        Term("lm.dense_mlp", n * ld * _ffn(b, dec, b.decoder_ffn), b.part),
        Term("lm.attn_core", n * rest * 2 * half, b.part, weights=False),
    ]
    if ctx.causal == "half":
        return terms + [Term("lm.attn_core", n * 2 * half, b.part, weights=False)]
    return terms + [
        Term("lm.attn_core", n * 2 * half, b.part, weights=False, input_grad=n * 3 * half),
        Term("lm.attn_core", 0 * half, b.part, weights=False, input_kind=INPUT_OWN, input_grad=n * half)]


@block_flops(DecoderLMHead)
def _decoder_lm_head(b: DecoderLMHead, s: BatchStats, ctx: FlopsContext) -> list[Term]:
    """2·D·h·V (every decoder position)"""
    return [Term("lm.logits", b.count * b.per_token() * s.lm_decoder_tokens, b.part)]
