"""MiniCPM-V 4.6 / 4.7 and MiniCPM-OCR (``minicpmv4_6`` / ``minicpmv4_7`` / ``minicpm_ocr``) measurement harnesses.

Tiny config: SigLIP NaViT tower hidden 32, 2 heads, MLP 32->64->32, 3 layers, patch 2, image_size 16 (8x8
position table), ``insert_layer_id`` 1 (layers 0-1 on the full grid, the window-attention merger, layer 2 on the
quarter grid in ``"16x"``); merger LayerNorm(128) -> Linear(128->128) -> GELU -> Linear(128->64). LM: the
qwen3_5 harness's tiny ``qwen3_5_text`` (hidden 64, layers [linear x3, full]).

Inputs: images through transformers' ``MiniCPMV4_6ImageProcessorPil`` (what transformers maps minicpmv4_6 and
minicpmv4_7 to) with patch 2, ``scale_resolution`` 16 and the model's ``downsample_mode``; the token layout as
``MiniCPMV4_6Processor.replace_image_token``: per image ``<image_id>`` text, ``<image>`` + overview tokens +
``</image>``, then per slice ``<slice>`` + tokens + ``</slice>`` (markers as text ids; the processor needs a
tokenizer with these special tokens, none of which changes the FLOPs). MiniCPM-OCR's image processor needs
torchvision (absent here): its measurements take explicit patch grids (``grids=[(h, w), ...]`` per image item
in patches), fed as random packed patches exactly as the processor packs them.
"""

from __future__ import annotations

from typing import Any, Sequence

from .common import FamilyHarness, eager, finish_model, random_images, register, text_ids
from .qwen3_5 import tiny_config as qwen3_5_tiny

IMAGE_TOKEN, VIDEO_TOKEN = 990, 991
# <image> </image> <slice> </slice> "\n" (MiniCPM-V 4.7's canvas M-RoPE reads them from the config)
IMAGE_START, IMAGE_END, SLICE_START, SLICE_END, NEWLINE = 992, 993, 994, 995, 996
SCALE = 16  # scale_resolution in pixels: overview ~ 8x8 patches


def tiny_config(model_type: str = "minicpmv4_6", moe: bool = False, **over: Any):
    """``moe``: the qwen3_5 harness's tiny Qwen3.5-MoE text config (8 experts top-2 + gated shared expert), as
    MiniCPM-V 4.7-35B-A3B's ``qwen3_5_moe_text`` LM."""
    import transformers

    text = qwen3_5_tiny(moe=moe).text_config.to_dict()
    text.update(over.pop("text", {}))
    vision = dict(hidden_size=32, intermediate_size=64, num_hidden_layers=3, num_attention_heads=2, patch_size=2,
                  image_size=16)
    vision.update(over.pop("vision", {}))
    kw = dict(vision_config=vision, text_config=text, image_token_id=IMAGE_TOKEN, video_token_id=VIDEO_TOKEN,
              insert_layer_id=1)
    if model_type == "minicpmv4_7":
        kw.update(image_start_id=IMAGE_START, image_end_id=IMAGE_END, slice_start_id=SLICE_START,
                  slice_end_id=SLICE_END, newline_id=NEWLINE)
    kw.update(over)
    cls = {"minicpmv4_6": transformers.MiniCPMV4_6Config, "minicpmv4_7": transformers.MiniCPMV4_7Config,
           "minicpm_ocr": transformers.MiniCPMOcrConfig}[model_type]
    return cls(**kw)


def build_model(config, seed: int = 0):
    import torch
    import transformers

    moe = config.text_config.model_type == "qwen3_5_moe_text"
    eager(config, experts=moe)
    torch.manual_seed(seed)
    cls = {"minicpmv4_6": transformers.MiniCPMV4_6ForConditionalGeneration,
           "minicpmv4_7": transformers.MiniCPMV4_7ForConditionalGeneration,
           "minicpm_ocr": transformers.MiniCPMOcrForConditionalGeneration}[config.model_type]
    model = finish_model(cls(config))
    if moe:  # random routers: non-trivial routing
        with torch.no_grad():
            for layer in model.model.language_model.layers:
                layer.mlp.gate.weight.normal_(0, 0.5)
    return model


def part_modules(model) -> dict:
    m = model.model
    return {"vision_tower": [m.vision_tower], "projector": [m.merger],
            "language_model": [m.language_model, model.lm_head],
            "rope": [mod for _, mod in model.named_modules() if "Rotary" in type(mod).__name__]}


def image_processor(config, scale: int = SCALE, **kw):
    from transformers.models.minicpmv4_6.image_processing_pil_minicpmv4_6 import MiniCPMV4_6ImageProcessorPil

    return MiniCPMV4_6ImageProcessorPil(patch_size=config.vision_config.patch_size, scale_resolution=scale,
                                        downsample_mode=config.downsample_mode, **kw)


