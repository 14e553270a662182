"""Attention sublayers of the LM: GQA (and its gated, sink, chunked and shared-KV variants), multi-head latent
attention, cross-attention to vision tokens, and the mask shapes that make image tokens bidirectional.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any, ClassVar

from ..parts import LANGUAGE_MODEL
from ..trainability import ATTENTION
from .base import Block, linear_params
from .laid import (AttnSub, LayerFrame, LayoutContext, Lin, Params, Placed, block_layout, decoder_layers, norm,
                   opaque_sublayer)


@dataclass(frozen=True)
class DecoderAttention(Block):
    """``count`` GQA self-attention sublayers: q/k/v/o projections (+ q/k RMSNorm over head_dim).

    ``window``: sliding-window size in tokens (None = full causal attention); ``q_bias`` covers q/k/v.
    """

    kind: ClassVar[str] = "decoder_attention"
    hidden: int
    num_heads: int
    num_kv_heads: int
    head_dim: int
    qkv_bias: bool
    o_bias: bool
    qk_norm: bool
    window: int | None = None

    @property
    def q_width(self) -> int:
        return self.num_heads * self.head_dim

    @property
    def kv_width(self) -> int:
        return self.num_kv_heads * self.head_dim

    def proj_per_token(self) -> int:
        """Forward FLOPs per token of one sublayer's projections."""
        h, q = self.hidden, self.q_width
        return 2 * (h * (q + 2 * self.kv_width) + q * h)

    def core_per_token_sq(self) -> int:
        """Forward FLOPs of one sublayer's attention core per unit of S^2 (full square)."""
        return 2 * self.num_heads * 2 * self.head_dim

    def params(self) -> int:
        h = self.hidden
        p = (linear_params(h, self.q_width, self.qkv_bias) + 2 * linear_params(h, self.kv_width, self.qkv_bias)
             + linear_params(self.q_width, h, self.o_bias))
        return p + (2 * self.head_dim if self.qk_norm else 0)

    def describe(self) -> str:
        kind = f"sliding-window ({self.window})" if self.window else "full causal"
        return (f"{self.count} {kind} GQA attention, {self.num_heads} q / {self.num_kv_heads} kv heads x "
                f"{self.head_dim}{', q/k norm' if self.qk_norm else ''}")


@dataclass(frozen=True)
class MLAttention(Block):
    """``count`` DeepSeek multi-head latent attention sublayers (q LoRA optional, kv LoRA)."""

    kind: ClassVar[str] = "mla_attention"
    hidden: int
    num_heads: int
    q_lora_rank: int | None
    kv_lora_rank: int
    qk_nope_head_dim: int
    qk_rope_head_dim: int
    v_head_dim: int

    @property
    def qk_head_dim(self) -> int:
        return self.qk_nope_head_dim + self.qk_rope_head_dim

    def proj_per_token(self) -> int:
        h, heads = self.hidden, self.num_heads
        if self.q_lora_rank is None:
            q_proj = h * heads * self.qk_head_dim
        else:
            q_proj = h * self.q_lora_rank + self.q_lora_rank * heads * self.qk_head_dim
        kv_proj = (h * (self.kv_lora_rank + self.qk_rope_head_dim)
                   + self.kv_lora_rank * heads * (self.qk_nope_head_dim + self.v_head_dim))
        return 2 * (q_proj + kv_proj + heads * self.v_head_dim * h)

    def core_per_token_sq(self) -> int:
        return 2 * self.num_heads * (self.qk_head_dim + self.v_head_dim)

    def params(self) -> int:
        h, heads = self.hidden, self.num_heads
        if self.q_lora_rank:
            q = (linear_params(h, self.q_lora_rank, False) + self.q_lora_rank
                 + linear_params(self.q_lora_rank, heads * self.qk_head_dim, False))
        else:
            q = linear_params(h, heads * self.qk_head_dim, False)
        kv = (linear_params(h, self.kv_lora_rank + self.qk_rope_head_dim, False) + self.kv_lora_rank
              + linear_params(self.kv_lora_rank, heads * (self.qk_nope_head_dim + self.v_head_dim), False))
        return q + kv + linear_params(heads * self.v_head_dim, h, False)

    def describe(self) -> str:
        return (f"{self.count} MLA attention, {self.num_heads} heads, q LoRA {self.q_lora_rank}, "
                f"kv LoRA {self.kv_lora_rank}")


