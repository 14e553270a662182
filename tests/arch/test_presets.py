"""Shipped presets: names, hub layout (keys and nesting as published), and the parsed dimensions."""

from __future__ import annotations

import pytest

from vlm_perf.arch import load_model, preset_config, preset_names

EXPECTED = [
    "qwen2-vl-7b", "qwen2.5-vl-3b", "qwen2.5-vl-7b", "qwen2.5-vl-32b", "qwen2.5-vl-72b",
    "qwen3-vl-2b", "qwen3-vl-4b", "qwen3-vl-8b", "qwen3-vl-32b", "qwen3-vl-30b-a3b", "qwen3-vl-235b-a22b",
    "qwen3-30b-a3b", "qwen3-235b-a22b", "llama3-8b", "llama3-70b", "llama3.1-405b", "deepseek-v3",
    "internvl3-8b", "internvl3-78b",
    "gemma3-4b", "gemma3-12b", "gemma3-27b", "llava-onevision-qwen2-7b",
    "mistral-small-3.1-24b", "smolvlm2-500m",
]
OTHER_VL = ["glm-4.1v-9b-thinking", "glm-4.5v"]  # --- glm4v --- (shapes checked in tests/arch/test_glm4v.py)
EXPECTED += OTHER_VL
FLAT_VL = ["qwen2-vl-7b", "qwen2.5-vl-3b", "qwen2.5-vl-7b", "qwen2.5-vl-32b", "qwen2.5-vl-72b"]
INTERNVL = ["internvl3-8b", "internvl3-78b"]
GEMMA3_LLAVA_OV = ["gemma3-4b", "gemma3-12b", "gemma3-27b", "llava-onevision-qwen2-7b"]
MISTRAL_IDEFICS = ["mistral-small-3.1-24b", "smolvlm2-500m"]
NESTED_VL = ["qwen3-vl-2b", "qwen3-vl-4b", "qwen3-vl-8b", "qwen3-vl-32b", "qwen3-vl-30b-a3b", "qwen3-vl-235b-a22b"]
QWEN3_5 = ["qwen3.5-35b-a3b", "qwen3.5-397b-a17b"]  # tests/arch/test_qwen3_5.py
EXPECTED += QWEN3_5
PALIGEMMA = ["paligemma-3b-224", "paligemma2-3b-224"]  # tests/verify/test_paligemma_flops.py
EXPECTED += PALIGEMMA
LLAVA_NEXT = ["llava-v1.6-mistral-7b"]  # tests/verify/test_llava_next_flops.py, tests/arch/test_llava_next.py
EXPECTED += LLAVA_NEXT
GPT_OSS = ["gpt-oss-20b", "gpt-oss-120b"]  # tests/verify/test_gpt_oss_flops.py (meta-device count)
EXPECTED += GPT_OSS
MLLAMA = ["llama3.2-11b-vision", "llama3.2-90b-vision"]  # tests/verify/test_mllama_flops.py (meta-device count)
EXPECTED += MLLAMA
LLAMA4 = ["llama4-scout-17b-16e", "llama4-maverick-17b-128e"]  # tests/verify/test_llama4_flops.py (meta-device count)
EXPECTED += LLAMA4
OMNI = ["qwen2.5-omni-7b", "qwen3-omni-30b-a3b"]  # thinker_config only; tests/verify/test_qwen_omni_presets.py
EXPECTED += OMNI
KIMI_VL = ["kimi-vl-a3b-instruct"]  # tests/arch/test_kimi_vl.py
EXPECTED += KIMI_VL
MINICPMV = ["minicpm-v-4.6"]  # tests/verify/test_minicpmv_flops.py (hub total = meta-device count)
EXPECTED += MINICPMV
NEMOTRON_H = ["nemotron-h-8b", "nemotron-h-56b", "nemotron-nano-9b-v2"]  # LM only; tests/verify/families/test_presets.py
EXPECTED += NEMOTRON_H
FLORENCE2 = ["florence-2-base", "florence-2-large"]  # tests/verify/test_florence2_flops.py (meta-device count)
EXPECTED += FLORENCE2
NO_DTYPE_HUB = set(GPT_OSS)  # the hub files state no torch_dtype (MXFP4 experts, quantization_config)
NO_DTYPE_HUB |= set(MINICPMV)  # transformers 5.7 wrote no dtype key into MiniCPM-V 4.6's config.json
NO_DTYPE_HUB |= set(FLORENCE2)  # architecture fields only: the dtype keys were not re-read (they do not change FLOPs)
FLOAT32_HUB = {"paligemma-3b-224"}  # the hub file says float32 (PaliGemma 1 was released in float32)


