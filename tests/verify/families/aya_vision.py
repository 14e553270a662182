"""Aya Vision / Command A Vision (transformers ``aya_vision`` / ``cohere2_vision``; tower ``siglip``) harness.

Tiny config: SigLIP tower at tile 32 px, patch 4 -> 8x8 = 64 patches, no CLS, hidden 32, 2 layers, 2 heads,
MLP 48, ``vision_use_head`` False; projector = pixel shuffle 2 (64 -> 16 tokens of 128) -> [Aya: LayerNorm(128)]
-> Linear(128 -> 48) -> SwiGLU halves -> Linear(24 -> 64). LM (``cohere2``): hidden 64, 4 heads, 2 KV heads,
SwiGLU 96, four layers ``[sliding, sliding, sliding, full]`` with ``sliding_window`` 8 (eager attention
computes the full square in every layer), one LayerNorm per layer (parallel attention + MLP), tied head.

Inputs: Aya: ``GotOcr2ImageProcessorPil`` built locally (size 32, min 1 / max 6 tiles) called with
``AyaVisionProcessor.images_kwargs`` (``crop_to_patches=True``); Command A Vision: tile counts
from ``Cohere2VisionImageProcessor``'s own ``get_optimal_tiled_canvas`` (size 32, max 6 tiles, crop_to_patches by
class default; see :func:`hf_cohere2_vision_canvas` for why not the processor object), random tile pixels. Token layout as the
processors write it: Aya ``<start> [TILE_i <image>*16 for each non-global tile] TILE_GLOBAL <image>*16 <end>``
(markers as single text ids here: their tokenization is text, not placeholders); Command A Vision
``<boi> (<image>*16 <line break>) per tile <eoi>``.
"""

from __future__ import annotations

from typing import Any, Sequence

from .common import VOCAB, FamilyHarness, eager, finish_model, processor_images_kwargs, random_images, register, \
    rotary_modules, text_ids

IMAGE_TOKEN, START, END, TILE, TILE_GLOBAL = 990, 991, 992, 993, 994
SIZE = 32


def tiny_config(model_type: str = "aya_vision", **over: Any):
    import transformers

    vision = dict(model_type="siglip_vision_model", hidden_size=32, intermediate_size=48, num_hidden_layers=2,
                  num_attention_heads=2, image_size=SIZE, patch_size=4, vision_use_head=False)
    text = dict(model_type="cohere2", vocab_size=VOCAB, hidden_size=64, intermediate_size=96, num_hidden_layers=4,
                num_attention_heads=4, num_key_value_heads=2, sliding_window=8,
                layer_types=["sliding_attention"] * 3 + ["full_attention"], max_position_embeddings=4096,
                pad_token_id=0, bos_token_id=2, eos_token_id=1)
    vision.update(over.pop("vision", {}))
    text.update(over.pop("text", {}))
    kw = dict(vision_config=vision, text_config=text, downsample_factor=2, alignment_intermediate_size=48,
              image_token_id=IMAGE_TOKEN, tie_word_embeddings=True)
    kw.update(over)
    cls = transformers.AyaVisionConfig if model_type == "aya_vision" else transformers.Cohere2VisionConfig
    return cls(**kw)


def build_model(config, seed: int = 0):
    import torch
    import transformers

    eager(config)
    torch.manual_seed(seed)
    cls = (transformers.AyaVisionForConditionalGeneration if config.model_type == "aya_vision"
           else transformers.Cohere2VisionForConditionalGeneration)
    return finish_model(cls(config))


def part_modules(model) -> dict:
    inner = model.model
    return {"vision_tower": [inner.vision_tower], "projector": [inner.multi_modal_projector],
            "language_model": [inner.language_model, model.lm_head], "rope": rotary_modules(model)}


def image_processor(config, max_patches: int = 6, min_patches: int = 1):
    """Aya: transformers' ``GotOcr2ImageProcessorPil`` (called with AyaVisionProcessor's forced kwargs)."""
    from transformers.models.got_ocr2.image_processing_pil_got_ocr2 import GotOcr2ImageProcessorPil

    s = config.vision_config.image_size
    return GotOcr2ImageProcessorPil(size={"height": s, "width": s}, min_patches=min_patches,
                                    max_patches=max_patches, crop_to_patches=False)


