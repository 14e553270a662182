"""Blocks that hold parameters but run no matmul: lookup tables (token embeddings, position tables, CLS tokens),
standalone norms, and modules a checkpoint stores but the forward pass never runs.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from ..parts import LANGUAGE_MODEL, MERGER, VISION_TOWER
from ..trainability import EMBEDDINGS
from .base import Block, norm_params
from .laid import LayoutContext, ModuleNames, Params, Placed, block_layout, extra_norm, norm


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


# --------------------------------------------------------------------------- per-Linear layout (vlm_perf.arch.layout)
@block_layout(PositionTable, stages=(VISION_TOWER,))
def _position_table_layout(b: PositionTable, ctx: LayoutContext) -> Placed:
    names = ctx.names
    return Placed(head=(Params(names.pos if names and names.pos else f"<vision_tower>.{b.kind}", EMBEDDINGS),))


@block_layout(ClsToken, stages=(VISION_TOWER,))
def _cls_token_layout(b: ClsToken, ctx: LayoutContext) -> Placed:
    names = ctx.names
    return Placed(head=(Params(names.cls if names and names.cls else f"<vision_tower>.{b.kind}", EMBEDDINGS),))


@block_layout(ExtraNorms, ExtraParams, stages=(VISION_TOWER, MERGER))
def _extra_layout(b: ExtraNorms | ExtraParams, ctx: LayoutContext) -> Placed | None:
    """In the tower: the family's standalone norms in inventory order, before the layers (GLM's post_conv_layernorm),
    after them, or on an output nothing reads (CLIP's post_layernorm: forward only); an ``ExtraNorms`` of two is
    GLM's pair around the layers. In the projector: LLaVA-NeXT's ``image_newline`` row (an LM input)."""
    names = ctx.names
    if ctx.stage == MERGER:
        if isinstance(b, ExtraParams) and b.count == 1 and names and names.newline:
            return Placed(head=(Params(names.newline, EMBEDDINGS),))  # concatenated to the projected rows
        return None
    width, kind = (b.width, b.norm) if isinstance(b, ExtraNorms) else (None, "")
    if isinstance(b, ExtraNorms) and b.count == 2 and len(ctx.head_norms) == 1 and names and names.tower_tail_norm:
        return Placed(head=(norm(ctx.head_norms.pop(0), b.width, b.norm),),
                      tail=(norm(names.tower_tail_norm, b.width, b.norm),))
    if not ctx.seen_layers and ctx.head_norms:
        return Placed(head=(extra_norm(ctx.head_norms.pop(0), width, kind, b),))
    if ctx.seen_layers and names and names.tower_dead_norm:
        return Placed(dead=(extra_norm(names.tower_dead_norm, width, kind, b),))
    tail = names.tower_tail_norm if names and names.tower_tail_norm else f"<vision_tower>.{b.kind}"
    return Placed(tail=(extra_norm(tail, width, kind, b),))


@block_layout(TokenEmbedding, stages=(LANGUAGE_MODEL,))
def _token_embedding_layout(b: TokenEmbedding, ctx: LayoutContext) -> Placed:
    return Placed(head=(Params(f"{ctx.lm_prefix}.embed_tokens", EMBEDDINGS, b.params(), 0),))


@block_layout(FinalNorm, stages=(LANGUAGE_MODEL,))
def _final_norm_layout(b: FinalNorm, ctx: LayoutContext) -> Placed:
    return Placed(tail=(norm(f"{ctx.lm_prefix}.norm", b.hidden, "rmsnorm"),))


@block_layout(LMLayerNorms, stages=(LANGUAGE_MODEL,))
def _lm_layer_norms_layout(b: LMLayerNorms, ctx: LayoutContext) -> Placed | None:
    """The decoder layers' norms, by role: input and post-attention (2 per layer), or Gemma's sandwich (4: input,
    post-attention, pre- and post-feedforward; the family's table names the last three)."""
    if b.norms_per_layer not in (2, 4):
        return None
    sandwich = b.norms_per_layer == 4
    after_attn, before_mlp, after_mlp = ctx.names.lm_sandwich if ctx.names else ModuleNames.lm_sandwich
    prefix, h = ctx.lm_prefix, b.hidden

    def norms(i: int) -> dict[str, Params | None]:
        pre = f"{prefix}.layers.{i}."
        return {"attention_in": norm(pre + "input_layernorm", h, "rmsnorm"),
                "attention_out": norm(pre + after_attn, h, "rmsnorm") if sandwich else None,
                "mlp_in": norm(pre + (before_mlp if sandwich else "post_attention_layernorm"), h, "rmsnorm"),
                "mlp_out": norm(pre + after_mlp, h, "rmsnorm") if sandwich else None}
    return Placed(norms=norms)
