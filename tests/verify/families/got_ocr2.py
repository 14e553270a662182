"""GOT-OCR2 (transformers ``got_ocr2``; SAM / ViTDet tower) measurement harness.

Tiny config: SAM tower at image_size 32, patch 4 -> 8 x 8 grid, hidden 32, 2 heads, 3 layers (layer 1 global,
layers 0 and 2 in 3 x 3 windows: the grid is padded to 9 x 9, so padding is exercised), MLP 48, relative
positions, neck to 16 channels; projector convs 16 -> 32 -> 64 (8 -> 4 -> 2: 4 tokens per tile), Linear 64 -> 64;
Qwen2 LM hidden 64, 4 heads, 2 KV heads, SwiGLU 96, 2 layers, tied head.

Inputs: transformers' own ``GotOcr2ImageProcessorPil`` called with ``GotOcr2Processor.images_kwargs``
(crop_to_patches False) unless the case passes ``crop_to_patches=True`` (then min / max patches); the
processor's ``num_image_tokens`` placeholders per tile (here the 4 the projector yields) as
``GotOcr2Processor.replace_image_token`` writes them (``<img>`` ... ``</img>`` markers are text).
"""

from __future__ import annotations

from typing import Any, Sequence

from .common import (FamilyHarness, eager, finish_model, processor_images_kwargs, random_images, register,
                     rotary_modules, text_ids, tiny_text)

IMAGE_TOKEN, START, END = 990, 991, 992
SIZE = 32


def tiny_config(**over: Any):
    import transformers

    vision = dict(hidden_size=32, output_channels=16, num_hidden_layers=3, num_attention_heads=2, image_size=SIZE,
                  patch_size=4, mlp_dim=48, window_size=3, global_attn_indexes=[1])
    text = tiny_text("qwen2")
    vision.update(over.pop("vision", {}))
    text.update(over.pop("text", {}))
    kw = dict(vision_config=vision, text_config=text, image_token_index=IMAGE_TOKEN, tie_word_embeddings=True)
    kw.update(over)
    return transformers.GotOcr2Config(**kw)


def build_model(config, seed: int = 0):
    import torch
    import transformers

    eager(config)
    torch.manual_seed(seed)
    return finish_model(transformers.GotOcr2ForConditionalGeneration(config))


def part_modules(model) -> dict:
    inner = model.model
    return {"vision_tower": [inner.vision_tower], "projector": [inner.multi_modal_projector],
            "language_model": [inner.language_model, model.lm_head], "rope": rotary_modules(model)}


def tokens_per_tile(cfg) -> int:
    """The projector's output per tile, measured on transformers' own projector (a zero tile through it)."""
    import torch

    from transformers.models.got_ocr2.modeling_got_ocr2 import GotOcr2MultiModalProjector

    side = cfg.vision_config.image_size // cfg.vision_config.patch_size
    with torch.no_grad():
        out = GotOcr2MultiModalProjector(cfg)(torch.zeros(1, cfg.vision_config.output_channels, side, side))
    return int(out.shape[1])


def make_inputs(model, image_sizes: Sequence[tuple[int, int]] = (), video_sizes: Sequence = (), text_len: int = 8,
                seed: int = 1, crop_to_patches: bool = False, min_patches: int = 1, max_patches: int = 6):
    import torch
    from transformers import GotOcr2Processor
    from transformers.models.got_ocr2.image_processing_pil_got_ocr2 import GotOcr2ImageProcessorPil

    if video_sizes:
        raise ValueError("got_ocr2 has no video input")
    cfg = model.config
    gen = torch.Generator().manual_seed(seed)
    ids = text_ids(text_len, gen)
    media: dict = {"tiles": [], "visual_tokens": 0}
    inputs: dict = {}
    if image_sizes:
        s = cfg.vision_config.image_size
        kwargs = processor_images_kwargs(GotOcr2Processor)  # crop_to_patches False, 1 / 12 patches
        if crop_to_patches:  # what a caller passes at call time
            kwargs.update(crop_to_patches=True, min_patches=min_patches, max_patches=max_patches)
        out = GotOcr2ImageProcessorPil(size={"height": s, "width": s})(
            random_images(image_sizes, seed), return_tensors="pt", input_data_format="channels_last", **kwargs)
        tiles = [int(n) for n in out["num_patches"]]
        per_tile = tokens_per_tile(cfg)
        for n in tiles:  # GotOcr2Processor: <img> + num_image_tokens x num_patches placeholders + </img>
            ids += [START] + [IMAGE_TOKEN] * (per_tile * n) + [END] + text_ids(2, gen)
        media.update(tiles=tiles, visual_tokens=per_tile * sum(tiles), pixel_shape=tuple(out["pixel_values"].shape))
        inputs["pixel_values"] = out["pixel_values"].to(torch.float64)
    media["seq_len"] = len(ids)
    inputs.update(input_ids=torch.tensor([ids]), attention_mask=torch.ones(1, len(ids), dtype=torch.long),
                  use_cache=False)
    return inputs, media


HARNESS = register(FamilyHarness("got_ocr2", tiny_config, build_model, part_modules, make_inputs))
