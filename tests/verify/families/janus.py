"""Janus (transformers ``janus``; understanding path) measurement harness.

Tiny config: Janus vision tower at image_size 32, patch 4 -> 8 x 8 = 64 patches, hidden 32, 2 layers, 2 heads,
MLP 32 x mlp_ratio 1.5 = 48; aligner depth 2: Linear 32 -> 64, GELU, Linear 64 -> 64; Llama LM hidden 64, 4
heads, 2 KV heads, SwiGLU 96, 2 layers, tied head; a small VQ-VAE (base 32 channels, multipliers 1, 2, one res
block, latent 32, 64 codes of 8) and generation aligner / head, stored but never run on understanding data.

Inputs: transformers' own ``JanusImageProcessorPil`` (size 32: longest side resized, padded to a square),
``num_image_tokens`` = 64 ``<image>`` placeholders per image between ``<begin_of_image>`` / ``<end_of_image>``
(text) as ``JanusProcessor`` writes them.
"""

from __future__ import annotations

from typing import Any, Sequence

from .common import FamilyHarness, eager, finish_model, one_square_inputs, register, rotary_modules, tiny_text

IMAGE_TOKEN, BOI, EOI = 990, 991, 992
SIZE = 32


def tiny_config(**over: Any):
    import transformers

    vision = dict(hidden_size=32, num_hidden_layers=2, num_attention_heads=2, image_size=SIZE, patch_size=4,
                  mlp_ratio=1.5, projection_dim=64, depth=2, num_image_tokens=64)
    vq = dict(embed_dim=8, num_embeddings=64, latent_channels=32, base_channels=32, channel_multiplier=[1, 2],
              num_res_blocks=1, projection_dim=64, num_hidden_layers=2, image_token_embed_dim=64)
    text = tiny_text()
    vision.update(over.pop("vision", {}))
    vq.update(over.pop("vq", {}))
    text.update(over.pop("text", {}))
    kw = dict(vision_config=vision, vq_config=vq, text_config=text, image_token_id=IMAGE_TOKEN)
    kw.update(over)
    return transformers.JanusConfig(**kw)


def build_model(config, seed: int = 0):
    import torch
    import transformers

    eager(config)
    torch.manual_seed(seed)
    return finish_model(transformers.JanusForConditionalGeneration(config))


def part_modules(model) -> dict:
    inner = model.model
    return {"vision_tower": [inner.vision_model, inner.vqmodel, inner.generation_embeddings,
                             inner.generation_aligner, inner.generation_head],
            "projector": [inner.aligner],
            "language_model": [inner.language_model, model.lm_head], "rope": rotary_modules(model)}


def make_inputs(model, image_sizes: Sequence[tuple[int, int]] = (), video_sizes: Sequence = (), text_len: int = 8,
                seed: int = 1):
    from transformers.models.janus.image_processing_pil_janus import JanusImageProcessorPil

    if video_sizes:
        raise ValueError("janus has no video input")
    s = model.config.vision_config.image_size
    per_image = model.config.vision_config.num_image_tokens  # JanusProcessor.num_image_tokens
    return one_square_inputs(JanusImageProcessorPil(size={"height": s, "width": s}), image_sizes, text_len, seed,
                             IMAGE_TOKEN, per_image, before=[BOI], after=[EOI])


HARNESS = register(FamilyHarness("janus", tiny_config, build_model, part_modules, make_inputs))
