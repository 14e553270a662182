"""Explain-a-delta: which data mix turns a logged TFLOP/s/GPU of X into Y once vision is counted?

At unchanged step time the ratio after/before equals (F_lm + F_vision) / F_lm, so
F_vision / F_lm = after/before - 1. With LM sequences of S tokens of which a share phi are visual
(merged) tokens, F_vision / F_lm = phi * v / l, where v is the vision FLOPs per merged token
(each stands for spatial_merge_size^2 ViT patches, every one through every ViT block) and l the LM
FLOPs per token. Hence phi = (after/before - 1) * l / v, for a stated frame size (v grows with
patches per frame through the attention core).

The per-visual-token ratio v / l is the real bound on how much counting vision can add (reached
when every token is visual); the "vision parameters / active LM parameters" ratio (about 1/6 for
Qwen3-VL-30B-A3B) is not a bound, because a visual token drives m^2 patches through the ViT.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field

from ..arch.spec import ModelSpec
from ..errors import ConfigError, UnsupportedModelError
from ..flops import CONVENTIONS, compute_flops
from ..stats import BatchStats

DEFAULT_FRAMES = (256, 1024, 4096)  # ViT patches per frame: 448, 896, 1792 px squares at patch 14-16


@dataclass(frozen=True)
class FrameSolution:
    patches_per_frame: int
    vision_flops_per_visual_token: float  # FLOPs (training), under the 'after' convention
    vision_to_lm_per_visual_token: float  # v / l: the bound on after/before - 1
    visual_token_share: float | None  # phi, None when the delta exceeds the bound
    patches_per_lm_token: float | None
    visual_tokens_per_sample: float | None
    frames_per_sample: float | None


@dataclass(frozen=True)
class Explanation:
    model: str
    before: float
    after: float
    ratio: float
    seq_len: int
    before_convention: str
    after_convention: str
    lm_flops_per_token: float
    param_ratio: float  # vision params / active LM params (the "1/6" intuition)
    frames: list[FrameSolution] = field(default_factory=list)
    statement: str = ""
    #: the 'after' convention counts no vision FLOPs for this model; then the conventions that do
    counts_no_vision: bool = False
    vision_conventions: list[str] = field(default_factory=list)

    def to_dict(self) -> dict:
        return asdict(self)


def explain_delta(spec: ModelSpec, before: float, after: float, convention: str = "mbridge-pr2575",
                  seq_len: int = 4096, before_convention: str = "megatron-lm",
                  frames: tuple[int, ...] = DEFAULT_FRAMES) -> Explanation:
    """Solve for the visual-token share that moves TFLOP/s/GPU from ``before`` to ``after``."""
    if spec.vision is None:
        raise UnsupportedModelError(f"{spec.name} has no vision tower: counting vision cannot change its TFLOP/s/GPU")
    if not (math.isfinite(before) and math.isfinite(after)) or before <= 0 or after <= 0:
        raise ConfigError(f"before and after must be positive TFLOP/s/GPU values, got {before!r} and {after!r}")
    if after < before:
        raise ConfigError(f"after ({after:g}) is below before ({before:g}): counting vision FLOPs can only raise "
                          "TFLOP/s/GPU at an unchanged step time")
    ratio = after / before
    lm_per_token = lm_flops_per_token(spec, seq_len, before_convention)
    m2 = spec.vision.merge_unit
    solutions = []
    for patches in frames:
        side = frame_side(patches, spec.vision.spatial_merge_size)
        v = vision_flops_per_visual_token(spec, side, convention, seq_len)
        bound = v / lm_per_token
        # a convention that counts no vision here (bound 0) solves nothing: said below, never a division by 0
        phi = (ratio - 1) / bound if bound > 0 and 0 <= ratio - 1 <= bound else None
        tokens = phi * seq_len if phi is not None else None
        solutions.append(FrameSolution(
            patches_per_frame=side * side, vision_flops_per_visual_token=v, vision_to_lm_per_visual_token=bound,
            visual_token_share=phi, patches_per_lm_token=phi * m2 if phi is not None else None,
            visual_tokens_per_sample=tokens,
            frames_per_sample=tokens / (side * side / m2) if tokens is not None else None))
    param_ratio = vision_param_ratio(spec)
    mid = solutions[len(solutions) // 2]
    if all(s.vision_flops_per_visual_token <= 0 for s in solutions):  # nothing to solve for: say so, name what does
        side = frame_side(mid.patches_per_frame, spec.vision.spatial_merge_size)
        others = [name for name in CONVENTIONS if name != convention and _counts_vision(spec, side, name, seq_len)]
        statement = (f"{spec.name}: {before:g} -> {after:g} TFLOP/s/GPU is +{100 * (ratio - 1):.1f}%, but the "
                     f"{convention} convention counts no vision FLOPs for {spec.name}, so no data mix explains a "
                     "delta under it. Conventions that count its vision: " + (", ".join(others) or "none") + ".")
        return Explanation(spec.name, before, after, ratio, seq_len, before_convention, convention, lm_per_token,
                           param_ratio, solutions, statement, counts_no_vision=True, vision_conventions=others)
    statement = (
        f"{spec.name}: {before:g} -> {after:g} TFLOP/s/GPU is +{100 * (ratio - 1):.1f}%, i.e. vision FLOPs = "
        f"{ratio - 1:.3f} x LM FLOPs at unchanged step time. One visual token costs {mid.vision_to_lm_per_visual_token:.2f}x "
        f"an LM token in vision FLOPs ({mid.patches_per_frame} patches/frame, {convention}), so "
        + (f"{100 * mid.visual_token_share:.1f}% of the {seq_len} LM tokens must be visual "
           f"({mid.patches_per_lm_token:.2f} ViT patches per LM token)." if mid.visual_token_share is not None
           else "the delta exceeds what even an all-visual sequence can produce.")
        + (f" The parameter ratio {param_ratio:.3f} (~1/{1 / param_ratio:.0f}) bounds nothing: each visual token "
           f"pushes {m2} patches through the ViT." if param_ratio else ""))
    return Explanation(spec.name, before, after, ratio, seq_len, before_convention, convention, lm_per_token,
                       param_ratio, solutions, statement)


def _counts_vision(spec: ModelSpec, side: int, convention: str, seq_len: int) -> bool:
    try:
        return vision_flops_per_visual_token(spec, side, convention, seq_len) > 0
    except (ConfigError, UnsupportedModelError, ValueError):  # a convention not defined for this family
        return False


def frame_side(patches: int, merge: int) -> int:
    """Side (in patches) of the square frame closest to ``patches``, a multiple of the merge size."""
    return max(merge, int(round(math.sqrt(patches) / merge)) * merge)


def lm_flops_per_token(spec: ModelSpec, seq_len: int, convention: str) -> float:
    """LM training FLOPs per token of one unpacked sequence of ``seq_len`` tokens."""
    return compute_flops(spec, BatchStats.from_batch(seq_len=seq_len, spec=spec), convention).total / seq_len


def vision_flops_per_visual_token(spec: ModelSpec, side: int, convention: str, seq_len: int) -> float:
    """Vision training FLOPs of one ``side x side``-patch image per merged (LM) token it becomes."""
    frame = BatchStats.from_batch(seq_len=max(seq_len, side * side // spec.vision.merge_unit),
                                  image_grids=[(1, side, side)], spec=spec)
    return compute_flops(spec, frame, convention).vision / frame.vision_merged_tokens


def vision_param_ratio(spec: ModelSpec) -> float:
    """(vision tower + mergers) / active LM parameters: the "about 1/6" intuition."""
    from ..arch import params

    return (params.vision_tower_params(spec) + params.merger_params(spec)) / params.lm_active_params(spec)
