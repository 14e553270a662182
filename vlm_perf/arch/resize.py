"""The Qwen-VL processors' image resize rule: pixels -> a grid of patches (no I/O)."""

from __future__ import annotations

import math

from ..errors import ConfigError
MAX_ASPECT = 200  # the processors refuse more extreme aspect ratios


def smart_resize(height: float, width: float, factor: int, min_pixels: int, max_pixels: int) -> tuple[int, int]:
    """Resized (height, width) in pixels, both multiples of ``factor`` (= patch * merge).

    Rule of the Qwen2-VL family image processors: round each side to the nearest multiple of
    ``factor`` (Python ``round``: halves go to even). If the result has
    more than ``max_pixels``, scale both sides by ``sqrt(h*w / max_pixels)`` and round DOWN to
    multiples (never below one ``factor``); if fewer than ``min_pixels``, scale up by
    ``sqrt(min_pixels / (h*w))`` and round UP.
    """
    if height <= 0 or width <= 0:
        raise ConfigError(f"image size must be positive, got {height}x{width} px")
    if max(height, width) / min(height, width) > MAX_ASPECT:
        raise ConfigError(f"aspect ratio {max(height, width) / min(height, width):.0f} exceeds {MAX_ASPECT} "
                         "(the Qwen processors reject it)")
    if min_pixels > max_pixels:
        raise ConfigError(f"min_pixels ({min_pixels}) > max_pixels ({max_pixels})")
    h = round(height / factor) * factor  # may be 0 for a side under factor/2: the min_pixels branch fixes it
    w = round(width / factor) * factor
    if h * w > max_pixels:
        scale = math.sqrt(height * width / max_pixels)
        h = max(factor, math.floor(height / scale / factor) * factor)
        w = max(factor, math.floor(width / scale / factor) * factor)
    elif h * w < min_pixels:
        scale = math.sqrt(min_pixels / (height * width))
        h = math.ceil(height * scale / factor) * factor
        w = math.ceil(width * scale / factor) * factor
    return int(h), int(w)


def smart_resize_video(frames: int, height: float, width: float, temporal_factor: int, factor: int,
                       min_pixels: int, max_pixels: int) -> tuple[int, int]:
    """Resized (height, width) of a clip of ``frames`` frames: the Qwen3-VL (and GLM-4.1V) video rule.

    Like :func:`smart_resize`, but the pixel bounds apply to ``t_bar * h * w`` with ``t_bar`` = frames
    rounded to a multiple of ``temporal_factor`` (so the budget is spread over the clip), and a side under
    ``factor`` first scales both sides up (truncating to int) until the short one reaches ``factor``.
    """
    if frames < temporal_factor:
        raise ConfigError(f"a clip needs at least temporal_patch_size={temporal_factor} frames, got {frames}")
    if height <= 0 or width <= 0:
        raise ConfigError(f"video frame size must be positive, got {height}x{width} px")
    if height < factor or width < factor:
        scale = max(factor / height, factor / width)
        height, width = int(height * scale), int(width * scale)
    if max(height, width) / min(height, width) > MAX_ASPECT:
        raise ConfigError(f"aspect ratio {max(height, width) / min(height, width):.0f} exceeds {MAX_ASPECT}")
    h = round(height / factor) * factor
    w = round(width / factor) * factor
    t = round(frames / temporal_factor) * temporal_factor
    if t * h * w > max_pixels:
        beta = math.sqrt(frames * height * width / max_pixels)
        h = max(factor, math.floor(height / beta / factor) * factor)
        w = max(factor, math.floor(width / beta / factor) * factor)
    elif t * h * w < min_pixels:
        beta = math.sqrt(min_pixels / (frames * height * width))
        h = math.ceil(height * beta / factor) * factor
        w = math.ceil(width * beta / factor) * factor
    return int(h), int(w)
