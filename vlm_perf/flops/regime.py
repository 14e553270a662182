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

import re
import sys
from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any

from ..arch.adapters import ALL_LINEAR, AdapterConfig
from ..arch.layout import (VERIFIED_TRANSFORMERS, AttnSub, Chain, Layer, Lin, MlpSub, Opaque, Params, StageLayout,
                           layout, module_names, module_names_known, names_verified_on, stage_ops,
                           transformers_version)
from ..arch.blocks import MoEMLP
from ..arch.parts import AUDIO, DEEPSTACK_MERGER, LANGUAGE_MODEL, MERGER, STAGES, VISION_TOWER, stage_part_names
from ..arch.spec import ModelSpec
from ..arch.trainability import EMBEDDINGS, EVERYTHING, HEAD, NORMS, Trainability
from ..errors import ConfigError, UnsupportedModelError
from ..stats.batch import BatchStats
from .blocks import FlopsContext, inventory_terms
from .blocks.moe import moe_weight_forward
from .breakdown import Breakdown, Options, component_names
from .terms import INPUT_OWN, INPUT_PIXELS, INPUT_UPSTREAM, matmul

# what each FLOP is, for the per-part table
FORWARD, INPUT_GRAD, WEIGHT_GRAD = "forward", "input_grad", "weight_grad"
ADAPTER_FORWARD, ADAPTER_BACKWARD, DORA_EXTRA = "adapter_forward", "adapter_backward", "dora_extra"
CATEGORIES = (FORWARD, INPUT_GRAD, WEIGHT_GRAD, ADAPTER_FORWARD, ADAPTER_BACKWARD, DORA_EXTRA)
_MOE_TERMS = ("lm.routed_experts", "lm.router", "lm.shared_experts")  # the MoE terms, by component
_MOE_ROLES = {"lm.routed_experts": ("gate_up", "down"), "lm.router": ("router",)}  # MoE term -> wrapped roles
_PART = {VISION_TOWER: "vision_tower", MERGER: "projector", DEEPSTACK_MERGER: "projector",
         LANGUAGE_MODEL: "language_model", AUDIO: "audio"}


@dataclass(frozen=True)
class AdaptedModule:
    """One Linear an adapter sits on."""

    name: str
    stage: str
    rank: int
    n_in: int
    n_out: int
    stacks: int = 1  # a wrapped 3-D parameter: one low-rank pair per expert
    parameter: bool = False  # wrapped through PEFT's target_parameters (a parameter, not an nn.Module)


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
    saved_params: int = 0  # the part of ``adapter_params`` that is modules_to_save copies (base-sized modules)

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


class _Sum:
    """A sum of FLOPs terms. Numbers add at once; polars expressions (statistics as columns) are grouped by their
    structure and each distinct one enters the sum once, times how often it was added. The walk adds the same
    term once per identical layer, so a plain left-to-right sum made expression trees of ~300,000 characters per
    column on a 7B LoRA regime and the frame evaluation cost ~0.5 s per call; grouped, the value per row is the
    same (every term is an integer-valued FLOPs count)."""

    __slots__ = ("number", "exprs")

    def __init__(self) -> None:
        self.number: Any = 0
        self.exprs: dict[str, list] = {}

    def add(self, value: Any) -> None:
        pl = sys.modules.get("polars")
        if pl is None or not isinstance(value, pl.Expr):
            self.number = self.number + value
            return
        key = value.meta.serialize(format="json")
        if key in self.exprs:
            self.exprs[key][1] += 1
        else:
            self.exprs[key] = [value, 1]

    def value(self) -> Any:
        total = self.number
        for expr, n in self.exprs.values():
            total = total + (expr if n == 1 else n * expr)
        return total


