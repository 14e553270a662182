"""Dense MLPs of the LM (gated SwiGLU, the cross-attention layers' MLPs, non-gated MLPs).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

from ..parts import LANGUAGE_MODEL
from ..trainability import MLP
from .base import Block, linear_params
from .laid import LayerFrame, LayoutContext, Lin, MlpSub, Placed, block_layout


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


# --------------------------------------------------------------------------- per-Linear layout (vlm_perf.arch.layout)
@block_layout(DenseMLP, stages=(LANGUAGE_MODEL,))
def _dense_mlp_layout(m: DenseMLP, ctx: LayoutContext) -> Placed | None:
    """In the layers that are not MoE: gate/up (or GLM-4V's fused ``gate_up_proj``) then down."""
    moe = set(ctx.spec.lm.moe_layers)
    layers = tuple(i for i in range(ctx.num_layers) if i not in moe)
    if len(layers) != m.count:
        return None
    return Placed(slot="mlp", layers=layers, build=lambda frame: _dense_mlp_sub(m, frame))


def _dense_mlp_sub(m: DenseMLP, frame: LayerFrame) -> tuple[Any, ...] | None:
    if frame.norms is None:
        return None
    names, rows = frame.ctx.names, ("lm_tokens",)
    pre = f"{frame.ctx.lm_prefix}.layers.{frame.index}."
    if names and names.lm_gate_up:
        ins: tuple[Lin, ...] = (Lin(pre + names.lm_gate_up, MLP, rows, m.hidden, 2 * m.width, "lm.dense_mlp"),)
    else:
        ins = (Lin(pre + "mlp.gate_proj", MLP, rows, m.hidden, m.width, "lm.dense_mlp"),
               Lin(pre + "mlp.up_proj", MLP, rows, m.hidden, m.width, "lm.dense_mlp"))
    return (MlpSub(frame.norm("mlp_in"), ins, Lin(pre + "mlp.down_proj", MLP, rows, m.width, m.hidden, "lm.dense_mlp"),
                   frame.norm("mlp_out")),)
