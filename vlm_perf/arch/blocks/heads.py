"""Output heads of the LM: the logits projection and DeepSeek's multi-token prediction modules.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from ..parts import LANGUAGE_MODEL
from ..trainability import HEAD
from .attention import DecoderAttention, MLAttention
from .base import Block, linear_params
from .laid import LayoutContext, Lin, Placed, block_layout
from .mlp import DenseMLP
from .moe import MoEMLP


@dataclass(frozen=True)
class LMHead(Block):
    """Output projection h -> V on every position (the logits GEMM); 0 stored params when tied."""

    kind: ClassVar[str] = "lm_head"
    hidden: int
    vocab: int
    tied: bool

    def per_token(self) -> int:
        return 2 * self.hidden * self.vocab

    def params(self) -> int:
        return 0 if self.tied else self.vocab * self.hidden

    def describe(self) -> str:
        return f"lm_head {self.hidden} -> {self.vocab}{' (tied to the embedding)' if self.tied else ''}"


@dataclass(frozen=True)
class MTPModules(Block):
    """DeepSeek-V3 multi-token prediction: ``count`` modules of enorm + hnorm + eh_proj (2h -> h) + one
    decoder layer (``attention`` + ``mlp``) + shared_head.norm, each with its own logits on the shared head.

    Not part of the model's stored-parameter total (released checkpoints keep them separately)."""

    kind: ClassVar[str] = "mtp_modules"
    hidden: int
    vocab: int
    attention: DecoderAttention | MLAttention  # the decoder layer's attention (GatedDecoderAttention included)
    mlp: DenseMLP | MoEMLP

    def per_token(self, router: bool = True) -> int:
        """Forward FLOPs per token of one module (eh_proj, decoder layer GEMMs, logits)."""
        mlp = self.mlp.per_token()
        mlp_flops = (mlp["routed"] + mlp["shared"] + (mlp["router"] if router else 0)) if isinstance(mlp, dict) \
            else mlp
        return 2 * 2 * self.hidden * self.hidden + self.attention.proj_per_token() + mlp_flops \
            + 2 * self.hidden * self.vocab

    def params(self) -> int:
        h = self.hidden
        return 2 * h + linear_params(2 * h, h, False) + self.attention.params() + self.mlp.params() + 2 * h + h

    def describe(self) -> str:
        return f"{self.count} MTP modules (eh_proj 2h -> h, one decoder layer, logits); not in the total"


# --------------------------------------------------------------------------- per-Linear layout (vlm_perf.arch.layout)
@block_layout(LMHead, stages=(LANGUAGE_MODEL,))
def _lm_head_layout(b: LMHead, ctx: LayoutContext) -> Placed:
    name = "lm_head" if ctx.known else "<language_model>.lm_head"
    return Placed(tail=(Lin(name, HEAD, ("lm_tokens",), b.hidden, b.vocab, "lm.logits", head=True, tied=b.tied),))
