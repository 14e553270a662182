"""Blocks that wrap another block and change how it is billed (not what it is): a module whose output reaches no
loss (forward only), a module on the text-only path, tower layers run on folded tokens.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import ClassVar

from ..parts import VISION_TOWER
from .base import Block
from .laid import LayoutContext, Placed, block_layout, default_placement
from .vision import VisionLayers, vision_layer


@dataclass(frozen=True)
class ForwardOnly(Block):
    """A module that runs but whose output reaches no loss, so autograd never back-propagates through it: its
    forward FLOPs count in training too, with neither weight nor input gradient. LLaVA's CLIP tower with
    ``vision_feature_layer`` -2: the last layer runs (``CLIPEncoder`` loops over every layer) but only the
    hidden state before it feeds the projector. ``module`` carries its own ``count``; ``count`` copies of it."""

    kind: ClassVar[str] = "forward_only"
    module: Block

    def params(self) -> int:
        return self.module.count * self.module.params()

    def describe(self) -> str:
        return f"{self.count} x forward only (output unused, never back-propagated): {self.module.describe()}"


@dataclass(frozen=True)
class TextOnly(Block):
    """``module`` on the text path before the first cross-attention layer: nothing earlier carries a vision
    gradient, so its input gradient runs only when its own stage (the LM) trains. Parameters: the module's."""

    kind: ClassVar[str] = "text_only"
    module: Block

    def params(self) -> int:
        return self.module.count * self.module.params()

    def describe(self) -> str:
        return f"{self.module.describe()} (text path before the first cross-attention layer)"


@dataclass(frozen=True)
class FoldedTokens(Block):
    """``module`` (tower layers with full attention per image / slice) run on the tokens left after a ``fold`` x
    ``fold`` spatial merge inside the tower: ``vision_patches / fold²`` rows and ``Σ (len / fold²)²`` per slice.
    MiniCPM-V 4.6's layers after the window-attention merger. Exact when every slice's side is a multiple of
    ``fold`` (the family's processor guarantees it). ``module`` carries its own ``count``."""

    kind: ClassVar[str] = "folded_tokens"
    module: Block
    fold: int

    def __post_init__(self) -> None:
        super().__post_init__()
        if not isinstance(self.module, VisionLayers) or self.module.attention != "frame" or self.module.cls:
            raise ValueError("FoldedTokens wraps VisionLayers with per-frame attention and no CLS token")
        if self.fold < 1:
            raise ValueError(f"FoldedTokens.fold must be >= 1, got {self.fold}")

    def params(self) -> int:
        return self.module.count * self.module.params()

    def describe(self) -> str:
        return f"after a {self.fold}x{self.fold} fold (1/{self.fold ** 2} of the patches): {self.module.describe()}"


# --------------------------------------------------------------------------- per-Linear layout (vlm_perf.arch.layout)
@block_layout(ForwardOnly, stages=(VISION_TOWER,))
def _forward_only_layout(b: ForwardOnly, ctx: LayoutContext) -> Placed | None:
    """Tower layers past the one the projector reads: the tower's last layers, laid out per Linear but run after
    the stage output is taken (forward only). Only with the family's module names; other modules: whole."""
    if type(b.module) is not VisionLayers:
        return default_placement(b, ctx)
    if ctx.names is None:
        return None
    free, total = ctx.free("layer"), b.count * b.module.count
    if total > len(free):
        return None
    module, names = replace(b.module, count=1), ctx.names
    return Placed(slot="layer", layers=tuple(free[len(free) - total:]), forward_only=True,
                  build=lambda frame: vision_layer(module, frame.index, names))
