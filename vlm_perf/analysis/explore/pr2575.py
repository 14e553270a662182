"""Tables for the Megatron-Bridge PR #2575 case: per-visual-token cost ratios, a run's vision profile."""

from __future__ import annotations

from typing import Iterable

import polars as pl

from ...arch.spec import ModelSpec
from ..explain import (
    frame_side,
    lm_flops_per_token,
    vision_flops_per_visual_token,
    vision_param_ratio,
)
from .media import vision_of


def ratio_table(spec: ModelSpec, seq_len: int = 4096, patches_per_frame: Iterable[int] = (256, 1024, 4096),
                convention: str = "megatron-bridge", lm_convention: str = "megatron-lm") -> pl.DataFrame:
    """Per-visual-token cost ratio against the parameter ratio, per frame size.

    For one square frame of ``p`` patches (side = sqrt(p), a multiple of the merge size):
    ``vision_flops_per_visual_token`` = vision FLOPs of the frame under ``convention`` / its merged tokens;
    ``lm_flops_per_token`` = LM FLOPs per token of a ``seq_len`` sequence under ``lm_convention``;
    ``cost_ratio`` = their quotient, the most counting vision can add (every token visual);
    ``param_ratio`` = (vision tower + mergers) / active LM parameters: the "about 1/6" figure.
    """
    v = vision_of(spec)
    lm_per_token = lm_flops_per_token(spec, seq_len, lm_convention)
    param_ratio = vision_param_ratio(spec)
    rows = []
    for p in patches_per_frame:
        side = frame_side(p, v.spatial_merge_size)
        per_visual = vision_flops_per_visual_token(spec, side, convention, seq_len)
        rows.append({"patches_per_frame": side * side, "frame_px": side * v.patch_size,
                     "vision_flops_per_visual_token": float(per_visual), "lm_flops_per_token": float(lm_per_token),
                     "cost_ratio": float(per_visual / lm_per_token), "param_ratio": float(param_ratio),
                     "cost_over_param_ratio": float(per_visual / lm_per_token / param_ratio)})
    return pl.DataFrame(rows)


def run_vision_profile(per_iteration: pl.DataFrame) -> dict:
    """Token and patch profile of a run from its per-iteration statistics (``RunAnalysis.per_iteration``).

    visual_token_share = sum(merged visual tokens) / sum(LM tokens); patches_per_lm_token = sum(patches) /
    sum(LM tokens); patches_per_frame = sum(t*(h*w)^2) / sum(t*h*w), the patch-weighted frame size that
    sets the ViT attention cost; exact_vision_share = exact vision / exact total FLOPs (if computed).
    """
    s = per_iteration
    tokens = float(s["lm_tokens"].sum())
    patches = float(s["vision_patches"].sum())
    out = {"iterations": s.height, "lm_tokens": tokens, "visual_tokens": float(s["vision_merged_tokens"].sum()),
           "patches": patches}
    out["visual_token_share"] = out["visual_tokens"] / tokens if tokens else None
    out["patches_per_lm_token"] = patches / tokens if tokens else None
    out["patches_per_frame"] = float(s["vision_patches_sq_frame"].sum()) / patches if patches else None
    if "exact_total" in s.columns:
        total = float(s["exact_total"].sum())
        out["exact_vision_share"] = float(s["exact_vision"].sum()) / total if total else None
    return out
