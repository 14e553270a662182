"""Step-time attribution: how fast does each part run?

Model: seconds per iteration = overhead + F_lm / R_lm + F_vision / R_vision, fitted by least
squares over logging windows (per-iteration means). R is the achieved FLOP/s of the whole job on
that part; divided by the GPU count it is comparable to the headline TFLOP/s/GPU. The fit needs
variation in the vision share between windows; without it the coefficients are not identifiable
and the result says so instead of inventing numbers. A fit is also rejected when it explains
little of the variance (R^2 < MIN_R2) or implies a negative fixed overhead: then the step-time
noise (stragglers, hiccups, the slowest rank setting the pace) dominates the FLOPs signal.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

import numpy as np

MIN_R2 = 0.3
MAX_LM_SPREAD_NO_OVERHEAD = 0.05  # LM FLOPs per iteration varying less than this: overhead not separable


@dataclass(frozen=True)
class Attribution:
    ok: bool
    reason: str
    overhead_s: float | None = None
    lm_tflops_per_gpu: float | None = None
    vision_tflops_per_gpu: float | None = None
    r2: float | None = None
    windows: int = 0
    model: str = "overhead"  # "overhead": a + b*F_lm + c*F_vis; "no_overhead": b*F_lm + c*F_vis

    def to_dict(self) -> dict:
        return asdict(self)


def _fit(design: np.ndarray, seconds: np.ndarray) -> tuple[np.ndarray, float | None]:
    coef, *_ = np.linalg.lstsq(design, seconds, rcond=None)
    ss_tot = float(((seconds - seconds.mean()) ** 2).sum())
    r2 = 1 - float(((seconds - design @ coef) ** 2).sum()) / ss_tot if ss_tot > 0 else None
    return coef, r2


def _verdict(coef: np.ndarray, r2: float | None, rates: list, spread: float, overhead: float) -> str:
    if not all(rates):
        return "a fitted coefficient is not positive"
    if r2 is None or r2 < MIN_R2:
        return (f"weak fit (R^2 = {r2 if r2 is not None else float('nan'):.2f} < {MIN_R2}): FLOPs per iteration vary "
                f"by only {100 * spread:.1f}% across windows, less than the step-time noise")
    if overhead < 0:
        return f"unphysical fit: negative fixed overhead ({overhead:.3f} s)"
    return "ok"


def fit_step_time(seconds: np.ndarray, lm_flops: np.ndarray, vision_flops: np.ndarray, gpus: int) -> Attribution:
    """Fit seconds = a + b*lm_flops + c*vision_flops (all per iteration); rates from 1/b, 1/c.

    Packed training keeps LM FLOPs per iteration almost constant, so the fixed overhead ``a`` and
    the LM slope cannot be told apart. When the fit with an overhead term fails, the model without
    it is tried (``model="no_overhead"``): its rates are then effective rates that include the
    per-step overhead, which the reason states.
    """
    seconds, lm_flops, vision_flops = (np.asarray(x, dtype=float) for x in (seconds, lm_flops, vision_flops))
    ok = np.isfinite(seconds) & np.isfinite(lm_flops) & np.isfinite(vision_flops)
    seconds, lm_flops, vision_flops = seconds[ok], lm_flops[ok], vision_flops[ok]
    n = len(seconds)
    if n < 5:
        return Attribution(False, f"only {n} usable windows (need >= 5)", windows=n)
    has_vision = np.ptp(vision_flops) > 0
    parts = [lm_flops / 1e12] + ([vision_flops / 1e12] if has_vision else [])
    design = np.column_stack([np.ones(n)] + parts)
    spread = float(np.ptp(lm_flops + vision_flops) / np.mean(lm_flops + vision_flops))

    def rates(slopes) -> list:
        return [1 / c / gpus if c > 0 else None for c in slopes]  # TFLOP/s/GPU

    if np.linalg.matrix_rank(design) == design.shape[1]:
        coef, r2 = _fit(design, seconds)
        lm_rate, *vis = rates(coef[1:])
        reason = _verdict(coef, r2, [lm_rate, *vis], spread, float(coef[0]))
        if reason == "ok" or not has_vision:
            return Attribution(reason == "ok", reason, float(coef[0]), lm_rate, vis[0] if vis else None, r2, n)
        failed = Attribution(False, reason, float(coef[0]), lm_rate, vis[0] if vis else None, r2, n)
    else:
        failed = Attribution(False, "LM and vision FLOPs do not vary independently across windows", windows=n)
    lm_spread = float(np.ptp(lm_flops) / np.mean(lm_flops))
    collinear = np.linalg.matrix_rank(design) < design.shape[1]
    # the fallback is for one situation only: the overhead and the LM slope are inseparable because
    # LM FLOPs per iteration barely move (packed sequences); any other failure stands
    if not has_vision or not (collinear or lm_spread < MAX_LM_SPREAD_NO_OVERHEAD) \
            or np.linalg.matrix_rank(np.column_stack(parts)) < len(parts):
        return failed
    coef0, r2_0 = _fit(np.column_stack(parts), seconds)
    lm0, vis0 = rates(coef0)
    reason0 = _verdict(coef0, r2_0, [lm0, vis0], spread, 0.0)
    if reason0 != "ok":
        return failed
    note = (f"ok without an overhead term: LM FLOPs per iteration vary by only {100 * lm_spread:.1f}%, so a fixed "
            "per-step overhead cannot be separated from the LM rate; both rates are effective rates that include it")
    return Attribution(True, note, 0.0, lm0, vis0, r2_0, n, model="no_overhead")
