"""Harness for the training-regime checks: a transformers VLM, optionally wrapped by ``peft``, measured under
FlopCounterMode per part (forward and backward), WITHOUT touching ``requires_grad`` (the regime under test
decides it; a forward-only count runs under :func:`~tests.verify.measure.forward_only`, which restores it), and the
library's ``regime_flops`` for the same batch.

The peft model runs in train mode (DoRA's per-forward weight-norm term is cached in eval mode); every tiny
config has zero attention dropout and adapters use ``lora_dropout=0`` unless a test says otherwise.
"""

from __future__ import annotations

import contextlib
from typing import Any

from .measure import _make_counter_class, forward_only, part_modules


def measure_regime(model, inputs: dict, parts: dict | None = None, training: bool = True) -> dict[str, dict]:
    """{"forward": {part: flops}, "backward": {part: flops}, "total": Global} for one forward (+ backward of
    ``logits.mean()``); ``model`` may be a PeftModel (parts default to the Qwen-VL split of its base model)."""
    import torch

    base = model.get_base_model() if hasattr(model, "get_base_model") else model
    counter = _make_counter_class()(base, parts=parts if parts is not None else part_modules(base))
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    model.train()
    for p in model.parameters():
        p.grad = None
    ctx = contextlib.nullcontext() if training else forward_only(model)
    try:
        with ctx, counter:
            out = model(**inputs)
            if training:
                out.logits.mean().backward()
    finally:
        torch.set_num_threads(threads)
    fw = {p: n for (ph, p), n in counter.counts.items() if ph == "forward"}
    bw = {p: n for (ph, p), n in counter.counts.items() if ph == "backward"}
    assert sum(fw.values()) + sum(bw.values()) == counter.get_total_flops()
    assert fw.get("other", 0) == 0 and bw.get("other", 0) == 0, (fw, bw)
    return {"forward": fw, "backward": bw, "total": counter.get_total_flops()}


def measured_parts(m: dict, training: bool = True) -> dict[str, int]:
    """Measured FLOPs per library part (``rope`` dropped: the rotary tables' tiny matmuls are not model FLOPs)."""
    names = {"tower": "vision_tower", "merger": "projector", "lm": "language_model"}
    out = {}
    for short, long in names.items():
        for key in (short, long):  # the Qwen harness names parts short, the family harnesses long
            if key in m["forward"] or key in m["backward"]:
                out[long] = m["forward"].get(key, 0) + (m["backward"].get(key, 0) if training else 0)
        out.setdefault(long, 0)
    return out


def peft_trainable_params(model) -> int:
    """PEFT's own count of what the adapter trains: the elements of every parameter requiring a gradient in the
    peft-wrapped model (what ``print_trainable_parameters`` reports as trainable)."""
    return sum(p.numel() for p in model.parameters() if p.requires_grad)


def peft_adapted_names(model) -> set[str]:
    """Module names (relative to the base model) that carry a LoRA adapter."""
    from peft.tuners.lora import LoraLayer

    base = model.get_base_model()
    return {name for name, mod in base.named_modules() if isinstance(mod, LoraLayer)}


def family_case(family: str, image_sizes, processor: dict, seed: int = 0):
    """(model, inputs, library spec, library stats) of a tiny ``family`` model (tests/verify/families harness) on
    HF-processed images; the library derives the same media with its own processor rule (checked)."""
    from vlm_perf.arch import spec_from_config
    from vlm_perf.arch.families import FAMILIES
    from vlm_perf.stats import BatchStats

    from .families import harness

    h = harness(family)
    model = h.build_model(h.tiny_config(), seed)
    inputs, media = h.make_inputs(model, image_sizes=image_sizes, video_sizes=(), text_len=8, seed=seed + 1)
    spec = spec_from_config(model.config.to_dict(), name=f"tiny-{family}", processor=processor)
    lib_media = [FAMILIES[spec.family].media.image(spec, hh, ww) for hh, ww in image_sizes]
    assert sum(m.visual_tokens for m in lib_media) == media["visual_tokens"]
    stats = BatchStats.from_batch(seq_lens=[media["seq_len"]], image_grids=[m.grid for m in lib_media], spec=spec)
    return model, inputs, spec, stats, h


def library_regime(config_dict: dict, seq_lens, image_grids, trainability, video_grids=(), mode: str = "training",
                   processor: dict | None = None, name: str = "tiny") -> Any:
    from vlm_perf.arch import spec_from_config
    from vlm_perf.flops.regime import regime_flops
    from vlm_perf.stats import BatchStats

    spec = spec_from_config(config_dict, name=name, **({"processor": processor} if processor else {}))
    stats = BatchStats.from_batch(seq_lens=list(seq_lens), image_grids=list(image_grids),
                                  video_grids=list(video_grids), spec=spec)
    return regime_flops(spec, stats, trainability, causal="full", mode=mode)
