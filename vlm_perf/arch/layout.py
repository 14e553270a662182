"""The block inventory laid out the way data flows, layer by layer, with Hugging Face module names (pure).

Whole-part freezing needs only the block inventory; finer regimes do not: whether a frozen weight's input
gradient runs depends on whether anything EARLIER in the graph trains (a LoRA adapter in LM layer 0, the
last four tower layers unfrozen), and an adapter config names modules (``...layers.3.self_attn.q_proj``).
:func:`layout` expands a :class:`~vlm_perf.arch.spec.ModelSpec` into one :class:`StageLayout` per stage
(tower, merger, deepstack mergers, audio, LM, in data-flow order), each a ``head`` (ops before the layers),
``layers`` (per layer: sublayers in order) and a ``tail``, in the vocabulary of
:mod:`vlm_perf.arch.blocks.laid` (:class:`Lin`, :class:`Params`, :class:`AttnSub`, :class:`MlpSub`,
:class:`Chain`, :class:`Opaque`).

This module is a generic walker: it knows no block kind. Each block of a stage, in inventory order, is placed by
its kind's ``@block_layout`` hook (filed beside the kind in :mod:`vlm_perf.arch.blocks`); the walker gathers the
heads and tails, fills each layer's slots (tower: ``layer``; LM: ``attention``, any ``extra`` weightless cores,
``mlp``, with the norms of the stage's norm block) and checks that every layer is filled once. A block with no
layout (its hook or its sublayer says None) makes the whole stage a list of :class:`Opaque` blocks: it trains or
freezes as a whole. The module names come from the family's row in :mod:`vlm_perf.arch.hf_names`.
"""

from __future__ import annotations

from typing import Any

from .blocks import Block
from .blocks.laid import (AttnSub, Chain, LayerFrame, Layer, LayoutContext, Lin, MlpSub, Opaque,
                          Params, Placed, StageLayout, place)
from .hf_names import (VERIFIED_TRANSFORMERS, module_names_known, named_model_types, names_for, names_verified_on,
                       transformers_version)
from .parts import AUDIO, DEEPSTACK_MERGER, LANGUAGE_MODEL, MERGER, STAGES, VISION_TOWER
from .spec import ModelSpec
from .trainability import MLP

__all__ = ["AttnSub", "Chain", "Lin", "Layer", "MlpSub", "Opaque", "Params", "StageLayout", "VERIFIED_TRANSFORMERS",
           "layout", "module_names", "module_names_known", "named_model_types", "names_of", "names_verified_on",
           "stage_ops", "transformers_version"]

# per stage: its per-layer slots in the order a layer runs them, and whether each layer has exactly one filler
_SLOTS: dict[str, tuple[tuple[str, bool], ...]] = {
    VISION_TOWER: (("layer", True),),
    LANGUAGE_MODEL: (("attention", True), ("extra", False), ("mlp", True)),
}


def layout(spec: ModelSpec) -> tuple[StageLayout, ...]:
    """Every stage the model has, in data-flow order (see the module docstring)."""
    names = names_for(spec)
    by_stage: dict[str, list[Block]] = {s: [] for s in STAGES}
    for b in spec.blocks:
        by_stage[b.part].append(b)
    out = []
    for stage in STAGES:
        blocks = by_stage[stage]
        if not blocks:
            continue
        if stage == AUDIO:  # an audio encoder: trains or freezes as a whole (no per-layer layout)
            out.append(_opaque_stage(AUDIO, blocks, spec.audio.num_layers if spec.audio else 0))
            continue
        ctx = LayoutContext(spec, stage, names, bool(names) or module_names_known(spec), _num_layers(spec, stage),
                            head_norms=list(names.tower_head_norms) if names and stage == VISION_TOWER else [])
        out.append(_stage(ctx, blocks) or _opaque_stage(stage, blocks, ctx.num_layers))
    return tuple(out)


def _num_layers(spec: ModelSpec, stage: str) -> int:
    if stage == VISION_TOWER:
        return spec.vision.depth if spec.vision else 0
    return spec.lm.num_layers if stage == LANGUAGE_MODEL else 0


def _opaque_stage(stage: str, blocks: list[Block], num_layers: int) -> StageLayout:
    return StageLayout(stage, num_layers, tail=tuple(Opaque(b, MLP) for b in blocks), expanded=False)


def _stage(ctx: LayoutContext, blocks: list[Block]) -> StageLayout | None:
    """Place every block, then build the layers; None when a block or a layer has no layout."""
    placed: list[Placed] = []
    for b in blocks:
        p = place(b, ctx)
        if p is None:
            return None
        if p.slot:
            ctx.taken.setdefault(p.slot, []).extend(p.layers)
            ctx.seen_layers = True
        placed.append(p)
    head = tuple(op for p in placed for op in p.head)
    if ctx.stage in (MERGER, DEEPSTACK_MERGER):
        return _projector_stage(ctx, head, tuple(t for p in placed for t in p.taps))
    layers = _layers(ctx, placed)
    if layers is None:
        return None
    live, dead = layers
    return StageLayout(ctx.stage, ctx.num_layers, head, live, tuple(op for p in placed for op in p.tail),
                       dead=dead + tuple(op for p in placed for op in p.dead))


