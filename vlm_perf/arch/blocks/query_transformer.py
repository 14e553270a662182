"""Query transformers: a fixed set of learned queries that read a vision tower's output through cross-attention
and hand a fixed number of tokens per image to the LM (BLIP-2's Q-Former).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from .base import Block, linear_params


@dataclass(frozen=True)
class QueryTransformer(Block):
    """A BERT-style query transformer on ``queries`` learned query vectors per image (BLIP-2 ``query_tokens`` +
    ``Blip2QFormerModel`` + ``language_projection``), all ``count`` copies identical (1 in BLIP-2).

    * ``query_tokens`` (queries x width) -> LayerNorm (``qformer.layernorm``);
    * ``layers`` post-norm layers: self-attention over the image's queries (query / key / value / dense, all with
      bias, LayerNorm), in every ``cross_every``-th layer (index % ``cross_every`` == 0: ``cross_layers`` of them)
      a cross-attention whose queries are the image's queries and whose keys / values are Linear(``kv_width`` ->
      width) of every tower output row of that image (patches and CLS), then ``intermediate_query`` /
      ``output_query`` (width -> ``mlp_width`` -> width, bias, LayerNorm);
    * ``text_ffn``: ``use_qformer_text_input`` stores a second FFN per layer for text rows, which
      ``Blip2ForConditionalGeneration`` never feeds (parameters only);
    * ``language_projection`` Linear(width -> ``out_width``, bias) on every query: ``queries`` LM tokens per image.
    """

    kind: ClassVar[str] = "query_transformer"
    queries: int
    width: int
    num_heads: int
    mlp_width: int
    layers: int
    cross_every: int
    kv_width: int
    out_width: int
    text_ffn: bool = False

    @property
    def cross_layers(self) -> int:
        """Layers with a cross-attention: indexes 0, f, 2f, ... below ``layers``."""
        return (self.layers + self.cross_every - 1) // self.cross_every

    def params(self) -> int:
        w, i = self.width, self.mlp_width
        ffn = linear_params(w, i, True) + linear_params(i, w, True) + 2 * w
        layer = 4 * linear_params(w, w, True) + 2 * w + ffn + (ffn if self.text_ffn else 0)
        cross = 2 * linear_params(w, w, True) + 2 * linear_params(self.kv_width, w, True) + 2 * w
        return (self.queries * w + 2 * w + self.layers * layer + self.cross_layers * cross
                + linear_params(w, self.out_width, True))

    def describe(self) -> str:
        return (f"query transformer: {self.queries} learned queries x {self.width}, {self.layers} layers "
                f"({self.num_heads} heads, FFN {self.mlp_width}), cross-attention to the tower ({self.kv_width}) in "
                f"{self.cross_layers} of them (every {self.cross_every}), "
                f"projection {self.width} -> {self.out_width} on every query"
                + (" (text FFN stored, never run)" if self.text_ffn else ""))
