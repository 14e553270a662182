"""Encoder-decoder language models: an encoder over the input sequence (image tokens + prompt) and a decoder over
the target sequence that attends to the encoder's output (BART in Florence-2; T5).

The encoder's sequences are the usual ``lm_*`` statistics; the decoder's are ``lm_decoder_tokens``,
``lm_decoder_tokens_sq`` and ``lm_decoder_x_encoder`` (:class:`~vlm_perf.stats.BatchStats`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from .base import Block, linear_params, norm_params
from .heads import LMHead


@dataclass(frozen=True)
class EncoderDecoderLayers(Block):
    """``encoder_layers`` encoder layers and ``decoder_layers`` decoder layers of width ``hidden`` (all ``count``
    copies identical; 1 in every model here).

    * encoder layer: self-attention (q / k / v Linear(hidden -> H·d), out Linear(H·d -> hidden)) over the
      sample's encoder positions, bidirectional (the whole square under any kernel), and an FFN;
    * decoder layer: causal self-attention over the target positions, cross-attention (q and out on the target
      positions, k / v Linear(hidden -> H·d) on the encoder's output positions, scores target x encoder per sample),
      and an FFN;
    * FFN: fc1 Linear(hidden -> ffn) -> activation -> fc2 Linear(ffn -> hidden) (BART), or with ``gated`` two input
      Linears whose product feeds the output one (T5 v1.1 / flan-t5 ``wi_0``, ``wi_1``, ``wo``);
    * ``bias`` on every Linear (BART) or none (T5); norms: 2 per encoder layer, 3 per decoder layer (``norm``:
      ``layernorm`` weight + bias, ``rmsnorm`` weight). Embeddings, position tables, the norms around the stacks and
      the output head are separate blocks.
    """

    kind: ClassVar[str] = "encoder_decoder_layers"
    hidden: int
    num_heads: int
    head_dim: int
    encoder_layers: int
    decoder_layers: int
    encoder_ffn: int
    decoder_ffn: int
    bias: bool = True
    gated: bool = False
    norm: str = "layernorm"

    @property
    def inner(self) -> int:
        """Attention width H·d."""
        return self.num_heads * self.head_dim

    def attention_params(self) -> int:
        return 3 * linear_params(self.hidden, self.inner, self.bias) + linear_params(self.inner, self.hidden, self.bias)

    def ffn_params(self, ffn: int) -> int:
        return (2 if self.gated else 1) * linear_params(self.hidden, ffn, self.bias) + linear_params(ffn, self.hidden,
                                                                                                   self.bias)

    def encoder_layer_params(self) -> int:
        return self.attention_params() + self.ffn_params(self.encoder_ffn) + 2 * norm_params(self.hidden, self.norm)

    def decoder_layer_params(self) -> int:
        return 2 * self.attention_params() + self.ffn_params(self.decoder_ffn) + 3 * norm_params(self.hidden, self.norm)

    def params(self) -> int:
        return self.encoder_layers * self.encoder_layer_params() + self.decoder_layers * self.decoder_layer_params()

    def describe(self) -> str:
        ffn = "gated FFN" if self.gated else "FFN"
        return (f"encoder-decoder LM: {self.encoder_layers} encoder layers (bidirectional self-attention, {ffn} "
                f"{self.encoder_ffn}) + {self.decoder_layers} decoder layers (causal self-attention, cross-attention "
                f"to the encoder output, {ffn} {self.decoder_ffn}), width {self.hidden}, {self.num_heads} heads x "
                f"{self.head_dim}{', biases' if self.bias else ''}, {self.norm}")


@dataclass(frozen=True)
class DecoderLMHead(LMHead):
    """The output head of an encoder-decoder LM: h -> V on every DECODER position (``lm_decoder_tokens``)."""

    kind: ClassVar[str] = "decoder_lm_head"

    def describe(self) -> str:
        return "decoder " + super().describe() + " on the target positions"
