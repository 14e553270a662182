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


@dataclass(frozen=True)
class Attribution:
    ok: bool
    reason: str
    overhead_s: float | None = None
    lm_tflops_per_gpu: float | None = None
    vision_tflops_per_gpu: float | None = None
    r2: float | None = None
    windows: int = 0

    def to_dict(self) -> dict:
        return asdict(self)


def fit_step_time(seconds: np.ndarray, lm_flops: np.ndarray, vision_flops: np.ndarray, gpus: int) -> Attribution:
    """Fit seconds = a + b*lm_flops + c*vision_flops (all per iteration); rates from 1/b, 1/c."""
    seconds, lm_flops, vision_flops = (np.asarray(x, dtype=float) for x in (seconds, lm_flops, vision_flops))
    ok = np.isfinite(seconds) & np.isfinite(lm_flops) & np.isfinite(vision_flops)
    seconds, lm_flops, vision_flops = seconds[ok], lm_flops[ok], vision_flops[ok]
    n = len(seconds)
    if n < 5:
        return Attribution(False, f"only {n} usable windows (need >= 5)", windows=n)
    has_vision = np.ptp(vision_flops) > 0
    columns = [np.ones(n), lm_flops / 1e12] + ([vision_flops / 1e12] if has_vision else [])
    design = np.column_stack(columns)
    if np.linalg.matrix_rank(design) < design.shape[1]:
        return Attribution(False, "LM and vision FLOPs do not vary independently across windows", windows=n)
    coef, *_ = np.linalg.lstsq(design, seconds, rcond=None)
    fitted = design @ coef
    ss_tot = float(((seconds - seconds.mean()) ** 2).sum())
    r2 = 1 - float(((seconds - fitted) ** 2).sum()) / ss_tot if ss_tot > 0 else None
    lm_rate = 1 / coef[1] / gpus if coef[1] > 0 else None  # TFLOP/s/GPU
    vis_rate = (1 / coef[2] / gpus if coef[2] > 0 else None) if has_vision else None
    spread = float(np.ptp(lm_flops + vision_flops) / np.mean(lm_flops + vision_flops))
    if not (lm_rate and (vis_rate or not has_vision)):
        reason = "a fitted coefficient is not positive"
    elif r2 is None or r2 < MIN_R2:
        reason = (f"weak fit (R^2 = {r2 if r2 is not None else float('nan'):.2f} < {MIN_R2}): FLOPs per iteration vary "
                  f"by only {100 * spread:.1f}% across windows, less than the step-time noise")
    elif coef[0] < 0:
        reason = f"unphysical fit: negative fixed overhead ({coef[0]:.3f} s)"
    else:
        reason = "ok"
    return Attribution(reason == "ok", reason, float(coef[0]), lm_rate, vis_rate, r2, n)