class _Walker:
    def __init__(self, spec: ModelSpec, stats: BatchStats, t: Trainability, causal: str, training: bool,
                 forward_calls: Any):
        self.spec, self.stats, self.t, self.training = spec, stats, t, training
        self.ctx = FlopsContext(causal=causal)
        self.forward_calls = forward_calls
        self.acc: dict[str, dict[str, dict[str, _Sum]]] = defaultdict(lambda: defaultdict(lambda: defaultdict(_Sum)))
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
        self.acc[self.stage][component][category].add(value)

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
        if lin.pool > 1:  # LLaVA-NeXT-Video: video frames pooled pool x pool before this Linear
            video = self.stats.video_merged_tokens
            total = total - video + video // (lin.pool * lin.pool)
        return total

    def trains(self, layer: int | None, kind: str, name: str) -> bool:
        return self.t.weight_trains(self.stage, layer, kind, name, self.num_layers)

    # -------------------------------------------------------------- ops
    def params(self, p: Params | None, layer: int | None) -> bool:
        if p is None:
            return False
        self.refuse_parameter_target(p.name)
        if self.adapter is not None and p.kind == EMBEDDINGS and self.adapter.targets(p.name, is_linear=False):
            raise UnsupportedModelError(f"{self.spec.name}: the adapter targets {p.name} (an embedding table); "
                                        "LoRA on embeddings is not modelled")
        trains = self.trains(layer, p.kind, p.name)
        self.any_trains = self.any_trains or trains
        return trains

    def refuse_parameter_target(self, module: str) -> None:
        a = self.adapter
        if a is not None and a.target_parameters and any(a.targets_parameter(f"{module}.{p}") for p in ("weight", "bias")):
            raise UnsupportedModelError(f"{self.spec.name}: target_parameters wraps a parameter of {module}; only "
                                        "fused MoE expert stacks and routers are modelled there (target the module "
                                        "through target_modules instead)")

    def linear(self, lin: Lin, live_in: bool, layer: int | None) -> bool:
        """Count one Linear; returns whether its output requires a gradient."""
        self.refuse_parameter_target(lin.name)
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
        adapted = self.lora(lin, rows, fwd, needs_input)
        bias_trains = lin.bias and ((a is not None and (a.bias == "all" or (a.bias == "lora_only" and adapted)))
                                    or lin.name in self.t.biases)
        self.any_trains = self.any_trains or trains or adapted or bias_trains
        return live_in or trains or adapted or bias_trains

    def lora(self, lin: Lin, rows: Any, fwd: Any, needs_input: bool) -> bool:
        """Count the adapter on ``lin`` if the adapter targets it (its base matmul ``fwd`` over ``rows``); returns
        whether it does. A targeted Linear keeps its adapter even when its base weight is also unfrozen (PEFT
        injects it either way; only modules_to_save are never adapted, which ``targets`` handles)."""
        a = self.adapter
        if a is None or not lin.adaptable or not a.targets(lin.name, is_linear=not lin.conv, is_head=lin.head):
            return False
        if a.use_dora and lin.conv:
            raise UnsupportedModelError(f"{self.spec.name}: DoRA on {lin.name} (a convolution): PEFT's convolutional "
                                        "DoRA weight norm is not modelled; exclude it or use LoRA there")
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
        return True

    def core(self, sub: AttnSub, q: bool, k: bool, v: bool, p: bool = False) -> None:
        """``p``: a weight inside the softmax trains (gpt-oss sinks): the gradient of the probabilities, dP, runs."""
        for term in inventory_terms((sub.core,), self.stats, self.ctx):
            if term.weights:
                continue
            self.add(term.component, FORWARD, term.forward)
            if not self.training or not (q or k or v or p):
                continue
            if term.input_grad is not None:
                self.add(term.component, INPUT_GRAD, term.input_grad)
            elif self.ctx.causal == "half":  # fused kernel: dQ, dK, dV together
                self.add(term.component, INPUT_GRAD, 2 * term.forward)
            else:  # eager: QK^T and AV are two equal matmuls; each backward matmul costs one of them
                halves = int(v) + int(q or k or p) + int(q) + int(k)
                self.add(term.component, INPUT_GRAD, _halves(term.forward, halves))

    def attn(self, sub: AttnSub, live: bool, layer: int | None) -> bool:
        live_n = live or self.params(sub.norm, layer)
        outs = [self.linear(p, live_n, layer) for p in sub.projections]
        q, k, v = (outs[i] for i in sub.sources)
        if sub.qk_norms:
            q = self.params(sub.qk_norms[0], layer) or q
            k = self.params(sub.qk_norms[1], layer) or k
        p = any([self.params(x, layer) for x in sub.core_params])
        self.core(sub, q, k, v, p)
        out = self.linear(sub.out, q or k or v or p, layer)
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

    def opaque(self, op: Opaque, live: bool, layer: int | None) -> bool:
        """Count a block laid out whole: its terms' forward, weight and input gradients by the block's own
        trainability and by what reaches its input; its laid-out shared expert per Linear."""
        self.refuse_inner_targets(op)
        live_n = live or self.params(op.norm, layer)
        trains = self.trains(layer, op.kind, op.name)
        self.any_trains = self.any_trains or trains
        wrapped = self.wrapped_params(op)
        # the laid-out shared expert reads the block input like the routed experts; its output joins theirs by an
        # elementwise sum (and Qwen's sigmoid-gate product), so the block output needs a gradient if it does
        shared_live = False
        for sub in op.shared:
            shared_live = self.sub(sub, live_n, layer) or shared_live
        for term in inventory_terms((op.block,), self.stats, self.ctx):
            if op.shared and term.component == "lm.shared_experts":
                continue  # counted per Linear above
            self.add(term.component, FORWARD, term.forward)
            if self.training:
                self.opaque_backward(op, term, live_n, trains, wrapped)
        return live_n or trains or bool(wrapped) or shared_live

    def refuse_inner_targets(self, op: Opaque) -> None:
        """An adapter on a Linear inside a block laid out whole cannot be placed: refused."""
        a = self.adapter
        if a is None or not op.name:
            return
        for inner in op.inner:
            full = f"{op.name}.{inner}"
            if a.targets(full, is_linear=inner not in ("conv1d", "gate", "experts", "router")):
                raise UnsupportedModelError(
                    f"{self.spec.name}: the adapter targets {full}, inside a {op.block.kind} sublayer that has no "
                    "per-Linear layout (its adapter FLOPs and the gradient flow through it cannot be placed "
                    "exactly); exclude it (exclude_modules) or target other modules")

    def opaque_backward(self, op: Opaque, term: Any, live_n: bool, trains: bool, wrapped: dict[str, str]) -> None:
        """The backward of one term of a block laid out whole (``live_n``: its input needs a gradient)."""
        if term.weights and trains:
            self.add(term.component, WEIGHT_GRAD, term.forward)
        elif wrapped and term.component in _MOE_ROLES:
            # PEFT's parameter wrapper: the effective weight W + ΔW requires grad, so the block's own weight
            # gradient runs on the routed tokens (per expert as executed) for each wrapped stack
            for role in _MOE_ROLES[term.component]:
                if role in wrapped:
                    self.add(term.component, WEIGHT_GRAD, self.moe_matmul(op, role))
        if term.input_kind != INPUT_PIXELS:
            self.opaque_input_grad(op, term, live_n, trains, wrapped)

    def opaque_input_grad(self, op: Opaque, term: Any, live_n: bool, trains: bool, wrapped: dict[str, str]) -> None:
        """The input gradient of one term of a block laid out whole, when what it reads needs one (an MoE's down
        projections also when only its own weights' gradients need them)."""
        moe = isinstance(op.block, MoEMLP) and term.component in _MOE_TERMS
        if term.input_kind == INPUT_UPSTREAM:
            # an LM op reading the vision output directly (Mllama's cross-attention k/v): only a live vision stage
            reaches = self.vision_into_lm if self.stage == LANGUAGE_MODEL else live_n
        elif moe:
            reaches = live_n
        else:
            reaches = trains if term.input_kind == INPUT_OWN else (live_n or trains)
        if reaches:
            grad = term.input_grad if term.input_grad is not None else (
                term.forward if term.weights else 2 * term.forward)
            self.add(term.component, INPUT_GRAD, grad)
        elif moe and (trains or (term.component == "lm.routed_experts" and "gate_up" in wrapped)):
            # an MoE whose input needs no gradient: only the input gradient of each down projection, which
            # the gate/up weight gradient behind it needs (the router's and gate/up's input gradients go to
            # the block input: not run)
            self.add(term.component, INPUT_GRAD, self.moe_matmul(op, "down" if term.component ==
                                                                 "lm.routed_experts" else "shared_down"))

    def wrapped_params(self, op: Opaque) -> dict[str, str]:
        """role -> parameter key of the MoE parameters the adapter's ``target_parameters`` wrap in ``op``; each adds
        its low-rank delta ΔW = B·A over all E experts (``2·E·r·n_in·n_out``) and that delta's backward (grad of A
        and of B, 2x), per forward call. PEFT 0.21 folds an expert stack's delta into the weight with one ``baddbmm``
        inside a ``torch.nn.utils.parametrize`` parametrization, and ``register_parametrization`` evaluates it once
        more to check its shape (result discarded, no backward): an expert stack's delta runs twice forward
        (measured). The router's delta is precomputed once (its registration check is an add)."""
        a = self.adapter
        if a is None or not a.target_parameters or not op.name:
            return {}
        wrapped = {role: f"{op.name}.{suffix}" for suffix, role in op.params if a.targets_parameter(f"{op.name}.{suffix}")}
        if not wrapped:
            return {}
        m = op.block
        assert isinstance(m, MoEMLP)
        shapes = m.weight_shapes()
        for role, key in wrapped.items():
            stacks, n_out, n_in = shapes[role]
            r = a.rank(key)
            delta = stacks * matmul(n_out, r, n_in)
            component = "lm.router" if role == "router" else "lm.routed_experts"
            self.adapted.append(AdaptedModule(key, self.stage, r, n_in, n_out, stacks, parameter=True))
            self.add(component, ADAPTER_FORWARD, self.calls() * (delta if role == "router" else 2 * delta))
            if self.training:
                self.add(component, ADAPTER_BACKWARD, self.calls() * 2 * delta)
        self.any_trains = self.any_trains or bool(wrapped)
        return wrapped

    def moe_matmul(self, op: Opaque, role: str) -> Any:
        assert isinstance(op.block, MoEMLP)
        return moe_weight_forward(op.block, role, self.stats.lm_tokens)

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
            if self.adapter is not None:
                raise UnsupportedModelError(
                    f"{self.spec.name}: its {_PART[s.stage]} has block kinds without a per-Linear layout "
                    f"({', '.join(sorted({op.block.kind for op in s.tail}))}), so whether the adapter targets a module "
                    "inside it cannot be resolved; use trainability selectors for this model")
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
        if s.dead:  # run after the stage output was taken, never read: forward only, no liveness
            training, any_trains = self.training, self.any_trains
            self.training = False
            for op in s.dead:
                if isinstance(op, Layer):
                    self.layer(op, live)
                else:
                    self.sub(op, live, None)
            self.training, self.any_trains = training, any_trains
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
            into_lm = self.deepstack_walk(stages[DEEPSTACK_MERGER], tower_live, tower_after) or into_lm
        if AUDIO in stages:  # reads mel features (nothing upstream), feeds the LM
            live, _ = self.stage_walk(stages[AUDIO], False)
            into_lm = into_lm or live
        if LANGUAGE_MODEL in stages:
            self.vision_into_lm = into_lm
            self.stage_walk(stages[LANGUAGE_MODEL], into_lm or self.t.input_require_grads)


    def deepstack_walk(self, s: StageLayout, tower_live: bool, tower_after: list[bool]) -> bool:
        """The deepstack mergers, each reading the tower layer it taps; returns whether any output needs a
        gradient."""
        self.stage, self.num_layers = s.stage, 0
        into_lm = False
        if not s.expanded:
            self.check_uniform(s)
            into_lm, _ = self.stage_walk(s, tower_live)
        for chain, tap in zip(s.head, s.taps):
            tap_live = tower_after[tap] if tap < len(tower_after) else tower_live
            into_lm = self.chain(chain, tap_live) or into_lm  # chain first: always counted
        return into_lm


