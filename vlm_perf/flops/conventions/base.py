"""The `Convention` object and the convention registry.

A convention is a named way of counting that some framework prints: its **forward** FLOPs by component
(``forward``), and the **training rule** that turns each component's forward FLOPs into what the framework
bills for a training step (``training_rule``: a factor per component; every framework shipped here bills x3,
i.e. forward + input gradient + weight gradient for every GEMM, whatever is frozen). ``Pin`` names the
framework, the file, the function and the commit or release the formula reproduces.

Conventions register themselves beside their definition (:func:`register_convention`); a second convention of
the same name is rejected, and the components a convention returns are checked against the known set
(:data:`vlm_perf.flops.breakdown.COMPONENTS`). Registration after import is seen by every lookup
(:func:`get_convention`, :func:`names`, the ``CONVENTIONS`` mapping, the CLI).
"""

from __future__ import annotations

import difflib
import re
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping

from ...arch.parts import frozen_stages
from ...arch.spec import ModelSpec
from ...errors import ConfigError, ConventionNotDefined, VlmPerfError
from ...stats.batch import BatchStats
from ..breakdown import COMPONENTS, Breakdown, Options

# the families every named convention covered before the family registry (Qwen-VL + decoder-only LMs)
QWEN_AND_DECODER_FAMILIES = ("qwen2_vl", "qwen2_5_vl", "qwen3_vl", "qwen3_vl_moe", "qwen2", "qwen3", "qwen3_moe",
                             "llama", "mistral", "deepseek_v3")

# (spec, stats, options) -> FLOPs by component (forward for ``forward``, training for the legacy ``training``)
ComponentFn = Callable[[ModelSpec, BatchStats, Options], dict[str, Any]]

#: "forward + input gradient + weight gradient" on every component, frozen or not: what every framework here bills
X3: Mapping[str, int] = {name: 3 for name in COMPONENTS}


class ConventionRegistryError(VlmPerfError):
    """A convention definition is inconsistent (duplicate name, unknown component, missing formula)."""


@dataclass(frozen=True)
class Pin:
    """Where a convention's formula comes from: framework, repository, file, function, commit or release."""

    framework: str  # "veRL"
    repo: str  # "verl-project/verl"
    file: str  # "verl/utils/flops_counter.py"
    function: str  # "_estimate_qwen3_vl_flops (+ ESTIMATE_FUNC routing)"
    version: str  # "main 1dda039b9c63 (2026-08-22)" or "v0.7.1 (2026-03-16)"
    verified: str = ""  # how vlm-perf checks it (test file and what it compares against)

    def describe(self) -> str:
        return f"{self.repo} {self.file} {self.function} @ {self.version}"


