"""Trainability from what a run observed: the names of the parameters that require grad (pure).

A training callback can list ``[n for n, p in model.named_parameters() if p.requires_grad]``;
:func:`observed_trainability` maps those names onto the model's layout (:mod:`vlm_perf.arch.layout`):

* wrapper prefixes are dropped (``base_model.model.`` of a PeftModel, ``module.`` of DDP, ``_orig_mod.`` of
  ``torch.compile``, ``_fsdp_wrapped_module.`` / ``_checkpoint_wrapped_module.`` segments);
* LoRA / DoRA parameters (``lora_A``, ``lora_B``, ``lora_magnitude_vector``) belong to the adapter, whose shape
  comes from its ``adapter_config.json``; they are counted, not mapped;
* PEFT's ``X.modules_to_save.<adapter>.weight`` and ``X.base_layer.weight`` are module ``X``;
* every other name must belong to a laid-out module (a Linear, a norm, an embedding or position table); one that
  does not is an :class:`~vlm_perf.errors.UnsupportedModelError` naming it, never silently dropped.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Iterable

from ..errors import UnsupportedModelError
from .adapters import AdapterConfig
from .layout import AttnSub, Chain, Layer, Lin, MlpSub, Opaque, Params, layout
from .spec import ModelSpec
from .trainability import Trainability

_WRAPPERS = re.compile(r"(^|\.)(_fsdp_wrapped_module|_checkpoint_wrapped_module|_orig_mod)(?=\.)")
_ADAPTER = re.compile(r"\.(lora_A|lora_B|lora_magnitude_vector|lora_embedding_A|lora_embedding_B)(\.|$)")
_SAVED = re.compile(r"\.(modules_to_save\.[^.]+|base_layer|original_module)(?=\.)")


@dataclass(frozen=True)
class Observed:
    """The observed :class:`Trainability` and how many adapter parameters (tensors) were seen."""

    trainability: Trainability
    adapter_tensors: int


def layout_names(spec: ModelSpec) -> list[str]:
    """Every module name of the layout (Linears and parameter-only modules)."""
    names: list[str] = []

    def visit(op) -> None:
        if isinstance(op, (Lin, Params)):
            names.append(op.name)
        elif isinstance(op, AttnSub):
            for x in (op.norm, *op.projections, *op.qk_norms, *op.core_params, op.out, op.post_norm):
                if x is not None:
                    visit(x)
        elif isinstance(op, MlpSub):
            for x in (op.norm, *op.ins, op.out, op.post_norm):
                if x is not None:
                    visit(x)
        elif isinstance(op, Chain):
            for x in (op.norm, *op.linears):
                if x is not None:
                    visit(x)
        elif isinstance(op, Opaque):
            if op.norm is not None:
                names.append(op.norm.name)
            if op.name:
                names.append(op.name)
            for x in op.shared:  # laid-out Linears inside it (an MoE's shared expert): owners of their own
                visit(x)

    for stage in layout(spec):
        for op in stage.head + tuple(o for layer in stage.layers for o in layer.subs) + stage.tail:
            visit(op)
        for op in stage.dead:
            for o in (op.subs if isinstance(op, Layer) else (op,)):
                visit(o)
    return names


def canonical(name: str) -> str:
    """A parameter name without wrapper prefixes / segments (see the module docstring)."""
    n = _WRAPPERS.sub("", name)
    for prefix in ("base_model.model.", "module."):
        while n.startswith(prefix):
            n = n[len(prefix):]
    return _SAVED.sub("", n)


def observed_trainability(spec: ModelSpec, requires_grad: Iterable[str], adapter: AdapterConfig | None = None,
                          input_require_grads: bool = False) -> Observed:
    """The trainability a run observed (see the module docstring)."""
    known = sorted(layout_names(spec), key=len, reverse=True)
    modules: set[str] = set()
    biases: set[str] = set()
    linears = set(linear_names(spec))
    adapter_tensors = 0
    for raw in requires_grad:
        if _ADAPTER.search(raw):
            adapter_tensors += 1
            continue
        name = canonical(raw)
        owner = next((k for k in known if name == k or name.startswith(k + ".")), None)
        if owner is None:
            raise UnsupportedModelError(f"{spec.name}: trainable parameter {raw!r} belongs to no module of the "
                                        "model's layout, so its effect on the backward pass is unknown")
        if owner in linears and name == owner + ".bias":
            biases.add(owner)
        else:
            modules.add(owner)
    if adapter_tensors and adapter is None:
        raise UnsupportedModelError(f"{spec.name}: {adapter_tensors} LoRA parameters require grad but no adapter "
                                    "config was given (its adapter_config.json gives the ranks and targets)")
    return Observed(Trainability(trainable=(), adapter=adapter, input_require_grads=input_require_grads,
                                 modules=frozenset(modules), biases=frozenset(biases - modules)), adapter_tensors)


def linear_names(spec: ModelSpec) -> list[str]:
    """Names of the layout's Linears."""
    from .layout import names_of

    return [lin.name for _, lin in names_of(layout(spec))]
