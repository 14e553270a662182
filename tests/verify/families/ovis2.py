"""Ovis2 (transformers ``ovis2``) measurement harness.

Tiny config: tower image_size 32, patch 4 -> 8 x 8 = 64 patches per tile, hidden 32, 2 layers, 2 heads, SwiGLU 48,
``hidden_stride`` 2 -> 16 folded tokens per tile; visual vocabulary 64 (5 indicator tokens: head Linear 128 -> 59);
visual embedding table 64 x 64; Qwen2 LM hidden 64, 4 heads, 2 KV heads, SwiGLU 96, 2 layers, vocab 1000, tied.

Inputs: transformers' own ``Ovis2ImageProcessorPil`` (size 32, ``crop_to_patches`` true, ``max_patches`` 6 unless
overridden: the checkpoint's tiling) and ``Ovis2Processor.replace_image_token`` for the placeholder run of each
image (its token strings mapped to the tiny ids below).
"""

from __future__ import annotations

import re
from types import SimpleNamespace
from typing import Any, Sequence

from .common import FamilyHarness, eager, finish_model, random_images, register, text_ids, tiny_text

IMAGE_TOKEN = 990  # <IMG_ATOM>
INDICATORS = (991, 992, 993, 994, 995)  # <IMG_START>, <IMG_GRID>, <IMG_COL>, <IMG_ROW>, <IMG_END>
TOKEN_IDS = dict(zip(("<IMG_ATOM>", "<IMG_START>", "<IMG_GRID>", "<IMG_COL>", "<IMG_ROW>", "<IMG_END>"),
                     (IMAGE_TOKEN,) + INDICATORS))
SIZE = 32
PROCESSOR = {"size": {"height": SIZE, "width": SIZE}, "crop_to_patches": True, "max_patches": 6}


def tiny_config(**over: Any):
    import transformers

    vision = dict(hidden_size=32, intermediate_size=48, num_hidden_layers=2, num_attention_heads=2, image_size=SIZE,
                  patch_size=4, hidden_stride=2, vocab_size=64, num_visual_indicator_tokens=5)
    text = tiny_text("qwen2")
    vision.update(over.pop("vision", {}))
    text.update(over.pop("text", {}))
    kw = dict(vision_config=vision, text_config=text, image_token_id=IMAGE_TOKEN, visual_indicator_token_ids=INDICATORS,
              hidden_size=text["hidden_size"], vocab_size=text["vocab_size"])
    kw.update(over)
    return transformers.Ovis2Config(**kw)


def build_model(config, seed: int = 0):
    import torch
    import transformers

    eager(config)
    torch.manual_seed(seed)
    return finish_model(transformers.Ovis2ForConditionalGeneration(config))


def part_modules(model) -> dict:
    inner = model.model
    return {"vision_tower": [inner.vision_tower], "projector": [inner.visual_embeddings_table],
            "language_model": [inner.language_model, model.lm_head],
            "rope": [m for _, m in model.named_modules() if "Rotary" in type(m).__name__]}


def placeholder_ids(grid: Sequence[int], per_tile: int) -> list[int]:
    """``Ovis2Processor.replace_image_token`` for one image of tile grid ``grid`` (rows, cols), as tiny ids."""
    from transformers.models.ovis2.processing_ovis2 import Ovis2Processor

    text = Ovis2Processor.replace_image_token(SimpleNamespace(image_seq_length=per_tile), {"grids": [_Grid(grid)]}, 0)
    return [TOKEN_IDS[t] for t in re.findall(r"<IMG_[A-Z]+>", text)]


class _Grid(list):
    def tolist(self) -> list:  # the processor reads a tensor row
        return list(self)


def make_inputs(model, image_sizes: Sequence[tuple[int, int]] = (), video_sizes: Sequence = (), text_len: int = 8,
                seed: int = 1, processor: dict | None = None):
    import torch
    from transformers.models.ovis2.image_processing_pil_ovis2 import Ovis2ImageProcessorPil

    if video_sizes:
        raise ValueError("ovis2 has no video input")
    vc = model.config.vision_config
    per_tile = (vc.image_size // vc.patch_size // vc.hidden_stride) ** 2
    gen = torch.Generator().manual_seed(seed)
    ids = text_ids(text_len, gen)
    media: dict = {"images_in_tower": 0, "visual_tokens": 0, "grids": []}
    inputs: dict = {}
    if image_sizes:
        proc = Ovis2ImageProcessorPil(**(PROCESSOR if processor is None else processor))
        out = proc(random_images(image_sizes, seed), return_tensors="pt", input_data_format="channels_last")
        for grid in out["grids"].tolist():
            run = placeholder_ids(grid, per_tile)
            ids += run + text_ids(2, gen)
            media["visual_tokens"] += len(run)
            media["grids"].append(tuple(grid))
        media["images_in_tower"] = int(out["pixel_values"].shape[0])
        media["pixel_shape"] = tuple(out["pixel_values"].shape[1:])
        inputs["pixel_values"] = out["pixel_values"].to(torch.float64)
    media["seq_len"] = len(ids)
    inputs.update(input_ids=torch.tensor([ids]), attention_mask=torch.ones(1, len(ids), dtype=torch.long),
                  use_cache=False)
    return inputs, media


HARNESS = register(FamilyHarness("ovis2", tiny_config, build_model, part_modules, make_inputs))
