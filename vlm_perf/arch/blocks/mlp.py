"""Dense MLPs of the LM (gated SwiGLU, the cross-attention layers' MLPs, non-gated MLPs).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from .base import Block, linear_params


@dataclass(frozen=True)
class DenseMLP(Block):
    """``count`` dense gated (SwiGLU) MLPs h -> F -> h, no bias."""

    kind: ClassVar[str] = "dense_mlp"
    hidden: int
    width: int

    def per_token(self) -> int:
        return 2 * 3 * self.hidden * self.width

    def params(self) -> int:
        return 3 * self.hidden * self.width

    def describe(self) -> str:
        return f"{self.count} dense gated MLP {self.hidden} -> {self.width}"


@dataclass(frozen=True)
class CrossLayerMLP(DenseMLP):
    """The gated MLPs of ``count`` cross-attention decoder layers (Mllama ``MllamaCrossAttentionDecoderLayer.mlp``):
    shapes and parameters of :class:`DenseMLP`, but they run only in microbatches with vision input
    (``MllamaTextModel`` skips a cross-attention decoder layer entirely when there are no cross-attention states):
    rows ``lm_tokens - lm_tokens_no_vision``."""

    kind: ClassVar[str] = "cross_layer_mlp"

    def describe(self) -> str:
        return super().describe() + " (cross-attention layers: only microbatches with images)"


@dataclass(frozen=True)
class PlainMLP(Block):
    """``count`` non-gated LM MLPs: up Linear(h -> w) -> act -> down Linear(w -> h) (Nemotron-H relu²)."""

    kind: ClassVar[str] = "plain_mlp"
    hidden: int
    width: int
    bias: bool = False

    def per_token(self) -> int:
        return 2 * 2 * self.hidden * self.width

    def params(self) -> int:
        return linear_params(self.hidden, self.width, self.bias) + linear_params(self.width, self.hidden, self.bias)

    def describe(self) -> str:
        return f"{self.count} plain MLP {self.hidden} -> {self.width} -> {self.hidden} (2 matrices)"
