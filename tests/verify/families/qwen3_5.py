"""Qwen3.5 (``qwen3_5``) and Qwen3.5-MoE (``qwen3_5_moe``) measurement harnesses.

Tiny config: tower = Qwen3-VL-style without deepstack: Conv3d patch embed (patch 2, temporal 2, bias),
learned 4x4 position grid (bilinear resampling, not counted), 2 blocks of hidden 32, 2 heads, fused qkv,
MLP 32->64->32; merger LayerNorm -> 4x32 -> Linear(128->128) -> GELU -> Linear(128->64). LM: hidden 64,
4 layers ``[linear, linear, linear, full]`` (``full_attention_interval`` 4 as released); full attention
with 4 heads of head_dim 16 and the output gate (q_proj 64 -> 2*64), 2 KV heads, partial rotary 0.5;
gated-delta-net layers with 2 key heads x 8, 4 value heads x 8, conv kernel 4. MoE: every layer 8
experts of width 24, top-2, one shared expert of width 32 with its sigmoid gate.

FlopCounterMode on the delta rule counts the chunked (64) torch fallback's matmuls, the depthwise conv1d
(and, in backward, over-counts its grad-weight by ``groups``: ``PartMeasurement.parts`` removes that by
default), not the triangular solves; see docs/families-notes.md.

Inputs: images through ``Qwen2VLImageProcessorPil`` (the class transformers maps ``qwen3_5`` to) with
patch 2 / merge 2 / temporal 2 and pixel bounds passed explicitly; token layout as ``Qwen3VLProcessor``:
``<vision_start> <image>*n <vision_end>``, mm_token_type_ids 1. Videos: the Qwen3-VL video processor
needs torchvision, so videos are passed as patch grids ``video_grids=[(t, h, w)]`` with random patches,
one ``<vision_start> <video>*(h*w/4) <vision_end>`` run per temporal patch after 2 timestamp tokens.
"""

from __future__ import annotations

from typing import Any, Sequence

from .common import VOCAB, FamilyHarness, eager, finish_model, random_images, register, rotary_modules, text_ids

IMAGE_TOKEN, VIDEO_TOKEN, VISION_START, VISION_END = 990, 991, 992, 993
PIXELS = dict(min_pixels=4 * 4 * 4, max_pixels=4 * 4 * 400)


def tiny_config(moe: bool = False, **over: Any):
    import transformers

    vision = dict(depth=2, hidden_size=32, intermediate_size=64, num_heads=2, in_channels=3, patch_size=2,
                  spatial_merge_size=2, temporal_patch_size=2, out_hidden_size=64, num_position_embeddings=16)
    rope = {"rope_type": "default", "rope_theta": 10000.0, "mrope_section": [2, 1, 1], "mrope_interleaved": True,
            "partial_rotary_factor": 0.5}
    text = dict(vocab_size=VOCAB, hidden_size=64, intermediate_size=96, num_hidden_layers=4, num_attention_heads=4,
                num_key_value_heads=2, head_dim=16, linear_conv_kernel_dim=4, linear_key_head_dim=8,
                linear_value_head_dim=8, linear_num_key_heads=2, linear_num_value_heads=4,
                layer_types=["linear_attention"] * 3 + ["full_attention"], max_position_embeddings=4096,
                rope_parameters=rope, bos_token_id=None, eos_token_id=None, pad_token_id=None)
    if moe:
        text.pop("intermediate_size")
        text.update(num_experts=8, num_experts_per_tok=2, moe_intermediate_size=24,
                    shared_expert_intermediate_size=32)
    vision.update(over.pop("vision", {}))
    text.update(over.pop("text", {}))
    kw = dict(vision_config=vision, text_config=text, image_token_id=IMAGE_TOKEN, video_token_id=VIDEO_TOKEN,
              vision_start_token_id=VISION_START, vision_end_token_id=VISION_END, tie_word_embeddings=False)
    kw.update(over)
    return (transformers.Qwen3_5MoeConfig if moe else transformers.Qwen3_5Config)(**kw)


