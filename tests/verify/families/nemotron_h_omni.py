"""Nemotron omni (transformers ``nemotron_h_omni``: ``NemotronH_Omni_Reasoning_V3``) measurement harness.

Tiny config: RADIO tower of width 32, 2 layers, patch 4, position table 16x16 (max_img_size 64), 2 class + 3
register tokens, video tubelets of 2 frames; pixel shuffle 0.5 -> RMSNorm(128) -> Linear(128 -> 48) -> relu² ->
Linear(48 -> 64); Nemotron-H LM of width 64 whose layer pattern is a parameter (``"*-*"``: attention + MLP only;
``E``: MoE layers of 6 plain experts top-2, width 24, shared MLP 40, eager experts;
whose reference FLOPs equal the training kernels'; with ``M`` the Mamba-2 layers run transformers' PyTorch
fallback scan, which does more work than the kernels: see tests/arch/test_nemotron_h.py).

Inputs: the image processor's grid function ``get_patch_grid_size`` and ``convert_image_to_patches`` compiled from
transformers' source (the module imports torchvision, absent here; patch 4, 16..64 patches per image) and
``NemotronH_Omni_Reasoning_V3VideoProcessor`` (patch 4, target 36 patches per frame, ``temporal_patch_size`` 2 as
the processor passes it); input_ids laid out as ``NemotronH_Omni_Reasoning_V3Processor`` writes them:
``<img> <image>*(rows·cols/4) </img>`` per image and per video tubelet (the tubelet's frame label: 3 text tokens).
"""

from __future__ import annotations

from typing import Any, Sequence

from .common import VOCAB, eager, finish_model, random_images, text_ids

IMAGE_TOKEN, IMG_START, IMG_END = 990, 991, 992
AUDIO_TOKEN, AUDIO_START, AUDIO_END = 993, 994, 995
# tiny Parakeet encoder: 16 mel bins, x8 subsampling with 8 channels, 2 layers of width 32, conv kernel 5,
# embed_audio 32 -> 40 -> 64 (layerdrop 0: the count refuses random layer skipping)
TINY_AUDIO = dict(hidden_size=32, num_hidden_layers=2, num_attention_heads=2, intermediate_size=48, num_mel_bins=16,
                  subsampling_conv_channels=8, conv_kernel_size=5, projection_hidden_size=40, projection_bias=False,
                  layerdrop=0.0)
CLIP_MEAN, CLIP_STD = [0.48145466, 0.4578275, 0.40821073], [0.26862954, 0.26130258, 0.27577711]
IMAGE_PROCESSOR = {"patch_size": 4, "min_num_patches": 16, "max_num_patches": 64}
VIDEO_PROCESSOR = {"patch_size": 4, "video_target_num_patches": 36}


def tiny_config(pattern: str = "*-*", **over: Any):
    from transformers.models.nemotron_h_omni.configuration_nemotron_h_omni import \
        NemotronH_Omni_Reasoning_V3_Config

    vision = dict(hidden_size=32, num_hidden_layers=2, num_attention_heads=2, patch_size=4, max_img_size=64,
                  num_cls_tokens=2, num_registers=3, video_temporal_patch_size=2)
    text = dict(hidden_size=64, vocab_size=VOCAB, num_attention_heads=4, num_key_value_heads=2, head_dim=16,
                intermediate_size=80, mamba_num_heads=8, mamba_head_dim=12, ssm_state_size=16, n_groups=2,
                conv_kernel=4, chunk_size=8, hybrid_override_pattern=pattern, bos_token_id=None, eos_token_id=None,
                pad_token_id=None, n_routed_experts=6, num_experts_per_tok=2, moe_intermediate_size=24,
                moe_shared_expert_intermediate_size=40)
    vision.update(over.pop("vision", {}))
    text.update(over.pop("text", {}))
    kw = dict(vision_config=vision, text_config=text, vision_hidden_size=vision["hidden_size"],
              projector_hidden_size=48, image_token_id=IMAGE_TOKEN, video_token_id=IMAGE_TOKEN, downsample_ratio=0.5)
    kw.update(over)
    return NemotronH_Omni_Reasoning_V3_Config(**kw)


def config_dict(config) -> dict:
    """``config.to_dict()`` without NemotronH's ``time_step_limit`` default ``(0.0, inf)`` (vlm-perf refuses
    non-finite config values; the mixer's clamp is elementwise and has no FLOPs)."""
    d = config.to_dict()
    d["text_config"].pop("time_step_limit", None)
    return d


def build_model(config, seed: int = 0):
    import torch
    from transformers.models.nemotron_h_omni.modeling_nemotron_h_omni import NemotronH_Omni_Reasoning_V3

    moe = "moe" in (config.text_config.layers_block_type or [])
    eager(config, experts=moe)
    torch.manual_seed(seed)
    model = finish_model(NemotronH_Omni_Reasoning_V3(config))
    if moe:  # random routers: non-trivial routing
        with torch.no_grad():
            for layer in model.language_model.model.layers:
                if hasattr(layer.mixer, "gate"):
                    layer.mixer.gate.weight.normal_(0, 0.5)
    return model


def part_modules(model) -> dict:
    parts = {"vision_tower": [model.vision_model], "projector": [model.multi_modal_projector],
             "language_model": [model.language_model], "rope": []}
    if model.audio_tower is not None:
        parts["audio"] = [model.audio_tower, model.embed_audio]
    return parts


