"""Vision sufficient statistics from ``grid_thw`` rows.

One row ``(t, h, w)`` of ``image_grid_thw`` / ``video_grid_thw`` counts patches before merging:
``t`` temporal slices (each covering ``temporal_patch_size`` raw frames) of ``h x w`` patches.
Every function here is plain arithmetic (``*``, ``//``, ``%``), so it runs unchanged on Python
ints and on polars expressions (a whole column of grids at once).

Statistics (all additive over rows, hence over microbatches, ranks and iterations):

* ``patches``               P  = t*h*w                      (ViT sequence positions)
* ``patches_sq_per_frame``  P2 = t*(h*w)^2                  (each temporal slice attends on its own)
* ``patches_sq_per_item``   (t*h*w)^2                       (a whole video as one sequence; torchtitan)
* ``merged_tokens``         M  = t*(h/m)*(w/m)              (LM visual tokens)
* ``window_patches_sq``     sum over Qwen2.5-VL windows of (patches in window)^2
* ``frames``                t
* ``cls_tokens``            c*t                             (CLS positions, c per frame/tile; InternViT c = 1)

With ``c`` CLS tokens per frame (tiles of InternVL are the frames of a (tiles, h, w) grid), every
attention sequence is ``h*w + c`` long: the squared sums use that length; ``patches`` stays the
patch-embed rows ``t*h*w`` (a CLS token is a learned vector, not a convolution output).
"""

from __future__ import annotations

from typing import Any

from ..errors import InputError


def sum_sq_of_window_sides(merged_side: Any, window_side: int) -> Any:
    """Sum of squared window extents along one axis, in merged tokens.

    Qwen2.5-VL pads each frame's merged grid up to a multiple of ``window_side`` at the
    bottom/right and drops the pads, so an axis of ``a`` merged tokens splits into
    ``a // u`` full windows of side ``u`` plus one edge window of ``a % u`` (if non-zero).
    """
    full, rest = merged_side // window_side, merged_side % window_side
    return full * window_side * window_side + rest * rest


def grid_row_stats(t: Any, h: Any, w: Any, merge_size: int = 2, window_side: int | None = None,
                   cls_per_frame: int = 0) -> dict[str, Any]:
    """Per-row vision statistics (see module docstring); ``window_side`` in merged tokens."""
    per_frame = h * w
    seq = per_frame + cls_per_frame if cls_per_frame else per_frame
    merged_h, merged_w = h // merge_size, w // merge_size
    stats = {
        "patches": t * per_frame,
        "patches_sq_per_frame": t * seq * seq,
        "patches_sq_per_item": (t * seq) * (t * seq),
        "merged_tokens": t * merged_h * merged_w,
        "frames": t,
        "cls_tokens": t * cls_per_frame,
    }
    if window_side:
        merge_unit = merge_size * merge_size
        # window of r x c merged tokens = (m^2 r c) patches; sum over windows factorises by axis
        stats["window_patches_sq"] = (t * merge_unit * merge_unit
                                      * sum_sq_of_window_sides(merged_h, window_side)
                                      * sum_sq_of_window_sides(merged_w, window_side))
    else:
        stats["window_patches_sq"] = t * seq * seq  # no windows: a window is the frame
    return stats


def validate_grid(row: Any, merge_size: int = 2, where: str = "grid") -> tuple[int, int, int]:
    """Check one (t, h, w) row of Python ints; raise ValueError naming the problem."""
    try:
        t, h, w = (int(v) for v in row)
        if any(int(v) != v for v in row):
            raise ValueError
    except (TypeError, ValueError):
        raise InputError(f"{where}: expected three integers t,h,w, got {row!r}") from None
    if min(t, h, w) <= 0:
        raise InputError(f"{where}: t,h,w must be positive, got {t},{h},{w}")
    if h % merge_size or w % merge_size:
        raise InputError(f"{where}: h and w must be divisible by spatial_merge_size={merge_size}, got {t},{h},{w}")
    return t, h, w
