"""ERNIE-4.5-VL-MoE (transformers ``ernie4_5_vl_moe``) measurement harness.

Tiny config: tower patch 4, hidden 32, 2 layers, 2 heads, MLP 48, merge 2 (temporal 2); resampler D = 128; LM hidden
64, 4 heads, 2 KV heads, 3 layers (dense MLP 96, then 2 modality-MoE layers: 4 experts top-2, text width 32, vision
width 16, 2 shared experts -> a shared MLP of 64; head_dim 16, mrope_section [3, 3, 2]), vocab 1000, tied head; eager attention and experts.

Inputs: images through transformers' own ``Ernie4_5_VLMoeImageProcessorPil`` (patch 4, merge 2: factor 8; pixel
bounds 8² .. 8²·64); videos as ``video_grids`` (T, H, W) patch grids of random pixels (the video processor needs
torchvision, which the verified stack lacks; T even, as it pads). Token ids as ``Ernie4_5_VLMoeProcessor`` writes
them: per item its start token, one placeholder per LM visual token, its end token; ``mm_token_type_ids`` marks the
placeholders, ``moe_mm_token_type_ids`` the placeholders and the start / end tokens (``create_moe_mm_token_type_ids``).
"""

from __future__ import annotations

from typing import Any, Sequence

from .common import VOCAB, FamilyHarness, eager, finish_model, random_images, register, text_ids

IMAGE, IMAGE_START, IMAGE_END, VIDEO, VIDEO_START, VIDEO_END = 990, 991, 992, 993, 994, 995
PATCH, MERGE = 4, 2
BOUNDS = {"shortest_edge": 8 * 8, "longest_edge": 8 * 8 * 64}


def tiny_config(**over: Any):
    import transformers

    vision = dict(depth=2, hidden_size=32, num_heads=2, intermediate_size=48, patch_size=PATCH,
                  spatial_merge_size=MERGE, temporal_merge_size=2)
    text = dict(vocab_size=VOCAB, hidden_size=64, intermediate_size=96, num_hidden_layers=3, num_attention_heads=4,
                num_key_value_heads=2, moe_intermediate_size=[32, 16], moe_k=2, moe_num_experts=4,
                moe_num_shared_experts=2, max_position_embeddings=4096,
                rope_parameters={"rope_type": "default", "rope_theta": 500000.0, "mrope_section": [3, 3, 2]}, pad_token_id=0, bos_token_id=2, eos_token_id=1)
    vision.update(over.pop("vision", {}))
    text.update(over.pop("text", {}))
    kw = dict(vision_config=vision, text_config=text, image_token_id=IMAGE, image_start_token_id=IMAGE_START,
              image_end_token_id=IMAGE_END, video_token_id=VIDEO, video_start_token_id=VIDEO_START,
              video_end_token_id=VIDEO_END)
    kw.update(over)
    return transformers.Ernie4_5_VLMoeConfig(**kw)


def build_model(config, seed: int = 0):
    import torch
    import transformers

    eager(config, experts=True)
    torch.manual_seed(seed)
    return finish_model(transformers.Ernie4_5_VLMoeForConditionalGeneration(config))


def part_modules(model) -> dict:
    inner = model.model
    return {"vision_tower": [inner.vision_tower], "projector": [inner.resampler_model],
            "language_model": [inner.language_model, model.lm_head],
            "rope": [m for _, m in model.named_modules() if "Rotary" in type(m).__name__]}


def make_inputs(model, image_sizes: Sequence[tuple[int, int]] = (), video_sizes: Sequence = (), text_len: int = 8,
                seed: int = 1, video_grids: Sequence[tuple[int, int, int]] = ()):
    import torch
    from transformers.models.ernie4_5_vl_moe.image_processing_pil_ernie4_5_vl_moe import (
        Ernie4_5_VLMoeImageProcessorPil)

    if video_sizes:
        raise ValueError("give ernie4_5_vl_moe videos as video_grids (its video processor needs torchvision)")
    gen = torch.Generator().manual_seed(seed)
    ids = text_ids(text_len, gen)
    media: dict = {"image_grids": [], "video_grids": [], "visual_tokens": 0}
    inputs: dict = {}
    m2 = MERGE * MERGE
    if image_sizes:
        proc = Ernie4_5_VLMoeImageProcessorPil(patch_size=PATCH, merge_size=MERGE, size=BOUNDS)
        out = proc(random_images(image_sizes, seed), return_tensors="pt", input_data_format="channels_last")
        for t, h, w in out["image_grid_thw"].tolist():
            run = [IMAGE_START] + [IMAGE] * (t * h * w // m2) + [IMAGE_END]
            ids += run + text_ids(2, gen)
            media["image_grids"].append((t, h, w))
            media["visual_tokens"] += len(run)
        inputs.update(pixel_values=out["pixel_values"].to(torch.float64), image_grid_thw=out["image_grid_thw"])
    if video_grids:
        rows = sum(t * h * w for t, h, w in video_grids)
        for t, h, w in video_grids:
            run = [VIDEO_START] + [VIDEO] * (t * h * w // m2 // 2) + [VIDEO_END]
            ids += run + text_ids(2, gen)
            media["video_grids"].append((t, h, w))
            media["visual_tokens"] += len(run)
        inputs.update(pixel_values_videos=torch.randn(rows, 3 * PATCH * PATCH, generator=gen, dtype=torch.float64),
                      video_grid_thw=torch.tensor(list(video_grids)))
    ids_t = torch.tensor([ids])
    mm = torch.zeros_like(ids_t)
    mm[ids_t == IMAGE], mm[ids_t == VIDEO] = 1, 2
    moe = mm.clone()
    moe[(ids_t == IMAGE_START) | (ids_t == IMAGE_END)] = 1
    moe[(ids_t == VIDEO_START) | (ids_t == VIDEO_END)] = 2
    media["seq_len"] = len(ids)
    inputs.update(input_ids=ids_t, attention_mask=torch.ones(1, len(ids), dtype=torch.long), mm_token_type_ids=mm,
                  moe_mm_token_type_ids=moe, use_cache=False)
    return inputs, media


HARNESS = register(FamilyHarness("ernie4_5_vl_moe", tiny_config, build_model, part_modules, make_inputs))
