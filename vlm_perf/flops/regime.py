"""Exact FLOPs of one step under any training regime (pure, no I/O).

``regime_flops(spec, stats, trainability)`` walks the model in data-flow order
(:func:`vlm_perf.arch.layout.layout`) and counts what autograd runs:

* every matmul runs forward once;
* a Linear adds its **weight gradient** (x1) when its weight trains;
* it adds its **input gradient** (x1) when its input requires a gradient, i.e. when anything earlier in
  the graph trains (a weight, a norm, an adapter, or the ``input_require_grads`` hook), never for the
  patch embed (its input is pixels);
* an attention core (no weights) adds, for eager kernels (``causal="full"``), dV when v requires a gradient,
  dP when q or k does, dQ and dK for each that does (each half its forward); fused kernels
  (``causal="half"``, flash-style) compute dQ, dK and dV together whenever any of them is needed (2x);
* a LoRA adapter on a Linear of ``n_in`` -> ``n_out`` over ``R`` rows, rank ``r``: forward
  ``2·R·r·(n_in + n_out)``; backward: B's weight and input gradients ``2·2·R·r·n_out``, A's weight gradient
  ``2·R·n_in·r``, A's input gradient ``2·R·n_in·r`` only when the Linear's input requires a gradient;
  DoRA adds, per call of each adapted Linear (the LM once per forward, a Qwen-VL tower once per media kind), the low-rank update pushed through an identity
  (``2·n_in²·r + 2·n_in·r·n_out``, forward only: PEFT detaches the weight norm) and, with ``lora_dropout > 0``
  in training, a second base matmul on the dropped-out input (its input gradient too when the input needs one).
  QLoRA: the base matmuls are counted as the dequantised weights compute them; dequantisation is not a matmul
  and is not counted.

A stage the layout cannot expand (block kinds without a per-Linear layout) is counted with the part-level
rule of :mod:`vlm_perf.flops.training`, which needs the stage to be uniformly trainable or frozen.

``Trainability.from_frozen(parts)`` gives exactly ``compute_flops(..., frozen=parts)`` (tested over every
preset). Units: FLOPs.
"""

from __future__ import annotations

import sys
from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any

from ..arch.layout import AttnSub, Chain, Layer, Lin, MlpSub, Opaque, Params, StageLayout, layout, module_names_known
from ..arch.parts import DEEPSTACK_MERGER, LANGUAGE_MODEL, MERGER, STAGES, VISION_TOWER
from ..arch.spec import ModelSpec
from ..arch.trainability import EMBEDDINGS, EVERYTHING, HEAD, Trainability
from ..errors import ConfigError, UnsupportedModelError
from ..stats.batch import BatchStats
from .blocks import FlopsContext, inventory_terms
from .breakdown import COMPONENTS, Breakdown, Options
from .terms import INPUT_OWN, INPUT_PIXELS, INPUT_UPSTREAM, matmul

# what each FLOP is, for the per-part table
FORWARD, INPUT_GRAD, WEIGHT_GRAD = "forward", "input_grad", "weight_grad"
ADAPTER_FORWARD, ADAPTER_BACKWARD, DORA_EXTRA = "adapter_forward", "adapter_backward", "dora_extra"
CATEGORIES = (FORWARD, INPUT_GRAD, WEIGHT_GRAD, ADAPTER_FORWARD, ADAPTER_BACKWARD, DORA_EXTRA)
_PART = {VISION_TOWER: "vision_tower", MERGER: "projector", DEEPSTACK_MERGER: "projector",
         LANGUAGE_MODEL: "language_model"}


@dataclass(frozen=True)
class AdaptedModule:
    """One Linear an adapter sits on."""

    name: str
    stage: str
    rank: int
    n_in: int
    n_out: int


