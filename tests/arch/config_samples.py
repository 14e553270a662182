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
}
_CACHE: dict[str, dict] = {}


def sample(family: str) -> dict:
    """A fresh copy of the sample config of ``family``."""
    if family not in _CACHE:
        _CACHE[family] = _BUILDERS[family]()
    return copy.deepcopy(_CACHE[family])


SAMPLES = tuple(_BUILDERS)
