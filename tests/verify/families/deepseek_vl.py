"""DeepSeek-VL (transformers ``deepseek_vl``; tower ``siglip``) measurement harness.

Tiny config: SigLIP tower at image_size 32, patch 4 -> 8x8 = 64 patches, hidden 32, 2 layers, 2 heads, MLP 48,
``vision_use_head`` as given (SigLIP's class default True: the pooling head runs, its output is discarded);
aligner Linear(32 -> 64) -> GELU -> Linear(64 -> 64); Llama LM hidden 64, 4 heads, 2 KV heads, SwiGLU 96,
2 layers, tied head.

Inputs: transformers' own ``DeepseekVLImageProcessorPil`` (size 32: longest side resized, padded to a square),
``num_image_tokens`` = 64 ``<image>`` placeholders per image as ``DeepseekVLProcessor`` writes them.
"""

from __future__ import annotations

from typing import Any, Sequence

from .common import FamilyHarness, eager, finish_model, one_square_inputs, register, rotary_modules, tiny_text

IMAGE_TOKEN = 990
SIZE = 32


def tiny_config(**over: Any):
    import transformers

    vision = dict(model_type="siglip_vision_model", hidden_size=32, intermediate_size=48, num_hidden_layers=2,
                  num_attention_heads=2, image_size=SIZE, patch_size=4)
    text = tiny_text()
    vision.update(over.pop("vision", {}))
    text.update(over.pop("text", {}))
    kw = dict(vision_config=vision, text_config=text, image_token_id=IMAGE_TOKEN)
    kw.update(over)
    return transformers.DeepseekVLConfig(**kw)


def build_model(config, seed: int = 0):
    import torch
    import transformers

    eager(config)
    torch.manual_seed(seed)
    return finish_model(transformers.DeepseekVLForConditionalGeneration(config))


def part_modules(model) -> dict:
    inner = model.model
    return {"vision_tower": [inner.vision_model], "projector": [inner.aligner],
            "language_model": [inner.language_model, model.lm_head], "rope": rotary_modules(model)}


def make_inputs(model, image_sizes: Sequence[tuple[int, int]] = (), video_sizes: Sequence = (), text_len: int = 8,
                seed: int = 1):
    from transformers.models.deepseek_vl.image_processing_pil_deepseek_vl import DeepseekVLImageProcessorPil

    if video_sizes:
        raise ValueError("deepseek_vl has no video input")
    s = model.config.vision_config.image_size
    return one_square_inputs(DeepseekVLImageProcessorPil(size={"height": s, "width": s}), image_sizes, text_len, seed,
                             IMAGE_TOKEN, (s // model.config.vision_config.patch_size) ** 2)


HARNESS = register(FamilyHarness("deepseek_vl", tiny_config, build_model, part_modules, make_inputs))
