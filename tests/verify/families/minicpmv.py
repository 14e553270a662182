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

Videos in pixels (``video_sizes=[(T, H, W), ...]``, T sampled frames): ``MiniCPMV4_6VideoProcessor`` is a
torchvision-backend class and torchvision is not in the environment (installing it would switch other families'
image processors to their torchvision backends), so transformers' own ``video_processing_minicpmv4_6.py`` is
executed from its source (relative imports made absolute, ``@auto_docstring`` dropped) and its ``_preprocess``,
``sample_frames``, slicing helpers, frame interleaving and NaViT packing run unchanged on an instance whose only
replaced methods are the pixel ops ``resize`` (bilinear ``F.interpolate``: the sizes are what counts) and
``rescale_and_normalize``; the placeholders come from ``MiniCPMV4_6Processor.replace_video_token`` itself.
"""

from __future__ import annotations

from types import SimpleNamespace
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


def video_processor_class(model_type: str = "minicpmv4_6"):
    """transformers' ``MiniCPMV4_6VideoProcessor`` (``minicpm_ocr``: ``MiniCPMOcrVideoProcessor``) built from its
    source file, with ``resize`` / ``rescale_and_normalize`` replaced by plain-torch stand-ins (no torchvision)."""
    import re
    from pathlib import Path

    import torch.nn.functional as F

    key = "minicpm_ocr" if model_type == "minicpm_ocr" else "minicpmv4_6"
    if key in _VIDEO_CLASSES:
        return _VIDEO_CLASSES[key]
    import importlib

    pkg = importlib.import_module(f"transformers.models.{key}")
    name = f"video_processing_{key}"
    src = (Path(pkg.__file__).parent / f"{name}.py").read_text()
    src = re.sub(r"^\s*@auto_docstring\n", "", src, flags=re.M)  # docstring generation only
    src = re.sub(r"^from \.\.\.", "from transformers.", src, flags=re.M)
    ns: dict = {"__name__": f"minicpmv_{name}"}
    exec(compile(src, f"transformers/models/{key}/{name}.py", "exec"), ns)
    base = ns["MiniCPMOcrVideoProcessor" if key == "minicpm_ocr" else "MiniCPMV4_6VideoProcessor"]

    class StandIn(base):  # type: ignore[misc, valid-type]
        def resize(self, video, size, resample=None, **_):
            lead = video.shape[:-3]
            flat = video.reshape(-1, *video.shape[-3:]).double()
            out = F.interpolate(flat, size=(size.height, size.width), mode="bilinear", align_corners=False)
            return out.reshape(*lead, *out.shape[-3:])

        def rescale_and_normalize(self, videos, *args, **_):
            return videos.double() / 255.0

    _VIDEO_CLASSES[key] = StandIn
    return StandIn


_VIDEO_CLASSES: dict = {}


def process_videos(video_sizes: Sequence[tuple[int, int, int]], model_type: str = "minicpmv4_6", seed: int = 0,
                   **kw: Any) -> dict:
    """The video processor's ``_preprocess`` on random uint8 videos of (T sampled frames, H, W) pixels; ``kw``
    overrides the class defaults (patch_size, scale_resolution, max_slice_nums, slice_mode, downsample_mode)."""
    import torch

    P = video_processor_class(model_type)
    proc = object.__new__(P)  # the class's __init__ only reads kwargs into attributes: its class defaults stand
    gen = torch.Generator().manual_seed(seed)
    videos = [torch.randint(0, 256, (t, 3, h, w), generator=gen, dtype=torch.uint8) for t, h, w in video_sizes]
    opts = {k: kw.get(k, getattr(P, k)) for k in ("max_slice_nums", "scale_resolution", "patch_size", "slice_mode",
                                                   "downsample_mode", "max_num_frames")}
    return proc._preprocess(videos=videos, do_resize=True, resample=None, do_rescale=True, rescale_factor=1 / 255,
                            do_normalize=True, image_mean=None, image_std=None, stack_frames=1,
                            video_metadata=[None] * len(videos), return_tensors=None, **opts)


# single-character markers for the processor's replacement text (mapped to the harness's token ids)
_MARKS = {"<": IMAGE_START, ">": IMAGE_END, "[": SLICE_START, "]": SLICE_END, "\n": NEWLINE, "V": VIDEO_TOKEN}


def video_placeholders(out: dict, divisor: int, slice_mode: bool = True) -> list[str]:
    """Per video, ``MiniCPMV4_6Processor.replace_video_token``'s text with one-character markers."""
    import numpy as np
    from transformers.models.minicpmv4_6.processing_minicpmv4_6 import MiniCPMV4_6Processor as Proc

    me = SimpleNamespace(image_start_token="<", image_end_token=">", slice_start_token="[", slice_end_token="]",
                         video_token="V", video_slice_mode=slice_mode)
    inputs = {"target_sizes_videos": np.asarray(out["target_sizes_videos"]),
              "num_frames_per_video": out["num_frames_per_video"],
              "grids_videos": np.asarray(out["grids_videos"])}
    return [Proc.replace_video_token(me, inputs, i, video_token_divisor=divisor)
            for i in range(len(out["num_frames_per_video"]))]


def make_inputs(model, image_sizes: Sequence[tuple[int, int]] = (), video_sizes: Sequence = (), text_len: int = 8,
                seed: int = 1, grids: Sequence[Sequence[tuple[int, int]]] = (),
                video_frames: Sequence[tuple[int, Sequence[tuple[int, int]]]] = (), **proc_kw):
    """``video_frames``: per video (frames, [(h, w) of the overview, then of each slice]) in patches; the frames
    go through the model's video path (``pixel_values_videos`` packed as the video processor packs them, one
    ``<image>``... run of video tokens per frame) with random patches (the video processor needs torchvision)."""
    import torch

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
    if video_sizes:
        if units:
            raise ValueError("give video_sizes or video_frames, not both")
        vout = process_videos(video_sizes, cfg.model_type, seed, patch_size=p, scale_resolution=proc_kw.get(
            "scale", SCALE), downsample_mode=cfg.downsample_mode)
        for text in video_placeholders(vout, divisor):
            ids.extend(_MARKS[c] for c in text)
            tokens += text.count("V")
            ids.extend(text_ids(2, gen))
        units = [tuple(int(x) for x in t) for t in vout["target_sizes_videos"]]
        inputs["pixel_values_videos"] = vout["pixel_values_videos"].to(torch.float64)
        inputs["target_sizes_videos"] = torch.tensor([list(u) for u in units], dtype=torch.int32)
    elif units:
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