@dataclass(frozen=True)
class ImageBlockAttention(Block):
    """Bidirectional attention inside each image's token block of a causal LM (Gemma 3 ``token_type_ids``):
    ``count`` layers, ``tokens`` placeholders per block (``mm_tokens_per_image``), one block per image or
    pan-and-scan crop (statistic ``vision_frames``). FLOPs only: the score entries above the causal diagonal
    that the mask re-opens, ``tokens^2 / 2`` per block per layer (continuous "causal half" convention);
    under ``--causal full`` the eager square already holds them (0 here). Parameters: none."""

    kind: ClassVar[str] = "image_block_attention"
    num_heads: int
    head_dim: int
    tokens: int

    def params(self) -> int:
        return 0

    def describe(self) -> str:
        return (f"{self.count} layers: image tokens attend bidirectionally within their block of {self.tokens} "
                f"(+{self.tokens}^2/2 score entries per image per layer under causal half)")


# Qwen3.5 / Qwen3.5-MoE hybrid LM (transformers models/qwen3_5*/modeling_*.py): gated-delta-net linear
# attention layers, full-attention layers with an output gate, MoE with a sigmoid-gated shared expert.
@dataclass(frozen=True)
class GatedDecoderAttention(DecoderAttention):
    """Full causal GQA attention whose ``q_proj`` also emits a per-channel output gate (h -> 2·H·d;
    ``attn_out * sigmoid(gate)`` before ``o_proj``), q/k RMSNorm over head_dim (Qwen3.5, Qwen3-Next)."""

    kind: ClassVar[str] = "gated_decoder_attention"

    def proj_per_token(self) -> int:
        h, q = self.hidden, self.q_width
        return 2 * (h * (2 * q + 2 * self.kv_width) + q * h)

    def params(self) -> int:
        return super().params() + linear_params(self.hidden, self.q_width, self.qkv_bias)

    def describe(self) -> str:
        return super().describe() + ", output gate (q_proj h -> 2·H·d)"


@dataclass(frozen=True)
class PrefixLMSquare(Block):
    """PaliGemma's prefix-LM mask (``token_type_ids``: image tokens + ``<bos>`` + prompt attend bidirectionally,
    the suffix causally). transformers refuses FlashAttention for it (the mask would be lost), and eager and SDPA
    compute every score entry of the square whatever the mask (also on Gemma 2's sliding-window layers), so the
    core is the whole square under both ``--causal`` rules: under ``half`` this block adds the half that the
    attention blocks leave out (``4·H·d·Σs²·½`` per layer; 0 under ``full``). Parameters: none."""

    kind: ClassVar[str] = "prefix_lm_square"
    num_heads: int
    head_dim: int

    def params(self) -> int:
        return 0

    def describe(self) -> str:
        return (f"{self.count} layers: prefix-LM mask, no causal-skipping kernel in transformers: the whole "
                "score square under both causal rules")


@dataclass(frozen=True)
class SinkDecoderAttention(DecoderAttention):
    """GQA attention with one learned **attention sink** logit per head (gpt-oss): the sink joins each row's
    softmax as an extra column and is then dropped, so it changes the weights but adds no matmul (the
    projections and the Q K^T / A V core are those of :class:`DecoderAttention`); ``num_heads`` parameters."""

    kind: ClassVar[str] = "sink_decoder_attention"

    def params(self) -> int:
        return super().params() + self.num_heads

    def describe(self) -> str:
        return super().describe() + ", attention sinks (1 logit per head)"


