"""``exact``: every matmul of the model's block inventory, counted the way autograd executes it."""

from __future__ import annotations

from ...arch.parts import STAGES
from ...arch.spec import ModelSpec
from ...errors import ConfigError
from ...stats.batch import BatchStats
from ..blocks import FlopsContext, inventory_terms
from ..breakdown import Breakdown, Options, component_names
from ..training import frozen_stages, training_flops
from dataclasses import replace

from .base import Convention, register_convention


def exact_terms(spec: ModelSpec, stats: BatchStats, options: Options):
    """Forward terms of every block of ``spec.blocks`` (vision first, then the LM)."""
    ctx = FlopsContext(causal=options.causal)
    return inventory_terms(spec.blocks, stats, ctx)


def model_stages(spec: ModelSpec) -> frozenset[str]:
    """The stages the model has parameters in."""
    return frozenset(b.part for b in spec.blocks)


def check_trainable(spec: ModelSpec, frozen: frozenset[str]) -> None:
    """Training with nothing trainable is a contradiction: refuse it (forward-only FLOPs are --mode forward)."""
    if not (model_stages(spec) - frozen):
        parts = ", ".join(s for s in STAGES if s in model_stages(spec))
        raise ConfigError(f"{spec.name}: every part it has ({parts}) is frozen, so a training step has no "
                          "backward pass; count it with mode 'forward' instead")


def _exact_components(spec: ModelSpec, stats: BatchStats, options: Options) -> dict:
    frozen = frozen_stages(options.frozen)
    if options.mode == "training":
        check_trainable(spec, frozen)
    components = dict.fromkeys(component_names(spec), 0)
    # a stage the model does not have (e.g. an audio encoder) has no weights: it never needs a gradient
    frozen = frozen | (frozenset(STAGES) - model_stages(spec))
    for term in exact_terms(spec, stats, options):
        flops = training_flops(term, frozen) if options.mode == "training" else term.forward
        components[term.component] = components[term.component] + flops
    return components


class _Exact(Convention):
    def compute(self, spec: ModelSpec, stats: BatchStats, options: Options) -> Breakdown:
        self.check(spec)
        notes = []
        if options.mode == "forward" and options.frozen:
            notes.append("frozen parts do not change forward-only FLOPs")
        if spec.audio is not None and isinstance(stats.audio_items, (int, float)) and not stats.audio_items:
            notes.append("no audio clips in these statistics: the audio encoder is counted 0 (give the clips' mel "
                         "frames: --audio-frames, or audio_frames in the metadata)")
        if spec.lm.sliding_window and options.causal == "half":
            notes.append(f"{len(spec.lm.sliding_layers)} sliding-window layers (window {spec.lm.sliding_window}) "
                         "counted as a windowed causal kernel computes them, from lm_tokens_sq_beyond_window "
                         "(statistics without it count them as full causal)")
        return Breakdown(self.name, _exact_components(spec, stats, options), options, tuple(notes))


EXACT = register_convention(_Exact(
    name="exact",
    source="vlm-perf; verified against torch.utils.flop_counter.FlopCounterMode on transformers' models",
    formula=("sum over every GEMM of the model's block inventory, 2*m*n*k: patch-embed conv, ViT qkv/proj/MLP "
             "(gated or plain from the config, CLS positions included), ViT attention per frame/tile "
             "(4*q_v*sum len^2) and per Qwen2.5-VL window (exact edge windows), projector/merger and deepstack "
             "mergers on merged tokens, LM projections, attention core (causal half by default), dense MLP, "
             "routed/shared experts, router, logits on the real vocabulary, MTP, an audio encoder's convolutions "
             "(on padded chunks), layers and head; training multiplies each GEMM "
             "by what autograd runs (see training.py)"),
    deviations=(),
    # the block inventory's own training rule (flops/training.py) applies, so compute() is overridden
    forward=lambda spec, stats, options: _exact_components(spec, stats, replace(options, mode="forward")),
    families=None,
    counts_audio=True,
))
