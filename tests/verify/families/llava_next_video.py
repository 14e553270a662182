"""LLaVA-NeXT-Video (transformers ``llava_next_video``) measurement harness.

Tiny config: the llava_next harness's (CLIP 24 px, patch 4: 36 patches + CLS per tile or frame, 2 layers,
``vision_feature_layer`` -2, "default"; 2-layer GELU projector; llama LM; the released pinpoints scaled to 24 px),
``spatial_pool_mode`` "average", stride 2 (6x6 -> 3x3 rows per frame before the projector).

Inputs: images through ``LlavaNextImageProcessorPil`` (the family's image processor), placeholders counted by
transformers' own ``LlavaNextVideoProcessor._get_number_of_features``; videos (the video processor needs
torchvision, not installed): T random frames at the tower's 24 px (the size the video processor produces), placeholders
from transformers' own ``LlavaNextVideoProcessor.replace_video_token``. Both called on a stand-in ``self`` holding the
processor settings a checkpoint ships (patch 4, one additional image token, "default").
"""

from __future__ import annotations

import types
from typing import Any, Sequence

from .common import FamilyHarness, eager, finish_model, random_images, register, rotary_modules, text_ids
from .llava_next import PINPOINTS, TILE
from .llava_next import tiny_config as next_config

IMAGE_TOKEN, VIDEO_TOKEN = 990, 991


def tiny_config(**over: Any):
    import transformers

    base = next_config(**over).to_dict()
    base.update(image_token_index=IMAGE_TOKEN, video_token_index=VIDEO_TOKEN, spatial_pool_mode="average",
                spatial_pool_stride=2)
    for key in ("model_type", "architectures", "transformers_version"):
        base.pop(key, None)
    return transformers.LlavaNextVideoConfig(**base)


def build_model(config, seed: int = 0):
    import torch
    import transformers

    eager(config)
    torch.manual_seed(seed)
    return finish_model(transformers.LlavaNextVideoForConditionalGeneration(config))


def part_modules(model) -> dict:
    inner = model.model
    return {"vision_tower": [inner.vision_tower], "projector": [inner.multi_modal_projector, inner.vision_resampler],
            "language_model": [inner.language_model, model.lm_head], "rope": rotary_modules(model)}


def _processor_self(config):
    from transformers import LlavaNextVideoProcessor
    from transformers.models.llava_next.image_processing_pil_llava_next import LlavaNextImageProcessorPil

    v = config.vision_config
    ip = LlavaNextImageProcessorPil(size={"shortest_edge": v.image_size},
                                    crop_size={"height": v.image_size, "width": v.image_size},
                                    image_grid_pinpoints=config.image_grid_pinpoints)
    fake = types.SimpleNamespace(image_processor=ip, patch_size=v.patch_size, num_additional_image_tokens=1,
                                 vision_feature_select_strategy="default", image_token="<image>",
                                 video_token="<video>")
    for name in ("_get_number_of_features", "_get_unpadded_features", "replace_video_token"):
        setattr(fake, name, types.MethodType(getattr(LlavaNextVideoProcessor, name), fake))
    return fake


def make_inputs(model, image_sizes: Sequence[tuple[int, int]] = (), video_sizes: Sequence = (), text_len: int = 8,
                seed: int = 1):
    import torch
    from transformers.models.llava_next.modeling_llava_next import image_size_to_num_patches

    cfg = model.config
    proc = _processor_self(cfg)
    gen = torch.Generator().manual_seed(seed)
    ids = text_ids(text_len, gen)
    media: dict = {"tiles": [], "visual_tokens": 0, "video_frames": []}
    inputs: dict = {}
    if image_sizes:
        out = proc.image_processor(random_images(image_sizes, seed), return_tensors="pt",
                                   input_data_format="channels_last")
        for h, w in out["image_sizes"].tolist():
            n = proc._get_number_of_features(h, w, TILE, TILE) - 1  # "default": the CLS is not a token
            ids += [IMAGE_TOKEN] * n + text_ids(2, gen)
            media["visual_tokens"] += n
            media["tiles"].append(image_size_to_num_patches((h, w), PINPOINTS, TILE))
        inputs.update(pixel_values=out["pixel_values"].to(torch.float64), image_sizes=out["image_sizes"])
    if video_sizes:
        frames = [int(t) for t, _, _ in video_sizes]
        if len(set(frames)) != 1:
            raise ValueError("llava_next_video harness: videos in one batch need equal frame counts")
        pv = torch.randn(len(frames), frames[0], 3, TILE, TILE, generator=gen, dtype=torch.float64)
        for i in range(len(frames)):
            n = proc.replace_video_token({"pixel_values_videos": pv.numpy()}, i).count("<video>")
            ids += [VIDEO_TOKEN] * n + text_ids(2, gen)
            media["visual_tokens"] += n
        media["video_frames"] = frames
        inputs["pixel_values_videos"] = pv
    media["seq_len"] = len(ids)
    inputs.update(input_ids=torch.tensor([ids]), attention_mask=torch.ones(1, len(ids), dtype=torch.long),
                  use_cache=False)
    return inputs, media


HARNESS = register(FamilyHarness("llava_next_video", tiny_config, build_model, part_modules, make_inputs))