@dataclass
class RegimeFlops:
    """The result: ``breakdown`` (components as :func:`compute_flops` names them, adapter FLOPs inside the
    component of the Linear they adapt), ``by_part`` (part -> category -> FLOPs), the adapted modules,
    trainable parameter counts, and notes."""

    breakdown: Breakdown
    by_part: dict[str, dict[str, Any]]
    adapted: tuple[AdaptedModule, ...] = ()
    trainable_base_linears: tuple[str, ...] = ()
    adapter_params: int = 0
    notes: tuple[str, ...] = field(default=())
    full_training: Breakdown | None = None  # every weight trains, no adapter: what a full fine-tune would run

    @property
    def total(self) -> Any:
        return self.breakdown.total

    @property
    def parts(self) -> dict[str, Any]:
        return {part: sum(cats.values()) for part, cats in self.by_part.items()}

    def to_dict(self) -> dict[str, Any]:
        return {"total": self.total, "parts": self.parts, "by_part": {p: dict(c) for p, c in self.by_part.items()},
                "components": dict(self.breakdown.components), "adapted_modules": len(self.adapted),
                "adapter_params": self.adapter_params, "trainable_base_linears": len(self.trainable_base_linears),
                "full_training_total": None if self.full_training is None else self.full_training.total,
                "notes": list(self.notes)}


