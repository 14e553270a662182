"""Gemma 3 (transformers ``gemma3``; tower ``siglip``) measurement harness.

Tiny config: SigLIP tower at image_size 32, patch 4 -> 8x8 = 64 patches, no CLS, hidden 32, 2 layers,
2 heads, MLP 48, ``vision_use_head`` False (as the released Gemma 3 configs); projector = AvgPool 2x2
(8x8 -> 4x4 = ``mm_tokens_per_image`` 16, not counted) -> RMSNorm -> matmul (32 x 64). LM
(``gemma3_text``): hidden 64, 4 heads of head_dim 16, 2 KV heads, gated GeLU MLP 96, three layers
``[sliding, sliding, full]`` with ``sliding_window`` 8 (eager attention computes the full square in every
layer whatever the mask), image tokens bidirectional within their block (``token_type_ids``).

Inputs: ``Gemma3ImageProcessorPil`` built locally (size 32x32), called with ``Gemma3Processor.images_kwargs``
(``do_pan_and_scan=False`` unless the caller passes ``pan_and_scan=True``, as a training pipeline would at
call time). Token layout as ``Gemma3Processor`` writes it: ``\\n\\n <boi> <image>*16 <eoi> \\n\\n`` per
image (and per pan-and-scan crop).
"""

from __future__ import annotations

from typing import Any, Sequence

from .common import VOCAB, FamilyHarness, eager, finish_model, processor_images_kwargs, random_images, register, \
    rotary_modules, text_ids

IMAGE_TOKEN, BOI, EOI, NEWLINES = 990, 991, 992, 108
SIZE = 32


def tiny_config(**over: Any):
    import transformers

    vision = dict(hidden_size=32, intermediate_size=48, num_hidden_layers=2, num_attention_heads=2,
                  image_size=SIZE, patch_size=4, vision_use_head=False)
    text = dict(vocab_size=VOCAB, hidden_size=64, intermediate_size=96, num_hidden_layers=3, num_attention_heads=4,
                num_key_value_heads=2, head_dim=16, query_pre_attn_scalar=16, sliding_window=8,
                layer_types=["sliding_attention", "sliding_attention", "full_attention"],
                max_position_embeddings=4096, pad_token_id=0, bos_token_id=2, eos_token_id=1)
    vision.update(over.pop("vision", {}))
    text.update(over.pop("text", {}))
    kw = dict(vision_config=vision, text_config=text, mm_tokens_per_image=16, boi_token_index=BOI,
              eoi_token_index=EOI, image_token_index=IMAGE_TOKEN, tie_word_embeddings=True)
    kw.update(over)
    return transformers.Gemma3Config(**kw)


def build_model(config, seed: int = 0):
    import torch
    import transformers

    eager(config)
    torch.manual_seed(seed)
    model = finish_model(transformers.Gemma3ForConditionalGeneration(config))
    with torch.no_grad():  # zero-initialised projection weight: give it values (FLOPs do not depend on them)
        model.model.multi_modal_projector.mm_input_projection_weight.normal_(0, 0.02)
    return model


def part_modules(model) -> dict:
    inner = model.model
    return {"vision_tower": [inner.vision_tower], "projector": [inner.multi_modal_projector],
            "language_model": [inner.language_model, model.lm_head], "rope": rotary_modules(model)}


def image_processor(config):
    from transformers.models.gemma3.image_processing_pil_gemma3 import Gemma3ImageProcessorPil

    s = config.vision_config.image_size
    return Gemma3ImageProcessorPil(size={"height": s, "width": s})


def make_inputs(model, image_sizes: Sequence[tuple[int, int]] = (), video_sizes: Sequence = (), text_len: int = 8,
                seed: int = 1, pan_and_scan: bool = False, pan_and_scan_min_crop_size: int | None = None):
    import torch
    from transformers import Gemma3Processor

    if video_sizes:
        raise ValueError("gemma3 has no video input")
    cfg = model.config
    gen = torch.Generator().manual_seed(seed)
    ids = text_ids(text_len, gen)
    types = [0] * text_len
    media: dict = {"images_in_tower": 0, "crops": [], "visual_tokens": 0}
    inputs: dict = {}
    if image_sizes:
        kw = processor_images_kwargs(Gemma3Processor)
        if pan_and_scan:
            kw["do_pan_and_scan"] = True
        if pan_and_scan_min_crop_size is not None:
            kw["pan_and_scan_min_crop_size"] = pan_and_scan_min_crop_size
        out = image_processor(cfg)(random_images(image_sizes, seed), return_tensors="pt",
                                   input_data_format="channels_last", **kw)
        crops = [int(c) for c in out["num_crops"]]
        per_image = cfg.mm_tokens_per_image
        for c in crops:
            for _ in range(1 + c):  # the original image, then each crop
                ids += [NEWLINES, BOI] + [IMAGE_TOKEN] * per_image + [EOI, NEWLINES] + text_ids(2, gen)
                types += [0, 0] + [1] * per_image + [0, 0, 0, 0]
        media["crops"] = crops
        media["images_in_tower"] = int(out["pixel_values"].shape[0])
        media["visual_tokens"] = per_image * media["images_in_tower"]
        inputs["pixel_values"] = out["pixel_values"].to(torch.float64)
    media["seq_len"] = len(ids)
    inputs.update(input_ids=torch.tensor([ids]), token_type_ids=torch.tensor([types]),
                  attention_mask=torch.ones(1, len(ids), dtype=torch.long), use_cache=False)
    return inputs, media


HARNESS = register(FamilyHarness("gemma3", tiny_config, build_model, part_modules, make_inputs))
