"""Qwen2.5-Omni (``qwen2_5_omni``) and Qwen3-Omni-MoE (``qwen3_omni_moe``) THINKER measurement harnesses.

The model is transformers' ``Qwen2_5OmniThinkerForConditionalGeneration`` / ``Qwen3OmniMoeThinkerForConditionalGeneration``
(no talker, no speech decoder). Parts: ``vision_tower`` = visual minus its mergers, ``projector`` = ``visual.merger``
(+ Qwen3's ``visual.merger_list`` deepstack mergers), ``audio`` = the whole ``audio_tower`` (convolutions, layers,
output head), ``language_model`` = the LM + ``lm_head``.

Tiny configs: Qwen2.5-VL-style tower (2 blocks of 32, window 16 px over patch 2, full block 1, gated MLP) and
Qwen3-VL-style tower (2 blocks, deepstack [0], learned 4x4 position grid); audio encoders with 16 mel bins,
d_model 32, 2 heads, 2 layers, FFN 48 -- Qwen2.5: ``n_window`` 8 (chunks of 16 frames, so short clips have several
chunks); Qwen3: ``n_window`` 50 (transformers' full-chunk constant 13 needs it), ``n_window_infer`` 200 (windows of
2 chunks), ``downsample_hidden_size`` 8; LMs of hidden 64 (Qwen2 dense; Qwen3-MoE 8 experts top-2).

Inputs: images through ``Qwen2VLImageProcessorPil`` (the class transformers maps both Omni types to) with the
tiny patch/merge sizes and explicit pixel bounds; audio through ``WhisperFeatureExtractor`` (the feature extractor
both map to) with ``feature_size`` = the tiny mel bins and the processor class's ``audio_kwargs`` (Qwen2.5-Omni:
sampling rate, attention mask, the extractor's default max-length padding and truncation; Qwen3-Omni: padding
"longest", truncation off), ``feature_attention_mask`` as the processors rename it; LM audio placeholders = the
processing module's own ``_get_feat_extract_output_lengths`` of the mask sums, one
``<audio_start> <audio>*n <audio_end>`` run per clip as ``replace_audio_token`` writes it.
"""

from __future__ import annotations

from typing import Any, Sequence

from .common import VOCAB, FamilyHarness, eager, finish_model, random_images, register, rotary_modules, text_ids

IMAGE, VIDEO, AUDIO, V_START, V_END, A_START, A_END = 990, 991, 992, 993, 994, 995, 996
PIXELS = dict(min_pixels=4 * 4 * 4, max_pixels=4 * 4 * 400)
MEL = 16
SAMPLING_RATE = 16000