def test_preset_names_exact():
    assert sorted(preset_names()) == sorted(EXPECTED)


@pytest.mark.parametrize("name", EXPECTED)
def test_every_preset_loads(name):
    spec = load_model(name)
    assert spec.name == name
    assert spec.source == f"preset:{name}"
    assert spec.lm.num_layers > 0 and spec.lm.vocab_size > 0
    assert spec.is_vlm == (name in FLAT_VL + NESTED_VL + INTERNVL + OTHER_VL + GEMMA3_LLAVA_OV + QWEN3_5
                           + MISTRAL_IDEFICS + PALIGEMMA + LLAVA_NEXT + MLLAMA + LLAMA4 + OMNI + KIMI_VL + MINICPMV
                           + FLORENCE2)


@pytest.mark.parametrize("name", EXPECTED)
def test_preset_provenance_and_core_keys(name):
    cfg = preset_config(name)
    src = cfg["_vlm_perf_source"]
    assert src.startswith("https://huggingface.co/") and src.endswith("/blob/main/config.json")
    assert isinstance(cfg["_vlm_perf_note"], str) and cfg["_vlm_perf_note"]
    assert isinstance(cfg["architectures"], list) and cfg["architectures"]
    assert "model_type" in cfg
    lm = cfg.get("text_config", cfg.get("thinker_config", {}).get("text_config", cfg))  # Omni: the thinker's
    # Qwen3-VL configs carry the dtype as text_config.dtype (transformers >= 4.56); others torch_dtype.
    assert lm.get("torch_dtype", lm.get("dtype")) == ("float32" if name in FLOAT32_HUB
                                                      else None if name in NO_DTYPE_HUB else "bfloat16")
    assert "vocab_size" in lm
    assert "tie_word_embeddings" in cfg


def test_case_and_whitespace_insensitive_names():
    assert load_model(" Qwen3-VL-30B-A3B ").lm == load_model("qwen3-vl-30b-a3b").lm


@pytest.mark.parametrize("name", FLAT_VL)
def test_qwen2_family_layout_is_flat(name):
    cfg = preset_config(name)
    assert "text_config" not in cfg
    assert "hidden_size" in cfg and "num_hidden_layers" in cfg
    assert cfg["vision_config"]["in_chans"] == 3 and "in_channels" not in cfg["vision_config"]


def test_qwen2_vl_uses_embed_dim_and_mlp_ratio():
    vc = preset_config("qwen2-vl-7b")["vision_config"]
    assert vc["embed_dim"] == 1280 and vc["mlp_ratio"] == 4 and vc["hidden_size"] == 3584
    assert "intermediate_size" not in vc and "out_hidden_size" not in vc


@pytest.mark.parametrize("name", NESTED_VL)
def test_qwen3_vl_layout_is_nested(name):
    cfg = preset_config(name)
    assert "hidden_size" not in cfg and "num_hidden_layers" in cfg["text_config"]
    assert cfg["vision_config"]["in_channels"] == 3 and "in_chans" not in cfg["vision_config"]
    assert cfg["text_config"]["head_dim"] == 128


@pytest.mark.parametrize("name", ["qwen3-vl-30b-a3b", "qwen3-vl-235b-a22b"])
def test_qwen3_vl_moe_tie_flag_lives_at_top_level(name):
    cfg = preset_config(name)
    assert cfg["tie_word_embeddings"] is False
    assert "tie_word_embeddings" not in cfg["text_config"]  # as released
    assert cfg["model_type"] == "qwen3_vl_moe"


