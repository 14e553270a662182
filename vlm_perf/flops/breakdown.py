"""`Breakdown`: FLOPs by component, and `compute_flops`, the library's one entry point."""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import reduce
from operator import add
from typing import Any, Iterable

from ..arch.spec import ModelSpec
from ..stats.batch import BatchStats

VISION_COMPONENTS = ("vision.patch_embed", "vision.attn_proj", "vision.attn_core", "vision.mlp", "vision.merger",
                     "vision.deepstack_merger")
LM_COMPONENTS = ("lm.attn_proj", "lm.attn_core", "lm.dense_mlp", "lm.routed_experts", "lm.shared_experts",
                 "lm.router", "lm.logits", "lm.mtp")
COMPONENTS = VISION_COMPONENTS + LM_COMPONENTS
# component -> user-facing part (``parts`` in JSON): vision = vision_tower + projector, language = the LM
PROJECTOR_COMPONENTS = ("vision.merger", "vision.deepstack_merger")
COMPONENT_PART = {name: ("projector" if name in PROJECTOR_COMPONENTS else
                         "vision_tower" if name.startswith("vision.") else "language_model") for name in COMPONENTS}
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
    def total(self) -> Any:
        return _sum(self.components.values())

    @property
    def parts(self) -> dict[str, Any]:
        """FLOPs by part: ``vision_tower``, ``projector`` (merger / projector / deepstack mergers),
        ``language_model``; ``vision_tower + projector == vision``."""
        out = {"vision_tower": 0, "projector": 0, "language_model": 0}
        for name, value in self.components.items():
            part = COMPONENT_PART[name]
            out[part] = out[part] + value
        return out

    def as_exprs(self, prefix: str = "flops_") -> list:
        """polars expressions named ``prefix + component`` plus total/vision/language."""
        import polars as pl

        out = [pl.lit(v).alias(prefix + k) if not isinstance(v, pl.Expr) else v.alias(prefix + k)
               for k, v in self.components.items()]
        for name, value in (("vision", self.vision), ("language", self.language), ("total", self.total)):
            out.append((value if isinstance(value, pl.Expr) else pl.lit(value)).alias(prefix + name))
        return out

    def to_dict(self) -> dict[str, Any]:
        return {"convention": self.convention, "total": self.total, "vision": self.vision,
                "language": self.language, "components": dict(self.components),
                "options": {"mode": self.options.mode, "causal": self.options.causal,
                            "frozen": list(self.options.frozen)}, "notes": list(self.notes)}


def _sum(values: Iterable[Any]) -> Any:
    return reduce(add, values, 0)


def compute_flops(spec: ModelSpec, stats: BatchStats, convention: str = "exact", mode: str = "training",
                  causal: str = "half", frozen: Iterable[str] = ()) -> Breakdown:
    """FLOPs of one batch (or, with polars stats, of every row) under a named convention.

    ``stats`` may hold Python numbers or polars expressions (``BatchStats.columns()``); the
    result's values are of the same kind. ``causal``/``frozen`` apply to ``exact``; named
    conventions count the way their tool does and say in ``notes`` what they ignored.
    """
    from .conventions import get_convention

    return get_convention(convention).compute(spec, stats, Options(mode=mode, causal=causal, frozen=tuple(frozen)))
