"""Mistral 3 / Mistral-Small-3.x (transformers ``mistral3``; tower ``pixtral``) measurement harness.

Tiny config: Pixtral tower patch 4, hidden 32, 2 layers, 2 heads (head_dim 16), gated SiLU MLP 48, 2D RoPE,
no biases; projector = RMSNorm(32) -> patch merger (2x2 unfold -> Linear(128 -> 32), no bias) ->
Linear(32 -> 64) -> GELU -> Linear(64 -> 64) (``multimodal_projector_bias`` False as the 24B config). LM
``mistral``: hidden 64, 4 heads, 2 KV heads, head_dim 16, 2 layers, ``sliding_window`` None (Mistral-Small-3.1;
set one to exercise the Mistral-style window, which eager attention ignores for FLOPs anyway).

Inputs: ``PixtralImageProcessorPil`` built locally with ``longest_edge`` 64 and, as ``PixtralProcessor._process_images``
does, ``patch_size = patch * spatial_merge_size`` (8 px): images scaled down (never up) to fit 64, then each side
rounded up to a multiple of 8; the batch is zero-padded to the largest H and W. Tokens as ``PixtralProcessor``:
per image rows x (cols [IMG] + one [IMG_BREAK]), the last [IMG_BREAK] replaced by [IMG_END]. The Pixtral tower
runs the patch conv on the padded batch and then ONE attention sequence over all images' patches (block-diagonal
mask): eager attention computes the square of the joined sequence.
"""

from __future__ import annotations

from typing import Any, Sequence

from .common import VOCAB, FamilyHarness, eager, finish_model, random_images, register, rotary_modules, text_ids

IMAGE_TOKEN, IMG_BREAK, IMG_END = 990, 991, 992
LONGEST_EDGE = 64


#: the tiny Pixtral tower and Mistral LM (also the llava harness's Pixtral variant)
PIXTRAL_VISION = dict(model_type="pixtral", hidden_size=32, intermediate_size=48, num_hidden_layers=2,
                      num_attention_heads=2, head_dim=16, num_channels=3, image_size=LONGEST_EDGE, patch_size=4,
                      hidden_act="silu", rope_theta=10000.0)
MISTRAL_TEXT = dict(model_type="mistral", vocab_size=VOCAB, hidden_size=64, intermediate_size=96, num_hidden_layers=2,
                    num_attention_heads=4, num_key_value_heads=2, head_dim=16, max_position_embeddings=4096,
                    sliding_window=None, bos_token_id=None, eos_token_id=None, pad_token_id=None)


def tiny_config(**over: Any):
    import transformers

    vision, text = dict(PIXTRAL_VISION), dict(MISTRAL_TEXT)
    vision.update(over.pop("vision", {}))
    text.update(over.pop("text", {}))
    kw = dict(vision_config=vision, text_config=text, image_token_index=IMAGE_TOKEN, spatial_merge_size=2,
              multimodal_projector_bias=False, projector_hidden_act="gelu", vision_feature_layer=-1,
              tie_word_embeddings=False)
    kw.update(over)
    return transformers.Mistral3Config(**kw)


def build_model(config, seed: int = 0):
    import torch
    import transformers

    eager(config)
    torch.manual_seed(seed)
    return finish_model(transformers.Mistral3ForConditionalGeneration(config))


def part_modules(model) -> dict:
    inner = model.model
    return {"vision_tower": [inner.vision_tower], "projector": [inner.multi_modal_projector],
            "language_model": [inner.language_model, model.lm_head], "rope": rotary_modules(model)}


def image_processor(config, longest_edge: int = LONGEST_EDGE):
    from transformers.models.pixtral.image_processing_pil_pixtral import PixtralImageProcessorPil

    step = config.vision_config.patch_size * config.spatial_merge_size  # PixtralProcessor._process_images
    return PixtralImageProcessorPil(size={"longest_edge": longest_edge}, patch_size={"height": step, "width": step})


def make_inputs(model, image_sizes: Sequence[tuple[int, int]] = (), video_sizes: Sequence = (), text_len: int = 8,
                seed: int = 1, longest_edge: int = LONGEST_EDGE):
    """``longest_edge``: the processor's size bound (tiny 64; Mistral-Small-3.1 ships 1540)."""
    import torch

    if video_sizes:
        raise ValueError("mistral3 has no video input")
    cfg = model.config
    step = cfg.vision_config.patch_size * cfg.spatial_merge_size
    gen = torch.Generator().manual_seed(seed)
    ids = text_ids(text_len, gen)
    media: dict = {"resized": [], "visual_tokens": 0}
    inputs: dict = {}
    if image_sizes:
        out = image_processor(cfg, longest_edge)(random_images(image_sizes, seed), return_tensors="pt",
                                   input_data_format="channels_last")
        resized = [tuple(int(x) for x in s) for s in out["image_sizes"]]
        for h, w in resized:
            rows, cols = h // step, w // step
            run = ([IMAGE_TOKEN] * cols + [IMG_BREAK]) * rows
            run[-1] = IMG_END
            ids += run + text_ids(2, gen)
            media["visual_tokens"] += rows * cols
        media["resized"] = resized
        media["padded_batch"] = tuple(out["pixel_values"].shape[-2:])
        inputs.update(pixel_values=out["pixel_values"].to(torch.float64), image_sizes=out["image_sizes"])
    media["seq_len"] = len(ids)
    inputs.update(input_ids=torch.tensor([ids]), attention_mask=torch.ones(1, len(ids), dtype=torch.long),
                  use_cache=False)
    return inputs, media


HARNESS = register(FamilyHarness("mistral3", tiny_config, build_model, part_modules, make_inputs))
