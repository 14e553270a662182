"""Trainable parts of a VLM, how gradients flow between them, and the names users may give them.

Stages (what ``--frozen`` freezes, what every block and FLOPs term belongs to):

* ``vision_tower``: patch embed, position table, CLS token, ViT layers;
* ``merger``: the main projector (Qwen ``visual.merger``, InternVL ``multi_modal_projector``, GLM's
  downsample conv + merger) -- reported as ``projector`` in ``parts``;
* ``deepstack_merger``: Qwen3-VL's deepstack mergers (``visual.deepstack_merger_list``), fed by
  intermediate tower layers and added into early LM layers -- reported under ``projector`` too;
* ``audio``: an audio encoder (Qwen2.5-Omni / Qwen3-Omni ``audio_tower``: conv front-end, encoder layers,
  output projection) -- its own part, reported as ``audio`` in ``parts`` (only by models that have one);
* ``language_model``: embedding, decoder layers, final norm, lm_head.

Gradient flow is a small DAG (:data:`UPSTREAM`), not a chain: the main merger and the deepstack
mergers both read the tower and both feed the LM, but neither feeds the other.
"""

from __future__ import annotations

from typing import Iterable

from ..errors import ConfigError
VISION_TOWER, MERGER, DEEPSTACK_MERGER, LANGUAGE_MODEL = "vision_tower", "merger", "deepstack_merger", "language_model"
AUDIO = "audio"
STAGES = (VISION_TOWER, MERGER, DEEPSTACK_MERGER, AUDIO, LANGUAGE_MODEL)  # data-flow order
PROJECTOR = "projector"  # the user-facing name of merger + deepstack mergers (``parts`` in JSON)

# stage -> the stages whose outputs (transitively) flow into it
UPSTREAM: dict[str, tuple[str, ...]] = {
    VISION_TOWER: (),
    MERGER: (VISION_TOWER,),
    DEEPSTACK_MERGER: (VISION_TOWER,),
    AUDIO: (),
    LANGUAGE_MODEL: (VISION_TOWER, MERGER, DEEPSTACK_MERGER, AUDIO),
}

# stage -> the user-facing part it is reported under
PART_OF_STAGE = {VISION_TOWER: VISION_TOWER, MERGER: PROJECTOR, DEEPSTACK_MERGER: PROJECTOR,
                 AUDIO: AUDIO, LANGUAGE_MODEL: LANGUAGE_MODEL}
PARTS = (VISION_TOWER, PROJECTOR, LANGUAGE_MODEL)  # every VLM's parts; ``audio`` only where a model has one

PART_ALIASES = {
    "vision_tower": (VISION_TOWER,),
    "vit": (VISION_TOWER,),
    "visual": (VISION_TOWER,),
    # the projector part: main merger and deepstack mergers (old meaning of "merger" kept)
    "projector": (MERGER, DEEPSTACK_MERGER),
    "merger": (MERGER, DEEPSTACK_MERGER),
    "main_merger": (MERGER,),
    "deepstack_merger": (DEEPSTACK_MERGER,),
    "deepstack": (DEEPSTACK_MERGER,),
    "vision": (VISION_TOWER, MERGER, DEEPSTACK_MERGER),
    "audio": (AUDIO,),
    "audio_tower": (AUDIO,),
    "audio_encoder": (AUDIO,),
    "language_model": (LANGUAGE_MODEL,),
    "lm": (LANGUAGE_MODEL,),
    "llm": (LANGUAGE_MODEL,),
}


def stage_part_names(stages: Iterable[str]) -> tuple[str, ...]:
    """Part names that denote exactly ``stages``, in data-flow order (`frozen_stages` maps them back to the same
    set): ``main_merger`` for the main merger, since ``merger`` also names the deepstack mergers."""
    chosen = set(stages)
    return tuple("main_merger" if s == MERGER else s for s in STAGES if s in chosen)


def frozen_stages(parts: Iterable[str]) -> frozenset[str]:
    """Map user-facing part names to stages; unknown names raise ValueError listing the valid ones."""
    stages: set[str] = set()
    for part in parts:
        key = str(part).strip().lower().replace("-", "_")
        if key not in PART_ALIASES:
            raise ConfigError(f"unknown frozen part {part!r}; use one of: {', '.join(sorted(PART_ALIASES))}")
        stages.update(PART_ALIASES[key])
    return frozenset(stages)
