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

from .common import VOCAB, FamilyHarness, eager, finish_model, random_images, register, rotary_modules, text_ids

IMAGE_TOKEN = 990
SIZE, HIGH = 32, 64


def tiny_config(**over: Any):
    import transformers

    vision = dict(model_type="siglip_vision_model", hidden_size=32, intermediate_size=48, num_hidden_layers=2,
                  num_attention_heads=2, image_size=SIZE, patch_size=4)
    high = dict(model_type="sam_vision_model", hidden_size=32, output_channels=8, num_hidden_layers=3,
                num_attention_heads=2, image_size=HIGH, patch_size=4, window_size=3, global_attn_indexes=[1])
    text = dict(model_type="llama", vocab_size=VOCAB, hidden_size=64, intermediate_size=96, num_hidden_layers=2,
                num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=4096, pad_token_id=0,
                bos_token_id=2, eos_token_id=1)
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
    import torch
    from transformers.models.deepseek_vl_hybrid.image_processing_pil_deepseek_vl_hybrid import (
        DeepseekVLHybridImageProcessorPil)

    if video_sizes:
        raise ValueError("deepseek_vl_hybrid has no video input")
    cfg = model.config
    gen = torch.Generator().manual_seed(seed)
    ids = text_ids(text_len, gen)
    media: dict = {"images_in_tower": 0, "visual_tokens": 0}
    inputs: dict = {}
    if image_sizes:
        s, hs = cfg.vision_config.image_size, cfg.high_res_vision_config.image_size
        out = DeepseekVLHybridImageProcessorPil(size={"height": s, "width": s},
                                                high_res_size={"height": hs, "width": hs})(
            random_images(image_sizes, seed), return_tensors="pt", input_data_format="channels_last")
        per_image = (s // cfg.vision_config.patch_size) ** 2
        for _ in image_sizes:
            ids += [IMAGE_TOKEN] * per_image + text_ids(2, gen)
        media["images_in_tower"] = int(out["pixel_values"].shape[0])
        media["pixel_shape"] = tuple(out["pixel_values"].shape[1:])
        media["high_res_shape"] = tuple(out["high_res_pixel_values"].shape)
        media["visual_tokens"] = per_image * len(image_sizes)
        inputs["pixel_values"] = out["pixel_values"].to(torch.float64)
        inputs["high_res_pixel_values"] = out["high_res_pixel_values"].to(torch.float64)
    media["seq_len"] = len(ids)
    inputs.update(input_ids=torch.tensor([ids]), attention_mask=torch.ones(1, len(ids), dtype=torch.long),
                  use_cache=False)
    return inputs, media


HARNESS = register(FamilyHarness("deepseek_vl_hybrid", tiny_config, build_model, part_modules, make_inputs,
                                 loose_params=loose_params))