def processor_grids(config, image_sizes: Sequence[tuple[int, int]], scale: int = SCALE, **kw) -> tuple[dict, list[list[tuple]]]:
    """The image processor's output and, per image, its target sizes as (h, w) patch pairs (overview first)."""
    out = image_processor(config, scale, **kw)(random_images(image_sizes, 0), return_tensors="pt",
                                        input_data_format="channels_last")
    sizes = [tuple(int(x) for x in t) for t in out["target_sizes"]]
    per_image, start = [], 0
    for n in out["num_patches_per_image"]:
        per_image.append(sizes[start:start + n])
        start += n
    return out, per_image


def make_inputs(model, image_sizes: Sequence[tuple[int, int]] = (), video_sizes: Sequence = (), text_len: int = 8,
                seed: int = 1, grids: Sequence[Sequence[tuple[int, int]]] = (),
                video_frames: Sequence[tuple[int, Sequence[tuple[int, int]]]] = (), **proc_kw):
    """``video_frames``: per video (frames, [(h, w) of the overview, then of each slice]) in patches; the frames
    go through the model's video path (``pixel_values_videos`` packed as the video processor packs them, one
    ``<image>``... run of video tokens per frame) with random patches (the video processor needs torchvision)."""
    import torch

    if video_sizes:
        raise NotImplementedError("minicpmv harness: the MiniCPM-V video processor needs torchvision")
    cfg = model.config
    p = cfg.vision_config.patch_size
    divisor = 16 if cfg.downsample_mode == "16x" else 4
    gen = torch.Generator().manual_seed(seed)
    ids = text_ids(text_len, gen)
    inputs: dict = {}
    per_image: list = [list(g) for g in grids]
    if image_sizes:
        if grids:
            raise ValueError("give image_sizes or grids, not both")
        out, per_image = processor_grids(cfg, image_sizes, **proc_kw)
        inputs["pixel_values"] = out["pixel_values"].to(torch.float64)
    elif per_image:  # explicit grids: random patches packed as the processor packs them (1, C, p, L*p)
        n = sum(h * w for item in per_image for h, w in item)
        inputs["pixel_values"] = torch.randn(1, 3, p, n * p, generator=gen, dtype=torch.float64)
    slice_grids = [tuple(g) for g in out["grids"]] if image_sizes else [(1, len(item) - 1) for item in per_image]
    tokens = 0
    for item, (_rows, cols) in zip(per_image, slice_grids):
        ids.extend(text_ids(3, gen))  # <image_id>i</image_id>
        counts = [h * w // divisor for h, w in item]
        ids.extend([IMAGE_START] + [IMAGE_TOKEN] * counts[0] + [IMAGE_END])
        for k, n in enumerate(counts[1:]):
            if k and k % cols == 0:
                ids.append(NEWLINE)
            ids.extend([SLICE_START] + [IMAGE_TOKEN] * n + [SLICE_END])
        tokens += sum(counts)
        ids.extend(text_ids(2, gen))
    if per_image:
        inputs["target_sizes"] = torch.tensor([list(s) for item in per_image for s in item], dtype=torch.int32)
    units = []
    for frames, frame_units in video_frames:
        for _ in range(frames):
            counts = [h * w // divisor for h, w in frame_units]
            ids.extend([IMAGE_START] + [VIDEO_TOKEN] * counts[0] + [IMAGE_END])
            for n in counts[1:]:
                ids.extend([SLICE_START] + [VIDEO_TOKEN] * n + [SLICE_END])
            tokens += sum(counts)
            units += list(frame_units)
        ids.extend(text_ids(2, gen))
    if units:
        n = sum(h * w for h, w in units)
        inputs["pixel_values_videos"] = torch.randn(1, 3, p, n * p, generator=gen, dtype=torch.float64)
        inputs["target_sizes_videos"] = torch.tensor([list(u) for u in units], dtype=torch.int32)
    media = {"image_grids": [(1, h, w) for item in per_image for h, w in item], "visual_tokens": tokens,
             "per_image": per_image, "video_grids": [(1, h, w) for h, w in units], "seq_len": len(ids)}
    inputs.update(input_ids=torch.tensor([ids]), attention_mask=torch.ones(1, len(ids), dtype=torch.long),
                  use_cache=False)
    if cfg.model_type == "minicpmv4_7":
        ids_t = inputs["input_ids"]
        inputs["mm_token_type_ids"] = ((ids_t == IMAGE_TOKEN) + 2 * (ids_t == VIDEO_TOKEN)).to(torch.int32)
    return inputs, media


for _type in ("minicpmv4_6", "minicpmv4_7", "minicpm_ocr"):
    register(FamilyHarness(_type, (lambda t: lambda **o: tiny_config(t, **o))(_type), build_model, part_modules,
                           make_inputs))
