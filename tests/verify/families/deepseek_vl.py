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

from .common import VOCAB, FamilyHarness, eager, finish_model, random_images, register, rotary_modules, text_ids

IMAGE_TOKEN = 990
SIZE = 32


def tiny_config(**over: Any):
    import transformers

    vision = dict(model_type="siglip_vision_model", hidden_size=32, intermediate_size=48, num_hidden_layers=2,
                  num_attention_heads=2, image_size=SIZE, patch_size=4)
    text = dict(model_type="llama", vocab_size=VOCAB, hidden_size=64, intermediate_size=96, num_hidden_layers=2,
                num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=4096, pad_token_id=0,
                bos_token_id=2, eos_token_id=1)
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
    import torch
    from transformers.models.deepseek_vl.image_processing_pil_deepseek_vl import DeepseekVLImageProcessorPil

    if video_sizes:
        raise ValueError("deepseek_vl has no video input")
    cfg = model.config
    gen = torch.Generator().manual_seed(seed)
    ids = text_ids(text_len, gen)
    media: dict = {"images_in_tower": 0, "visual_tokens": 0}
    inputs: dict = {}
    if image_sizes:
        s = cfg.vision_config.image_size
        out = DeepseekVLImageProcessorPil(size={"height": s, "width": s})(
            random_images(image_sizes, seed), return_tensors="pt", input_data_format="channels_last")
        per_image = (s // cfg.vision_config.patch_size) ** 2
        for _ in image_sizes:
            ids += [IMAGE_TOKEN] * per_image + text_ids(2, gen)
        media["images_in_tower"] = int(out["pixel_values"].shape[0])
        media["pixel_shape"] = tuple(out["pixel_values"].shape[1:])
        media["visual_tokens"] = per_image * len(image_sizes)
        inputs["pixel_values"] = out["pixel_values"].to(torch.float64)
    media["seq_len"] = len(ids)
    inputs.update(input_ids=torch.tensor([ids]), attention_mask=torch.ones(1, len(ids), dtype=torch.long),
                  use_cache=False)
    return inputs, media


HARNESS = register(FamilyHarness("deepseek_vl", tiny_config, build_model, part_modules, make_inputs))
