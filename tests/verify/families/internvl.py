"""InternVL3 / InternVL3.5 (transformers ``internvl``; image processor ``got_ocr2``) measurement harness.

Tiny config: 32-px tiles, patch 4 -> 8x8 = 64 patches + 1 CLS per tile in the tower; CLS dropped, pixel
shuffle 0.5 -> 4x4 = 16 tokens per tile (``image_seq_length`` 16); projector LayerNorm(4*32) ->
Linear(128->64) -> GELU -> Linear(64->64). QK-norm on (InternViT-6B style) and attention_bias on so every
structural feature is present. LM: Qwen2 (InternVL3) by default, Qwen3 (InternVL3.5) with
``text_model_type="qwen3"``, Qwen3-MoE (InternVL3.5-30B-A3B / 241B-A28B) with ``text_model_type="qwen3_moe"``
(tiny: 4 experts of width 24, top-2, every layer).

Inputs: ``GotOcr2ImageProcessorPil`` built locally with the tile size / min / max tiles passed explicitly,
called with ``InternVLProcessor.images_kwargs`` (``crop_to_patches=True``: InternVL always tiles, whatever
preprocessor_config.json says). Each image becomes ``<img> <IMG_CONTEXT>*(16*tiles) </img>`` in input_ids
as ``InternVLProcessor`` writes it.
"""

from __future__ import annotations

from typing import Any, Sequence

from .common import VOCAB, FamilyHarness, eager, finish_model, processor_images_kwargs, random_images, register, \
    rotary_modules, text_ids

IMAGE_TOKEN, IMG_START, IMG_END = 990, 991, 992
TILE = 32  # px


def tiny_config(text_model_type: str = "qwen2", **over: Any):
    import transformers

    vision = dict(hidden_size=32, num_hidden_layers=2, num_attention_heads=2, intermediate_size=48,
                  image_size=[TILE, TILE], patch_size=[4, 4], attention_bias=True, use_qk_norm=True,
                  norm_type="layer_norm", use_mean_pooling=False)
    text = dict(model_type=text_model_type, vocab_size=VOCAB, hidden_size=64, intermediate_size=96,
                num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=4096,
                bos_token_id=None, eos_token_id=None, pad_token_id=None)
    if text_model_type in ("qwen3", "qwen3_moe"):
        text["head_dim"] = 16
    if text_model_type == "qwen3_moe":
        text.update(num_experts=4, num_experts_per_tok=2, moe_intermediate_size=24, decoder_sparse_step=1,
                    mlp_only_layers=[])
    vision.update(over.pop("vision", {}))
    text.update(over.pop("text", {}))
    kw = dict(vision_config=vision, text_config=text, image_token_id=IMAGE_TOKEN, image_seq_length=16,
              downsample_ratio=0.5, vision_feature_layer=-1, vision_feature_select_strategy="default",
              tie_word_embeddings=False)
    kw.update(over)
    return transformers.InternVLConfig(**kw)


def build_model(config, seed: int = 0):
    import torch
    import transformers

    moe = getattr(config.text_config, "num_experts", 0) or 0  # InternVL3.5-30B-A3B / 241B: qwen3_moe LM
    eager(config, experts=bool(moe))
    torch.manual_seed(seed)
    model = finish_model(transformers.InternVLForConditionalGeneration(config))
    if moe:  # random routers: non-trivial routing
        with torch.no_grad():
            for layer in model.model.language_model.layers:
                gate = getattr(layer.mlp, "gate", None)
                if gate is not None:
                    gate.weight.normal_(0, 0.5)
    return model


def part_modules(model) -> dict:
    inner = model.model
    return {"vision_tower": [inner.vision_tower], "projector": [inner.multi_modal_projector],
            "language_model": [inner.language_model, model.lm_head], "rope": rotary_modules(model)}


def image_processor(config, min_patches: int = 1, max_patches: int = 6):
    from transformers.models.got_ocr2.image_processing_pil_got_ocr2 import GotOcr2ImageProcessorPil

    h, w = config.vision_config.image_size
    return GotOcr2ImageProcessorPil(size={"height": h, "width": w}, min_patches=min_patches,
                                    max_patches=max_patches, crop_to_patches=False)  # as *-hf checkpoints ship it


def make_inputs(model, image_sizes: Sequence[tuple[int, int]] = (), video_sizes: Sequence = (), text_len: int = 8,
                seed: int = 1, min_patches: int = 1, max_patches: int = 6):
    import torch
    from transformers import InternVLProcessor

    if video_sizes:
        raise NotImplementedError("internvl harness: videos not built (frames are 1-tile images)")
    gen = torch.Generator().manual_seed(seed)
    proc = image_processor(model.config, min_patches, max_patches)
    ids = text_ids(text_len, gen)
    media: dict = {"tiles": [], "visual_tokens": 0}
    inputs: dict = {}
    if image_sizes:
        out = proc(random_images(image_sizes, seed), return_tensors="pt", input_data_format="channels_last",
                   **processor_images_kwargs(InternVLProcessor))
        tiles = [int(n) for n in out["num_patches"]]
        media["tiles"] = tiles
        per_tile = model.config.image_seq_length
        for n in tiles:
            ids += [IMG_START] + [IMAGE_TOKEN] * (per_tile * n) + [IMG_END] + text_ids(3, gen)
        media["visual_tokens"] = per_tile * sum(tiles)
        inputs["pixel_values"] = out["pixel_values"].to(torch.float64)
        media["pixel_values_shape"] = tuple(out["pixel_values"].shape)
    media["seq_len"] = len(ids)
    inputs.update(input_ids=torch.tensor([ids]), attention_mask=torch.ones(1, len(ids), dtype=torch.long),
                  use_cache=False)
    return inputs, media


HARNESS = register(FamilyHarness("internvl", tiny_config, build_model, part_modules, make_inputs))
