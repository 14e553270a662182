"""The `Convention` object: a named way of counting, with its formula and deviations stated."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

from ...arch.parts import frozen_stages
from ...arch.spec import ModelSpec
from ...stats.batch import BatchStats
from ..breakdown import Breakdown, Options

# (spec, stats, options) -> training FLOPs by component
ComponentFn = Callable[[ModelSpec, BatchStats, Options], dict[str, Any]]


@dataclass(frozen=True)
class Convention:
    """A named FLOPs convention.

    ``formula`` states what it counts (per step, training), ``deviations`` how that differs from
    ``exact``, ``source`` where the convention comes from. ``training`` returns training FLOPs by
    component; forward-only is training / 3 (every named convention is "3x forward"), except
    ``exact``, which overrides :meth:`compute`.
    """

    name: str
    source: str
    formula: str
    deviations: tuple[str, ...]
    training: ComponentFn
    counts_vision: bool = True
    unsupported: tuple[str, ...] = ()  # LM families this convention has no formula for

    def check(self, spec: ModelSpec) -> None:
        if spec.lm.family in self.unsupported:
            raise ValueError(f"convention {self.name!r} has no formula for {spec.lm.family} models "
                             f"({spec.name}); use 'exact' or another convention")

    def compute(self, spec: ModelSpec, stats: BatchStats, options: Options) -> Breakdown:
        self.check(spec)
        frozen_stages(options.frozen)  # a misspelled part is an error under every convention
        components = self.training(spec, stats, options)
        notes = []
        if options.causal != "half":
            notes.append(f"--causal {options.causal} ignored: {self.name} fixes its own causal rule")
        if options.frozen:
            notes.append(f"frozen parts ignored: {self.name} counts every component as trainable")
        if not self.counts_vision and spec.is_vlm:
            notes.append(f"{self.name} does not count the vision tower")
        if options.mode == "forward":
            components = {k: v / 3 for k, v in components.items()}
        return Breakdown(self.name, components, options, tuple(notes))
