"""Residual-stream machinery that is neither attention nor MLP (Gemma 3n's AltUp streams, LAuReL residuals,
per-layer input gates).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from .base import Block


@dataclass(frozen=True)
class AltUpLayer(Block):
    """``count`` AltUp predict / correct steps (``Gemma3nTextAltUp``) over ``streams`` copies of width ``hidden``.

    Per token: predict: RMSNorm -> ``modality_router`` Linear(h -> n) on the active stream, ``prediction_coefs``
    Linear(n -> n²), then the (h x n) x (n x n) stream mix (a matmul of two activations: no weight, both inputs need
    gradients); correct: ``modality_router`` Linear(h -> n) again on the layer output, ``correction_coefs``
    Linear(n -> n). Parameters: router norm and ``correct_output_scale`` (h each), router h·n, coefficients n³ + n²."""

    kind: ClassVar[str] = "altup_layer"
    hidden: int
    streams: int

    def weight_per_token(self) -> int:
        h, n = self.hidden, self.streams
        return 2 * (2 * h * n + n * n * n + n * n)

    def mix_per_token(self) -> int:
        return 2 * self.hidden * self.streams * self.streams

    def params(self) -> int:
        h, n = self.hidden, self.streams
        return 2 * h + h * n + n ** 3 + n * n

    def describe(self) -> str:
        return (f"{self.count} AltUp predict/correct over {self.streams} streams of {self.hidden} (router h -> n twice, "
                f"coefficients n -> n² and n -> n, stream mix h x n x n per token)")


@dataclass(frozen=True)
class LaurelBlock(Block):
    """``count`` LAuReL low-rank residuals (``Gemma3nTextLaurelBlock``): Linear(h -> r) -> Linear(r -> h) ->
    RMSNorm, no bias."""

    kind: ClassVar[str] = "laurel_block"
    hidden: int
    rank: int

    def params(self) -> int:
        return 2 * self.hidden * self.rank + self.hidden

    def describe(self) -> str:
        return f"{self.count} LAuReL residual {self.hidden} -> {self.rank} -> {self.hidden} + RMSNorm"


@dataclass(frozen=True)
class PerLayerInputGate(Block):
    """``count`` per-layer input gates (``Gemma3nTextDecoderLayer``): ``per_layer_input_gate`` Linear(h -> p), act,
    times the layer's per-layer input (elementwise), ``per_layer_projection`` Linear(p -> h), RMSNorm(h); no bias."""

    kind: ClassVar[str] = "per_layer_input_gate"
    hidden: int
    width: int

    def params(self) -> int:
        return 2 * self.hidden * self.width + self.hidden

    def describe(self) -> str:
        return f"{self.count} per-layer input gates {self.hidden} -> {self.width} -> {self.hidden} + RMSNorm"


@dataclass(frozen=True)
class AltUpStreams(Block):
    """Gemma 3n's model-level stream machinery (``Gemma3nTextModel``), once per token: ``per_layer_model_projection``
    Linear(h -> L·p) (+ RMSNorm(p)), ``altup_projections`` and ``altup_unembed_projections``: (n - 1) Linear(h -> h)
    each; no bias. (The per-layer embedding table is a lookup: a :class:`TokenEmbedding`.)"""

    kind: ClassVar[str] = "altup_streams"
    hidden: int
    streams: int
    layers: int
    per_layer_width: int

    def params(self) -> int:
        h = self.hidden
        return h * self.layers * self.per_layer_width + self.per_layer_width + 2 * (self.streams - 1) * h * h

    def describe(self) -> str:
        h = self.hidden
        return (f"per-layer input projection {h} -> {self.layers} x {self.per_layer_width}, {self.streams - 1} AltUp "
                f"stream projections and {self.streams - 1} unembed projections {h} -> {h}")
