"""Trainable parts of a VLM, in data-flow order, and the names users may give them (``--frozen``)."""

from __future__ import annotations

from typing import Iterable

VISION_TOWER, MERGER, LANGUAGE_MODEL = "vision_tower", "merger", "language_model"
STAGES = (VISION_TOWER, MERGER, LANGUAGE_MODEL)  # a gradient reaching a stage flows into every earlier one

PART_ALIASES = {
    "vision_tower": (VISION_TOWER,),
    "vit": (VISION_TOWER,),
    "visual": (VISION_TOWER,),
    "merger": (MERGER,),
    "projector": (MERGER,),
    "vision": (VISION_TOWER, MERGER),
    "language_model": (LANGUAGE_MODEL,),
    "lm": (LANGUAGE_MODEL,),
    "llm": (LANGUAGE_MODEL,),
}


def frozen_stages(parts: Iterable[str]) -> frozenset[str]:
    """Map user-facing part names to stages; unknown names raise ValueError listing the valid ones."""
    stages: set[str] = set()
    for part in parts:
        key = str(part).strip().lower().replace("-", "_")
        if key not in PART_ALIASES:
            raise ValueError(f"unknown frozen part {part!r}; use one of: {', '.join(sorted(PART_ALIASES))}")
        stages.update(PART_ALIASES[key])
    return frozenset(stages)
