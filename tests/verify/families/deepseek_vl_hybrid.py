"""DeepSeek-VL hybrid (transformers ``deepseek_vl_hybrid``; towers ``siglip`` + ``sam``) measurement harness.

Tiny config: SigLIP at image_size 32, patch 4 -> 8 x 8 = 64 patches, hidden 32, 2 layers, 2 heads, MLP 48
(pooling head as given: SigLIP's class default True); SAM at image_size 64, patch 4 -> 16 x 16 grid, hidden 32,
2 heads, 3 layers (layer 1 global, read by the second neck; layers 0 and 2 in 3 x 3 windows on the grid padded to
18 x 18), MLP hidden x mlp_ratio 4 = 128, neck to 8 channels; high_res_vision_proj: resize to 32, convs 8 -> 16 ->
32 (32 -> 16 -> 8: 64 tokens); aligner Linear 32 -> 32 ‖ Linear 32 -> 32, GELU, Linear 64 -> 64; Llama LM hidden
64, 4 heads, 2 KV heads, SwiGLU 96, 2 layers, tied head.

Inputs: transformers' own ``DeepseekVLHybridImageProcessorPil`` (size 32, high_res_size 64: longest side resized,
padded to a square, twice), ``num_image_tokens`` = 64 ``<image>`` placeholders per image as
``DeepseekVLHybridProcessor`` writes them.
"""

from __future__ import annotations

from typing import Any, Sequence

from .common import FamilyHarness, eager, finish_model, one_square_inputs, register, rotary_modules, tiny_text

IMAGE_TOKEN = 990
SIZE, HIGH = 32, 64


def tiny_config(**over: Any):
    import transformers

    vision = dict(model_type="siglip_vision_model", hidden_size=32, intermediate_size=48, num_hidden_layers=2,
                  num_attention_heads=2, image_size=SIZE, patch_size=4)
    high = dict(model_type="sam_vision_model", hidden_size=32, output_channels=8, num_hidden_layers=3,
                num_attention_heads=2, image_size=HIGH, patch_size=4, window_size=3, global_attn_indexes=[1])
    text = tiny_text()
    vision.update(over.pop("vision", {}))
    high.update(over.pop("high", {}))
    text.update(over.pop("text", {}))
    kw = dict(vision_config=vision, high_res_vision_config=high, text_config=text, image_token_id=IMAGE_TOKEN)
    kw.update(over)
    return transformers.DeepseekVLHybridConfig(**kw)


def build_model(config, seed: int = 0):
    import torch
    import transformers

    eager(config)
    config.high_res_vision_config._attn_implementation = "eager"
    torch.manual_seed(seed)
    return finish_model(transformers.DeepseekVLHybridForConditionalGeneration(config))


def part_modules(model) -> dict:
    inner = model.model
    return {"vision_tower": [inner.vision_model, inner.high_res_vision_model, inner.high_res_vision_neck,
                             inner.high_res_vision_proj],
            "projector": [inner.aligner],
            "language_model": [inner.language_model, model.lm_head], "rope": rotary_modules(model)}


def loose_params(model, part: str) -> list:
    """``high_res_vision_alpha`` sits on the model itself: frozen with the vision tower."""
    return [model.model.high_res_vision_alpha] if part == "vision_tower" else []


def make_inputs(model, image_sizes: Sequence[tuple[int, int]] = (), video_sizes: Sequence = (), text_len: int = 8,
                seed: int = 1):
    from transformers.models.deepseek_vl_hybrid.image_processing_pil_deepseek_vl_hybrid import (
        DeepseekVLHybridImageProcessorPil)

    if video_sizes:
        raise ValueError("deepseek_vl_hybrid has no video input")
    cfg = model.config
    s, hs = cfg.vision_config.image_size, cfg.high_res_vision_config.image_size
    processor = DeepseekVLHybridImageProcessorPil(size={"height": s, "width": s},
                                                  high_res_size={"height": hs, "width": hs})
    per_image = (s // cfg.vision_config.patch_size) ** 2
    return one_square_inputs(processor, image_sizes, text_len, seed, IMAGE_TOKEN, per_image,
                             extra={"high_res_pixel_values": "high_res_shape"})


HARNESS = register(FamilyHarness("deepseek_vl_hybrid", tiny_config, build_model, part_modules, make_inputs,
                                 loose_params=loose_params))
