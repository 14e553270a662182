"""`Breakdown`: FLOPs by component, and `compute_flops`, the library's one entry point."""

from __future__ import annotations

import sys
from dataclasses import dataclass, field
from functools import reduce
from operator import add
from typing import Any, Iterable

from ..arch.spec import ModelSpec
from ..stats.batch import BatchStats

VISION_COMPONENTS = ("vision.patch_embed", "vision.attn_proj", "vision.attn_core", "vision.mlp", "vision.merger",
                     "vision.deepstack_merger")
LM_COMPONENTS = ("lm.attn_proj", "lm.attn_core", "lm.dense_mlp", "lm.routed_experts", "lm.shared_experts",
                 "lm.router", "lm.logits", "lm.mtp", "lm.altup", "lm.laurel", "lm.per_layer_input")
# an audio encoder (Omni thinkers): its own part ``audio``; present only in models that have one
AUDIO_COMPONENTS = ("audio.conv", "audio.attn_proj", "audio.attn_core", "audio.mlp", "audio.proj")
COMPONENTS = VISION_COMPONENTS + LM_COMPONENTS + AUDIO_COMPONENTS
# component -> user-facing part (``parts`` in JSON): vision = vision_tower + projector, language = the LM
PROJECTOR_COMPONENTS = ("vision.merger", "vision.deepstack_merger")
COMPONENT_PART = {name: ("projector" if name in PROJECTOR_COMPONENTS else
                         "vision_tower" if name.startswith("vision.") else
                         "audio" if name.startswith("audio.") else "language_model") for name in COMPONENTS}


def component_names(spec: ModelSpec) -> tuple[str, ...]:
    """The components a model's breakdown lists: vision ones only for a VLM, audio ones only with an audio encoder."""
    return tuple(name for name in COMPONENTS
                 if (spec.is_vlm or not name.startswith("vision."))
                 and (spec.audio is not None or not name.startswith("audio.")))
MODES = ("training", "forward")
CAUSAL = ("half", "full")


@dataclass(frozen=True)
class Options:
    """How to count: ``mode`` training|forward, ``causal`` half|full, ``frozen`` parts (see training.py)."""

    mode: str = "training"
    causal: str = "half"
    frozen: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if self.mode not in MODES:
            raise ValueError(f"mode must be one of {', '.join(MODES)}, got {self.mode!r}")
        if self.causal not in CAUSAL:
            raise ValueError(f"causal must be one of {', '.join(CAUSAL)}, got {self.causal!r}")


@dataclass(frozen=True)
class Breakdown:
    """FLOPs by component (numbers or polars expressions). Units: FLOPs (not TFLOPs)."""

    convention: str
    components: dict[str, Any]
    options: Options = Options()
    notes: tuple[str, ...] = field(default=())

    @property
    def vision(self) -> Any:
        return _sum(self.components.get(name, 0) for name in VISION_COMPONENTS)

    @property
    def language(self) -> Any:
        return _sum(self.components.get(name, 0) for name in LM_COMPONENTS)

    @property
    def audio(self) -> Any:
        """The audio encoder's FLOPs (0 for a model without one)."""
        return _sum(self.components.get(name, 0) for name in AUDIO_COMPONENTS)

    @property
    def total(self) -> Any:
        return _sum(self.components.values())

    @property
    def parts(self) -> dict[str, Any]:
        """FLOPs by part: ``vision_tower``, ``projector`` (merger / projector / deepstack mergers),
        ``language_model``, and ``audio`` for a model with an audio encoder (its components present);
        ``vision_tower + projector == vision``."""
        out = {"vision_tower": 0, "projector": 0, "language_model": 0}
        if any(name in self.components for name in AUDIO_COMPONENTS):
            out["audio"] = 0
        for name, value in self.components.items():
            part = COMPONENT_PART[name]
            out[part] = out[part] + value
        return out

    def as_exprs(self, prefix: str = "flops_") -> list:
        """polars expressions named ``prefix + component`` plus total/vision/language, all Float64.

        Always Float64, never an integer dtype: training FLOPs of one step can exceed the Int64
        range (integer polars arithmetic wraps silently) and a Python-int component above 2^63 is
        not a valid Int64 literal. The arithmetic before this point is Float64 too:
        ``compute_flops`` casts expression statistics (e.g. ``BatchStats.columns()``) first.
        """
        items = [*self.components.items(), ("vision", self.vision), ("language", self.language),
                 ("total", self.total)]
        return [_float_expr(value).alias(prefix + name) for name, value in items]

    def to_dict(self) -> dict[str, Any]:
        return {"convention": self.convention, "total": self.total, "vision": self.vision,
                "language": self.language, "components": dict(self.components),
                "options": {"mode": self.options.mode, "causal": self.options.causal,
                            "frozen": list(self.options.frozen)}, "notes": list(self.notes)}


def _float_expr(value: Any) -> Any:
    """A polars Float64 expression of ``value`` (an expression, or a Python number of any size)."""
    import polars as pl

    if isinstance(value, pl.Expr):
        return value.cast(pl.Float64)
    return pl.lit(float(value), dtype=pl.Float64)


def _sum(values: Iterable[Any]) -> Any:
    return reduce(add, values, 0)


def compute_flops(spec: ModelSpec, stats: BatchStats, convention: str = "exact", mode: str = "training",
                  causal: str = "half", frozen: Iterable[str] = ()) -> Breakdown:
    """FLOPs of one batch (or, with polars stats, of every row) under a named convention.

    ``stats`` may hold Python numbers or polars expressions (``BatchStats.columns()``); the
    result's values are of the same kind. Polars expressions are cast to Float64 first, whatever
    their dtype, so no formula runs in (silently wrapping) integer arithmetic; Python ints stay
    exact. ``causal``/``frozen`` apply to ``exact``; named conventions count the way their tool
    does and say in ``notes`` what they ignored.
    """
    from .conventions import get_convention

    options = Options(mode=mode, causal=causal, frozen=tuple(frozen))
    return get_convention(convention).compute(spec, _float64_exprs(stats), options)


def _float64_exprs(stats: BatchStats) -> BatchStats:
    """``stats`` with every polars-expression field cast to Float64 (numbers untouched).

    polars is looked up, not imported: if it was never imported, no field can be an expression.
    """
    pl = sys.modules.get("polars")
    if pl is None:
        return stats
    casts = {name: value.cast(pl.Float64) for name, value in stats.as_dict().items() if isinstance(value, pl.Expr)}
    return stats.with_(**casts) if casts else stats