def _weights(stages: tuple[StageLayout, ...]) -> list[tuple[str, int | None, str, int]]:
    """(stage, layer, kind, number of layers) of every weight-bearing op of the layout."""
    out: list[tuple[str, int | None, str, int]] = []
    for s in stages:
        for layer, op in stage_ops(s):
            if isinstance(op, Opaque):
                out.append((s.stage, layer, op.kind, s.num_layers))
                ops: tuple[Any, ...] = (op.norm,) if op.norm is not None else ()
            else:
                ops = op.members() if isinstance(op, (AttnSub, MlpSub, Chain)) else (op,)
            out += [(s.stage, layer, x.kind, s.num_layers) for x in ops if isinstance(x, (Lin, Params))]
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


def _check_target_names(spec: ModelSpec, t: Trainability) -> list[str]:
    """The adapter's ``target_modules`` against the layout's module names (transformers names of the releases in
    ``VERIFIED_TRANSFORMERS``). A list entry (or a regex) that names no module of the layout names nothing in the
    model when its transformers release is a verified one (PEFT adapts nothing there: a note); on another release
    it may name a module the layout lacks, so the count would miss its adapter: an UnsupportedModelError naming
    the release and the entry. An unknown release (no ``transformers_version``, none installed) gets the note."""
    a = t.adapter
    assert a is not None
    tm = a.target_modules
    if tm is None:
        return []
    known = module_names(layout(spec))
    if tm == ALL_LINEAR:  # resolved by module type: names none
        unknown: list[str] = []
    elif isinstance(tm, str):
        unknown = [] if any(re.fullmatch(tm, n) for n in known) else [tm]
    else:
        unknown = [e for e in tm if e not in known and not any(n.endswith("." + e) for n in known)]
    version, where = transformers_version(spec)
    verified = "-".join(VERIFIED_TRANSFORMERS)
    if unknown and version and not names_verified_on(version):
        raise UnsupportedModelError(
            f"{spec.name}: the adapter's target_modules {unknown[0]!r} names no module of the {spec.model_type} layout "
            f"(transformers {verified} module names), and this model's module names are those of transformers "
            f"{version} ({where}), which the layout was not verified on: the module may exist there and its adapter "
            "cannot be counted")
    notes = [f"target_modules {e!r} names no module of this model (transformers {verified} module names): no "
             "adapter there" for e in unknown]
    if version and not names_verified_on(version):
        notes.append(f"adapter targets resolved with transformers {verified} module names; this model's are those "
                     f"of transformers {version} ({where})")
    elif unknown and not version:
        notes.append("the transformers release of this model is unknown (no transformers_version, none installed)")
    return notes


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
    if trainability.adapter is not None and getattr(spec, "audio", None) is not None:
        # PEFT target names (q_proj, fc1...) also match the audio encoder's modules, whose names are not modelled
        raise UnsupportedModelError(f"{spec.name}: adapters on a model with an audio encoder are not modelled (its "
                                    "modules' names are not in the layout); state whole frozen parts instead")
    if trainability.adapter is not None and spec.extra.get("encoder_decoder"):
        raise UnsupportedModelError(f"{spec.name}: adapters on an encoder-decoder LM are not modelled (its encoder, "
                                    "decoder and cross-attention Linears have no per-Linear layout in "
                                    "vlm_perf/arch/layout.py); state whole frozen parts instead")
    w = _Walker(spec, stats, trainability, causal, mode == "training", forward_calls)
    w.run()
    name_notes = _check_target_names(spec, trainability) if trainability.adapter is not None else []
    if mode == "training":
        _check_something_trains(spec, trainability, w)
    components, by_part = _sums(spec, w)
    notes = [f"regime: {trainability.describe()}", *name_notes]
    a = trainability.adapter
    adapter_params, saved, unsized = adapter_param_count(spec, a, w.adapted) if a is not None else (0, 0, [])
    if a is not None:
        notes += _adapter_notes(a, w.adapted, adapter_params, unsized)
    options = Options(mode=mode, causal=causal, frozen=())
    full = None
    if mode == "training" and full_reference:
        full = regime_flops(spec, stats, Trainability(), causal=causal, mode=mode, full_reference=False).breakdown
    return RegimeFlops(Breakdown("exact", components, options, tuple(notes)), by_part, tuple(w.adapted),
                       tuple(w.trained_linears), adapter_params, tuple(notes), full, saved)