def build_model(config, seed: int = 0):
    import torch
    import transformers

    moe = config.model_type == "qwen3_5_moe"
    eager(config, experts=moe)
    torch.manual_seed(seed)
    cls = transformers.Qwen3_5MoeForConditionalGeneration if moe else transformers.Qwen3_5ForConditionalGeneration
    model = finish_model(cls(config))
    if moe:  # random routers: non-trivial routing
        with torch.no_grad():
            for layer in model.model.language_model.layers:
                gate = getattr(layer.mlp, "gate", None)
                if gate is not None:
                    gate.weight.normal_(0, 0.5)
    return model


def part_modules(model) -> dict:
    v = model.model.visual
    return {"vision_tower": [v.patch_embed, v.pos_embed, *v.blocks], "projector": [v.merger],
            "language_model": [model.model.language_model, model.lm_head], "rope": rotary_modules(model)}


def image_processor(config, pixels: dict | None = PIXELS):
    """``pixels=None``: the Qwen2VLImageProcessor class defaults (Qwen2-VL's bounds; a Qwen3.5 checkpoint's
    preprocessor_config.json sets its own)."""
    from transformers.models.qwen2_vl.image_processing_pil_qwen2_vl import Qwen2VLImageProcessorPil

    vc = config.vision_config
    size = {} if pixels is None else {"size": {"shortest_edge": pixels["min_pixels"],
                                               "longest_edge": pixels["max_pixels"]}}
    return Qwen2VLImageProcessorPil(patch_size=vc.patch_size, temporal_patch_size=vc.temporal_patch_size,
                                    merge_size=vc.spatial_merge_size, **size)


def make_inputs(model, image_sizes: Sequence[tuple[int, int]] = (), video_sizes: Sequence = (), text_len: int = 8,
                seed: int = 1, video_grids: Sequence[tuple[int, int, int]] = (), pixels: dict | None = PIXELS):
    import torch

    if video_sizes:
        raise NotImplementedError("qwen3_5 harness: the Qwen3-VL video processor needs torchvision; "
                                  "pass video_grids=[(t, h, w)] in patches instead")
    cfg = model.config
    vc = cfg.vision_config
    m2 = vc.spatial_merge_size**2
    gen = torch.Generator().manual_seed(seed)
    ids = text_ids(text_len, gen)
    types = [0] * text_len
    media: dict = {"image_grids": [], "video_grids": [tuple(g) for g in video_grids], "visual_tokens": 0}
    inputs: dict = {}

    def run(token, kind, n):
        ids.extend([VISION_START] + [token] * n + [VISION_END])
        types.extend([0] + [kind] * n + [0])
        media["visual_tokens"] += n

    if image_sizes:
        out = image_processor(cfg, pixels)(random_images(image_sizes, seed), return_tensors="pt",
                                   input_data_format="channels_last")
        grids = [tuple(int(x) for x in g) for g in out["image_grid_thw"]]
        for t, h, w in grids:
            run(IMAGE_TOKEN, 1, t * h * w // m2)
            ids.extend(text_ids(3, gen))
            types.extend([0] * 3)
        media["image_grids"] = grids
        inputs["pixel_values"] = out["pixel_values"].to(torch.float64)
        inputs["image_grid_thw"] = out["image_grid_thw"]
    if video_grids:
        for t, h, w in video_grids:
            for _ in range(t):
                ids.extend(text_ids(2, gen))
                types.extend([0, 0])
                run(VIDEO_TOKEN, 2, h * w // m2)
        patch_dim = vc.in_channels * vc.temporal_patch_size * vc.patch_size**2
        n = sum(t * h * w for t, h, w in video_grids)
        inputs["pixel_values_videos"] = torch.randn(n, patch_dim, generator=gen, dtype=torch.float64)
        inputs["video_grid_thw"] = torch.tensor([list(g) for g in video_grids])
    media["seq_len"] = len(ids)
    inputs.update(input_ids=torch.tensor([ids]), mm_token_type_ids=torch.tensor([types], dtype=torch.int32),
                  attention_mask=torch.ones(1, len(ids), dtype=torch.long), use_cache=False)
    return inputs, media


def _moe_config(**over):
    return tiny_config(moe=True, **over)


HARNESS = register(FamilyHarness("qwen3_5", tiny_config, build_model, part_modules, make_inputs))
HARNESS_MOE = register(FamilyHarness("qwen3_5_moe", _moe_config, build_model, part_modules, make_inputs))