class _Walker:
    def __init__(self, spec: ModelSpec, stats: BatchStats, t: Trainability, causal: str, training: bool,
                 forward_calls: Any):
        self.spec, self.stats, self.t, self.training = spec, stats, t, training
        self.ctx = FlopsContext(causal=causal)
        self.forward_calls = forward_calls
        self.acc: dict[str, dict[str, dict[str, Any]]] = defaultdict(lambda: defaultdict(lambda: defaultdict(int)))
        self.adapted: list[AdaptedModule] = []
        self.trained_linears: list[str] = []
        self.num_layers = 0
        self.stage = ""
        self.vision_into_lm = False  # a vision stage carries a gradient into the LM (set before the LM walk)
        self.embed_name = ""  # the LM's input embedding (a tied head trains with it)
        self.any_trains = False  # any weight, bias, norm, table or adapter trains
        self.adapter = t.adapter
        if self.adapter is not None and not module_names_known(spec):
            raise UnsupportedModelError(f"{spec.name}: the module names of family {spec.family!r} are not laid out "
                                        "yet, so an adapter config (which names modules) cannot be resolved")

    def add(self, component: str, category: str, value: Any) -> None:
        self.acc[self.stage][component][category] += value

    def calls(self) -> Any:
        """How often the current stage's modules run per step: the LM once per forward call; the vision stages
        once per media kind present (transformers' Qwen-VL models encode images and videos in separate tower
        calls), per forward call."""
        if self.stage == LANGUAGE_MODEL:
            return self.forward_calls
        patches, video = self.stats.vision_patches, self.stats.video_patches
        if isinstance(patches, (int, float)) and isinstance(video, (int, float)):
            return self.forward_calls * (int(patches - video > 0) + int(video > 0))
        pl = sys.modules.get("polars")  # expression statistics: the same rule per row
        if pl is not None and isinstance(patches - video, pl.Expr):
            return self.forward_calls * (((patches - video) > 0).cast(pl.Float64) + (video > 0).cast(pl.Float64))
        return self.forward_calls

    def rows(self, lin: Lin) -> Any:
        total: Any = 0
        for name in lin.rows:
            total = total + getattr(self.stats, name)
        return total

    def trains(self, layer: int | None, kind: str, name: str) -> bool:
        return self.t.weight_trains(self.stage, layer, kind, name, self.num_layers)

    # -------------------------------------------------------------- ops
    def params(self, p: Params | None, layer: int | None) -> bool:
        if p is None:
            return False
        if self.adapter is not None and p.kind == EMBEDDINGS and self.adapter.targets(p.name, is_linear=False):
            raise UnsupportedModelError(f"{self.spec.name}: the adapter targets {p.name} (an embedding table); "
                                        "LoRA on embeddings is not modelled")
        trains = self.trains(layer, p.kind, p.name)
        self.any_trains = self.any_trains or trains
        return trains

    def linear(self, lin: Lin, live_in: bool, layer: int | None) -> bool:
        """Count one Linear; returns whether its output requires a gradient."""
        rows = self.rows(lin)
        fwd = matmul(rows, lin.n_in, lin.n_out)
        trains = self.trains(layer, lin.kind, lin.name) or (lin.tied and self.trains(None, EMBEDDINGS, self.embed_name))
        needs_input = live_in and not lin.pixels
        self.add(lin.component, FORWARD, fwd)
        if trains:
            self.trained_linears.append(lin.name)
        if self.training:
            if trains:
                self.add(lin.component, WEIGHT_GRAD, fwd)
            if needs_input:
                self.add(lin.component, INPUT_GRAD, fwd)
        a = self.adapter
        # a targeted Linear keeps its adapter even when its base weight is also unfrozen (PEFT injects it either
        # way; only modules_to_save are never adapted, which ``targets`` handles)
        adapted = bool(a is not None and lin.adaptable and a.targets(lin.name, is_linear=True, is_head=lin.head))
        if adapted and a is not None:
            r = a.rank(lin.name)
            self.adapted.append(AdaptedModule(lin.name, self.stage, r, lin.n_in, lin.n_out))
            a_fwd, b_fwd = matmul(rows, lin.n_in, r), matmul(rows, r, lin.n_out)
            self.add(lin.component, ADAPTER_FORWARD, a_fwd + b_fwd)
            if self.training:
                self.add(lin.component, ADAPTER_BACKWARD, 2 * b_fwd + a_fwd + (a_fwd if needs_input else 0))
            if a.use_dora:
                self.add(lin.component, DORA_EXTRA, self.calls() * (matmul(lin.n_in, lin.n_in, r)
                                                                    + matmul(lin.n_in, r, lin.n_out)))
                if self.training and a.lora_dropout > 0:
                    self.add(lin.component, DORA_EXTRA, fwd + (fwd if needs_input else 0))
        bias_trains = lin.bias and ((a is not None and (a.bias == "all" or (a.bias == "lora_only" and adapted)))
                                    or lin.name in self.t.biases)
        self.any_trains = self.any_trains or trains or adapted or bias_trains
        return live_in or trains or adapted or bias_trains

    def core(self, sub: AttnSub, q: bool, k: bool, v: bool) -> None:
        for term in inventory_terms((sub.core,), self.stats, self.ctx):
            if term.weights:
                continue
            self.add(term.component, FORWARD, term.forward)
            if not self.training or not (q or k or v):
                continue
            if term.input_grad is not None:
                self.add(term.component, INPUT_GRAD, term.input_grad)
            elif self.ctx.causal == "half":  # fused kernel: dQ, dK, dV together
                self.add(term.component, INPUT_GRAD, 2 * term.forward)
            else:  # eager: QK^T and AV are two equal matmuls; each backward matmul costs one of them
                halves = int(v) + int(q or k) + int(q) + int(k)
                self.add(term.component, INPUT_GRAD, _halves(term.forward, halves))

    def attn(self, sub: AttnSub, live: bool, layer: int | None) -> bool:
        live_n = live or self.params(sub.norm, layer)
        outs = [self.linear(p, live_n, layer) for p in sub.projections]
        q, k, v = (outs[i] for i in sub.sources)
        if sub.qk_norms:
            q = self.params(sub.qk_norms[0], layer) or q
            k = self.params(sub.qk_norms[1], layer) or k
        self.core(sub, q, k, v)
        out = self.linear(sub.out, q or k or v, layer)
        return live or out or self.params(sub.post_norm, layer)

    def mlp(self, sub: MlpSub, live: bool, layer: int | None) -> bool:
        live_n = live or self.params(sub.norm, layer)
        hidden = any([self.linear(x, live_n, layer) for x in sub.ins])
        out = self.linear(sub.out, hidden, layer)
        return live or out or self.params(sub.post_norm, layer)

    def chain(self, c: Chain, live: bool) -> bool:
        x = live or self.params(c.norm, None)
        for lin in c.linears:
            x = self.linear(lin, x, None)
        return x

    def opaque(self, op: Opaque, live: bool, layer: int | None, ) -> bool:
        live_n = live or self.params(op.norm, layer)
        trains = self.trains(layer, op.kind, op.name)
        self.any_trains = self.any_trains or trains
        for term in inventory_terms((op.block,), self.stats, self.ctx):
            self.add(term.component, FORWARD, term.forward)
            if not self.training:
                continue
            if term.weights and trains:
                self.add(term.component, WEIGHT_GRAD, term.forward)
            if term.input_kind == INPUT_PIXELS:
                continue
            if term.input_kind == INPUT_UPSTREAM:
                # an LM op reading the vision output directly (Mllama's cross-attention k/v): only a live vision stage
                reaches = self.vision_into_lm if self.stage == LANGUAGE_MODEL else live_n
            else:
                reaches = trains if term.input_kind == INPUT_OWN else (live_n or trains)
            if reaches:
                grad = term.input_grad if term.input_grad is not None else (
                    term.forward if term.weights else 2 * term.forward)
                self.add(term.component, INPUT_GRAD, grad)
        return live_n or trains

    def sub(self, op: Any, live: bool, layer: int | None) -> bool:
        if isinstance(op, AttnSub):
            return self.attn(op, live, layer)
        if isinstance(op, MlpSub):
            return self.mlp(op, live, layer)
        if isinstance(op, Lin):
            return self.linear(op, live, layer)
        if isinstance(op, Params):
            tied_head = op.kind == EMBEDDINGS and self.stage == LANGUAGE_MODEL and self.tied_head_trains()
            return live or self.params(op, layer) or tied_head
        if isinstance(op, Chain):
            return self.chain(op, live)
        if isinstance(op, Opaque):
            return self.opaque(op, live, layer)
        raise TypeError(op)

    def tied_head_trains(self) -> bool:
        """A tied LM head that trains trains the input embedding too (one weight). Not when PEFT's
        ``modules_to_save`` trains it: that trains an untied copy (the name is left out so it cannot match)."""
        return any(b.kind == "lm_head" and b.tied for b in self.spec.blocks) and self.trains(None, HEAD, "")

    # -------------------------------------------------------------- stages
    def check_uniform(self, s: StageLayout) -> None:
        fine = [x for x in self.t.trainable + self.t.frozen if s.stage in x.stages and not x.whole_stages]
        if fine:
            raise UnsupportedModelError(
                f"{self.spec.name}: its {_PART[s.stage]} has block kinds without a per-layer layout "
                f"({', '.join(sorted({op.block.kind for op in s.tail}))}), so it can only train or freeze as a whole "
                f"(selector {fine[0]} is finer)")

    def stage_walk(self, s: StageLayout, live: bool) -> tuple[bool, list[bool]]:
        """Returns the live flag after the stage and after each layer."""
        self.stage, self.num_layers = s.stage, s.num_layers
        if not s.expanded:
            self.check_uniform(s)
        after: list[bool] = []
        for op in s.head:
            live = self.sub(op, live, None)
            if s.stage == VISION_TOWER and self.t.input_require_grads and isinstance(op, Lin) and op.pixels:
                live = True  # enable_input_require_grads: the patch-embed output is marked as requiring grad
        for layer in s.layers:
            live = self.layer(layer, live)
            after.append(live)
        for op in s.tail:
            live = self.sub(op, live, None)
        return live, after

    def layer(self, layer: Layer, live: bool) -> bool:
        for op in layer.subs:
            live = self.sub(op, live, layer.index)
        return live

    def run(self) -> None:
        stages = {s.stage: s for s in layout(self.spec)}
        if LANGUAGE_MODEL in stages:
            self.embed_name = next((op.name for op in stages[LANGUAGE_MODEL].head
                                    if isinstance(op, Params) and op.kind == EMBEDDINGS), "")
        tower_after: list[bool] = []
        tower_live = False
        if VISION_TOWER in stages:
            tower_live, tower_after = self.stage_walk(stages[VISION_TOWER], False)
        into_lm = False
        if MERGER in stages:
            live, _ = self.stage_walk(stages[MERGER], tower_live)
            into_lm = into_lm or live
        if DEEPSTACK_MERGER in stages:
            s = stages[DEEPSTACK_MERGER]
            self.stage, self.num_layers = s.stage, 0
            if not s.expanded:
                self.check_uniform(s)
                live, _ = self.stage_walk(s, tower_live)
                into_lm = into_lm or live
            for chain, tap in zip(s.head, s.taps):
                tap_live = tower_after[tap] if tap < len(tower_after) else tower_live
                into_lm = self.chain(chain, tap_live) or into_lm  # chain first: always counted
        if LANGUAGE_MODEL in stages:
            self.vision_into_lm = into_lm
            self.stage_walk(stages[LANGUAGE_MODEL], into_lm or self.t.input_require_grads)


