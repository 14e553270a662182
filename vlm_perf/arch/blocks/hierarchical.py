"""Hierarchical vision towers: stages that each start with a strided convolution embedding and then run layers at a
shrinking resolution (DaViT, Florence-2's tower).

The processor resizes every image to one fixed square, so each stage runs on a fixed ``side`` x ``side`` grid: a
stage's FLOPs are a per-image constant times the images of the batch (``vision_frames``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from .base import Block, linear_params


def conv_out_side(side: int, kernel: int, stride: int, padding: int) -> int:
    """Output side of a Conv2d: floor((side + 2·padding − kernel) / stride) + 1."""
    return (side + 2 * padding - kernel) // stride + 1


def padded_windows(side: int, window: int) -> int:
    """Windows per side after padding the grid up to a multiple of ``window`` (bottom / right zeros)."""
    return -(-side // window)


@dataclass(frozen=True)
class DaViTStage(Block):
    """One DaViT stage (transformers ``Florence2VisionConvEmbed`` + ``depth`` x ``Florence2VisionBlock``) on an
    ``in_side`` x ``in_side`` input per image (pixels for the first stage):

    * conv embedding: Conv2d(``in_width`` -> ``width``, ``kernel``, ``stride``, ``padding``, bias) and a LayerNorm
      before it (``pre_norm``, over ``in_width``) or after it (over ``width``); output ``side`` x ``side``;
    * per block a **spatial** block -- depthwise Conv2d 3x3 (bias) as a residual position encoding, LayerNorm,
      window attention (the grid zero-padded bottom / right to a multiple of ``window``, qkv Linear(w -> 3w,
      ``qkv_bias``) and proj Linear(w -> w, bias) on every padded position, ``num_heads`` heads inside each
      ``window`` x ``window`` window), depthwise conv again, LayerNorm, fc1 -> GELU -> fc2 (``mlp_width``, bias) --
      then a **channel** block: the same convolutions, norms and MLP around a channel attention (qkv, proj on the
      real positions; ``num_groups`` groups of w / G channels, each attending over its channels: scores are
      (w/G) x (w/G) summed over the positions).
    """

    kind: ClassVar[str] = "davit_stage"
    in_width: int
    width: int
    kernel: int
    stride: int
    padding: int
    pre_norm: bool
    depth: int
    num_heads: int
    num_groups: int
    window: int
    mlp_width: int
    qkv_bias: bool
    in_side: int
    reads_pixels: bool = False  # the first stage: its conv reads the image (no input gradient)

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.width % self.num_groups or self.width % self.num_heads:
            raise ValueError(f"DaViTStage: width {self.width} is not divisible by its {self.num_heads} heads and "
                             f"{self.num_groups} channel groups")
        if self.side <= 0:
            raise ValueError(f"DaViTStage: a {self.in_side}-wide input gives no output positions (kernel "
                             f"{self.kernel}, stride {self.stride}, padding {self.padding})")

    @property
    def side(self) -> int:
        return conv_out_side(self.in_side, self.kernel, self.stride, self.padding)

    @property
    def positions(self) -> int:
        """Output positions per image."""
        return self.side * self.side

    @property
    def padded_positions(self) -> int:
        """Positions the window attention's Linears run on: the grid padded to whole windows."""
        return (padded_windows(self.side, self.window) * self.window) ** 2

    def block_params(self) -> int:
        """One spatial + one channel block."""
        w, m = self.width, self.mlp_width
        dw = 9 * w + w
        sub = (2 * dw + 2 * 2 * w + linear_params(w, 3 * w, self.qkv_bias) + linear_params(w, w, True)
               + linear_params(w, m, True) + linear_params(m, w, True))
        return 2 * sub

    def params(self) -> int:
        conv = self.in_width * self.kernel * self.kernel * self.width + self.width
        norm = 2 * (self.in_width if self.pre_norm else self.width)
        return conv + norm + self.depth * self.block_params()

    def describe(self) -> str:
        return (f"DaViT stage: conv {self.kernel}x{self.kernel}/{self.stride} {self.in_width} -> {self.width} "
                f"({self.in_side} -> {self.side} per side), {self.depth} x (spatial block: window {self.window} "
                f"attention, {self.num_heads} heads; channel block: {self.num_groups} channel groups), depthwise "
                f"conv 3x3 before each attention and MLP, MLP {self.mlp_width}")
