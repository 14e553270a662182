"""LLaVA (transformers ``llava``: ``LlavaForConditionalGeneration``) measurement harnesses, two towers.

``llava`` (LLaVA-1.5 shape): CLIP tower (``clip_vision_model``) image 32 px, patch 8 (4 x 4 = 16 patches + 1 CLS
per image), hidden 32, 2 layers, 2 heads, MLP 48 (quick_gelu), ``vision_feature_layer`` -2 (LlavaConfig's default:
the hidden state after layer 1 feeds the projector; layer 2 still runs), strategy "default" (CLS dropped; ``tiny_config(vision_feature_select_strategy="full")`` keeps it: 17 rows
to the projector and 17 image tokens per image);
projector Linear(32 -> 64) -> GELU -> Linear(64 -> 64) with bias; LM ``llama`` hidden 64, 4 heads, 2 KV heads,
head_dim 16, MLP 96, 2 layers. Inputs: transformers' own ``CLIPImageProcessorPil`` (shortest edge 32, center crop
32 x 32, as llava-1.5-7b-hf's preprocessor_config.json at 336), 16 image tokens per image (``LlavaProcessor`` with
``num_additional_image_tokens`` 1 under "default").

``llava_pixtral`` (Pixtral-12B shape): Pixtral tower patch 4, hidden 32, 2 layers, 2 heads, gated SiLU MLP 48, no
biases; strategy "full", ``vision_feature_layer`` -1, projector Linear(32 -> 64) -> GELU -> Linear(64 -> 64)
with bias; LM ``mistral`` as above. Inputs: ``PixtralImageProcessorPil`` with ``longest_edge`` 64 and patch 4
(``PixtralProcessor`` with ``spatial_merge_size`` 1); per image rows x (cols [IMG] + [IMG_BREAK]), the last
[IMG_BREAK] replaced by [IMG_END]. Several images in one forward join into one Pixtral attention sequence.
"""

from __future__ import annotations

from typing import Any, Sequence

from .common import VOCAB, FamilyHarness, eager, finish_model, random_images, register, rotary_modules, text_ids
from .mistral3 import MISTRAL_TEXT, PIXTRAL_VISION

IMAGE_TOKEN, IMG_BREAK, IMG_END = 990, 991, 992
CLIP_IMAGE = 32
LONGEST_EDGE = 64


def _text(**over: Any) -> dict:
    text = dict(model_type="llama", vocab_size=VOCAB, hidden_size=64, intermediate_size=96, num_hidden_layers=2,
                num_attention_heads=4, num_key_value_heads=2, head_dim=16, max_position_embeddings=4096,
                bos_token_id=None, eos_token_id=None, pad_token_id=None)
    text.update(over)
    return text