def _weights(stages: tuple[StageLayout, ...]) -> list[tuple[str, int | None, str, int]]:
    """(stage, layer, kind, number of layers) of every weight-bearing op of the layout."""
    out: list[tuple[str, int | None, str, int]] = []

    def visit(stage: StageLayout, layer: int | None, op: Any) -> None:
        if isinstance(op, (Lin, Params)):
            out.append((stage.stage, layer, op.kind, stage.num_layers))
        elif isinstance(op, Opaque):
            out.append((stage.stage, layer, op.kind, stage.num_layers))
            if op.norm is not None:
                visit(stage, layer, op.norm)
        elif isinstance(op, (AttnSub, MlpSub, Chain)):
            parts = ([op.norm, *op.projections, *op.qk_norms, op.out, op.post_norm] if isinstance(op, AttnSub) else
                     [op.norm, *op.ins, op.out, op.post_norm] if isinstance(op, MlpSub) else [op.norm, *op.linears])
            for x in parts:
                if x is not None:
                    visit(stage, layer, x)

    for s in stages:
        for op in s.head + s.tail:
            visit(s, None, op)
        for layer in s.layers:
            for op in layer.subs:
                visit(s, layer.index, op)
    return out


def check_selectors(spec: ModelSpec, trainability: Trainability) -> None:
    """A layer-range or kind selector that names no weight of the model (a range past the last layer, a kind the
    part does not have) is a ConfigError, never a silent no-op. Whole parts the model lacks are accepted, as
    ``frozen`` always accepted them."""
    stages = layout(spec)
    weights = _weights(stages)
    opaque = {s.stage for s in stages if not s.expanded}
    for sel in trainability.trainable + trainability.frozen:
        if sel.stages & opaque or sel.whole_stages:
            continue  # the walk says what an opaque stage accepts; a whole part the model lacks is harmless
        if not any(sel.matches(stage, layer, kind, n) for stage, layer, kind, n in weights):
            raise ConfigError(f"{spec.name}: selector '{sel}' matches no weight of the model (its parts have "
                              + ", ".join(f"{s.stage} {s.num_layers} layers" for s in stages) + ")")