# name: (layers, hidden, heads, kv, head_dim, intermediate, vocab, tied)
LM_DIMS = {
    "qwen2-vl-7b": (28, 3584, 28, 4, 128, 18944, 152064, False),
    "qwen2.5-vl-3b": (36, 2048, 16, 2, 128, 11008, 151936, True),
    "qwen2.5-vl-7b": (28, 3584, 28, 4, 128, 18944, 152064, False),
    "qwen2.5-vl-32b": (64, 5120, 40, 8, 128, 27648, 152064, False),
    "qwen2.5-vl-72b": (80, 8192, 64, 8, 128, 29568, 152064, False),
    "qwen3-vl-2b": (28, 2048, 16, 8, 128, 6144, 151936, True),
    "qwen3-vl-4b": (36, 2560, 32, 8, 128, 9728, 151936, True),
    "qwen3-vl-8b": (36, 4096, 32, 8, 128, 12288, 151936, False),
    "qwen3-vl-32b": (64, 5120, 64, 8, 128, 25600, 151936, False),
    "qwen3-vl-30b-a3b": (48, 2048, 32, 4, 128, 6144, 151936, False),
    "qwen3-vl-235b-a22b": (94, 4096, 64, 4, 128, 12288, 151936, False),
    "qwen3-30b-a3b": (48, 2048, 32, 4, 128, 6144, 151936, False),
    "qwen3-235b-a22b": (94, 4096, 64, 4, 128, 12288, 151936, False),
    "llama3-8b": (32, 4096, 32, 8, 128, 14336, 128256, False),
    "llama3-70b": (80, 8192, 64, 8, 128, 28672, 128256, False),
    "llama3.1-405b": (126, 16384, 128, 8, 128, 53248, 128256, False),
    "deepseek-v3": (61, 7168, 128, 128, 128, 18432, 129280, False),
    "internvl3-8b": (28, 3584, 28, 4, 128, 18944, 151674, False),  # Qwen2.5-7B LM
    "internvl3-78b": (80, 8192, 64, 8, 128, 29568, 151674, False),  # Qwen2.5-72B LM
    "gemma3-4b": (34, 2560, 8, 4, 256, 10240, 262208, True),
    "gemma3-12b": (48, 3840, 16, 8, 256, 15360, 262208, True),
    "gemma3-27b": (62, 5376, 32, 16, 128, 21504, 262208, True),
    "llava-onevision-qwen2-7b": (28, 3584, 28, 4, 128, 18944, 152064, False),  # Qwen2-7B LM
    "mistral-small-3.1-24b": (40, 5120, 32, 8, 128, 32768, 131072, False),
    "smolvlm2-500m": (32, 960, 15, 5, 64, 2560, 49280, True),
}
LM_DIMS.update({  # --- glm4v --- (hub config.json values)
    "glm-4.1v-9b-thinking": (40, 4096, 32, 2, 128, 13696, 151552, False),
    "glm-4.5v": (46, 4096, 96, 8, 128, 10944, 151552, False),
    "qwen3.5-35b-a3b": (40, 2048, 16, 2, 256, 0, 248320, False),
    "qwen3.5-397b-a17b": (60, 4096, 32, 2, 256, 0, 248320, False),
    "paligemma-3b-224": (18, 2048, 8, 1, 256, 16384, 257216, True),  # Gemma-2B LM (GemmaConfig head_dim 256)
    "paligemma2-3b-224": (26, 2304, 8, 4, 256, 9216, 257216, True),  # Gemma 2 2B LM
    "llava-v1.6-mistral-7b": (32, 4096, 32, 8, 128, 14336, 32064, False),  # MistralConfig defaults fill the rest
    "gpt-oss-20b": (24, 2880, 64, 8, 64, 0, 201088, False),  # every layer MoE: no dense width
    "gpt-oss-120b": (36, 2880, 64, 8, 64, 0, 201088, False),
    "llama3.2-11b-vision": (40, 4096, 32, 8, 128, 14336, 128256, False),  # Llama 3.1 8B dims + 8 cross layers
    "llama3.2-90b-vision": (100, 8192, 64, 8, 128, 28672, 128256, False),  # Llama 3.1 70B dims + 20 cross layers
    "llama4-scout-17b-16e": (48, 5120, 40, 8, 128, 16384, 202048, False),  # dense width intermediate_size_mlp (unused)
    "llama4-maverick-17b-128e": (48, 5120, 40, 8, 128, 16384, 202048, False),  # dense MLP on even layers
    "qwen2.5-omni-7b": (28, 3584, 28, 4, 128, 18944, 152064, False),  # thinker: Qwen2.5-7B LM
    "qwen3-omni-30b-a3b": (48, 2048, 32, 4, 128, 768, 152064, False),  # thinker: Qwen3-30B-A3B-like MoE LM
    "kimi-vl-a3b-instruct": (27, 2048, 16, 16, 128, 11264, 163840, False),  # MLA: head_dim = v_head_dim
    "minicpm-v-4.6": (24, 1024, 8, 2, 256, 3584, 248094, True),  # Qwen3.5 text LM, tied head
    "nemotron-h-8b": (52, 4096, 32, 8, 128, 21504, 131072, False),  # hybrid: 24 Mamba-2, 4 attention, 24 MLP
    "nemotron-h-56b": (118, 8192, 64, 8, 128, 32768, 131072, False),
    "nemotron-nano-9b-v2": (56, 4480, 40, 8, 128, 15680, 131072, False),
    # BART LMs: num_layers = encoder + decoder layers, intermediate = the encoder FFN
    "florence-2-base": (12, 768, 12, 12, 64, 3072, 51328, True),
    "florence-2-large": (24, 1024, 16, 16, 64, 4096, 51328, True),
})