@dataclass(frozen=True)
class Convention:
    """A named FLOPs convention.

    ``formula`` states what it counts (per step, training), ``deviations`` how that differs from ``exact``,
    ``pin`` where it comes from. ``forward`` returns forward FLOPs by component; a training step bills
    ``forward[c] * training_rule[c]`` for each component ``c``. (``training`` is the older spelling: training
    FLOPs by component, forward derived as ``training[c] / training_rule[c]``.) ``refuses`` maps a family to
    the reason its framework cannot train or count it.
    """

    name: str
    formula: str
    deviations: tuple[str, ...]
    forward: ComponentFn | None = None
    training: ComponentFn | None = None
    training_rule: Mapping[str, Any] = field(default_factory=lambda: dict(X3))
    pin: Pin | None = None
    source: str = ""
    counts_vision: bool = True
    unsupported: tuple[str, ...] = ()  # LM families this convention has no formula for
    # model families (vlm_perf.arch.families names) the convention defines a number for; None = every family
    families: tuple[str, ...] | None = QWEN_AND_DECODER_FAMILIES
    # covered families whose vision the framework does not count (e.g. veRL routes glm4v to a text-only formula)
    text_only_families: tuple[str, ...] = ()
    # family -> why the framework gives no number for it (checked before ``families``)
    refuses: Mapping[str, str] = field(default_factory=dict)
    variant_of: str | None = None  # the convention this one is an older/newer version of
    # (spec, options) -> training rule, for a framework whose rule depends on what is frozen (VeOmni freeze_vit);
    # None: ``training_rule`` whatever is frozen (the frozen parts are then ignored, with a note)
    frozen_rule: Callable[[ModelSpec, Options], Mapping[str, Any]] | None = None
    # (spec, stats, trainability) -> TRAINING FLOPs by component, for a regime finer than whole parts (an adapter,
    # VeOmni's LoRA branches); None: such a regime is refused (:meth:`compute_regime`)
    regime_training: Callable[[ModelSpec, BatchStats, Any], tuple[dict[str, Any], tuple[str, ...]]] | None = None

    def __post_init__(self) -> None:
        if not re.fullmatch(r"[a-z0-9][a-z0-9._@-]*", self.name):
            raise ConventionRegistryError(f"convention name {self.name!r}: lower-case letters, digits and . _ @ - only")
        if (self.forward is None) == (self.training is None):
            raise ConventionRegistryError(f"convention {self.name!r}: give exactly one of forward or training")
        unknown = sorted(set(self.training_rule) - set(COMPONENTS))
        if unknown:
            raise ConventionRegistryError(f"convention {self.name!r}: training_rule names unknown components "
                                          f"{', '.join(unknown)} (known: {', '.join(COMPONENTS)})")
        if not self.source and self.pin is not None:
            object.__setattr__(self, "source", self.pin.describe())

    def covers(self, family: str) -> bool:
        return family not in self.refuses and (self.families is None or family in self.families)

    def counts_vision_for(self, family: str) -> bool:
        return self.counts_vision and family not in self.text_only_families

    def check(self, spec: ModelSpec) -> None:
        family = spec.family or spec.model_type
        if family in self.refuses:
            raise ConventionNotDefined(f"convention {self.name!r} is not defined for {family} ({spec.name}): "
                                       f"{self.refuses[family]}; use 'exact'")
        if not self.covers(family):
            raise ConventionNotDefined(f"convention {self.name!r} is not defined for {family} ({spec.name}): "
                                       f"{self.name} has no formula for that family; use 'exact'")
        if spec.lm.family in self.unsupported:
            raise ConventionNotDefined(f"convention {self.name!r} has no formula for {spec.lm.family} models "
                                       f"({spec.name}); use 'exact' or another convention")

    def rule(self, component: str) -> Any:
        """The training factor of ``component`` (training FLOPs = forward FLOPs x this)."""
        return self.training_rule.get(component, 3)

    def forward_components(self, spec: ModelSpec, stats: BatchStats, options: Options) -> dict[str, Any]:
        """Forward FLOPs by component, keys checked against the known components."""
        if self.forward is not None:
            out = self.forward(spec, stats, options)
        else:
            assert self.training is not None
            out = {k: v / self.rule(k) for k, v in self.training(spec, stats, options).items()}
        unknown = sorted(set(out) - set(COMPONENTS))
        if unknown:
            raise ConventionRegistryError(f"convention {self.name!r} returned unknown components "
                                          f"{', '.join(unknown)} (known: {', '.join(COMPONENTS)})")
        return out

    def compute(self, spec: ModelSpec, stats: BatchStats, options: Options) -> Breakdown:
        self.check(spec)
        frozen_stages(options.frozen)  # a misspelled part is an error under every convention
        forward = self.forward_components(spec, stats, options)
        notes = []
        if options.causal != "half":
            notes.append(f"--causal {options.causal} ignored: {self.name} fixes its own causal rule")
        if options.frozen and self.frozen_rule is None:
            notes.append(f"frozen parts ignored: {self.name} counts every component as trainable")
        if not self.counts_vision_for(spec.family or spec.model_type) and spec.is_vlm:
            notes.append(f"{self.name} does not count the vision tower")
        if options.mode == "forward":
            components = forward
        elif self.frozen_rule is not None:
            rule = self.frozen_rule(spec, options)
            unknown = sorted(set(rule) - set(COMPONENTS))
            if unknown:
                raise ConventionRegistryError(f"convention {self.name!r}: frozen_rule names unknown components "
                                              f"{', '.join(unknown)}")
            components = {k: v * rule.get(k, self.rule(k)) for k, v in forward.items()}
        else:
            components = {k: v * self.rule(k) for k, v in forward.items()}
        return Breakdown(self.name, components, options, tuple(notes))


    def compute_regime(self, spec: ModelSpec, stats: BatchStats, regime: Any, causal: str = "half") -> Breakdown:
        """Training FLOPs under a training regime: a frozen-parts tuple or a ``Trainability``. A whole-part regime is
        :meth:`compute` with ``frozen``; a finer one (adapters, layer ranges) needs ``regime_training``."""
        from ...arch.trainability import Trainability

        if isinstance(regime, Trainability) and regime.stage_level:
            regime = tuple(sorted(regime.frozen_stage_set()))
        if not isinstance(regime, Trainability):
            return self.compute(spec, stats, Options(mode="training", causal=causal, frozen=tuple(regime)))
        self.check(spec)
        if self.regime_training is None:
            raise ConventionNotDefined(f"convention {self.name!r} does not count a regime finer than whole parts "
                                       f"({regime.describe()}); use 'exact'")
        components, notes = self.regime_training(spec, stats, regime)
        unknown = sorted(set(components) - set(COMPONENTS))
        if unknown:
            raise ConventionRegistryError(f"convention {self.name!r} returned unknown components {', '.join(unknown)}")
        return Breakdown(self.name, components, Options(mode="training", causal=causal), tuple(notes))


# ------------------------------------------------------------------------------------------------ registry

#: name -> Convention, in registration order. The same object for the life of the process: code holding a
#: reference (``from vlm_perf.flops import CONVENTIONS``) sees conventions registered later.
CONVENTIONS: dict[str, Convention] = {}


def register_convention(convention: Convention) -> Convention:
    """Add ``convention`` to the registry; a second convention of the same name is rejected."""
    if not isinstance(convention, Convention):
        raise ConventionRegistryError(f"register_convention expects a Convention, got {type(convention).__name__}")
    if convention.name in CONVENTIONS:
        raise ConventionRegistryError(f"convention {convention.name!r} is already registered")
    if convention.variant_of is not None and convention.variant_of not in CONVENTIONS:
        raise ConventionRegistryError(f"convention {convention.name!r}: variant_of {convention.variant_of!r} "
                                      "is not registered (register the base convention first)")
    CONVENTIONS[convention.name] = convention
    return convention


def names() -> tuple[str, ...]:
    """Every registered convention name, in registration order."""
    return tuple(CONVENTIONS)


def variants(name: str) -> tuple[str, ...]:
    """``name`` and every registered variant of it (e.g. ``verl``, ``verl@v0.7.1``)."""
    base = get_convention(name)
    root = base.variant_of or base.name
    return tuple(n for n, c in CONVENTIONS.items() if n == root or c.variant_of == root)


def get_convention(name: str) -> Convention:
    key = name.strip().lower()
    if key not in CONVENTIONS:
        close = difflib.get_close_matches(key, CONVENTIONS, n=2, cutoff=0.4)
        hint = f"; did you mean {', '.join(close)}?" if close else ""
        raise ConfigError(f"unknown convention {name!r}{hint} (known: {', '.join(CONVENTIONS)})")
    return CONVENTIONS[key]
