"""Exact forward FLOPs of the vision block kinds (:mod:`vlm_perf.arch.blocks.vision`): vision-tower blocks: patch
embeddings (a Conv as a GEMM on ``vision_patches``), ViT / SAM layers, pooling heads,
"""

from __future__ import annotations

from typing import Any, TypedDict

from ...arch.blocks import (
    ImageVideoPatchEmbed,
    PatchEmbed,
    SamEmbed,
    SamVisionLayers,
    SiglipPoolingHead,
    TileMaskProduct,
    VisionLayers,
    VisualVocabularyHead,
)
from ...stats.batch import BatchStats
from ..terms import INPUT_PIXELS, Term, matmul
from .base import FlopsContext, block_flops


@block_flops(PatchEmbed)
def _patch_embed(b: PatchEmbed, s: BatchStats, ctx: FlopsContext) -> list[Term]:
    """2·P·in·width (P = vision_patches)"""
    return [Term("vision.patch_embed", b.count * matmul(s.vision_patches, b.in_volume, b.width), b.part,
                 input_kind=INPUT_PIXELS)]


@block_flops(VisionLayers)
def _vision_layers(b: VisionLayers, s: BatchStats, ctx: FlopsContext) -> list[Term]:
    """per layer 2·R·(4·h·q + f·h·i) + 4·q·Σlen² (R = patches [+ CLS], f = 2 or 3; per frame/tile or window)"""
    rows = s.vision_patches + s.vision_cls_tokens if b.cls else s.vision_patches
    squares = {"window": s.vision_window_sq, "item": s.vision_patches_sq_item}.get(b.attention,
                                                                                  s.vision_patches_sq_frame)
    width, attn_width = b.width, b.attn_width
    return [
        Term("vision.attn_proj", b.count * (matmul(rows, width, 3 * attn_width) + matmul(rows, attn_width, width)),
             b.part),
        Term("vision.attn_core", 4 * attn_width * (b.count * squares), b.part, weights=False),
        Term("vision.mlp", b.count * b.mlp_matrices * matmul(rows, width, b.mlp_width), b.part),
    ]


@block_flops(VisualVocabularyHead)
def _visual_vocabulary_head(b: VisualVocabularyHead, s: BatchStats, ctx: FlopsContext) -> list[Term]:
    """2·M·in·vocab (M = vision_merged_tokens: the tower's folded tokens); billed as the tower's vision.mlp"""
    return [Term("vision.mlp", b.count * matmul(s.vision_merged_tokens, b.in_width, b.vocab), b.part)]


class _TermKind(TypedDict):
    """The :class:`Term` flags several terms of one block share (typed ``**`` arguments)."""

    weights: bool
    input_kind: str


@block_flops(SiglipPoolingHead)
def _siglip_pooling_head(b: SiglipPoolingHead, s: BatchStats, ctx: FlopsContext) -> list[Term]:
    """per image: 2·w·w (q) + 2·w·w (out) + 4·w·i (MLP) on 1 probe row (vision_frames), 2·N·w·2w (k, v) + 4·w·N (core);
    never back-propagated (output discarded)"""
    w, frames, patches = b.width, s.vision_frames, s.vision_patches
    once = _TermKind(weights=False, input_kind=INPUT_PIXELS)  # forward only: no weight or input gradient
    return [Term("vision.attn_proj", b.count * (2 * matmul(frames, w, w) + matmul(patches, w, 2 * w)), b.part, **once),
            Term("vision.attn_core", b.count * 4 * w * patches, b.part, **once),
            Term("vision.mlp", b.count * 2 * matmul(frames, w, b.mlp_width), b.part, **once)]


@block_flops(TileMaskProduct)
def _tile_mask_product(b: TileMaskProduct, s: BatchStats, ctx: FlopsContext) -> list[Term]:
    """2·Σ L² (the mask's outer product per image; data, forward only)"""
    return [Term("vision.attn_core", b.count * 2 * s.vision_patches_sq_frame, b.part, weights=False,
                 input_kind=INPUT_PIXELS)]


@block_flops(ImageVideoPatchEmbed)
def _image_video_patch_embed(b: ImageVideoPatchEmbed, s: BatchStats, ctx: FlopsContext) -> list[Term]:
    """2·(P − P_video)·in_image·width + 2·P_video·in_video·width (P = vision_patches, P_video = video_patches)"""
    flops = matmul(s.vision_patches - s.video_patches, b.image_volume, b.width)
    if b.video_volume:
        flops = flops + matmul(s.video_patches, b.video_volume, b.width)
    return [Term("vision.patch_embed", b.count * flops, b.part, input_kind=INPUT_PIXELS)]


def fixed_tiles(b: Any, s: BatchStats) -> Any:
    """Fixed-size tiles of the batch: vision_patches // tile_patches (vision_frames without tile_patches)."""
    return s.vision_patches // b.tile_patches if b.tile_patches else s.vision_frames


@block_flops(SamEmbed)
def _sam_embed(b: SamEmbed, s: BatchStats, ctx: FlopsContext) -> list[Term]:
    """2·T·side²·in·width (T = tiles; input is pixels)"""
    return [Term("vision.patch_embed", b.count * matmul(fixed_tiles(b, s) * b.side * b.side, b.in_volume, b.width),
                 b.part, input_kind=INPUT_PIXELS)]


@block_flops(SamVisionLayers)
def _sam_vision_layers(b: SamVisionLayers, s: BatchStats, ctx: FlopsContext) -> list[Term]:
    """per layer and tile (n sequences of L = S² tokens, S = window or side): 2·n·L·4h² (qkv, proj on padded
    windows) + 4·h·n·L² (core) + 4·h·n·L·S (relative positions) + 2·side²·2·h·m (MLP on real tokens)"""
    h, side, seq_side = b.width, b.side, b.attention_side
    seq_len = seq_side * seq_side
    tiles = fixed_tiles(b, s) * b.count
    rows = b.sequences * seq_len
    terms = [Term("vision.attn_proj", matmul(tiles * rows, h, 3 * h) + matmul(tiles * rows, h, h), b.part),
             Term("vision.attn_core", 4 * h * b.sequences * seq_len * seq_len * tiles, b.part, weights=False),
             Term("vision.mlp", 2 * matmul(tiles * side * side, h, b.mlp_width), b.part)]
    if b.rel_pos:  # q x tables: weight-like (the tables are parameters)
        terms.insert(2, Term("vision.attn_core", 2 * matmul(tiles * rows, b.head_dim * b.num_heads, seq_side),
                             b.part))
    return terms