def _check_something_trains(spec: ModelSpec, trainability: Trainability, w: _Walker) -> None:
    """A training step needs something that trains: an adapter that adapts nothing, or a regime that trains
    nothing, is a ConfigError."""
    a = trainability.adapter
    if not w.any_trains and a is not None and not w.adapted:
        where = f"{a.source}: " if a.source else "adapter: "
        targets = list(a.target_modules) if isinstance(a.target_modules, tuple) else a.target_modules
        raise ConfigError(f"{where}target_modules {targets!r} match no module of {spec.name}: the adapter adapts "
                          "nothing and nothing else trains (PEFT refuses such a config too); name modules the model "
                          "has (e.g. q_proj, v_proj) or state what trains")
    if not w.any_trains:
        raise ConfigError(f"{spec.name}: nothing trains under '{trainability.describe()}', so a training step has "
                          "no backward pass; count it with mode 'forward' instead")


def _sums(spec: ModelSpec, w: _Walker) -> tuple[dict[str, Any], dict[str, dict[str, Any]]]:
    """The walk's sums by component (every component of the model, 0 where none) and by part and category."""
    components: dict[str, Any] = dict.fromkeys(component_names(spec), 0)
    by_part: dict[str, dict[str, Any]] = {}
    for stage in STAGES:
        if stage not in w.acc:
            continue
        cats = by_part.setdefault(_PART[stage], {c: 0 for c in CATEGORIES})
        for component, per in w.acc[stage].items():
            for category, summed in per.items():
                value = summed.value()
                components[component] = components[component] + value
                cats[category] = cats[category] + value
    return components, by_part


