"""What trains in a training step, at block granularity (pure, no I/O).

A :class:`Trainability` says, for every weight of the model, whether it receives a gradient:

* **selectors** (:class:`Selector`): a part (stage alias as in ``--frozen``), optionally a layer range of
  the vision tower or the LM (Python slice semantics, negative = from the end), optionally module kinds
  (:data:`MODULE_KINDS`). Text form: ``PART[SLICE][.KIND[+KIND...]]``, e.g. ``language_model``,
  ``vision_tower[-4:]``, ``lm[20:].mlp``, ``lm.attention+norms``, ``lm.head``, ``projector``;
* a weight trains when a ``trainable`` selector matches it and no ``frozen`` selector does; modules an
  adapter saves (``modules_to_save``) train whatever the selectors say;
* an **adapter** (:class:`~vlm_perf.arch.adapters.AdapterConfig`): LoRA / DoRA matrices on the modules it
  targets; with an adapter the base weights are frozen unless a ``trainable`` selector names them (PEFT
  freezes every base weight);
* ``input_require_grads``: the hook Hugging Face / PEFT install with gradient checkpointing
  (``enable_input_require_grads``) marks the LM's input embeddings -- and, in transformers 5, the vision
  tower's patch-embedding output -- as requiring a gradient, so input gradients run down to them even
  where nothing below trains.

``Trainability.from_frozen(parts)`` is today's ``frozen`` tuple: everything trainable except whole parts,
giving exactly the FLOPs of ``compute_flops(..., frozen=parts)``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Iterable

from ..errors import ConfigError
from .adapters import AdapterConfig
from .parts import PART_ALIASES, STAGES, frozen_stages

# module kinds a selector may name; every weight of the layout has exactly one
ATTENTION, MLP, NORMS, EMBEDDINGS, HEAD = "attention", "mlp", "norms", "embeddings", "head"
MODULE_KINDS = (ATTENTION, MLP, NORMS, EMBEDDINGS, HEAD)
_KIND_ALIASES = {"attention": ATTENTION, "attn": ATTENTION, "self_attn": ATTENTION, "mlp": MLP, "ffn": MLP,
                 "norm": NORMS, "norms": NORMS, "layernorm": NORMS, "embeddings": EMBEDDINGS,
                 "embedding": EMBEDDINGS, "embed": EMBEDDINGS, "head": HEAD, "lm_head": HEAD}
_SELECTOR = re.compile(r"^(?P<part>[A-Za-z_\-]+)(?:\[(?P<slice>[^\]]*)\])?(?:\.(?P<kinds>[A-Za-z_+\-]+))?$")


@dataclass(frozen=True)
class Selector:
    """A set of weights: ``stages``; ``layers`` = (start, stop) Python slice bounds over the stage's layer list
    (``None`` = every weight of the stage, layered or not; with a range, only layer weights match);
    ``kinds`` (``None`` = every kind)."""

    stages: frozenset[str]
    layers: tuple[int | None, int | None] | None = None
    kinds: frozenset[str] | None = None
    text: str = ""

    def matches(self, stage: str, layer: int | None, kind: str, num_layers: int) -> bool:
        if stage not in self.stages:
            return False
        if self.kinds is not None and kind not in self.kinds:
            return False
        if self.layers is None:
            return True
        if layer is None:
            return False
        return layer in range(num_layers)[slice(*self.layers)]

    @property
    def whole_stages(self) -> bool:
        return self.layers is None and self.kinds is None

    def __str__(self) -> str:
        return self.text or "+".join(sorted(self.stages))


EVERYTHING = Selector(frozenset(STAGES), text="everything")


def parse_selector(text: str) -> Selector:
    """``PART[SLICE][.KIND[+KIND...]]`` (see the module docstring); a bad form raises ConfigError naming it."""
    raw = str(text).strip()
    m = _SELECTOR.match(raw.replace(" ", ""))
    if not m:
        raise ConfigError(f"trainability selector {text!r}: expected PART[SLICE][.KIND+KIND], e.g. "
                          "'vision_tower[-4:]' or 'lm.attention+mlp'")
    key = m.group("part").lower().replace("-", "_")
    if key not in PART_ALIASES:
        raise ConfigError(f"trainability selector {text!r}: unknown part {m.group('part')!r}; use one of: "
                          f"{', '.join(sorted(PART_ALIASES))}")
    stages = frozenset(PART_ALIASES[key])
    layers = None
    if m.group("slice") is not None:
        layers = _parse_slice(m.group("slice"), text)
    kinds = None
    if m.group("kinds"):
        kinds_set = set()
        for k in m.group("kinds").split("+"):
            kk = _KIND_ALIASES.get(k.lower())
            if kk is None:
                raise ConfigError(f"trainability selector {text!r}: unknown module kind {k!r}; use one of: "
                                  f"{', '.join(MODULE_KINDS)}")
            kinds_set.add(kk)
        kinds = frozenset(kinds_set)
    return Selector(stages, layers, kinds, raw)


def _parse_slice(body: str, text: str) -> tuple[int | None, int | None]:
    def num(s: str) -> int | None:
        s = s.strip()
        if not s:
            return None
        try:
            return int(s)
        except ValueError:
            raise ConfigError(f"trainability selector {text!r}: layer bound {s!r} is not an integer") from None

    if ":" not in body:
        i = num(body)
        if i is None:
            raise ConfigError(f"trainability selector {text!r}: empty layer index")
        return (i, i + 1 if i != -1 else None)
    start, _, stop = body.partition(":")
    if ":" in stop:
        raise ConfigError(f"trainability selector {text!r}: a layer range has no step")
    return (num(start), num(stop))


def parse_selectors(items: Iterable[str]) -> tuple[Selector, ...]:
    """Selectors from repeatable / comma-separated CLI values (commas outside brackets split)."""
    out: list[Selector] = []
    for item in items:
        for piece in re.split(r",(?![^\[]*\])", str(item)):
            if piece.strip():
                out.append(parse_selector(piece))
    return tuple(out)


@dataclass(frozen=True)
class Trainability:
    """What trains (see the module docstring)."""

    trainable: tuple[Selector, ...] = (EVERYTHING,)
    frozen: tuple[Selector, ...] = ()
    adapter: AdapterConfig | None = None
    input_require_grads: bool = False
    modules: frozenset[str] = frozenset()  # module names observed training (``vlm_perf.arch.observed``)
    biases: frozenset[str] = frozenset()  # Linears whose bias alone trains (no weight gradient, output needs grad)

    @classmethod
    def from_frozen(cls, parts: Iterable[str]) -> "Trainability":
        """Today's ``frozen`` tuple: every weight trains except those of the named parts."""
        try:
            stages = frozen_stages(parts)
        except ValueError as exc:
            raise ConfigError(str(exc)) from None
        return cls(frozen=(Selector(stages, text="+".join(s for s in STAGES if s in stages)),) if stages else ())

    @classmethod
    def build(cls, trainable: Iterable[str] = (), frozen: Iterable[str] = (), adapter: AdapterConfig | None = None,
              input_require_grads: bool = False) -> "Trainability":
        """From CLI-style selector texts: ``trainable`` defaults to everything without an adapter and to nothing
        (base frozen) with one."""
        t = parse_selectors(trainable)
        if not t and adapter is None:
            t = (EVERYTHING,)
        return cls(trainable=t, frozen=parse_selectors(frozen), adapter=adapter,
                   input_require_grads=input_require_grads)

    def weight_trains(self, stage: str, layer: int | None, kind: str, name: str, num_layers: int) -> bool:
        if name and (name in self.modules or (self.adapter is not None and self.adapter.saves(name))):
            return True
        if any(f.matches(stage, layer, kind, num_layers) for f in self.frozen):
            return False
        return any(t.matches(stage, layer, kind, num_layers) for t in self.trainable)

    @property
    def stage_level(self) -> bool:
        """Only whole parts are selected, no adapter, no input hook: what ``frozen`` alone can say."""
        return (self.adapter is None and not self.input_require_grads and not self.modules and not self.biases
                and all(s.whole_stages for s in self.trainable + self.frozen))

    def frozen_stage_set(self) -> frozenset[str]:
        """For a stage-level trainability: the stages that do not train."""
        if not self.stage_level:
            raise ConfigError("this trainability is finer than whole parts")
        trains = set().union(*(s.stages for s in self.trainable)) if self.trainable else set()
        trains -= set().union(*(s.stages for s in self.frozen)) if self.frozen else set()
        return frozenset(STAGES) - trains

    def describe(self) -> str:
        bits = []
        if self.adapter is not None:
            bits.append(self.adapter.describe())
        if self.trainable and self.trainable != (EVERYTHING,):
            bits.append("trainable: " + ", ".join(map(str, self.trainable)))
        elif self.trainable == (EVERYTHING,):
            bits.append("trainable: everything")
        if self.frozen:
            bits.append("frozen: " + ", ".join(map(str, self.frozen)))
        if self.modules:
            bits.append(f"{len(self.modules)} modules observed training")
        if self.input_require_grads:
            bits.append("input embeddings require grad (gradient-checkpointing hook)")
        return "; ".join(bits) or "nothing trainable"
