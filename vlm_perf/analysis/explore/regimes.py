"""Vision / LM compute of one training sample under a training regime (full, frozen tower, LoRA, ...).

:func:`regime_split` counts ONE sample (:func:`~vlm_perf.analysis.explore.sample.sample_stats`) with
:func:`vlm_perf.flops.regime.regime_flops` under each named regime of :data:`REGIMES` (or a
:class:`~vlm_perf.arch.trainability.Trainability` of your own) and returns one row per regime: the tower,
projector and LM FLOPs, the vision share, the vision / LM ratio and the step's cost relative to full training.
Named regimes:

* ``full``: every weight trains;
* ``frozen_tower``: the vision tower is frozen, projector and LM train;
* ``frozen_vision``: tower and projector frozen, the LM trains;
* ``lora_lm``: LoRA of rank ``rank`` on every Linear of the LM except the head (attention and dense MLPs; an
  MoE's routed experts are fused parameters, not Linears), base frozen;
* ``lora_lm_experts``: ``lora_lm`` plus LoRA on the fused MoE expert stacks (PEFT ``target_parameters``
  ``experts.gate_up_proj`` / ``experts.down_proj``); MoE LMs only;
* ``lora_all``: LoRA on every Linear of tower, projector and LM except the head (PEFT ``all-linear``);
* ``lora_lm_tower_last4``: ``lora_lm`` with the last four tower layers and the projector unfrozen.

The adapter regimes are refused (``UnsupportedModelError``) for models whose module names are not laid out.
Units: training FLOPs of one sample (``mode="forward"``: forward FLOPs).
"""

from __future__ import annotations

from typing import Sequence

import polars as pl

from ...arch.adapters import ALL_LINEAR, AdapterConfig
from ...arch.layout import layout, names_of
from ...arch.parts import LANGUAGE_MODEL
from ...arch.spec import ModelSpec
from ...arch.trainability import Trainability
from ...errors import ConfigError
from ...flops.regime import regime_flops
from .sample import sample_stats

REGIMES = ("full", "frozen_tower", "frozen_vision", "lora_lm", "lora_lm_experts", "lora_all", "lora_lm_tower_last4")
REGIME_COLUMNS = ("regime", "description", "vision_tower_flops", "projector_flops", "vision_flops", "lm_flops",
                  "total_flops", "vision_share", "vision_lm_ratio", "vs_full", "adapter_params")
_EXPERTS = ("experts.gate_up_proj", "experts.down_proj")


def regime_trainability(spec: ModelSpec, regime: str, rank: int = 16) -> Trainability:
    """The :class:`Trainability` of a named regime (see the module docstring) for ``spec``."""
    if regime == "full":
        return Trainability()
    if regime == "frozen_tower":
        return Trainability.build(["projector", "lm"])
    if regime == "frozen_vision":
        return Trainability.build(["lm"])
    lm_linears = tuple(lin.name for stage, lin in names_of(layout(spec))
                       if stage == LANGUAGE_MODEL and not lin.head and lin.adaptable)
    if regime == "lora_lm":
        return Trainability.build(adapter=AdapterConfig(r=rank, target_modules=lm_linears, source=regime))
    if regime == "lora_lm_experts":
        if not spec.lm.moe_layers:
            raise ConfigError(f"{spec.name}: regime lora_lm_experts needs an MoE LM")
        return Trainability.build(adapter=AdapterConfig(r=rank, target_modules=lm_linears, target_parameters=_EXPERTS,
                                                        source=regime))
    if regime == "lora_all":
        return Trainability.build(adapter=AdapterConfig(r=rank, target_modules=ALL_LINEAR, source=regime))
    if regime == "lora_lm_tower_last4":
        return Trainability.build(["vision_tower[-4:]", "projector"],
                                  adapter=AdapterConfig(r=rank, target_modules=lm_linears, source=regime))
    raise ConfigError(f"unknown regime {regime!r}; use one of: {', '.join(REGIMES)} (or pass a Trainability)")


def regime_split(spec: ModelSpec, image_px: int | Sequence[int] | None = 448, images_per_sample: int = 1,
                 text_tokens: int = 1024, regimes: Sequence[str | tuple[str, Trainability]] = ("full", "frozen_tower",
                                                                                              "lora_lm"),
                 rank: int = 16, video: Sequence[int] | None = None, min_pixels: int | None = None,
                 max_pixels: int | None = None, causal: str = "half", mode: str = "training") -> pl.DataFrame:
    """One row per regime (columns :data:`REGIME_COLUMNS`) for one sample of ``images_per_sample`` images of
    ``image_px`` plus ``text_tokens`` of text; ``regimes``: names of :data:`REGIMES` or ``(label, Trainability)``.
    ``vs_full``: the regime's total over full training of the same sample; ``vision_flops`` = tower + projector."""
    if not regimes:
        raise ConfigError("give at least one regime")
    stats, _, _ = sample_stats(spec, image_px, images_per_sample, text_tokens, video, min_pixels, max_pixels)
    full = regime_flops(spec, stats, Trainability(), causal=causal, mode=mode, full_reference=False).total
    rows = []
    for item in regimes:
        label, t = (item, regime_trainability(spec, item, rank)) if isinstance(item, str) else item
        r = regime_flops(spec, stats, t, causal=causal, mode=mode, full_reference=False)
        parts = r.parts
        tower, projector = parts.get("vision_tower", 0), parts.get("projector", 0)
        lm, total = parts.get("language_model", 0), r.total
        vision = tower + projector
        rows.append({"regime": label, "description": t.describe(), "vision_tower_flops": float(tower),
                     "projector_flops": float(projector), "vision_flops": float(vision), "lm_flops": float(lm),
                     "total_flops": float(total), "vision_share": vision / total if total else 0.0,
                     "vision_lm_ratio": vision / lm if lm else float("inf"),
                     "vs_full": total / full if full else 0.0, "adapter_params": int(r.adapter_params)})
    return pl.DataFrame(rows).select(REGIME_COLUMNS)