def _adapter_notes(a: AdapterConfig, adapted: list[AdaptedModule], adapter_params: int, unsized: list[str]
                   ) -> list[str]:
    """What the adapter adapted, its parameter count, and what of it is counted how."""
    per_part: dict[str, int] = {}
    for m in adapted:
        per_part[_PART[m.stage]] = per_part.get(_PART[m.stage], 0) + 1
    where = ", ".join(f"{n} in the {p.replace('_', ' ')}" for p, n in per_part.items()) or "none"
    notes = [f"{len(adapted)} Linears adapted ({a.describe()}): {where}; {adapter_params:,} trainable adapter "
             "parameters (PEFT's count: low-rank pairs" + (", DoRA magnitudes" if a.use_dora else "")
             + (", modules_to_save copies" if a.modules_to_save else "")
             + (", biases" if a.bias != "none" else "") + ")"]
    if unsized:
        notes.append(f"the adapter parameter count omits {len(unsized)} weight(s) whose size the layout does not "
                     f"carry (e.g. {unsized[0]}): it is a lower bound")
    wrapped = [m for m in adapted if m.parameter]
    if wrapped:
        notes.append(f"{len(wrapped)} MoE parameters wrapped through target_parameters: the low-rank delta over "
                     "every expert once per forward call, and the experts' weight gradient on the routed tokens")
    if a.quantized_base:
        notes.append("QLoRA: base matmuls counted at the dequantised weights' FLOPs; the dequantisation "
                     "(elementwise, twice per Linear per step) is not counted")
    if a.use_dora:
        notes.append("DoRA: the weight-norm term (low-rank update through an identity) is counted once per "
                     "forward call per adapted Linear; the norm itself is elementwise and not counted")
    return notes