def tiny_config(family: str = "qwen2_5_omni", **over: Any):
    import transformers

    audio = dict(num_mel_bins=MEL, encoder_layers=2, encoder_attention_heads=2, encoder_ffn_dim=48, d_model=32,
                 output_dim=64, max_source_positions=1500)
    tokens = dict(image_token_id=IMAGE, video_token_id=VIDEO, audio_token_id=AUDIO, vision_start_token_id=V_START,
                  vision_end_token_id=V_END, audio_start_token_id=A_START, audio_end_token_id=A_END)
    if family == "qwen2_5_omni":
        vision = dict(depth=2, hidden_size=32, intermediate_size=48, num_heads=2, in_channels=3, patch_size=2,
                      spatial_merge_size=2, temporal_patch_size=2, window_size=16, fullatt_block_indexes=[1],
                      out_hidden_size=64)
        audio.update(n_window=8)
        text = dict(vocab_size=VOCAB, hidden_size=64, intermediate_size=96, num_hidden_layers=2,
                    num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=4096,
                    rope_parameters={"rope_type": "default", "rope_theta": 10000.0, "mrope_section": [2, 3, 3]})
        cls = transformers.Qwen2_5OmniThinkerConfig
        tokens = {"image_token_index": IMAGE, "video_token_index": VIDEO, "audio_token_index": AUDIO,
                  **{k: v for k, v in tokens.items() if k.endswith("start_token_id") or k.endswith("end_token_id")}}
    else:
        vision = dict(depth=2, hidden_size=32, intermediate_size=48, num_heads=2, in_channels=3, patch_size=2,
                      spatial_merge_size=2, temporal_patch_size=2, out_hidden_size=64, num_position_embeddings=16,
                      deepstack_visual_indexes=[0])
        audio.update(n_window=50, n_window_infer=200, downsample_hidden_size=8, conv_chunksize=500)
        text = dict(vocab_size=VOCAB, hidden_size=64, intermediate_size=96, num_hidden_layers=2,
                    num_attention_heads=4, num_key_value_heads=2, head_dim=16, num_experts=8,
                    num_experts_per_tok=2, moe_intermediate_size=24, decoder_sparse_step=1, mlp_only_layers=[],
                    max_position_embeddings=4096,
                    rope_parameters={"rope_type": "default", "rope_theta": 10000.0, "mrope_section": [2, 3, 3],
                                     "mrope_interleaved": True})
        cls = transformers.Qwen3OmniMoeThinkerConfig
    vision.update(over.pop("vision", {}))
    audio.update(over.pop("audio", {}))
    text.update(over.pop("text", {}))
    kw = dict(vision_config=vision, audio_config=audio, text_config=text, tie_word_embeddings=False, **tokens)
    kw.update(over)
    return cls(**kw)


def build_model(config, seed: int = 0):
    import torch
    import transformers

    moe = config.model_type == "qwen3_omni_moe_thinker"
    eager(config, experts=moe)
    config.audio_config._attn_implementation = "eager"
    torch.manual_seed(seed)
    cls = (transformers.Qwen3OmniMoeThinkerForConditionalGeneration if moe
           else transformers.Qwen2_5OmniThinkerForConditionalGeneration)
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
    mergers = [v.merger] + list(getattr(v, "merger_list", []))
    tower = [v.patch_embed, *v.blocks] + ([v.pos_embed] if hasattr(v, "pos_embed") else [])
    return {"vision_tower": tower, "projector": mergers, "audio": [model.model.audio_tower],
            "language_model": [model.model.language_model, model.lm_head], "rope": rotary_modules(model)}


def image_processor(config, pixels: dict | None = PIXELS):
    from transformers.models.qwen2_vl.image_processing_pil_qwen2_vl import Qwen2VLImageProcessorPil

    vc = config.vision_config
    size = {} if pixels is None else {"size": {"shortest_edge": pixels["min_pixels"],
                                               "longest_edge": pixels["max_pixels"]}}
    return Qwen2VLImageProcessorPil(patch_size=vc.patch_size, temporal_patch_size=vc.temporal_patch_size,
                                    merge_size=vc.spatial_merge_size, **size)


def processor_module(family: str):
    if family.startswith("qwen2_5_omni"):
        from transformers.models.qwen2_5_omni import processing_qwen2_5_omni as mod
    else:
        from transformers.models.qwen3_omni_moe import processing_qwen3_omni_moe as mod
    return mod


def feature_extract(family: str, samples: Sequence[int], mel: int = MEL, seed: int = 0, **extractor_kw: Any):
    """(input_features, feature_attention_mask, LM tokens per clip) as the family's processor makes them."""
    import numpy as np
    from transformers import WhisperFeatureExtractor

    mod = processor_module(family)
    proc_cls = mod.Qwen2_5OmniProcessor if family.startswith("qwen2_5_omni") else mod.Qwen3OmniMoeProcessor
    kwargs = dict(proc_cls.audio_kwargs)
    kwargs.pop("n_window", None)
    fe = WhisperFeatureExtractor(feature_size=mel, **extractor_kw)
    rng = np.random.default_rng(seed)
    clips = [rng.standard_normal(n).astype(np.float32) * 0.1 for n in samples]
    out = fe(clips, return_tensors="pt", **kwargs)
    mask = out["attention_mask"]
    lengths = mask.sum(-1)
    if family.startswith("qwen2_5_omni"):
        tokens = mod._get_feat_extract_output_lengths(lengths)
    else:
        tokens = mod._get_feat_extract_output_lengths(lengths, proc_cls.n_window)
    return out["input_features"], mask, [int(t) for t in tokens]