@dataclass(frozen=True)
class CrossAttention(Block):
    """``count`` cross-attention sublayers (kind ``cross_attention``): every LM token of a sample attends to the
    vision tokens of that sample's images (Mllama ``MllamaTextCrossAttention``).

    q_proj (h -> H·d) and o_proj (H·d -> h) on ``lm_tokens``; k_proj / v_proj (h -> kv·d each) on the vision tokens
    (``vision_patches`` + ``kv_tokens_per_frame`` x ``vision_frames``; their input is the projector output, so
    their input gradient is due only when a vision part trains); RMSNorm over head_dim on q and k (``qk_norm``).
    The whole decoder layer runs only in microbatches with vision input (``MllamaTextModel`` skips it otherwise): q/o
    rows are ``lm_tokens - lm_tokens_no_vision`` (k/v and the core are 0 without vision tokens anyway).
    Core: ``4·H·d·Σ_samples S x V`` (QKᵀ and AV over the whole text x vision rectangle: the cross-attention mask
    is additive, no kernel skips it; ``--causal`` does not apply), from the statistics ``lm_x_vision_patches`` +
    ``kv_tokens_per_frame`` x ``lm_x_vision_frames``.

    ``query_from_vision`` False for the first cross-attention layer: its queries come from text-only layers, so
    with the LM frozen and a vision part trainable neither q_proj's input gradient nor, under eager attention,
    dQ runs (dK, dP and dV do).
    """

    kind: ClassVar[str] = "cross_attention"
    hidden: int
    num_heads: int
    num_kv_heads: int
    head_dim: int
    kv_tokens_per_frame: int
    qk_norm: bool = True
    query_from_vision: bool = True

    @property
    def q_width(self) -> int:
        return self.num_heads * self.head_dim

    @property
    def kv_width(self) -> int:
        return self.num_kv_heads * self.head_dim

    def params(self) -> int:
        h = self.hidden
        return (2 * linear_params(h, self.q_width, False) + 2 * linear_params(h, self.kv_width, False)
                + (2 * self.head_dim if self.qk_norm else 0))

    def describe(self) -> str:
        return (f"{self.count} cross-attention to the sample's vision tokens, {self.num_heads} q / {self.num_kv_heads} "
                f"kv heads x {self.head_dim}{', q/k norm' if self.qk_norm else ''}; k/v on vision tokens, core "
                "4·H·d·Σ S·V (whole rectangle)")


@dataclass(frozen=True)
class ChunkedDecoderAttention(DecoderAttention):
    """GQA attention that attends causally **within consecutive chunks** of ``chunk`` tokens (Llama 4's RoPE layers,
    ``attention_chunk_size``): a chunk-aware kernel computes Σ_chunks c²/2 score entries (statistic
    ``lm_tokens_sq_beyond_chunks``); eager attention (``--causal full``) computes the whole square. Projections and
    parameters are :class:`DecoderAttention`'s (Llama 4's q/k L2 norm has no weights)."""

    kind: ClassVar[str] = "chunked_decoder_attention"
    chunk: int = 0

    def describe(self) -> str:
        return super().describe().replace("full causal", f"chunked causal ({self.chunk})", 1)


