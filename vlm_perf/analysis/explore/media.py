"""Image/video sizes in pixels -> Qwen processor grids (patches) and merged tokens."""

from __future__ import annotations

from typing import Sequence

from ...arch.spec import ModelSpec
from ...errors import ConfigError, UnsupportedModelError
from ...stats.resize import smart_resize

# Default processor pixel bounds (min_pixels, max_pixels) per vision family, as the released
# checkpoints' preprocessor_config.json set them (Qwen2/2.5-VL: min_pixels 3136 = 56^2, max_pixels
# 12845056 = 28^2 * 16384; Qwen3-VL: size.shortest_edge 65536 = 256^2, size.longest_edge 16777216 =
# 4096^2). transformers' class default for Qwen2-VL is lower (max 28^2 * 1280); training recipes
# usually pass their own bounds, so every function takes min_pixels / max_pixels.
DEFAULT_PIXEL_BOUNDS: dict[str, tuple[int, int]] = {
    "qwen2_vl": (56 * 56, 28 * 28 * 16384),
    "qwen2_5_vl": (56 * 56, 28 * 28 * 16384),
    "qwen3_vl": (256 * 256, 4096 * 4096),
}
# Per-frame bounds of the video processors (Qwen2/2.5-VL video: 128..768 merged tokens per frame).
DEFAULT_VIDEO_PIXEL_BOUNDS: dict[str, tuple[int, int]] = {
    "qwen2_vl": (128 * 28 * 28, 768 * 28 * 28),
    "qwen2_5_vl": (128 * 28 * 28, 768 * 28 * 28),
    "qwen3_vl": (128 * 32 * 32, 768 * 32 * 32),
}


# ------------------------------------------------------------------------------------ resize
def vision_of(spec: ModelSpec):
    if spec.vision is None:
        raise UnsupportedModelError(f"{spec.name} has no vision tower: it takes no images")
    return spec.vision


def _bounds(spec: ModelSpec, table: dict, min_pixels: int | None, max_pixels: int | None) -> tuple[int, int]:
    lo, hi = table.get(vision_of(spec).family, (None, None))
    lo = min_pixels if min_pixels is not None else lo
    hi = max_pixels if max_pixels is not None else hi
    if lo is None or hi is None:
        raise UnsupportedModelError(f"no default pixel bounds for vision family {spec.vision.family!r}: "
                         "pass min_pixels and max_pixels")
    return lo, hi


def uses_own_rule(spec: ModelSpec, min_pixels, max_pixels) -> bool:
    """Families without Qwen pixel bounds (InternVL tiling, ...) use their own registered media rule."""
    return vision_of(spec).family not in DEFAULT_PIXEL_BOUNDS and min_pixels is None and max_pixels is None


def family_media(spec: ModelSpec):
    from ...arch.families import FAMILIES

    return FAMILIES[spec.family].media


def pixel_bounds(spec: ModelSpec, video: bool = False) -> tuple[int, int]:
    """Default (min_pixels, max_pixels) of the model's processor (images, or video per frame)."""
    return _bounds(spec, DEFAULT_VIDEO_PIXEL_BOUNDS if video else DEFAULT_PIXEL_BOUNDS, None, None)


def height_width(image_px: int | Sequence[int]) -> tuple[int, int]:
    if isinstance(image_px, (int, float)):
        return int(image_px), int(image_px)
    h, w = image_px
    return int(h), int(w)


def image_grid(height_px: int, width_px: int, spec: ModelSpec, min_pixels: int | None = None,
               max_pixels: int | None = None) -> tuple[int, int, int]:
    """``image_grid_thw`` row (1, h, w) in patches for an image of ``height_px`` x ``width_px``.

    448x448 on Qwen2.5-VL (patch 14, merge 2, factor 28): 448 = 16 x 28 -> (1, 32, 32), 256 merged tokens.
    """
    v = vision_of(spec)
    if uses_own_rule(spec, min_pixels, max_pixels):
        return tuple(family_media(spec).image(spec, int(height_px), int(width_px)).single_grid("explore"))
    lo, hi = _bounds(spec, DEFAULT_PIXEL_BOUNDS, min_pixels, max_pixels)
    h, w = smart_resize(height_px, width_px, v.patch_size * v.spatial_merge_size, lo, hi)
    return 1, h // v.patch_size, w // v.patch_size


def video_grid(frames: int, height_px: int, width_px: int, spec: ModelSpec, min_pixels: int | None = None,
               max_pixels: int | None = None) -> tuple[int, int, int]:
    """``video_grid_thw`` row (t, h, w) for ``frames`` sampled frames of ``height_px`` x ``width_px``.

    Each frame is resized with per-frame bounds (the Qwen2/2.5-VL video processor rule); frames are
    padded up to a multiple of ``temporal_patch_size`` (t = ceil(frames / T_p)). Qwen3-VL's video
    processor instead spreads one pixel budget over all frames: pass ``max_pixels`` per frame to model it.
    """
    v = vision_of(spec)
    if frames <= 0:
        raise ConfigError(f"frames must be positive, got {frames}")
    if uses_own_rule(spec, min_pixels, max_pixels):
        return tuple(family_media(spec).video(spec, int(frames), int(height_px), int(width_px)).single_grid("explore"))
    lo, hi = _bounds(spec, DEFAULT_VIDEO_PIXEL_BOUNDS, min_pixels, max_pixels)
    h, w = smart_resize(height_px, width_px, v.patch_size * v.spatial_merge_size, lo, hi)
    return -(-frames // v.temporal_patch_size), h // v.patch_size, w // v.patch_size


def merged_tokens(grid: Sequence[int], spec: ModelSpec) -> int:
    """LM (visual placeholder) tokens of one grid row: t * h * w / merge^2 (a temporal-chunk tower, Kimi K2.5:
    one frame's tokens per chunk of frames; ``grid_row_stats``, the statistics' own rule)."""
    from ...stats import grid_row_stats

    v = vision_of(spec)
    t, h, w = grid
    return int(grid_row_stats(t, h, w, v.spatial_merge_size, temporal_chunk=v.temporal_chunk)["merged_tokens"])
