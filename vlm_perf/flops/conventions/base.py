"""The `Convention` object: a named way of counting, with its formula and deviations stated."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

from ...arch.parts import frozen_stages
from ...arch.spec import ModelSpec
from ...stats.batch import BatchStats
from ...errors import ConventionNotDefined
from ..breakdown import Breakdown, Options

# the families every named convention covered before the family registry (Qwen-VL + decoder-only LMs)
QWEN_AND_DECODER_FAMILIES = ("qwen2_vl", "qwen2_5_vl", "qwen3_vl", "qwen3_vl_moe", "qwen2", "qwen3", "qwen3_moe",
                             "llama", "mistral", "deepseek_v3")

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
    # model families (vlm_perf.arch.families names) the convention defines a number for; None = every family
    families: tuple[str, ...] | None = QWEN_AND_DECODER_FAMILIES
    # covered families whose vision the framework does not count (e.g. veRL routes glm4v to a text-only formula)
    text_only_families: tuple[str, ...] = ()

    def covers(self, family: str) -> bool:
        return self.families is None or family in self.families

    def counts_vision_for(self, family: str) -> bool:
        return self.counts_vision and family not in self.text_only_families

    def check(self, spec: ModelSpec) -> None:
        family = spec.family or spec.model_type
        if not self.covers(family):
            raise ConventionNotDefined(f"convention {self.name!r} is not defined for {family} ({spec.name}): "
                                       f"{self.name} has no formula for that family; use 'exact'")
        if spec.lm.family in self.unsupported:
            raise ConventionNotDefined(f"convention {self.name!r} has no formula for {spec.lm.family} models "
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
        if not self.counts_vision_for(spec.family or spec.model_type) and spec.is_vlm:
            notes.append(f"{self.name} does not count the vision tower")
        if options.mode == "forward":
            components = {k: v / 3 for k, v in components.items()}
        return Breakdown(self.name, components, options, tuple(notes))