def hf_cohere2_vision_canvas():
    """``get_optimal_tiled_canvas`` of transformers' ``image_processing_cohere2_vision.py``, executed from
    transformers' own source: the module imports torchvision at the top, which this CPU venv lacks (and
    cannot get without a CUDA torch), so its two pure numpy functions are compiled from the installed file."""
    import ast
    import functools
    import importlib.util
    from pathlib import Path

    import numpy as np

    origin = importlib.util.find_spec("transformers.models.cohere2_vision").origin
    path = Path(origin).parent / "image_processing_cohere2_vision.py"
    tree = ast.parse(path.read_text())
    wanted = {"get_all_supported_aspect_ratios", "get_optimal_tiled_canvas"}
    module = ast.Module(body=[n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name in wanted],
                        type_ignores=[])
    namespace: dict = {"np": np, "lru_cache": functools.lru_cache}
    exec(compile(module, str(path), "exec"), namespace)
    return namespace["get_optimal_tiled_canvas"]


def cohere2_vision_tiles(height: int, width: int, tile: int, max_patches: int, min_patches: int = 1) -> int:
    """Tiles ``Cohere2VisionImageProcessor`` makes of an image (crop_to_patches, its class default): the
    canvas transformers' function picks, plus the thumbnail when there is more than one tile
    (``crop_image_to_patches`` / ``get_number_of_image_patches``)."""
    if max_patches <= 1:
        return 1
    cols, rows = hf_cohere2_vision_canvas()((height, width), (tile, tile), min_patches, max_patches)
    n = int(cols) * int(rows)
    return n + 1 if n > 1 else n


def make_inputs(model, image_sizes: Sequence[tuple[int, int]] = (), video_sizes: Sequence = (), text_len: int = 8,
                seed: int = 1, max_patches: int = 6, min_patches: int = 1):
    import torch

    if video_sizes:
        raise ValueError("aya_vision / cohere2_vision have no video input")
    cfg = model.config
    gen = torch.Generator().manual_seed(seed)
    ids = text_ids(text_len, gen)
    media: dict = {"tiles": [], "visual_tokens": 0}
    inputs: dict = {}
    if image_sizes:
        s = cfg.vision_config.image_size
        if cfg.model_type == "aya_vision":
            from transformers import AyaVisionProcessor

            out = image_processor(cfg, max_patches, min_patches)(random_images(image_sizes, seed), return_tensors="pt",
                                                                 input_data_format="channels_last",
                                                                 **processor_images_kwargs(AyaVisionProcessor))
            tiles = [int(n) for n in out["num_patches"]]
            pixels = out["pixel_values"]
        else:  # tile counts from transformers' own canvas function; pixel content does not change FLOPs
            tiles = [cohere2_vision_tiles(h, w, s, max_patches, min_patches) for h, w in image_sizes]
            pixels = torch.randn(sum(tiles), 3, s, s, generator=gen)
        side = cfg.vision_config.image_size // cfg.vision_config.patch_size // cfg.downsample_factor
        per_tile = side * side
        for n in tiles:
            if cfg.model_type == "aya_vision":  # AyaVisionProcessor.replace_image_token
                ids.append(START)
                for _ in range(1, n):
                    ids += [TILE] + [IMAGE_TOKEN] * per_tile
                ids += [TILE_GLOBAL] + [IMAGE_TOKEN] * per_tile + [END] + text_ids(2, gen)
            else:  # Cohere2VisionProcessor.replace_image_token: boi, (tile tokens + line break) per tile, eoi
                ids += [START] + ([IMAGE_TOKEN] * per_tile + [TILE]) * n + [END] + text_ids(2, gen)
        media["tiles"] = tiles
        media["visual_tokens"] = per_tile * sum(tiles)
        inputs["pixel_values"] = pixels.to(torch.float64)
    media["seq_len"] = len(ids)
    inputs.update(input_ids=torch.tensor([ids]), attention_mask=torch.ones(1, len(ids), dtype=torch.long),
                  use_cache=False)
    return inputs, media


HARNESS = register(FamilyHarness("aya_vision", tiny_config, build_model, part_modules, make_inputs))
COHERE2_VISION = register(FamilyHarness("cohere2_vision", lambda **kw: tiny_config("cohere2_vision", **kw),
                                        build_model, part_modules, make_inputs))