def tiny_config(**over: Any):
    """CLIP tower (LLaVA-1.5 shape)."""
    import transformers

    vision = dict(model_type="clip_vision_model", hidden_size=32, intermediate_size=48, num_hidden_layers=2,
                  num_attention_heads=2, num_channels=3, image_size=CLIP_IMAGE, patch_size=8, projection_dim=16,
                  hidden_act="quick_gelu")
    vision.update(over.pop("vision", {}))
    text = _text(**over.pop("text", {}))
    kw = dict(vision_config=vision, text_config=text, image_token_index=IMAGE_TOKEN, projector_hidden_act="gelu",
              vision_feature_layer=-2, vision_feature_select_strategy="default", multimodal_projector_bias=True,
              tie_word_embeddings=False, image_seq_length=(CLIP_IMAGE // 8) ** 2)
    kw.update(over)
    return transformers.LlavaConfig(**kw)


def tiny_pixtral_config(**over: Any):
    """Pixtral tower (Pixtral-12B shape)."""
    import transformers

    vision = {**PIXTRAL_VISION, "image_size": LONGEST_EDGE, **over.pop("vision", {})}
    text = {**MISTRAL_TEXT, **over.pop("text", {})}
    kw = dict(vision_config=vision, text_config=text, image_token_index=IMAGE_TOKEN, projector_hidden_act="gelu",
              vision_feature_layer=-1, vision_feature_select_strategy="full", multimodal_projector_bias=True,
              tie_word_embeddings=False)
    kw.update(over)
    return transformers.LlavaConfig(**kw)


def build_model(config, seed: int = 0):
    import torch
    import transformers

    eager(config)
    torch.manual_seed(seed)
    return finish_model(transformers.LlavaForConditionalGeneration(config))


def part_modules(model) -> dict:
    inner = model.model
    return {"vision_tower": [inner.vision_tower], "projector": [inner.multi_modal_projector],
            "language_model": [inner.language_model, model.lm_head], "rope": rotary_modules(model)}


def clip_processor(config):
    from transformers.models.clip.image_processing_pil_clip import CLIPImageProcessorPil

    side = config.vision_config.image_size
    return CLIPImageProcessorPil(size={"shortest_edge": side}, crop_size={"height": side, "width": side},
                                 do_center_crop=True)


def pixtral_processor(config, longest_edge: int = LONGEST_EDGE):
    from transformers.models.pixtral.image_processing_pil_pixtral import PixtralImageProcessorPil

    step = config.vision_config.patch_size  # PixtralProcessor: patch x spatial_merge_size (1)
    return PixtralImageProcessorPil(size={"longest_edge": longest_edge}, patch_size={"height": step, "width": step})


def make_inputs(model, image_sizes: Sequence[tuple[int, int]] = (), video_sizes: Sequence = (), text_len: int = 8,
                seed: int = 1, longest_edge: int = LONGEST_EDGE):
    import torch

    if video_sizes:
        raise ValueError("llava has no video input")
    cfg = model.config
    gen = torch.Generator().manual_seed(seed)
    ids = text_ids(text_len, gen)
    media: dict = {"resized": [], "visual_tokens": 0}
    inputs: dict = {}
    if image_sizes and cfg.vision_config.model_type == "pixtral":
        step = cfg.vision_config.patch_size
        out = pixtral_processor(cfg, longest_edge)(random_images(image_sizes, seed), return_tensors="pt",
                                                   input_data_format="channels_last")
        resized = [tuple(int(x) for x in s) for s in out["image_sizes"]]
        for h, w in resized:
            rows, cols = h // step, w // step
            run = ([IMAGE_TOKEN] * cols + [IMG_BREAK]) * rows
            run[-1] = IMG_END
            ids += run + text_ids(2, gen)
            media["visual_tokens"] += rows * cols
        media["resized"] = resized
        inputs.update(pixel_values=out["pixel_values"].to(torch.float64), image_sizes=out["image_sizes"])
    elif image_sizes:
        out = clip_processor(cfg)(random_images(image_sizes, seed), return_tensors="pt",
                                  input_data_format="channels_last")
        pixels = out["pixel_values"]
        per_image = (pixels.shape[-2] // cfg.vision_config.patch_size) * (pixels.shape[-1] // cfg.vision_config.patch_size)
        # LlavaProcessor.replace_image_token: (H/p)(W/p) + num_additional_image_tokens (1), - 1 only under "default"
        per_image += 1 if cfg.vision_feature_select_strategy == "full" else 0
        for _ in image_sizes:
            ids += [IMAGE_TOKEN] * per_image + text_ids(2, gen)
        media["resized"] = [tuple(int(x) for x in pixels.shape[-2:])] * len(image_sizes)
        media["visual_tokens"] = per_image * len(image_sizes)
        inputs.update(pixel_values=pixels.to(torch.float64))
    media["seq_len"] = len(ids)
    inputs.update(input_ids=torch.tensor([ids]), attention_mask=torch.ones(1, len(ids), dtype=torch.long),
                  use_cache=False)
    return inputs, media


HARNESS = register(FamilyHarness("llava", tiny_config, build_model, part_modules, make_inputs))
PIXTRAL_HARNESS = register(FamilyHarness("llava_pixtral", tiny_pixtral_config, build_model, part_modules, make_inputs))
