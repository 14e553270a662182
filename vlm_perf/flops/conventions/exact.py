"""``exact``: every matmul of the architecture, counted the way autograd executes it."""

from __future__ import annotations

from ...arch.spec import ModelSpec
from ...stats.batch import BatchStats
from ..breakdown import COMPONENTS, Breakdown, Options
from ..language import language_terms
from ..training import frozen_stages, training_multiplier
from ..vision import vision_terms
from .base import Convention


def exact_terms(spec: ModelSpec, stats: BatchStats, options: Options):
    causal_factor = 0.5 if options.causal == "half" else 1
    terms = language_terms(spec.lm, stats, causal_factor)
    if spec.vision is not None:
        terms = vision_terms(spec.vision, stats) + terms
    return terms


def _exact_components(spec: ModelSpec, stats: BatchStats, options: Options) -> dict:
    frozen = frozen_stages(options.frozen)
    components = {name: 0 for name in COMPONENTS if spec.is_vlm or not name.startswith("vision.")}
    for term in exact_terms(spec, stats, options):
        factor = training_multiplier(term, frozen) if options.mode == "training" else 1
        components[term.component] = components[term.component] + factor * term.forward
    return components


class _Exact(Convention):
    def compute(self, spec: ModelSpec, stats: BatchStats, options: Options) -> Breakdown:
        notes = []
        if options.mode == "forward" and options.frozen:
            notes.append("frozen parts do not change forward-only FLOPs")
        return Breakdown(self.name, _exact_components(spec, stats, options), options, tuple(notes))


EXACT = _Exact(
    name="exact",
    source="vlm-perf; verified against torch.utils.flop_counter.FlopCounterMode on transformers' models",
    formula=("sum over every GEMM of 2*m*n*k: patch-embed conv, ViT qkv/proj/MLP (gated or plain from the "
             "config), ViT attention per frame (4*q_v*sum t*(h*w)^2) and per Qwen2.5-VL window (exact edge "
             "windows), merger and deepstack mergers on merged tokens, LM projections, attention core "
             "(causal half by default), dense MLP, routed/shared experts, router, logits on the real "
             "vocabulary, MTP; training multiplies each GEMM by what autograd runs (see training.py)"),
    deviations=(),
    training=lambda spec, stats, options: _exact_components(spec, stats, options),
)