def make_inputs(model, image_sizes: Sequence[tuple[int, int]] = (), video_sizes: Sequence = (), text_len: int = 8,
                seed: int = 1, audio_samples: Sequence[int] = (), pixels: dict | None = PIXELS,
                video_grids: Sequence[tuple[int, int, int]] = ()):
    import torch

    if video_sizes:
        raise NotImplementedError("qwen_omni harness: Qwen2VLVideoProcessor needs torchvision; pass "
                                  "video_grids=[(t, h, w)] in patches instead")
    cfg = model.config
    family = cfg.model_type
    vc = cfg.vision_config
    m2 = vc.spatial_merge_size**2
    gen = torch.Generator().manual_seed(seed)
    ids = text_ids(text_len, gen)
    media: dict = {"image_grids": [], "visual_tokens": 0, "audio_mel_frames": [], "audio_tokens": []}
    inputs: dict = {}
    if image_sizes:
        out = image_processor(cfg, pixels)(random_images(image_sizes, seed), return_tensors="pt",
                                           input_data_format="channels_last")
        grids = [tuple(int(x) for x in g) for g in out["image_grid_thw"]]
        for t, h, w in grids:
            n = t * h * w // m2
            ids.extend([V_START] + [IMAGE] * n + [V_END] + text_ids(3, gen))
            media["visual_tokens"] += n
        media["image_grids"] = grids
        inputs["pixel_values"] = out["pixel_values"].to(torch.float64)
        inputs["image_grid_thw"] = out["image_grid_thw"]
    if video_grids:  # random patches, one <vision_start> <video>*n <vision_end> run per video
        for t, h, w in video_grids:
            n = t * h * w // m2
            ids.extend([V_START] + [VIDEO] * n + [V_END] + text_ids(2, gen))
            media["visual_tokens"] += n
        patch_dim = vc.in_channels * vc.temporal_patch_size * vc.patch_size**2
        rows = sum(t * h * w for t, h, w in video_grids)
        inputs["pixel_values_videos"] = torch.randn(rows, patch_dim, generator=gen, dtype=torch.float64)
        inputs["video_grid_thw"] = torch.tensor([list(g) for g in video_grids])
        inputs["video_second_per_grid"] = torch.ones(len(video_grids))
    media["video_grids"] = [tuple(g) for g in video_grids]
    if audio_samples:
        features, mask, tokens = feature_extract(family, audio_samples, mel=cfg.audio_config.num_mel_bins, seed=seed)
        for n in tokens:
            ids.extend([A_START] + [AUDIO] * n + [A_END] + text_ids(2, gen))
        media["audio_mel_frames"] = [int(x) for x in mask.sum(-1)]
        media["audio_tokens"] = tokens
        inputs["input_features"] = features.to(torch.float64)
        inputs["feature_attention_mask"] = mask
    media["seq_len"] = len(ids)
    inputs.update(input_ids=torch.tensor([ids]), attention_mask=torch.ones(1, len(ids), dtype=torch.long),
                  use_cache=False)
    return inputs, media


def _qwen3_config(**over):
    return tiny_config("qwen3_omni_moe", **over)


HARNESS = register(FamilyHarness("qwen2_5_omni", tiny_config, build_model, part_modules, make_inputs))
HARNESS_MOE = register(FamilyHarness("qwen3_omni_moe", _qwen3_config, build_model, part_modules, make_inputs))
