"""Two runs side by side (before/after a change): pure functions over two report summaries.

Everything is computed from the ``summary.json`` dicts `vlm_perf report` writes (so a comparison
always agrees with the two reports), using the ``step`` block `step_facts` adds to each summary.

Decomposition of the step-time change (exact training FLOPs). Per iteration a run does ``F`` FLOPs
in ``t`` seconds on ``G`` GPUs; ``s = t * G / F`` is GPU-seconds per FLOP (= 1 / (TFLOP/s/GPU x 1e12)).
Then ``t = F * s / G`` and, exactly,

    t_B - t_A = (F_B - F_A) * s_A / G_A            "the data changed": B's FLOPs on A's system
              + F_B * (s_B / G_B - s_A / G_A)       "the system changed": time per FLOP (and GPUs)

so the two parts add up to the step-time delta, and TFLOP/s/GPU moves only with the second one.
"""

from __future__ import annotations

import math

import polars as pl

from .crosscheck import TOLERANCE
from .run import RunAnalysis

__all__ = ["step_facts", "logged_convention", "compare_summaries", "convention_table"]


def _div(num: float | None, den: float | None) -> float | None:
    if num is None or den is None or den == 0 or not math.isfinite(num) or not math.isfinite(den):
        return None
    return num / den


def step_facts(run: RunAnalysis) -> dict:
    """Per-iteration means over the windows the report's means use: seconds, exact FLOPs, tokens,
    visual-token share of LM tokens, patches per frame. Means of sums (ratio of totals)."""
    good = run.selection.windows
    its = float(good["window_iterations"].sum()) if good.height else 0.0
    per = run.per_iteration.filter(pl.col("iteration").is_in(run.selection.iterations().implode()))

    def total(col: str) -> float | None:
        return float(per[col].sum()) if col in per.columns and per.height else None

    n = per.height
    tokens, visual = total("lm_tokens"), total("vision_merged_tokens")
    return {
        "iterations": int(its),
        "seconds_per_iteration": _div(float(good["window_seconds"].sum()) if its else None, its),
        "exact_flops_per_iteration": _div(float(good["exact_total"].sum()) if its else None, its),
        "exact_vision_flops_per_iteration": _div(float(good["exact_vision"].sum()) if its else None, its),
        "vision_share": run.vision_share_mean(),
        "lm_tokens_per_iteration": _div(tokens, n),
        "padded_tokens_per_iteration": _div(total("lm_padded_tokens"), n),
        "visual_token_share": _div(visual, tokens),
        "images_and_videos_per_iteration": _div(total("vision_items"), n),
        "patches_per_frame": _div(total("vision_patches"), total("vision_frames")),
    }


def logged_convention(summary: dict) -> dict:
    """Which convention the log's own TFLOP/s/GPU matches (within the cross-check's tolerance)."""
    cc = summary.get("log_crosscheck") or {}
    cands = cc.get("candidates") or {}
    if not cands:
        return {"convention": None, "ratio": None, "note": cc.get("message") or "the log printed no TFLOP/s/GPU"}
    best = min(cands, key=lambda k: abs(cands[k] - 1))
    ok = abs(cands[best] - 1) <= TOLERANCE
    return {"convention": best if ok else None, "ratio": cands[best],
            "note": f"matches {best} (logged/recomputed {cands[best]:.4f})" if ok else
            f"matches no convention within {100 * TOLERANCE:.0f}% (closest {best}, {cands[best]:.4f})"}


def _pair(a: float | None, b: float | None) -> dict:
    delta = b - a if a is not None and b is not None else None
    return {"a": a, "b": b, "delta": delta, "ratio": _div(b, a)}


def convention_table(a: dict, b: dict) -> dict:
    """``{convention: {a, b, delta, ratio, mfu: {a, b, delta, ratio}}}`` for conventions in both runs
    (TFLOP/s/GPU, time-weighted means over complete windows, as each report states them)."""
    out = {}
    for name in [c for c in a["conventions"] if c in b["conventions"]]:
        ea, eb = a["conventions"][name], b["conventions"][name]
        entry = _pair(ea["tflops_per_gpu_mean"], eb["tflops_per_gpu_mean"])
        entry["mfu"] = _pair(ea["mfu_mean"], eb["mfu_mean"])
        out[name] = entry
    return out


def _decompose(sa: dict, sb: dict, ga: int | None, gb: int | None) -> dict | None:
    ta, tb = sa.get("seconds_per_iteration"), sb.get("seconds_per_iteration")
    fa, fb = sa.get("exact_flops_per_iteration"), sb.get("exact_flops_per_iteration")
    if None in (ta, tb, fa, fb, ga, gb) or not fa or not fb:
        return None
    s_a, s_b = ta * ga / fa, tb * gb / fb  # GPU-seconds per FLOP
    data = (fb - fa) * s_a / ga
    system = fb * (s_b / gb - s_a / ga)
    return {"step_time_delta_s": tb - ta, "data_changed_s": data, "system_changed_s": system,
            "flops_per_iteration_ratio": fb / fa, "gpu_seconds_per_flop_ratio": s_b / s_a,
            "gpus_ratio": gb / ga, "step_time_ratio": tb / ta}


def regime_of(r: dict | None) -> dict:
    """A run's training regime for compare (none stated: full training)."""
    if not r:
        return {"description": "full training (no regime stated)", "source": None, "full_training_over_regime": 1.0}
    return {k: r.get(k) for k in ("description", "source", "full_training_over_regime")}


def compare_summaries(a: dict, b: dict) -> dict:
    """Everything `vlm-perf compare` shows, from two report summaries (A = before, B = after)."""
    sa, sb = a.get("step") or {}, b.get("step") or {}
    facts = {key: _pair(sa.get(key), sb.get(key)) for key in dict.fromkeys([*sa, *sb]) if key != "iterations"}
    runs = {}
    for label, s in (("a", a), ("b", b)):
        runs[label] = {"run": s.get("run"), "model": s.get("model"), "synthetic": s.get("synthetic"),
                       "estimated": s.get("estimated"), "world_size": s.get("world_size"), "gpu": s.get("gpu"),
                       "dtype": s.get("dtype"), "peak_tflops": s.get("peak_tflops"), "peak": s.get("peak"),
                       "iterations_in_means": (s.get("step") or {}).get("iterations"),
                       "logged": logged_convention(s), "logged_tflops_per_gpu_mean": s.get("logged_tflops_per_gpu_mean"),
                       "regime": regime_of(s.get("regime"))}
    ha, hb = a.get("hfu") or {}, b.get("hfu") or {}
    hfu = {"a": {k: ha.get(k) for k in ("recompute", "rule", "source")},
           "b": {k: hb.get(k) for k in ("recompute", "rule", "source")},
           "hfu": _pair(ha.get("hfu_mean"), hb.get("hfu_mean")),
           "hardware_tflops_per_gpu": _pair(ha.get("hardware_tflops_per_gpu_mean"), hb.get("hardware_tflops_per_gpu_mean"))}
    return {"runs": runs, "conventions": convention_table(a, b), "step": facts, "hfu": hfu,
            "decomposition": _decompose(sa, sb, a.get("world_size"), b.get("world_size")),
            "messages": [f"A: {m}" for m in a.get("messages", [])] + [f"B: {m}" for m in b.get("messages", [])]}
