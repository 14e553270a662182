"""Vision sufficient statistics from ``grid_thw`` rows.

One row ``(t, h, w)`` of ``image_grid_thw`` / ``video_grid_thw`` counts patches before merging:
``t`` temporal slices (each covering ``temporal_patch_size`` raw frames) of ``h x w`` patches.
Every function here is plain arithmetic (``*``, ``//``, ``%``), so it runs unchanged on Python
ints and on polars expressions (a whole column of grids at once).

Statistics (all additive over rows, hence over microbatches, ranks and iterations):

* ``patches``               P  = t*h*w                      (ViT sequence positions)
* ``patches_sq_per_frame``  P2 = t*(h*w)^2                  (each temporal slice attends on its own)
* ``patches_sq_per_item``   (t*h*w)^2                       (a whole video as one sequence; torchtitan)
                            with a temporal chunk c (Kimi K2.5): the row's frames in consecutive chunks of c,
                            each one sequence: (t//c)*(c*h*w)^2 + ((t%c)*h*w)^2
* ``merged_tokens``         M  = t*(h/m)*(w/m)              (LM visual tokens)
                            with a temporal chunk c: ceil(t/c)*(h/m)*(w/m) (each chunk's frames averaged)
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
                   cls_per_frame: int = 0, temporal_chunk: int = 0) -> dict[str, Any]:
    """Per-row vision statistics (see module docstring); ``window_side`` in merged tokens; ``temporal_chunk``:
    frames per joint attention sequence and per temporal average (Kimi K2.5; 0 = none). A row of at most
    ``temporal_chunk`` frames (what the Kimi K2.5 video processor emits per chunk) is one chunk, so a video's
    chunk rows and one row of all its frames give the same sums."""
    per_frame = h * w
    seq = per_frame + cls_per_frame if cls_per_frame else per_frame
    merged_h, merged_w = h // merge_size, w // merge_size
    if temporal_chunk:
        full, rest = t // temporal_chunk, t % temporal_chunk
        chunk_seq, rest_seq = temporal_chunk * seq, rest * seq
        item_sq = full * chunk_seq * chunk_seq + rest_seq * rest_seq
        merged = (t + (temporal_chunk - 1)) // temporal_chunk * merged_h * merged_w
    else:
        item_sq, merged = (t * seq) * (t * seq), t * merged_h * merged_w
    stats = {
        "patches": t * per_frame,
        "patches_sq_per_frame": t * seq * seq,
        "patches_sq_per_item": item_sq,
        "merged_tokens": merged,
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