def hf_image_functions() -> dict:
    """``get_patch_grid_size`` and ``convert_image_to_patches`` from transformers' ``image_processing_nemotron_h_omni.py``,
    compiled from its source: the module imports torchvision (absent here); these two functions need only math / torch."""
    import ast
    import math
    from pathlib import Path

    import transformers.models.nemotron_h_omni as pkg

    tree = ast.parse((Path(pkg.__file__).parent / "image_processing_nemotron_h_omni.py").read_text())
    keep = [n for n in tree.body if isinstance(n, ast.FunctionDef)
            and n.name in ("get_patch_grid_size", "convert_image_to_patches")]
    ns: dict = {"math": math}
    exec(compile(ast.Module(body=keep, type_ignores=[]), "image_processing_nemotron_h_omni.py", "exec"), ns)
    return ns


def process_images(images, patch: int = IMAGE_PROCESSOR["patch_size"], merge: int = 2,
                   min_patches: int = IMAGE_PROCESSOR["min_num_patches"],
                   max_patches: int = IMAGE_PROCESSOR["max_num_patches"], max_model_len: int = 16384):
    """The image processor's ``_preprocess`` for one call: every image of the call gets the patch budget
    clamp(max((max_model_len - 4)·merge², min·images), min, max); its grid from transformers'
    ``get_patch_grid_size``; resized (bilinear here: pixel values do not change FLOPs) and cut into patches by
    transformers' ``convert_image_to_patches``. -> (pixel_values (total_patches, 3·P²), image_grid_hw)."""
    import torch

    hf = hf_image_functions()
    budget = max((max_model_len - 4) * merge ** 2, min_patches * len(images))
    budget = max(min(budget, max_patches) if max_patches else budget, min_patches)
    patches, grids = [], []
    for image in images:
        t = torch.as_tensor(image).permute(2, 0, 1)[None].to(torch.float32) / 255.0
        rows, cols = hf["get_patch_grid_size"](t.shape[-2], t.shape[-1], patch, merge, min_patches, budget)
        t = torch.nn.functional.interpolate(t, size=(rows * patch, cols * patch), mode="bilinear")
        patches.append(hf["convert_image_to_patches"](t, patch)[0])
        grids.append([rows, cols])
    return torch.cat(patches), torch.tensor(grids)


def make_inputs(model, image_sizes: Sequence[tuple[int, int]] = (), video_sizes: Sequence = (), text_len: int = 8,
                seed: int = 1, audio_samples: Sequence[int] = ()):
    """(inputs, media): media = per image / video the processors' grids and the placeholder count."""
    import numpy as np
    import torch
    from transformers.models.nemotron_h_omni.video_processing_nemotron_h_omni import \
        NemotronH_Omni_Reasoning_V3VideoProcessor

    gen = torch.Generator().manual_seed(seed)
    ids = text_ids(text_len, gen)
    media: dict = {"image_grids": [], "video_grids": [], "visual_tokens": 0}
    inputs: dict = {}
    if image_sizes:
        pixel_values, grids = process_images(random_images(image_sizes, seed))
        for rows, cols in grids.tolist():
            media["image_grids"].append((1, rows, cols))
            ids += [IMG_START] + [IMAGE_TOKEN] * (rows * cols // 4) + [IMG_END] + text_ids(3, gen)
            media["visual_tokens"] += rows * cols // 4
        inputs.update(pixel_values=pixel_values.to(torch.float64), image_grid_hw=grids)
    if video_sizes:
        proc = NemotronH_Omni_Reasoning_V3VideoProcessor(norm_mean=CLIP_MEAN, norm_std=CLIP_STD, **VIDEO_PROCESSOR)
        rng = np.random.default_rng(seed)
        videos = [rng.integers(0, 256, size=(t, h, w, 3), dtype=np.uint8) for t, h, w in video_sizes]
        out = proc(videos=videos, temporal_patch_size=model.config.video_temporal_patch_size, return_tensors="pt")
        pv = out["pixel_values_videos"]
        tubelets, (height, width) = pv.shape[1], pv.shape[-2:]
        rows, cols = height // 4, width // 4
        for _ in video_sizes:
            media["video_grids"].append((tubelets, rows, cols))
            for _ in range(tubelets):  # "Frame i and frame j: " label + one image chunk per tubelet
                ids += text_ids(3, gen) + [IMG_START] + [IMAGE_TOKEN] * (rows * cols // 4) + [IMG_END]
            media["visual_tokens"] += tubelets * rows * cols // 4
        inputs["pixel_values_videos"] = pv.to(torch.float64)
    if audio_samples:  # transformers' ParakeetFeatureExtractor; placeholders by the processor's own estimate
        from types import SimpleNamespace

        from transformers import ParakeetFeatureExtractor
        from transformers.models.nemotron_h_omni.processing_nemotron_h_omni import \
            NemotronH_Omni_Reasoning_V3Processor

        rng = np.random.default_rng(seed)
        clips = [rng.standard_normal(n).astype(np.float32) for n in audio_samples]
        fe = ParakeetFeatureExtractor(feature_size=model.config.audio_config.num_mel_bins)
        out = fe(clips, sampling_rate=16000, return_tensors="pt", return_attention_mask=True)
        stub = SimpleNamespace(audio_hop_length=160, audio_subsampling_factor=8)
        media["audio_tokens"] = [max(1, NemotronH_Omni_Reasoning_V3Processor._estimate_audio_num_embeddings(stub, n))
                                 for n in audio_samples]
        media["audio_frames"] = [int(n) + 1 for n in out["attention_mask"].sum(-1).tolist()]  # the model's count
        for n in media["audio_tokens"]:
            ids += [AUDIO_START] + [AUDIO_TOKEN] * n + [AUDIO_END] + text_ids(2, gen)
        inputs.update(input_features=out["input_features"].to(torch.float64), input_features_mask=out["attention_mask"])
    media["seq_len"] = len(ids)
    inputs.update(input_ids=torch.tensor([ids]), attention_mask=torch.ones(1, len(ids), dtype=torch.long),
                  use_cache=False)
    return inputs, media
