"""LLaVA-OneVision (transformers ``llava_onevision``; tower ``siglip``) measurement harness.

Tiny config: SigLIP at image_size 24, patch 4 -> 6x6 = 36 patches per tile, no CLS
(``vision_feature_select_strategy`` "full"), hidden 32, 2 layers, 2 heads, MLP 48; projector
Linear(32->64) -> GELU -> Linear(64->64), bias; LM Qwen2 hidden 64. ``image_grid_pinpoints`` = every
24*{1,2,3} x 24*{1,2,3}; ``vision_aspect_ratio`` "anyres_max_4" (the tiny analogue of anyres_max_9 so
that both the kept and the bilinearly shrunk unpadded feature maps occur).

Inputs: ``LlavaOnevisionImageProcessorPil`` built locally (tile 24, the pinpoints above). One image per
sample (``multi_image=False``, the processor's flat-list convention, ``batch_num_images`` 1 each):
anyres = base tile + rows x cols grid tiles, all through tower and projector; LM tokens counted by
``LlavaOnevisionProcessor._get_number_of_features`` (HF's own rule: unpadding, shrink when the ratio
exceeds 1.1, one newline per row). ``multi_image=True``: the images form one sample (nested list,
``batch_num_images`` = n): each image one square-padded tile, 36 + 1 newline tokens. Videos: the
video processor needs torchvision, so each video is T random 24x24 frames (the processor's fixed frame
size); LM tokens T * 3*3 (bilinear 2x pooling after the projector, not counted) + 1 newline.
"""

from __future__ import annotations

import types
from typing import Any, Sequence

from .common import VOCAB, FamilyHarness, eager, finish_model, random_images, register, rotary_modules, text_ids

IMAGE_TOKEN, VIDEO_TOKEN = 990, 991
TILE = 24
PINPOINTS = [[TILE * a, TILE * b] for a in (1, 2, 3) for b in (1, 2, 3)]


def tiny_config(**over: Any):
    import transformers

    vision = dict(model_type="siglip_vision_model", hidden_size=32, intermediate_size=48, num_hidden_layers=2,
                  num_attention_heads=2, image_size=TILE, patch_size=4, vision_use_head=False)
    text = dict(model_type="qwen2", vocab_size=VOCAB, hidden_size=64, intermediate_size=96, num_hidden_layers=2,
                num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=4096, bos_token_id=None,
                eos_token_id=None, pad_token_id=None)
    vision.update(over.pop("vision", {}))
    text.update(over.pop("text", {}))
    kw = dict(vision_config=vision, text_config=text, image_token_index=IMAGE_TOKEN, video_token_index=VIDEO_TOKEN,
              vision_feature_select_strategy="full", vision_feature_layer=-1, image_grid_pinpoints=PINPOINTS,
              vision_aspect_ratio="anyres_max_4", tie_word_embeddings=False)
    kw.update(over)
    return transformers.LlavaOnevisionConfig(**kw)


def build_model(config, seed: int = 0):
    import torch
    import transformers

    eager(config)
    torch.manual_seed(seed)
    return finish_model(transformers.LlavaOnevisionForConditionalGeneration(config))


def part_modules(model) -> dict:
    inner = model.model
    return {"vision_tower": [inner.vision_tower], "projector": [inner.multi_modal_projector],
            "language_model": [inner.language_model, model.lm_head], "rope": rotary_modules(model)}


def image_processor(config):
    from transformers.models.llava_onevision.image_processing_pil_llava_onevision import \
        LlavaOnevisionImageProcessorPil

    s = config.vision_config.image_size
    return LlavaOnevisionImageProcessorPil(size={"height": s, "width": s},
                                           image_grid_pinpoints=config.image_grid_pinpoints)


def lm_tokens_one_image(config, proc, orig_h: int, orig_w: int) -> int:
    """HF's own count (``LlavaOnevisionProcessor._get_number_of_features``) for a single-image sample."""
    from transformers import LlavaOnevisionProcessor

    per_tile = (config.vision_config.image_size // config.vision_config.patch_size) ** 2
    fake = types.SimpleNamespace(image_processor=proc, num_image_tokens=per_tile,
                                 vision_aspect_ratio=config.vision_aspect_ratio)
    fake._get_unpadded_features = types.MethodType(LlavaOnevisionProcessor._get_unpadded_features, fake)
    s = config.vision_config.image_size
    return LlavaOnevisionProcessor._get_number_of_features(fake, orig_h, orig_w, s, s)


def make_inputs(model, image_sizes: Sequence[tuple[int, int]] = (), video_sizes: Sequence = (), text_len: int = 8,
                seed: int = 1, multi_image: bool = False):
    import torch

    cfg = model.config
    vc = cfg.vision_config
    per_tile = (vc.image_size // vc.patch_size) ** 2
    gen = torch.Generator().manual_seed(seed)
    ids = text_ids(text_len, gen)
    media: dict = {"tiles": [], "visual_tokens": 0, "video_frames": []}
    inputs: dict = {}
    if image_sizes:
        proc = image_processor(cfg)
        imgs = random_images(image_sizes, seed)
        out = proc([imgs] if multi_image else imgs, return_tensors="pt", input_data_format="channels_last")
        pv = out["pixel_values"]  # (images, max tiles, 3, s, s), zero-padded to the most tiles
        if multi_image:
            tiles = [1] * len(image_sizes)
            counts = [per_tile + 1] * len(image_sizes)
        else:
            from transformers.models.llava_onevision.modeling_llava_onevision import image_size_to_num_patches

            tiles = [image_size_to_num_patches((h, w), cfg.image_grid_pinpoints, vc.image_size)
                     for h, w in image_sizes]
            counts = [lm_tokens_one_image(cfg, proc, h, w) for h, w in image_sizes]
        for n in counts:
            ids += [IMAGE_TOKEN] * n + text_ids(2, gen)
        media.update(tiles=tiles, visual_tokens=sum(counts), lm_tokens_per_image=counts)
        inputs.update(pixel_values=pv.to(torch.float64), image_sizes=out["image_sizes"],
                      batch_num_images=torch.as_tensor(out["batch_num_images"]))
    if video_sizes:
        frames = [int(t) for t, _, _ in video_sizes]
        pooled = -(-(vc.image_size // vc.patch_size) // 2)
        if len(set(frames)) != 1:
            raise ValueError("llava_onevision harness: videos in one batch need equal frame counts")
        for t in frames:
            n = t * pooled * pooled + 1
            ids += [VIDEO_TOKEN] * n + text_ids(2, gen)
            media["visual_tokens"] += n
        media["video_frames"] = frames
        inputs["pixel_values_videos"] = torch.randn(len(frames), frames[0], 3, vc.image_size, vc.image_size,
                                                    generator=gen, dtype=torch.float64)
    media["seq_len"] = len(ids)
    inputs.update(input_ids=torch.tensor([ids]), attention_mask=torch.ones(1, len(ids), dtype=torch.long),
                  use_cache=False)
    return inputs, media


HARNESS = register(FamilyHarness("llava_onevision", tiny_config, build_model, part_modules, make_inputs))
