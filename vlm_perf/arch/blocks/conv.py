"""Convolutions that are not patch embeddings: strided and downsampling Conv2d chains and the SAM neck.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from ..parts import MERGER
from ..trainability import MLP
from .base import Block, linear_params, norm_params
from .laid import LayoutContext, Lin, Placed, block_layout


@dataclass(frozen=True)
class DownsampleConv(Block):
    """A Conv2d with kernel = stride = the merge size on each m x m block of tower outputs (GLM's
    ``visual.downsample``): one GEMM on ``vision_merged_tokens`` rows of ``in_width`` (= m^2 h_v) values
    to ``out_width``. It is the projector's FIRST op (no norm in front of it), so its input gradient is
    needed only when the tower upstream is trainable."""

    kind: ClassVar[str] = "downsample_conv"
    in_width: int
    out_width: int
    bias: bool = True

    def params(self) -> int:
        return linear_params(self.in_width, self.out_width, self.bias)

    def describe(self) -> str:
        return (f"downsample conv (kernel = stride = merge) {self.in_width} -> {self.out_width}"
                f"{' (+bias)' if self.bias else ''} on merged tokens")


# Every SAM tower input is one fixed-size square tile (the patch embed refuses any other size), so these blocks
# cost a constant per tile: their FLOPs are per-tile constants times the tiles, ``vision_patches // tile_patches``
# (``tile_patches``: patches of one tile in the model's summary grid, fixed for these families; exact from grids
# and from pre-aggregated metadata rows alike), or ``vision_frames`` when ``tile_patches`` is 0.
def strided_side(side: int) -> int:
    """Output side of a Conv2d(kernel 3, stride 2, padding 1) on ``side`` positions: floor((side − 1) / 2) + 1."""
    return (side - 1) // 2 + 1


@dataclass(frozen=True)
class SamNeck(Block):
    """SAM neck on a ``side`` x ``side`` grid per tile: Conv2d 1x1 (width -> channels, no bias) -> LayerNorm ->
    Conv2d 3x3 padding 1 (channels -> channels, no bias) -> LayerNorm (channels-first LayerNorms)."""

    kind: ClassVar[str] = "sam_neck"
    width: int
    channels: int
    side: int
    tile_patches: int = 0

    def params(self) -> int:
        c = self.channels
        return self.width * c + 9 * c * c + 2 * norm_params(c, "layernorm")

    def describe(self) -> str:
        return (f"{self.count} SAM neck: conv 1x1 {self.width} -> {self.channels}, LayerNorm, conv 3x3 "
                f"{self.channels} -> {self.channels}, LayerNorm on {self.side}x{self.side}")


@dataclass(frozen=True)
class StridedConvs(Block):
    """A chain of Conv2d(kernel 3, stride 2, padding 1, no bias) over ``channels`` (c0 -> c1 -> ...) on a
    ``side`` x ``side`` grid per tile (after a bilinear resize to ``resize`` x ``resize`` when set: not a
    matmul), then an optional Linear(c_last -> ``linear``, bias) on the output positions.

    GOT-OCR2's projector (convs 256 -> 512 -> h on 64 -> 32 -> 16, Linear h -> h: 256 tokens per tile) and
    DeepSeek-VL-hybrid's ``high_res_vision_proj`` (resize to 4·24, convs 256 -> 512 -> 1024: 24 x 24 tokens).
    ``component`` places it (``vision.merger``: projector; ``vision.mlp``: tower); ``first_input`` is the
    first conv's input kind (``upstream`` when it is the first op of the projector). ``runs``: how many times
    one stored copy runs per tile (DeepSeek-VL-hybrid applies its one ``high_res_vision_proj`` to two inputs)."""

    kind: ClassVar[str] = "strided_convs"
    channels: tuple[int, ...]
    side: int
    resize: int = 0
    linear: int = 0
    component: str = "vision.merger"
    first_input: str = "stage"
    runs: int = 1
    tile_patches: int = 0

    def __post_init__(self) -> None:
        super().__post_init__()
        if len(self.channels) < 2:
            raise ValueError("StridedConvs needs at least 2 channel widths (one conv)")

    def sides(self) -> tuple[int, ...]:
        """Output side of each conv in turn."""
        out, side = [], self.resize or self.side
        for _ in self.channels[1:]:
            side = strided_side(side)
            out.append(side)
        return tuple(out)

    @property
    def out_tokens(self) -> int:
        return self.sides()[-1] ** 2

    def params(self) -> int:
        convs = sum(9 * a * b for a, b in zip(self.channels[:-1], self.channels[1:]))
        return convs + (linear_params(self.channels[-1], self.linear, True) if self.linear else 0)

    def describe(self) -> str:
        chain = " -> ".join(str(c) for c in self.channels)
        sides = " -> ".join(str(s) for s in (self.resize or self.side,) + self.sides())
        resize = f"resize {self.side} -> {self.resize}, " if self.resize else ""
        lin = f", Linear {self.channels[-1]} -> {self.linear}" if self.linear else ""
        runs = f", run {self.runs} times per tile" if self.runs != 1 else ""
        return f"{self.count} x {resize}convs 3x3/2 {chain} on {sides}{lin}{runs}"


# --------------------------------------------------------------------------- per-Linear layout (vlm_perf.arch.layout)
@block_layout(DownsampleConv, stages=(MERGER,))
def _downsample_conv_layout(b: DownsampleConv, ctx: LayoutContext) -> Placed | None:
    """GLM's downsample in front of its merger: kernel = stride, one GEMM on the merged rows (named families)."""
    if b.count != 1 or not ctx.names or not ctx.names.downsample:
        return None
    return Placed(head=(Lin(ctx.names.downsample, MLP, ("vision_merged_tokens",), b.in_width, b.out_width,
                            "vision.merger", b.bias, conv=True),))