@pytest.mark.parametrize("name", EXPECTED)
def test_lm_dims(name):
    lm = load_model(name).lm
    got = (lm.num_layers, lm.hidden_size, lm.num_heads, lm.num_kv_heads, lm.head_dim, lm.intermediate_size,
           lm.vocab_size, lm.tie_word_embeddings)
    assert got == LM_DIMS[name]


# name: (depth, h_v, i_v, gated, patch, out, norm, window, deepstack, pos_table, conv_bias)
VISION_DIMS = {
    "qwen2-vl-7b": (32, 1280, 5120, False, 14, 3584, "layernorm", None, (), 0, False),
    "qwen2.5-vl-3b": (32, 1280, 3420, True, 14, 2048, "rmsnorm", 112, (), 0, False),
    "qwen2.5-vl-7b": (32, 1280, 3420, True, 14, 3584, "rmsnorm", 112, (), 0, False),
    "qwen2.5-vl-32b": (32, 1280, 3456, True, 14, 5120, "rmsnorm", 112, (), 0, False),
    "qwen2.5-vl-72b": (32, 1280, 3456, True, 14, 8192, "rmsnorm", 112, (), 0, False),
    "qwen3-vl-2b": (24, 1024, 4096, False, 16, 2048, "layernorm", None, (5, 11, 17), 2304, True),
    "qwen3-vl-4b": (24, 1024, 4096, False, 16, 2560, "layernorm", None, (5, 11, 17), 2304, True),
    "qwen3-vl-8b": (27, 1152, 4304, False, 16, 4096, "layernorm", None, (8, 16, 24), 2304, True),
    "qwen3-vl-32b": (27, 1152, 4304, False, 16, 5120, "layernorm", None, (8, 16, 24), 2304, True),
    "qwen3-vl-30b-a3b": (27, 1152, 4304, False, 16, 2048, "layernorm", None, (8, 16, 24), 2304, True),
    "qwen3-vl-235b-a22b": (27, 1152, 4304, False, 16, 4096, "layernorm", None, (8, 16, 24), 2304, True),
}


