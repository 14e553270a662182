"""One small, valid ``config.json`` dict per registered model family (built from the shipped presets or
hand-written in the transformers layout), for the config-sanity tests and the config fuzz test.

`sample(family)` returns a fresh deep copy. `SAMPLES` covers every family in the registry; a family
added without a sample here fails ``test_every_family_has_a_sample``.
"""

from __future__ import annotations

import copy
from typing import Any

from vlm_perf.arch import preset_config


def _text_only(preset: str, model_type: str) -> dict:
    cfg = preset_config(preset)
    text = dict(cfg.get("text_config") or {k: v for k, v in cfg.items() if k != "vision_config"})
    text["model_type"] = model_type
    return text


def _qwen2() -> dict:
    cfg = {k: v for k, v in preset_config("qwen2.5-vl-7b").items() if k != "vision_config"}
    cfg["model_type"] = "qwen2"
    return cfg


def _idefics3() -> dict:
    cfg = preset_config("smolvlm2-500m")
    cfg["model_type"] = "idefics3"
    return cfg


def _florence2() -> dict:
    """florence-2-base with BART's width / heads / layers under their attribute-map aliases (hidden_size,
    num_attention_heads, num_hidden_layers: BartConfig maps them to d_model, encoder_attention_heads,
    encoder_layers), so the generic LM-field checks reach them."""
    cfg = {k: v for k, v in preset_config("florence-2-base").items() if not k.startswith("_")}
    text = dict(cfg["text_config"])
    for key, alias in (("d_model", "hidden_size"), ("encoder_attention_heads", "num_attention_heads"),
                       ("encoder_layers", "num_hidden_layers")):
        text[alias] = text.pop(key)
    cfg["text_config"] = text
    return cfg


def _glm46v() -> dict:
    cfg = preset_config("glm-4.5v")
    cfg["model_type"] = "glm46v"
    cfg["text_config"] = dict(cfg["text_config"], model_type="glm4v_moe_text")
    cfg["vision_config"] = dict(cfg["vision_config"], model_type="glm4v_vision")
    return cfg


def _qwen3_5() -> dict:
    cfg = preset_config("qwen3.5-35b-a3b")
    cfg["model_type"] = "qwen3_5"
    text = dict(cfg["text_config"], model_type="qwen3_5_text", intermediate_size=4096)
    for key in ("num_experts", "num_experts_per_tok", "moe_intermediate_size", "shared_expert_intermediate_size"):
        text.pop(key, None)
    cfg["text_config"] = text
    return cfg


def _llava() -> dict:
    return {"model_type": "llava", "vision_feature_layer": -2, "vision_feature_select_strategy": "default",
            "image_seq_length": 576,
            "vision_config": {"model_type": "clip_vision_model", "hidden_size": 1024, "intermediate_size": 4096,
                              "num_hidden_layers": 24, "num_attention_heads": 16, "patch_size": 14,
                              "image_size": 336, "projection_dim": 768},
            "text_config": {"model_type": "llama", "hidden_size": 4096, "intermediate_size": 11008,
                            "num_hidden_layers": 32, "num_attention_heads": 32, "num_key_value_heads": 32,
                            "vocab_size": 32064}}


def _llava_next() -> dict:
    """The LLaVA-1.6 preset with the MistralConfig class defaults its partial text_config relies on written out,
    so the fuzz mutates them too."""
    cfg = preset_config("llava-v1.6-mistral-7b")
    cfg["text_config"] = {"hidden_size": 4096, "num_hidden_layers": 32, "num_attention_heads": 32,
                          **cfg["text_config"]}
    return cfg


def _llava_next_video() -> dict:
    cfg = _llava_next()
    cfg.update(model_type="llava_next_video", architectures=["LlavaNextVideoForConditionalGeneration"],
               spatial_pool_mode="average", spatial_pool_stride=2, video_token_index=32000, image_token_index=32001)
    return cfg


def _cohere2_text() -> dict:  # hand-written in the Cohere2Config layout (small dims)
    return {"model_type": "cohere2", "vocab_size": 1000, "hidden_size": 64, "intermediate_size": 96,
            "num_hidden_layers": 4, "num_attention_heads": 4, "num_key_value_heads": 2, "sliding_window": 8,
            "sliding_window_pattern": 4, "logit_scale": 0.25, "layer_norm_eps": 1e-5}


def _aya_vision(model_type: str = "aya_vision") -> dict:  # hand-written in the AyaVisionConfig layout
    return {"model_type": model_type, "downsample_factor": 2, "alignment_intermediate_size": 48,
            "image_token_index": 255036, "vision_feature_layer": -1, "vision_feature_select_strategy": "full",
            "vision_config": {"model_type": "siglip_vision_model", "hidden_size": 32, "intermediate_size": 48,
                              "num_hidden_layers": 2, "num_attention_heads": 2, "image_size": 32, "patch_size": 4,
                              "vision_use_head": False},
            "text_config": _cohere2_text()}