def _halves(forward: Any, n: int) -> Any:
    """``n`` halves of ``forward`` (exact for even integers, the attention core always is)."""
    if isinstance(forward, int) and forward % 2 == 0:
        return n * (forward // 2)
    return n * forward / 2


def regime_flops(spec: ModelSpec, stats: BatchStats, trainability: Trainability, causal: str = "half",
                 mode: str = "training", forward_calls: Any = 1, full_reference: bool = True) -> RegimeFlops:
    """Exact FLOPs of one step of ``stats`` under ``trainability`` (see the module docstring).

    ``forward_calls``: forward passes the statistics span (micro-batches), for the DoRA per-forward term.
    ``full_reference``: also count full training of every weight (``RegimeFlops.full_training``), the number a
    tool that ignores the regime would use.
    Training with nothing that trains (no weight, no adapter) is a ConfigError (count it with mode forward).
    """
    if mode not in ("training", "forward"):
        raise ConfigError(f"mode must be training or forward, got {mode!r}")
    if trainability.trainable != (EVERYTHING,) or trainability.frozen:
        check_selectors(spec, trainability)
    w = _Walker(spec, stats, trainability, causal, mode == "training", forward_calls)
    w.run()
    if mode == "training" and not w.any_trains:
        raise ConfigError(f"{spec.name}: nothing trains under '{trainability.describe()}', so a training step has "
                          "no backward pass; count it with mode 'forward' instead")
    components: dict[str, Any] = {name: 0 for name in COMPONENTS if spec.is_vlm or not name.startswith("vision.")}
    by_part: dict[str, dict[str, Any]] = {}
    for stage in STAGES:
        if stage not in w.acc:
            continue
        cats = by_part.setdefault(_PART[stage], {c: 0 for c in CATEGORIES})
        for component, per in w.acc[stage].items():
            for category, value in per.items():
                components[component] = components[component] + value
                cats[category] = cats[category] + value
    notes = [f"regime: {trainability.describe()}"]
    a = trainability.adapter
    adapter_params = sum(m.rank * (m.n_in + m.n_out) for m in w.adapted)
    if a is not None:
        per_part: dict[str, int] = {}
        for m in w.adapted:
            per_part[_PART[m.stage]] = per_part.get(_PART[m.stage], 0) + 1
        where = ", ".join(f"{n} in the {p.replace('_', ' ')}" for p, n in per_part.items()) or "none"
        notes.append(f"{len(w.adapted)} Linears adapted ({a.describe()}): {where}; {adapter_params:,} adapter weights")
        if any(isinstance(op, Opaque) for s in layout(spec) for layer in s.layers for op in layer.subs):
            notes.append("the LM's MoE / non-standard sublayers are laid out as whole blocks: an adapter inside them "
                         "(expert or router weights) is not resolved")
        if a.quantized_base:
            notes.append("QLoRA: base matmuls counted at the dequantised weights' FLOPs; the dequantisation "
                         "(elementwise, twice per Linear per step) is not counted")
        if a.use_dora:
            notes.append("DoRA: the weight-norm term (low-rank update through an identity) is counted once per "
                         "forward call per adapted Linear; the norm itself is elementwise and not counted")
    options = Options(mode=mode, causal=causal, frozen=())
    full = None
    if mode == "training" and full_reference:
        full = regime_flops(spec, stats, Trainability(), causal=causal, mode=mode, full_reference=False).breakdown
    return RegimeFlops(Breakdown("exact", components, options, tuple(notes)), by_part, tuple(w.adapted),
                       tuple(w.trained_linears), adapter_params, tuple(notes), full)


def exact_flops(spec: ModelSpec, stats: BatchStats, regime: Any = (), mode: str = "training",
                causal: str = "half") -> Breakdown:
    """THE exact breakdown of a run under its regime: ``regime`` is today's frozen-parts tuple, or a
    :class:`Trainability`. Whole-part regimes (``stage_level``) go through ``compute_flops(frozen=...)``
    unchanged, so their numbers are identical to a run without a stated regime; any finer regime is counted by
    :func:`regime_flops`."""
    from .breakdown import compute_flops

    if isinstance(regime, Trainability):
        if regime.stage_level:
            regime = tuple(s for s in STAGES if s in regime.frozen_stage_set())
        else:
            return regime_flops(spec, stats, regime, causal=causal, mode=mode, full_reference=False).breakdown
    return compute_flops(spec, stats, "exact", mode=mode, causal=causal, frozen=tuple(regime))