@pytest.mark.parametrize("name", sorted(VISION_DIMS))
def test_vision_dims(name):
    v = load_model(name).vision
    got = (v.depth, v.hidden_size, v.intermediate_size, v.mlp_gated, v.patch_size, v.out_hidden_size, v.norm,
           v.window_size, v.deepstack_visual_indexes, v.num_position_embeddings, v.patch_embed_bias)
    assert got == VISION_DIMS[name]
    assert v.num_heads == 16 and v.in_channels == 3 and v.temporal_patch_size == 2 and v.spatial_merge_size == 2
    assert v.out_hidden_size == load_model(name).lm.hidden_size
    if v.window_size:
        assert v.fullatt_block_indexes == (7, 15, 23, 31) and v.window_side_merged == 4


@pytest.mark.parametrize("name,experts,top_k,width,moe_layers", [
    ("qwen3-vl-30b-a3b", 128, 8, 768, 48),
    ("qwen3-vl-235b-a22b", 128, 8, 1536, 94),
    ("qwen3-30b-a3b", 128, 8, 768, 48),
    ("qwen3-235b-a22b", 128, 8, 1536, 94),
    ("deepseek-v3", 256, 8, 2048, 58),
])
def test_moe_fields(name, experts, top_k, width, moe_layers):
    lm = load_model(name).lm
    assert (lm.moe.num_experts, lm.moe.top_k, lm.moe.expert_intermediate_size) == (experts, top_k, width)
    assert lm.num_moe_layers == moe_layers


def test_deepseek_v3_mla_mtp_and_router():
    lm = load_model("deepseek-v3").lm
    assert lm.moe_layers == tuple(range(3, 61))
    assert (lm.moe.num_shared_experts, lm.moe.shared_intermediate_size, lm.moe.router_bias) == (1, 2048, True)
    m = lm.mla
    assert (m.q_lora_rank, m.kv_lora_rank, m.qk_nope_head_dim, m.qk_rope_head_dim, m.v_head_dim) == (
        1536, 512, 128, 64, 128)
    assert lm.num_mtp_layers == 1
    assert lm.q_width == 128 * 192


@pytest.mark.parametrize("name,qkv_bias,qk_norm", [
    ("qwen2-vl-7b", True, False), ("qwen2.5-vl-7b", True, False), ("qwen3-vl-8b", False, True),
    ("qwen3-30b-a3b", False, True), ("llama3-8b", False, False), ("deepseek-v3", False, False),
])
def test_attention_flags(name, qkv_bias, qk_norm):
    lm = load_model(name).lm
    assert (lm.qkv_bias, lm.qk_norm) == (qkv_bias, qk_norm)



# InternViT-300M (InternVL3-8B) and InternViT-6B (InternVL3-78B): (depth, width, heads, MLP, qkv bias, qk norm,
# norm, position table, CLS per tile, merge = 1/downsample_ratio)
INTERNVL_VISION = {
    "internvl3-8b": (24, 1024, 16, 4096, True, "none", "layernorm", 32 * 32 + 1, 1, 2),
    "internvl3-78b": (45, 3200, 25, 12800, False, "rmsnorm", "rmsnorm", 32 * 32 + 1, 1, 2),
}


@pytest.mark.parametrize("name", sorted(INTERNVL_VISION))
def test_internvl_vision_dims(name):
    from vlm_perf.arch.blocks import VisionLayers

    spec = load_model(name)
    v = spec.vision
    layers = next(b for b in spec.blocks if isinstance(b, VisionLayers))
    got = (v.depth, v.hidden_size, v.num_heads, v.intermediate_size, layers.qkv_bias, layers.qk_norm, v.norm,
           v.num_position_embeddings, v.cls_per_frame, v.spatial_merge_size)
    assert got == INTERNVL_VISION[name]
    assert (v.patch_size, v.temporal_patch_size, v.patch_embed_bias, layers.cls, layers.layer_scale) == (14, 1, True,
                                                                                                       True, True)