def adapter_param_count(spec: ModelSpec, a: AdapterConfig, adapted: Any) -> tuple[int, int, list[str]]:
    """The parameters PEFT makes trainable for adapter ``a`` (``sum(p.numel())`` over the peft-wrapped model's
    trainable parameters when nothing else trains), how many of them are ``modules_to_save`` copies, and the
    weights the count leaves out because the layout does not size them. ``adapted``: the walk's
    :class:`AdaptedModule` list.

    * each adapted Linear: ``lora_A`` (n_in -> r; a convolution's kernel volume in) and ``lora_B`` (r -> n_out);
      DoRA adds its magnitude, one value per output feature (peft/tuners/lora/dora.py, ``lora_magnitude_vector``);
    * each wrapped parameter (``target_parameters``): ``lora_A`` r·E x n_in and ``lora_B`` n_out x r·E;
    * a ``modules_to_save`` module: PEFT trains a copy of all of it;
    * ``bias='all'``: every bias of the model (Linears and LayerNorms); ``'lora_only'``: the adapted Linears'."""
    total = sum(m.stacks * m.rank * (m.n_in + m.n_out) + (m.n_out if a.use_dora and not m.parameter else 0)
                for m in adapted)
    names = {m.name for m in adapted if not m.parameter}
    unsized: list[str] = []
    saved = [0]

    def visit(op: Any) -> int:
        if op is None:
            return 0
        if isinstance(op, Lin):
            if a.saves(op.name):
                saved[0] += op.n_in * op.n_out + (op.n_out if op.bias else 0)
                return op.n_in * op.n_out + (op.n_out if op.bias else 0)
            bias = op.bias and (a.bias == "all" or (a.bias == "lora_only" and op.name in names))
            return op.n_out if bias else 0
        if isinstance(op, Params):
            if a.saves(op.name) or (a.bias == "all" and op.kind == NORMS):
                size = op.numel if a.saves(op.name) else op.bias
                if size is None:
                    unsized.append(op.name)
                saved[0] += (size or 0) if a.saves(op.name) else 0
                return size or 0
            return 0
        if isinstance(op, Opaque):
            if op.name and a.saves(op.name):
                saved[0] += op.block.params()
                return op.block.params() + visit(op.norm)
            if a.bias == "all":
                unsized.append(f"biases inside {op.name or op.block.kind}")
            return visit(op.norm) + sum(visit(x) for x in op.shared)
        if isinstance(op, Layer):
            return sum(visit(x) for x in op.subs)
        if isinstance(op, (AttnSub, MlpSub, Chain)):
            return sum(visit(x) for x in op.members())
        raise TypeError(op)

    if a.modules_to_save or a.bias != "none":
        for s in layout(spec):
            total += sum(visit(op) for op in (*s.head, *s.layers, *s.tail, *s.dead))
    return total, saved[0], unsized


def exact_flops(spec: ModelSpec, stats: BatchStats, regime: Any = (), mode: str = "training",
                causal: str = "half") -> Breakdown:
    """THE exact breakdown of a run under its regime: ``regime`` is today's frozen-parts tuple, or a
    :class:`Trainability`. Whole-part regimes (``stage_level``) go through ``compute_flops(frozen=...)``
    unchanged, so their numbers are identical to a run without a stated regime; any finer regime is counted by
    :func:`regime_flops`."""
    from .breakdown import compute_flops

    if isinstance(regime, Trainability):
        if regime.stage_level:
            regime = stage_part_names(regime.frozen_stage_set())
        else:
            return regime_flops(spec, stats, regime, causal=causal, mode=mode, full_reference=False).breakdown
    return compute_flops(spec, stats, "exact", mode=mode, causal=causal, frozen=tuple(regime))
