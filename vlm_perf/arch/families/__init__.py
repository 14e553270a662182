"""Model families: one module per family, registered where it is defined (duplicates rejected).

A :class:`Family` turns a Hugging Face ``config.json`` (and, for media, the processor files a
checkpoint ships) into

* a :class:`~vlm_perf.arch.spec.ModelSpec` whose ``blocks`` are the typed inventory
  (:mod:`vlm_perf.arch.blocks`) -- parameters and exact FLOPs both derive from it;
* derived media (:mod:`vlm_perf.arch.media`): pixels -> grids / tiles / visual tokens, as the family's
  Hugging Face processor applies them.

See docs/adding-a-family.md for the recipe. Importing this package registers the built-in families.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Mapping

from ...errors import UnsupportedModelError
from ..spec import ModelSpec

# (config, source, name) -> ModelSpec; ``name`` "" means: take it from the config
BuildFn = Callable[[Mapping[str, Any], str, str], ModelSpec]


@dataclass(frozen=True)
class Family:
    """One model family.

    ``name``: the family id conventions and docs use (e.g. ``qwen2_5_vl``); ``model_types``: the
    ``config.json`` ``model_type`` values it reads; ``build``: config -> ModelSpec with its inventory;
    ``media``: the processor rule (None for text-only families); ``hf_class``: the transformers class
    its FLOPs are verified against; ``notes``: what the inventory leaves out, for docs/families.md.
    """

    name: str
    model_types: tuple[str, ...]
    build: BuildFn
    hf_class: str
    is_vlm: bool
    media: Any = None
    notes: tuple[str, ...] = field(default=())
    has_audio: bool = False  # an audio encoder (part ``audio``: Omni thinkers)
    # spec -> spec, applied once the processor files are attached: a family whose inventory depends on a processor
    # setting (Florence-2's tower runs on the processor's fixed square) rebuilds it there
    with_processor: Callable[[ModelSpec], ModelSpec] | None = None


FAMILIES: dict[str, Family] = {}  # family name -> Family
_BY_MODEL_TYPE: dict[str, Family] = {}


def register_family(family: Family) -> Family:
    """Add a family to the registry; a second family of the same name or model_type is rejected."""
    if family.name in FAMILIES:
        raise ValueError(f"family {family.name!r} is already registered")
    for model_type in family.model_types:
        if model_type in _BY_MODEL_TYPE:
            raise ValueError(f"model_type {model_type!r} already belongs to family {_BY_MODEL_TYPE[model_type].name!r}")
    FAMILIES[family.name] = family
    for model_type in family.model_types:
        _BY_MODEL_TYPE[model_type] = family
    return family


REFUSED_MODEL_TYPES: dict[str, str] = {}  # model_type -> why no family reads it (a module's clear refusal)


def refuse_model_type(model_type: str, reason: str) -> None:
    """Name why ``model_type`` is refused (instead of the generic "unsupported" line)."""
    REFUSED_MODEL_TYPES[model_type] = reason


def family_for(model_type: str | None, source: str = "config") -> Family:
    """The family reading ``model_type``; UnsupportedModelError listing the supported ones otherwise."""
    if model_type not in _BY_MODEL_TYPE and model_type in REFUSED_MODEL_TYPES:
        raise UnsupportedModelError(f"{source}: model_type {model_type!r} is refused: {REFUSED_MODEL_TYPES[model_type]}")
    if model_type not in _BY_MODEL_TYPE:
        raise UnsupportedModelError(f"{source}: unsupported model_type {model_type!r}; supported: "
                                    f"{', '.join(supported_model_types())}")
    return _BY_MODEL_TYPE[model_type]


def supported_model_types() -> tuple[str, ...]:
    return tuple(_BY_MODEL_TYPE)


from . import decoder, qwen_vl, internvl, gemma3, llava_onevision  # noqa: E402,F401  (registers the built-in families)
from . import glm4v  # noqa: E402,F401  (--- glm4v ---)
from . import qwen3_5  # noqa: E402,F401  (--- qwen3_5 ---)
from . import mistral3, idefics3  # noqa: E402,F401  (--- mistral3 / idefics3 ---)
from . import llava  # noqa: E402,F401  (--- llava ---)
from . import paligemma  # noqa: E402,F401  (--- paligemma ---)
from . import llava_next  # noqa: E402,F401  (--- llava_next ---)
from ..._modules import import_submodules  # noqa: E402

import_submodules(__name__, __path__)  # any other module of this package registers too (no list to edit)

__all__ = ["FAMILIES", "Family", "family_for", "register_family", "supported_model_types"]