def _layers(ctx: LayoutContext, placed: list[Placed]) -> tuple[tuple[Layer, ...], tuple[Layer, ...]] | None:
    """(live layers, forward-only layers after them), each layer's sublayers in slot order."""
    fillers = _fillers(ctx, placed)
    norms = next((p.norms for p in reversed(placed) if p.norms is not None), None)
    if fillers is None or (ctx.stage == LANGUAGE_MODEL and norms is None):
        return None  # a layer not filled once per slot; decoder layers are laid out around their norms
    live: list[Layer] = []
    dead: list[Layer] = []
    for i in range(ctx.num_layers):
        frame = LayerFrame(i, ctx, norms(i) if norms else None)
        owners = fillers.get(i, [])
        subs = [p.build(frame) if p.build else None for p in owners]
        if any(ops is None for ops in subs):
            return None
        layer = Layer(i, tuple(op for ops in subs if ops is not None for op in ops))
        (dead if any(p.forward_only for p in owners) else live).append(layer)
    if dead and live and dead[0].index < live[-1].index:
        return None  # forward-only layers run after the layers whose output is read
    return tuple(live), tuple(dead)


def _fillers(ctx: LayoutContext, placed: list[Placed]) -> dict[int, list[Placed]] | None:
    """Layer -> the blocks filling it, in the stage's slot order; None when a slot the stage lacks is used or a
    one-per-layer slot is not filled exactly once in every layer."""
    slots = _SLOTS.get(ctx.stage, ())
    order = {slot: k for k, (slot, _) in enumerate(slots)}
    if any(p.slot not in order for p in placed if p.layers):
        return None
    out: dict[int, list[Placed]] = {}
    for p in sorted(placed, key=lambda p: order.get(p.slot, 0)):  # stable: inventory order within a slot
        for i in p.layers:
            out.setdefault(i, []).append(p)
    for slot, single in slots:
        if single and any(sum(p.slot == slot for p in out.get(i, ())) != 1 for i in range(ctx.num_layers)):
            return None
    return out


def _projector_stage(ctx: LayoutContext, head: tuple[Any, ...], taps: tuple[int, ...]) -> StageLayout | None:
    """A projector stage: its ops in order; it needs a Linear chain or MLP. The deepstack mergers each read the
    tower layer their block names (``taps``, one per merger)."""
    if not any(isinstance(op, (Chain, MlpSub)) for op in head):
        return None
    if ctx.stage == DEEPSTACK_MERGER and len(taps) != len(head):
        return None
    return StageLayout(ctx.stage, 0, head=head, taps=taps)


def stage_ops(s: StageLayout) -> list[tuple[int | None, Any]]:
    """(layer index or None, op) of every op of a stage in order: head, layers, tail, then the forward-only ops."""
    out: list[tuple[int | None, Any]] = [(None, op) for op in s.head]
    out += [(layer.index, op) for layer in s.layers for op in layer.subs]
    out += [(None, op) for op in s.tail]
    for op in s.dead:
        out += [(op.index, o) for o in op.subs] if isinstance(op, Layer) else [(None, op)]
    return out


def module_names(stages: tuple[StageLayout, ...]) -> set[str]:
    """Every module name the layout knows: its Linears, parameter-only modules, blocks laid out whole and the
    Linears inside them (what an adapter config's ``target_modules`` can name)."""
    out = {lin.name for _, lin in names_of(stages)}

    def visit(op: Any) -> None:
        if isinstance(op, Params):
            out.add(op.name)
        elif isinstance(op, (AttnSub, MlpSub, Chain)):
            for x in op.members():
                visit(x)
        elif isinstance(op, Opaque):
            visit(op.norm)
            if op.name:
                out.add(op.name)
                out.update(f"{op.name}.{inner}" for inner in op.inner)
                out.update(f"{op.name}.{p.rsplit('.', 1)[0]}" for p, _ in op.params)

    for s in stages:
        for _, op in stage_ops(s):
            visit(op)
    return out


def names_of(stages: tuple[StageLayout, ...]) -> list[tuple[str, Lin]]:
    """(stage, Linear) of every Linear in the layout, in order (what an adapter config can target)."""
    out: list[tuple[str, Lin]] = []

    def visit(stage: str, op: Any) -> None:
        if isinstance(op, Lin):
            out.append((stage, op))
        elif isinstance(op, (AttnSub, MlpSub, Chain)):
            out.extend((stage, x) for x in op.members() if isinstance(x, Lin))
        elif isinstance(op, Opaque):
            for x in op.shared:
                visit(stage, x)

    for s in stages:
        for _, op in stage_ops(s):
            visit(s.stage, op)
    return out
