"""GLM-4.1V (``glm4v``), GLM-4.5V (``glm4v_moe``) and GLM-4.6V (``glm46v``) measurement harnesses.

Tiny config: vision hidden 32, 2 blocks, 2 heads, patch 2, temporal patch 2, merge 2, learned position
grid 4x4 (image_size 8), ``out_hidden_size`` 64 (= LM hidden; also the width of the tower's gated MLP),
``intermediate_size`` 80 (the merger's gated MLP width). LM hidden 64, partial rotary 0.5, M-RoPE
sections [1, 1, 2]. GLM-4.5V: explicit head_dim 16 with 6 heads (q_proj 64 -> 96 wider than hidden),
layer 0 dense (``first_k_dense_replace`` 1), layer 1 MoE with 8 routed experts of width 24, top-2,
n_group 2 / topk_group 1, 1 shared expert. GLM-4.6V: ``Glm46VModel`` builds the same glm4v vision model and
its LM with ``AutoModel`` (tiny: the GLM-4.5V-style MoE LM); same processor rule (``glm46v/`` copies
``smart_resize``).

Parts: vision_tower = patch_embed, post_conv_layernorm, embeddings, blocks, post_layernorm;
projector = ``visual.downsample`` (Conv2d 2x2) + ``visual.merger``; language_model = LM + lm_head.

Inputs: images through ``Glm4vImageProcessorPil`` (built locally with the tiny patch/merge sizes and pixel
bounds passed explicitly; smart_resize with factor patch*merge and t = temporal_patch_size). Videos: the
video processor needs torchvision (not importable here), so frames are sized with
``Glm4vVideoProcessor.get_num_of_video_patches`` / its ``smart_resize`` and fed random patches. Token
layout as ``Glm4vProcessor`` writes it: image ``<boi> <image>*n <eoi>`` (mm_token_type 1); video
``<bov>`` then per temporal patch ``<boi> <image>*(h*w/4) <eoi>`` + 2 timestamp tokens, ``<eov>``
(mm_token_type 2 on the image tokens inside the video). HF cannot run an image and a video in one sample
(``get_placeholder_mask`` builds both masks from the image token id).
"""

from __future__ import annotations

from typing import Any, Sequence

from .common import VOCAB, FamilyHarness, eager, finish_model, random_images, register, rotary_modules, text_ids

IMAGE_TOKEN, VIDEO_TOKEN, BOI, EOI, BOV, EOV = 990, 991, 992, 993, 994, 995
PIXELS = dict(min_pixels=4 * 4 * 4, max_pixels=4 * 4 * 2 * 400)  # tiny analogues of 112*112 / 28*28*15000


def tiny_config(moe: bool = False, glm46v: bool = False, **over: Any):
    """``moe``: GLM-4.5V's LM; ``glm46v``: the ``glm46v`` wrapper (GLM-4.6V: glm4v vision + any GLM LM via
    AutoModel; with ``moe`` the glm4v_moe_text LM)."""
    import transformers

    vision = dict(depth=2, hidden_size=32, num_heads=2, in_channels=3, image_size=8, patch_size=2,
                  spatial_merge_size=2, temporal_patch_size=2, out_hidden_size=64, intermediate_size=80,
                  hidden_act="silu", attention_bias=False)
    rope = {"rope_type": "default", "rope_theta": 10000.0, "mrope_section": [1, 1, 2], "partial_rotary_factor": 0.5}
    text = dict(vocab_size=VOCAB, hidden_size=64, intermediate_size=96, num_hidden_layers=2, num_attention_heads=4,
                num_key_value_heads=2, max_position_embeddings=4096, rope_parameters=rope, pad_token_id=None)
    if moe:
        text.update(num_attention_heads=6, head_dim=16, attention_bias=True, moe_intermediate_size=24,
                    n_routed_experts=8, num_experts_per_tok=2, n_shared_experts=1, n_group=2, topk_group=1,
                    first_k_dense_replace=1, norm_topk_prob=True, bos_token_id=None, eos_token_id=None)
    vision.update(over.pop("vision", {}))
    text.update(over.pop("text", {}))
    kw = dict(vision_config=vision, text_config=text, image_token_id=IMAGE_TOKEN, video_token_id=VIDEO_TOKEN,
              image_start_token_id=BOI, image_end_token_id=EOI, video_start_token_id=BOV, video_end_token_id=EOV,
              tie_word_embeddings=False)
    kw.update(over)
    if glm46v:
        kw["vision_config"] = dict(kw["vision_config"], model_type="glm4v_vision")
        kw["text_config"] = dict(kw["text_config"], model_type="glm4v_moe_text" if moe else "glm4v_text")
        return transformers.Glm46VConfig(**kw)
    return (transformers.Glm4vMoeConfig if moe else transformers.Glm4vConfig)(**kw)


def build_model(config, seed: int = 0):
    import torch
    import transformers

    moe = config.text_config.model_type == "glm4v_moe_text"
    eager(config, experts=moe)
    torch.manual_seed(seed)
    cls = {"glm4v": transformers.Glm4vForConditionalGeneration,
           "glm4v_moe": transformers.Glm4vMoeForConditionalGeneration,
           "glm46v": transformers.Glm46VForConditionalGeneration}[config.model_type]
    model = finish_model(cls(config))
    if moe:  # zero-initialised routers tie every score; random ones make routing non-trivial
        with torch.no_grad():
            for layer in model.model.language_model.layers:
                gate = getattr(layer.mlp, "gate", None)
                if gate is not None:
                    gate.weight.normal_(0, 0.5)
    return model