# Gemma 3n's text decoder (transformers models/gemma3n: ``Gemma3nTextModel`` / ``Gemma3nTextDecoderLayer``): every
# layer carries AltUp (n parallel copies of the hidden state, one active), a LAuReL low-rank residual and a gated
# per-layer input; the last ``num_kv_shared_layers`` layers reuse an earlier layer's keys and values.
@dataclass(frozen=True)
class SharedKVDecoderAttention(DecoderAttention):
    """``count`` attention sublayers that reuse the keys / values of an earlier layer of the same type (Gemma 3n's
    KV-shared layers, ``kv_sharing_modes`` "reuse"): q/o projections and q RMSNorm only (no k/v projection, no
    k norm); the core attends the producer's keys (the same sequence: same square, same window)."""

    kind: ClassVar[str] = "shared_kv_decoder_attention"

    def proj_per_token(self) -> int:
        return 2 * 2 * self.hidden * self.q_width

    def params(self) -> int:
        h = self.hidden
        p = linear_params(h, self.q_width, self.qkv_bias) + linear_params(self.q_width, h, self.o_bias)
        return p + (self.head_dim if self.qk_norm else 0)

    def describe(self) -> str:
        return super().describe() + " reusing an earlier layer's keys / values (q/o only)"


# --------------------------------------------------------------------------- per-Linear layout (vlm_perf.arch.layout)
@block_layout(DecoderAttention, GatedDecoderAttention, SinkDecoderAttention, stages=(LANGUAGE_MODEL,))
def _decoder_attention_layout(a: DecoderAttention, ctx: LayoutContext) -> Placed | None:
    layers = decoder_layers(a, ctx, window=a.window)
    if layers is None:
        return None
    return Placed(slot="attention", layers=layers, build=lambda frame: _decoder_attention_sub(a, frame))


def _decoder_attention_sub(a: DecoderAttention, frame: LayerFrame) -> tuple[Any, ...] | None:
    """q/k/v projections (Qwen3.5's gated attention: q_proj also emits the output gate, h -> 2·H·d, an elementwise
    multiply), optional q/k RMSNorms over one head, the core (gpt-oss: its sinks inside the softmax), o_proj."""
    if frame.norms is None:
        return None
    pre = f"{frame.ctx.lm_prefix}.layers.{frame.index}."
    rows = ("lm_tokens",)
    q_out = 2 * a.q_width if isinstance(a, GatedDecoderAttention) else a.q_width
    projections = (Lin(pre + "self_attn.q_proj", ATTENTION, rows, a.hidden, q_out, "lm.attn_proj", a.qkv_bias),
                   Lin(pre + "self_attn.k_proj", ATTENTION, rows, a.hidden, a.kv_width, "lm.attn_proj", a.qkv_bias),
                   Lin(pre + "self_attn.v_proj", ATTENTION, rows, a.hidden, a.kv_width, "lm.attn_proj", a.qkv_bias))
    qk = ((norm(pre + "self_attn.q_norm", a.head_dim, "rmsnorm"), norm(pre + "self_attn.k_norm", a.head_dim, "rmsnorm"))
          if a.qk_norm else ())
    sinks = (Params(pre + "self_attn.sinks", ATTENTION),) if isinstance(a, SinkDecoderAttention) else ()
    return (AttnSub(frame.norm("attention_in"), projections, (0, 1, 2), qk, replace(a, count=1),
                    Lin(pre + "self_attn.o_proj", ATTENTION, rows, a.q_width, a.hidden, "lm.attn_proj", a.o_bias),
                    frame.norm("attention_out"), sinks),)


# the nn.Linear modules inside attention kinds laid out whole (transformers 5 names, relative to ``self_attn``)
_MLA_LINEARS = ("q_a_proj", "q_b_proj", "q_proj", "kv_a_proj_with_mqa", "kv_b_proj", "o_proj")


@block_layout(ChunkedDecoderAttention, SharedKVDecoderAttention, MLAttention, stages=(LANGUAGE_MODEL,))
def _whole_attention_layout(a: Block, ctx: LayoutContext) -> Placed | None:
    """Attention kinds without a per-Linear layout: in their decoder layers, laid out whole."""
    layers = decoder_layers(a, ctx, window=getattr(a, "window", None))
    if layers is None:
        return None
    inner = _MLA_LINEARS if isinstance(a, MLAttention) else ()
    return Placed(slot="attention", layers=layers, build=opaque_sublayer(a, "self_attn", inner))