_BUILDERS: dict[str, Any] = {
    "qwen2": _qwen2,
    "qwen3": lambda: _text_only("qwen3-vl-8b", "qwen3"),
    "qwen3_moe": lambda: preset_config("qwen3-30b-a3b"),
    "llama": lambda: preset_config("llama3-8b"),
    "mistral": lambda: _text_only("mistral-small-3.1-24b", "mistral"),
    "deepseek_v3": lambda: preset_config("deepseek-v3"),
    "qwen2_vl": lambda: preset_config("qwen2-vl-7b"),
    "qwen2_5_vl": lambda: preset_config("qwen2.5-vl-7b"),
    "qwen3_vl": lambda: preset_config("qwen3-vl-8b"),
    "qwen3_vl_moe": lambda: preset_config("qwen3-vl-30b-a3b"),
    "internvl": lambda: preset_config("internvl3-8b"),
    "gemma3": lambda: preset_config("gemma3-4b"),
    "gemma3_text": lambda: _text_only("gemma3-4b", "gemma3_text"),
    "llava_onevision": lambda: preset_config("llava-onevision-qwen2-7b"),
    "glm4v": lambda: preset_config("glm-4.1v-9b-thinking"),
    "glm4v_moe": lambda: preset_config("glm-4.5v"),
    "glm46v": _glm46v,
    "qwen3_5": _qwen3_5,
    "qwen3_5_moe": lambda: preset_config("qwen3.5-35b-a3b"),
    "mistral3": lambda: preset_config("mistral-small-3.1-24b"),
    "idefics3": _idefics3,
    "smolvlm": lambda: preset_config("smolvlm2-500m"),
    "llava": _llava,
    "llava_next": _llava_next,
    "llava_next_video": _llava_next_video,
    "paligemma": lambda: preset_config("paligemma2-3b-224"),
    "gpt_oss": lambda: preset_config("gpt-oss-20b"),
    "mllama": lambda: preset_config("llama3.2-11b-vision"),
    "llama4": lambda: preset_config("llama4-scout-17b-16e"),
    "qwen2_5_omni": lambda: preset_config("qwen2.5-omni-7b"),  # --- qwen_omni ---
    "qwen3_omni_moe": lambda: preset_config("qwen3-omni-30b-a3b"),
    "aya_vision": _aya_vision,
    "cohere2_vision": lambda: {k: v for k, v in _aya_vision("cohere2_vision").items()
                               if k not in ("vision_feature_layer", "vision_feature_select_strategy")},
    "cohere2": _cohere2_text,
    "deepseek_vl": lambda: {"model_type": "deepseek_vl", "image_token_id": 100015,  # hand-written, small dims
                            "vision_config": {"model_type": "siglip_vision_model", "hidden_size": 32,
                                              "intermediate_size": 48, "num_hidden_layers": 2,
                                              "num_attention_heads": 2, "image_size": 32, "patch_size": 4},
                            "text_config": {"model_type": "llama", "vocab_size": 1000, "hidden_size": 64,
                                            "intermediate_size": 96, "num_hidden_layers": 2,
                                            "num_attention_heads": 4, "num_key_value_heads": 2}},
    # --- got_ocr2 / deepseek_vl_hybrid / janus --- hand-written, small dims (transformers' layouts)
    "got_ocr2": lambda: {"model_type": "got_ocr2", "image_token_index": 151859, "tie_word_embeddings": True,
                         "vision_config": {"hidden_size": 32, "output_channels": 16, "num_hidden_layers": 3,
                                           "num_attention_heads": 2, "image_size": 32, "patch_size": 4,
                                           "mlp_dim": 48, "window_size": 3, "global_attn_indexes": [1]},
                         "text_config": {"model_type": "qwen2", "vocab_size": 1000, "hidden_size": 64,
                                         "intermediate_size": 96, "num_hidden_layers": 2,
                                         "num_attention_heads": 4, "num_key_value_heads": 2}},
    "deepseek_vl_hybrid": lambda: {
        "model_type": "deepseek_vl_hybrid", "image_token_id": 100015,
        "vision_config": {"model_type": "siglip_vision_model", "hidden_size": 32, "intermediate_size": 48,
                          "num_hidden_layers": 2, "num_attention_heads": 2, "image_size": 32, "patch_size": 4},
        "high_res_vision_config": {"model_type": "sam_vision_model", "hidden_size": 32, "output_channels": 8,
                                   "num_hidden_layers": 3, "num_attention_heads": 2, "image_size": 64,
                                   "patch_size": 4, "window_size": 3, "global_attn_indexes": [1]},
        "text_config": {"model_type": "llama", "vocab_size": 1000, "hidden_size": 64, "intermediate_size": 96,
                        "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2}},
    "janus": lambda: {
        "model_type": "janus", "image_token_id": 100581,
        "vision_config": {"hidden_size": 32, "num_hidden_layers": 2, "num_attention_heads": 2, "image_size": 32,
                          "patch_size": 4, "mlp_ratio": 1.5, "projection_dim": 64, "depth": 2},
        "vq_config": {"embed_dim": 8, "num_embeddings": 64, "latent_channels": 32, "base_channels": 32,
                      "channel_multiplier": [1, 2], "num_res_blocks": 1, "projection_dim": 64,
                      "num_hidden_layers": 2, "image_token_embed_dim": 64},
        "text_config": {"model_type": "llama", "vocab_size": 1000, "hidden_size": 64, "intermediate_size": 96,
                        "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2}},
    "kimi_vl": lambda: preset_config("kimi-vl-a3b-instruct"),  # --- kimi_vl ---
    "minicpmv4_6": lambda: preset_config("minicpm-v-4.6"),  # --- minicpmv --- (4.7 / OCR: the 4.6 layout)
    "minicpmv4_7": lambda: dict(preset_config("minicpm-v-4.6"), model_type="minicpmv4_7"),
    "minicpm_ocr": lambda: dict(preset_config("minicpm-v-4.6"), model_type="minicpm_ocr", downsample_mode="4x"),
    "kimi_k25": lambda: {  # --- kimi_k25 --- hand-written in the Kimi_K25Config layout (small dims)
        "model_type": "kimi_k25", "projection_hidden_size": 32, "tie_word_embeddings": False,
        "vision_config": {"model_type": "kimi_k25_vision", "patch_size": 14, "hidden_size": 32,
                          "num_attention_heads": 2, "num_hidden_layers": 2, "intermediate_size": 48,
                          "pos_emb_height": 8, "pos_emb_width": 8, "pos_emb_time": 4, "merge_kernel_size": [2, 2]},
        "text_config": {"model_type": "deepseek_v3", "vocab_size": 1000, "hidden_size": 64, "intermediate_size": 96,
                        "moe_intermediate_size": 24, "num_hidden_layers": 2, "num_attention_heads": 4,
                        "num_key_value_heads": 4, "kv_lora_rank": 16, "q_lora_rank": 24, "qk_nope_head_dim": 8,
                        "qk_rope_head_dim": 8, "v_head_dim": 16, "n_shared_experts": 1, "n_routed_experts": 4,
                        "num_experts_per_tok": 2, "first_k_dense_replace": 1, "n_group": 1, "topk_group": 1}},
    "phi4_multimodal": lambda: {  # --- phi4_multimodal --- hand-written in the Phi4MultimodalConfig layout
        "model_type": "phi4_multimodal", "vocab_size": 1000, "hidden_size": 64, "intermediate_size": 96,
        "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2, "tie_word_embeddings": False,
        "vision_config": {"model_type": "phi4_multimodal_vision", "hidden_size": 32, "intermediate_size": 48,
                          "num_hidden_layers": 2, "num_attention_heads": 2, "image_size": 64, "patch_size": 2,
                          "crop_size": 64, "feature_layer": -2},
        "audio_config": {"model_type": "phi4_multimodal_audio", "hidden_size": 32, "intermediate_size": 48,
                         "num_blocks": 2, "num_attention_heads": 2, "ext_pw_out_channel": 32,
                         "depthwise_separable_out_channel": 32, "nemo_conv_channels": 16, "input_size": 80,
                         "time_reduction": 8, "bias_max_distance": 100}},
    "nemotron_h": lambda: {  # --- nemotron_h --- (Nemotron-Nano-12B-v2 dims, shortened pattern)
        "model_type": "nemotron_h", "architectures": ["NemotronHForCausalLM"], "hidden_size": 5120,
        "vocab_size": 131072, "num_attention_heads": 40, "num_key_value_heads": 8, "head_dim": 128,
        "intermediate_size": 20480, "mamba_num_heads": 128, "mamba_head_dim": 80, "ssm_state_size": 128,
        "n_groups": 8, "conv_kernel": 4, "chunk_size": 128, "use_conv_bias": True, "use_bias": False,
        "mlp_bias": False, "attention_bias": False, "tie_word_embeddings": False,
        "hybrid_override_pattern": "M-M-M*-M-", "num_hidden_layers": 9},
    "nemotron_h_omni": lambda: {  # --- nemotron_h_omni --- (hand-written, small dims)
        "model_type": "nemotron_h_omni", "vision_hidden_size": 32, "projector_hidden_size": 48,
        "downsample_ratio": 0.5, "video_temporal_patch_size": 2,
        "vision_config": {"model_type": "radio", "hidden_size": 32, "num_hidden_layers": 2,
                          "num_attention_heads": 2, "patch_size": 4, "max_img_size": 64, "num_cls_tokens": 2,
                          "num_registers": 3, "video_temporal_patch_size": 2},
        "text_config": {"model_type": "nemotron_h", "hidden_size": 64, "vocab_size": 1000,
                        "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 16,
                        "intermediate_size": 80, "mamba_num_heads": 8, "mamba_head_dim": 12, "ssm_state_size": 16,
                        "n_groups": 2, "conv_kernel": 4, "chunk_size": 8, "hybrid_override_pattern": "M*E",
                        "num_hidden_layers": 3, "n_routed_experts": 6, "num_experts_per_tok": 2,
                        "moe_intermediate_size": 24, "moe_shared_expert_intermediate_size": 40},
        "audio_config": {"model_type": "parakeet_encoder", "hidden_size": 32, "num_hidden_layers": 2,
                         "num_attention_heads": 2, "intermediate_size": 48, "num_mel_bins": 16,
                         "subsampling_conv_channels": 8, "conv_kernel_size": 5, "projection_hidden_size": 40,
                         "layerdrop": 0.0}},
    "blip-2": lambda: {  # --- blip_2 --- Salesforce/blip2-opt-2.7b's hub layout (tower / Q-Former: class defaults)
        "model_type": "blip-2", "num_query_tokens": 32, "image_token_index": 50265,
        "vision_config": {"model_type": "blip_2_vision_model"},
        "qformer_config": {"model_type": "blip_2_qformer"},
        "text_config": {"model_type": "opt", "hidden_size": 2560, "num_hidden_layers": 32, "num_attention_heads": 32,
                        "ffn_dim": 10240, "word_embed_proj_dim": 2560, "vocab_size": 50272,
                        "max_position_embeddings": 2048}},
    "florence2": _florence2,
    "gemma3n_text": lambda: {  # --- gemma3n --- hand-written in the Gemma3nTextConfig layout (small dims)
        "model_type": "gemma3n_text", "vocab_size": 1000, "vocab_size_per_layer_input": 800, "hidden_size": 64,
        "intermediate_size": [96, 96, 128, 128, 96, 96], "num_hidden_layers": 6, "num_attention_heads": 4,
        "num_key_value_heads": 2, "head_dim": 16, "sliding_window": 8, "hidden_size_per_layer_input": 8,
        "laurel_rank": 4, "altup_num_inputs": 4, "num_kv_shared_layers": 2,
        "layer_types": ["sliding_attention", "sliding_attention", "full_attention"] * 2},
    "ovis2": lambda: {  # --- ovis2 --- hand-written in the Ovis2Config layout (small dims)
        "model_type": "ovis2", "hidden_size": 64, "vocab_size": 1000, "image_token_id": 990,
        "vision_config": {"model_type": "ovis2_vision", "hidden_size": 32, "intermediate_size": 48,
                          "num_hidden_layers": 2, "num_attention_heads": 2, "image_size": 32, "patch_size": 4,
                          "hidden_stride": 2, "vocab_size": 64, "num_visual_indicator_tokens": 5},
        "text_config": {"model_type": "qwen2", "vocab_size": 1000, "hidden_size": 64, "intermediate_size": 96,
                        "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2}},
    "ernie4_5_vl_moe": lambda: {  # --- ernie4_5_vl_moe --- hand-written in the Ernie4_5_VLMoeConfig layout
        "model_type": "ernie4_5_vl_moe", "image_token_id": 990,
        "vision_config": {"model_type": "ernie4_5_vl_moe_vision", "depth": 2, "hidden_size": 32, "num_heads": 2,
                          "intermediate_size": 48, "patch_size": 4, "spatial_merge_size": 2},
        "text_config": {"model_type": "ernie4_5_vl_moe_text", "vocab_size": 1000, "hidden_size": 64,
                        "intermediate_size": 96, "num_hidden_layers": 3, "num_attention_heads": 4,
                        "num_key_value_heads": 2, "moe_intermediate_size": [32, 16], "moe_k": 2,
                        "moe_num_experts": 4, "moe_num_shared_experts": 2}},
}
_CACHE: dict[str, dict] = {}


def sample(family: str) -> dict:
    """A fresh copy of the sample config of ``family``."""
    if family not in _CACHE:
        _CACHE[family] = _BUILDERS[family]()
    return copy.deepcopy(_CACHE[family])


SAMPLES = tuple(_BUILDERS)