def part_modules(model) -> dict:
    v = model.model.visual
    return {"vision_tower": [v.patch_embed, v.post_conv_layernorm, v.embeddings, *v.blocks, v.post_layernorm],
            "projector": [v.downsample, v.merger],
            "language_model": [model.model.language_model, model.lm_head], "rope": rotary_modules(model)}


def _size(pixels: dict | None) -> dict:
    """Processor ``size`` kwargs: the tiny bounds, or {} (the processor class defaults) for ``pixels=None``."""
    return {} if pixels is None else {"size": {"shortest_edge": pixels["min_pixels"],
                                               "longest_edge": pixels["max_pixels"]}}


def image_processor(config, pixels: dict | None = PIXELS):
    from transformers.models.glm4v.image_processing_pil_glm4v import Glm4vImageProcessorPil

    vc = config.vision_config
    return Glm4vImageProcessorPil(patch_size=vc.patch_size, temporal_patch_size=vc.temporal_patch_size,
                                  merge_size=vc.spatial_merge_size, **_size(pixels))


def video_grid(config, frames: int, height: int, width: int, pixels: dict | None = PIXELS) -> tuple[int, int, int]:
    """(t, h, w) patches of one video as ``Glm4vVideoProcessor`` would produce (its own size arithmetic)."""
    from transformers.models.glm4v.video_processing_glm4v import Glm4vVideoProcessor, smart_resize

    vc = config.vision_config
    vp = Glm4vVideoProcessor(patch_size=vc.patch_size, temporal_patch_size=vc.temporal_patch_size,
                             merge_size=vc.spatial_merge_size, **_size(pixels))
    rh, rw = smart_resize(num_frames=frames, height=height, width=width, temporal_factor=vc.temporal_patch_size,
                          factor=vc.patch_size * vc.spatial_merge_size, min_pixels=vp.size["shortest_edge"],
                          max_pixels=vp.size["longest_edge"])
    t = -(-frames // vc.temporal_patch_size)
    grid = (t, rh // vc.patch_size, rw // vc.patch_size)
    assert vp.get_num_of_video_patches(frames, height, width) == grid[0] * grid[1] * grid[2], grid
    return grid


def make_inputs(model, image_sizes: Sequence[tuple[int, int]] = (), video_sizes: Sequence = (), text_len: int = 8,
                seed: int = 1, pixels: dict | None = PIXELS):
    """``pixels``: min/max pixel bounds of the processors; None = the processor classes' defaults."""
    import torch

    if image_sizes and video_sizes:
        raise ValueError("glm4v in transformers cannot run an image and a video in one sample")
    cfg = model.config
    vc = cfg.vision_config
    m2 = vc.spatial_merge_size**2
    gen = torch.Generator().manual_seed(seed)
    ids = text_ids(text_len, gen)
    types = [0] * text_len
    media: dict = {"image_grids": [], "video_grids": [], "visual_tokens": 0}
    inputs: dict = {}
    if image_sizes:
        out = image_processor(cfg, pixels)(random_images(image_sizes, seed), return_tensors="pt",
                                   input_data_format="channels_last")
        grids = [tuple(int(x) for x in g) for g in out["image_grid_thw"]]
        for t, h, w in grids:
            n = t * h * w // m2
            ids += [BOI] + [IMAGE_TOKEN] * n + [EOI] + text_ids(3, gen)
            types += [0] + [1] * n + [0] + [0] * 3
            media["visual_tokens"] += n
        media["image_grids"] = grids
        inputs["pixel_values"] = out["pixel_values"].to(torch.float64)
        inputs["image_grid_thw"] = out["image_grid_thw"]
    if video_sizes:
        grids = [video_grid(cfg, *v, pixels=pixels) for v in video_sizes]
        for t, h, w in grids:
            ids.append(BOV)
            types.append(0)
            for _ in range(t):
                n = h * w // m2
                ids += [BOI] + [IMAGE_TOKEN] * n + [EOI] + text_ids(2, gen)
                types += [0] + [2] * n + [0] + [0, 0]
                media["visual_tokens"] += n
            ids.append(EOV)
            types.append(0)
        media["video_grids"] = grids
        patch_dim = vc.in_channels * vc.temporal_patch_size * vc.patch_size**2
        n = sum(t * h * w for t, h, w in grids)
        inputs["pixel_values_videos"] = torch.randn(n, patch_dim, generator=gen, dtype=torch.float64)
        inputs["video_grid_thw"] = torch.tensor([list(g) for g in grids])
    media["seq_len"] = len(ids)
    inputs.update(input_ids=torch.tensor([ids]), mm_token_type_ids=torch.tensor([types], dtype=torch.int32),
                  attention_mask=torch.ones(1, len(ids), dtype=torch.long), use_cache=False)
    return inputs, media


def _moe_config(**over):
    return tiny_config(moe=True, **over)


HARNESS = register(FamilyHarness("glm4v", tiny_config, build_model, part_modules, make_inputs))
def _glm46v_config(**over):
    return tiny_config(moe=True, glm46v=True, **over)


HARNESS_MOE = register(FamilyHarness("glm4v_moe", _moe_config, build_model, part_modules, make_inputs))
HARNESS_46V = register(FamilyHarness("glm46v", _glm46v_config, build_model, part_modules, make_inputs))
