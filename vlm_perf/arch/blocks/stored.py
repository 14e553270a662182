"""Blocks that hold parameters but run no matmul: lookup tables (token embeddings, position tables, CLS tokens),
standalone norms, and modules a checkpoint stores but the forward pass never runs.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from .base import Block, norm_params


@dataclass(frozen=True)
class PositionTable(Block):
    """Learned absolute position table (looked up/interpolated, not a matmul: parameters only)."""

    kind: ClassVar[str] = "position_table"
    entries: int
    width: int

    def params(self) -> int:
        return self.entries * self.width

    def describe(self) -> str:
        return f"learned position table {self.entries} x {self.width} (interpolation not counted)"


@dataclass(frozen=True)
class ClsToken(Block):
    """A learned CLS token prepended to every tile/frame (parameters only; its positions are carried by
    the ``vision_cls_tokens`` statistic and counted in every :class:`VisionLayers`)."""

    kind: ClassVar[str] = "cls_token"
    width: int

    def params(self) -> int:
        return self.width

    def describe(self) -> str:
        return f"CLS token ({self.width}) prepended to each tile"


@dataclass(frozen=True)
class TokenEmbedding(Block):
    """Input embedding table (a lookup: parameters only)."""

    kind: ClassVar[str] = "token_embedding"
    vocab: int
    width: int

    def params(self) -> int:
        return self.vocab * self.width

    def describe(self) -> str:
        return f"token embedding {self.vocab} x {self.width} (lookup, not counted as FLOPs)"


@dataclass(frozen=True)
class LMLayerNorms(Block):
    """The two RMSNorms of each decoder layer (input / post-attention): parameters only."""

    kind: ClassVar[str] = "lm_layer_norms"
    hidden: int
    norms_per_layer: int = 2

    def params(self) -> int:
        return self.norms_per_layer * self.hidden

    def describe(self) -> str:
        return f"{self.count} x {self.norms_per_layer} RMSNorm({self.hidden}) per layer"


@dataclass(frozen=True)
class FinalNorm(Block):
    kind: ClassVar[str] = "final_norm"
    hidden: int

    def params(self) -> int:
        return self.hidden

    def describe(self) -> str:
        return f"final RMSNorm({self.hidden})"


@dataclass(frozen=True)
class ExtraParams(Block):
    """Parameters outside any matmul the inventory counts (a mask token, a final tower norm): ``numel``
    per copy, described by ``label``."""

    kind: ClassVar[str] = "extra_params"
    label: str
    numel: int

    def params(self) -> int:
        return self.numel

    def describe(self) -> str:
        return f"{self.label} ({self.numel} params, no matmul)"


@dataclass(frozen=True)
class StoredOnly(Block):
    """Modules a checkpoint stores but the forward pass never runs (e.g. a deepstack merger whose index is
    duplicated or beyond the tower depth): their parameters count, their FLOPs do not."""

    kind: ClassVar[str] = "stored_only"
    module: Block

    def params(self) -> int:
        return self.module.params()

    def describe(self) -> str:
        return f"{self.count} stored but never run: {self.module.describe()}"


@dataclass(frozen=True)
class ExtraNorms(Block):
    """``count`` standalone norms of ``width`` outside any layer (GLM's ``post_conv_layernorm`` and
    ``post_layernorm`` RMSNorms around the tower): parameters only, no matmul."""

    kind: ClassVar[str] = "extra_norms"
    width: int
    norm: str = "rmsnorm"
    what: str = "norm"

    def params(self) -> int:
        return norm_params(self.width, self.norm)

    def describe(self) -> str:
        return f"{self.count} x {self.norm}({self.width}): {self.what}"
