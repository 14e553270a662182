"""Parameter counts vs published figures.

Sources of the published figures (each row says which):
* "hub": the "Model size" shown on the model's Hugging Face page, computed by the Hub from the safetensors
  metadata (tensor shapes) and displayed rounded to 3 significant digits. These were recalled, not
  re-fetched while writing the tests (the Hub was not reachable here); the exact tensor-shape totals are
  also cross-checked against transformers' own modules below (``test_matches_transformers_modules``).
* "card": the model card's prose figure (e.g. Qwen3 "30.5B total / 3.3B activated").
* "tabulation": a third-party sum of the released checkpoint's tensor shapes, quoted in
  the project's shared reference notes (vlm-architectures.md sections 0 and 2; exact, not publicly
  attributable).
* "torchinfo": the public per-module torchinfo dump of Qwen2.5-VL-3B next to a copy of its config.json.
"""

from __future__ import annotations

import math

import pytest

from vlm_perf.arch import load_model, preset_config, preset_names
from vlm_perf.arch.params import (
    ParamCount,
    count_params,
    deepstack_merger_params,
    lm_active_params,
    lm_attention_params,
    lm_layer_params,
    lm_params,
    main_merger_params,
    merger_params,
    mtp_checkpoint_params,
    mtp_params,
    total_params,
    vision_block_params,
    vision_patch_embed_params,
    vision_pos_embed_params,
    vision_tower_params,
)

# ----------------------------------------------------------------------------- exact published totals

EXACT_TOTAL = {
    # meta-llama/Meta-Llama-3-8B, hub safetensors metadata: 8,030,261,248
    "llama3-8b": 8_030_261_248,
    # meta-llama/Meta-Llama-3-70B, hub safetensors metadata: 70,553,706,496
    "llama3-70b": 70_553_706_496,
    # meta-llama/Llama-3.1-405B, hub safetensors metadata: 405,853,388,800
    "llama3.1-405b": 405_853_388_800,
    # Qwen3-VL checkpoint tabulations (vlm-architectures.md section 0; verify against the checkpoint)
    "qwen3-vl-8b": 8_767_123_696,
    "qwen3-vl-30b-a3b": 31_070_754_032,
    "qwen3-vl-235b-a22b": 235_670_022_896,
}


@pytest.mark.parametrize("name", sorted(EXACT_TOTAL))
def test_exact_published_totals(name):
    assert total_params(load_model(name)) == EXACT_TOTAL[name]


# name: (published, unit used for rounding, source)
ROUNDED_TOTAL = {
    "qwen2-vl-7b": (8.29e9, 1e7, "hub Qwen/Qwen2-VL-7B-Instruct: 8.29B"),
    "qwen2.5-vl-3b": (3.75e9, 1e7, "hub Qwen/Qwen2.5-VL-3B-Instruct: 3.75B (tied head stored once)"),
    "qwen2.5-vl-7b": (8.29e9, 1e7, "hub Qwen/Qwen2.5-VL-7B-Instruct: 8.29B"),
    "qwen2.5-vl-32b": (33.5e9, 1e8, "hub Qwen/Qwen2.5-VL-32B-Instruct: 33.5B (only if untied)"),
    "qwen2.5-vl-72b": (73.4e9, 1e8, "hub Qwen/Qwen2.5-VL-72B-Instruct: 73.4B"),
    "qwen3-vl-2b": (2.13e9, 1e7, "hub Qwen/Qwen3-VL-2B-Instruct: 2.13B (card: 2B)"),
    "qwen3-vl-4b": (4.44e9, 1e7, "hub Qwen/Qwen3-VL-4B-Instruct: 4.44B"),
    "qwen3-vl-8b": (8.77e9, 1e7, "hub Qwen/Qwen3-VL-8B-Instruct: 8.77B"),
    "qwen3-vl-32b": (33.4e9, 1e8, "hub Qwen/Qwen3-VL-32B-Instruct: 33.4B (only if untied)"),
    "qwen3-vl-30b-a3b": (31.1e9, 1e8, "hub Qwen/Qwen3-VL-30B-A3B-Instruct: 31.1B"),
    "qwen3-vl-235b-a22b": (236e9, 1e9, "hub Qwen/Qwen3-VL-235B-A22B-Instruct: 236B"),
    "qwen3-30b-a3b": (30.5e9, 1e8, "card Qwen/Qwen3-30B-A3B: 30.5B total"),
    "qwen3-235b-a22b": (235e9, 1e9, "card Qwen/Qwen3-235B-A22B: 235B total"),
    "llama3-8b": (8.03e9, 1e7, "hub: 8.03B"),
    "llama3-70b": (70.6e9, 1e8, "hub: 70.6B"),
    "llama3.1-405b": (406e9, 1e9, "hub: 406B"),
    "deepseek-v3": (671e9, 1e9, "card deepseek-ai/DeepSeek-V3: 671B main model (MTP excluded)"),
    "internvl3-8b": (7.94e9, 1e7, "InternVL3-8B: 7.94B (reference notes, vlm-architectures.json)"),
    "internvl3-78b": (78.4e9, 1e8, "InternVL3-78B: 78.4B (reference notes, vlm-architectures.json)"),
    "gemma3-4b": (4.30e9, 1e7, "Gemma-3-4B-it: 4.30B (reference notes, vlm-architectures.json)"),
    "gemma3-12b": (12e9, 1e9, "Gemma-3-12B-it: 12B (model name only)"),
    "gemma3-27b": (27.4e9, 1e8, "Gemma-3-27B-it: 27.4B (reference notes, vlm-architectures.json)"),
    "llava-onevision-qwen2-7b": (8.03e9, 1e7, "LLaVA-OneVision-Qwen2-7B (llava-hf): 8.03B (reference notes)"),
    "mistral-small-3.1-24b": (24.0e9, 1e8, "Mistral-Small-3.1-24B: 24B (name); reference analytic 24.01B, untied"),
    "smolvlm2-500m": (500e6, 1e8, "SmolVLM2-500M: 500M (model name only; tied head assumed, see the preset note)"),
}
ROUNDED_TOTAL.update({  # --- minicpmv --- (exact value = transformers' meta count: tests/verify/test_minicpmv_flops.py)
    "minicpm-v-4.6": (1.300428016e9, 1, "hub openbmb/MiniCPM-V-4.6 safetensors total 1,300,428,016 (BF16)"),
})
ROUNDED_TOTAL.update({  # --- glm4v ---
    "glm-4.1v-9b-thinking": (10.3e9, 1e8, "vlm-architectures.md table: GLM-4.1V-9B 10.3B published"),
    "glm-4.5v": (108e9, 1e9, "vlm-architectures.md: GLM-4.5V 107.71B checkpoint total (exact value in test_glm4v.py)"),
    "qwen3.5-35b-a3b": (35e9, 1e9, "model name Qwen/Qwen3.5-35B-A3B: 35B"),
    "qwen3.5-397b-a17b": (397e9, 1e9, "model name Qwen/Qwen3.5-397B-A17B: 397B"),
})
ROUNDED_TOTAL.update({  # --- paligemma --- llava_next --- (exact values in test_paligemma.py / test_llava_next.py)
    "paligemma-3b-224": (2.92e9, 1e7, "PaliGemma 3B: 2.92B (model card; keras-hub 2,923,335,408 at vocab 257,152)"),
    "paligemma2-3b-224": (3.03e9, 1e7, "PaliGemma 2 3B: keras-hub 3,032,094,960 at vocab 257,152 -> 3.03B"),
    "llava-v1.6-mistral-7b": (7.57e9, 1e7, "llava-hf/llava-v1.6-mistral-7b-hf: 7.57B (hub page; reference notes)"),
    # --- gpt_oss --- (exact values = transformers' meta-device count in tests/verify/test_gpt_oss_flops.py)
    "gpt-oss-20b": (20.91e9, 1e7, "gpt-oss model card (OpenAI, 2025): 20.91B total, 3.61B active"),
    "gpt-oss-120b": (116.83e9, 1e7, "gpt-oss model card (OpenAI, 2025): 116.83B total, 5.13B active"),
    # --- mllama / llama4 --- (exact values vs transformers' meta-device count: tests/verify/test_mllama_flops.py,
    # test_llama4_flops.py); the hub pages' safetensors totals, rounded as the hub prints them
    "llama3.2-11b-vision": (10.7e9, 1e8, "hub meta-llama/Llama-3.2-11B-Vision: 10.7B params"),
    "llama3.2-90b-vision": (88.6e9, 1e8, "hub meta-llama/Llama-3.2-90B-Vision: 88.6B params"),
    "llama4-scout-17b-16e": (109e9, 1e9, "hub meta-llama/Llama-4-Scout-17B-16E model card: 109B total parameters"),
    "llama4-maverick-17b-128e": (400e9, 1e10, "Meta model card: 400B total (round; 401.58B counted, see "
                                              "tests/verify/test_llama4_flops.py)"),
    # --- qwen_omni --- thinkers only (exact values vs transformers' meta-device count: tests/verify/test_qwen_omni_presets.py)
    "qwen3-omni-30b-a3b": (31.72e9, 1e7, "thinker module dump 31,719,205,488 (ai-bot-pro/achatbot PR #196)"),
    "qwen2.5-omni-7b": (8.93e9, 1e7, "no published thinker total: its parts' published sizes (Qwen2.5-7B LM 7.62B, the "
                                     "report's 675M vision encoder, Whisper-large-v3's ~0.64B audio encoder) sum to ~8.93B"),
})
ROUNDED_TOTAL.update({  # --- kimi_vl --- (exact hand count in tests/arch/test_kimi_vl.py)
    "kimi-vl-a3b-instruct": (16.4e9, 1e8, "hub moonshotai/Kimi-VL-A3B-Instruct: 16.4B params (card: 16B total)"),
})
ROUNDED_TOTAL.update({  # --- nemotron_h --- (exact = transformers' meta count: tests/verify/families/test_presets.py)
    "nemotron-h-8b": (8e9, 1e9, "model name nvidia/Nemotron-H-8B-Base-8K: 8B"),
    "nemotron-h-56b": (56e9, 1e9, "model name nvidia/Nemotron-H-56B-Base-8K: 56B"),
    "nemotron-nano-9b-v2": (9e9, 1e9, "model name nvidia/NVIDIA-Nemotron-Nano-9B-v2: 9B"),
    "florence-2-base": (0.23e9, 1e7, "Florence-2 paper / model card: 0.23B"),
    "florence-2-large": (0.77e9, 1e7, "Florence-2 paper / model card: 0.77B"),
})


def test_every_preset_has_a_published_total():
    assert set(ROUNDED_TOTAL) == set(preset_names())


@pytest.mark.parametrize("name", sorted(ROUNDED_TOTAL))
def test_totals_within_published_rounding(name):
    published, unit, source = ROUNDED_TOTAL[name]
    got = total_params(load_model(name))
    assert round(got / unit) * unit == pytest.approx(published, rel=1e-12), f"{got:,} vs {source}"


# ----------------------------------------------------------------------------- vision towers


VISION_INCL_MERGERS = {
    # vlm-architectures.md section 2.1 (analytic; consistent with the 31,070,754,032 tabulation)
    "qwen3-vl-30b-a3b": 538_631_408,
    # vlm-architectures.md section 2.3 (analytic; equals the torchinfo-per-module sum of the released model)
    "qwen2.5-vl-7b": 676_550_144,
    "qwen2-vl-7b": 675_759_104,
    "qwen2.5-vl-3b": 668_684_288,
    "qwen2.5-vl-32b": 688_841_984,
    "qwen2.5-vl-72b": 704_573_696,
    "qwen3-vl-8b": 576_388_336,
    "qwen3-vl-235b-a22b": 576_388_336,
    "qwen3-vl-32b": 595_266_800,
}


@pytest.mark.parametrize("name", sorted(VISION_INCL_MERGERS))
def test_vision_incl_mergers(name):
    spec = load_model(name)
    assert vision_tower_params(spec) + merger_params(spec) == VISION_INCL_MERGERS[name]
    assert count_params(spec).vision == VISION_INCL_MERGERS[name]


@pytest.mark.parametrize("name,published", [("qwen3-vl-2b", 406.96e6), ("qwen3-vl-4b", 415.35e6)])
def test_small_qwen3_vl_towers(name, published):
    # vlm-architectures.md section 1.1 table, rounded to 10k
    assert round(count_params(load_model(name)).vision, -4) == published


def test_qwen3_vl_30b_a3b_vision_breakdown():
    """vlm-architectures.md section 2.1, line by line."""
    v = load_model("qwen3-vl-30b-a3b").vision
    assert vision_patch_embed_params(v) == 1_770_624
    assert vision_pos_embed_params(v) == 2_654_208
    assert vision_block_params(v) == 15_239_504
    assert main_merger_params(v) == 30_679_808
    assert deepstack_merger_params(v) == 30_686_720  # post-shuffle LayerNorm over 4608
    assert merger_params(v) == 30_679_808 + 3 * 30_686_720
    assert vision_tower_params(v) == 1_770_624 + 2_654_208 + 27 * 15_239_504


def test_qwen2_5_vl_3b_matches_public_torchinfo_dump():
    """Per-module torchinfo counts printed next to a public copy of the Qwen2.5-VL-3B config."""
    spec = load_model("qwen2.5-vl-3b")
    v, lm = spec.vision, spec.lm
    assert vision_patch_embed_params(v) == 1_505_280  # Conv3d, no bias
    assert vision_block_params(v) == 19_702_200  # Qwen2_5_VLVisionBlock
    assert main_merger_params(v) == 1_280 + 36_707_328  # Qwen2RMSNorm + Sequential
    assert lm_layer_params(lm, moe_layer=False) == 77_076_992  # Qwen2_5_VLDecoderLayer
    assert count_params(spec).lm_head == 0  # tied


def test_qwen2_5_vl_7b_block_breakdown():
    v = load_model("qwen2.5-vl-7b").vision
    assert vision_block_params(v) == 19_702_200
    assert main_merger_params(v) == 44_574_464


def test_text_only_models_have_no_vision():
    spec = load_model("llama3-8b")
    assert vision_tower_params(spec) == 0 and merger_params(spec) == 0


# ----------------------------------------------------------------------------- active parameters


def test_qwen3_vl_30b_a3b_active_lm():
    """vlm-architectures.md section 2.2."""
    lm = load_model("qwen3-vl-30b-a3b").lm
    assert lm_attention_params(lm) == 18_874_624
    assert lm_active_params(lm) == 3_041_867_776
    assert lm_active_params(lm, include_embedding=True) == 3_353_032_704
    assert lm_params(lm) == 30_532_122_624


def test_qwen3_30b_a3b_card_activated():
    # Model card: "30.5B in total and 3.3B activated". Our count incl. the embedding is 3.353B: the card
    # truncates (3.35 -> 3.3); without the embedding it would be 3.04B, which no rounding maps to 3.3.
    active = lm_active_params(load_model("qwen3-30b-a3b"), include_embedding=True)
    assert math.floor(active / 1e8) / 10 == 3.3


def test_qwen3_235b_a22b_card_activated():
    # Model card: "235B in total and 22B activated".
    active = lm_active_params(load_model("qwen3-235b-a22b"), include_embedding=True)
    assert round(active / 1e9) == 22


def test_deepseek_v3_card_activated():
    # Model card: "671B total parameters with 37B activated for each token". The card does not say whether
    # the embedding is included: without it 36.63B rounds to 37B, with it 37.55B truncates to 37B.
    lm = load_model("deepseek-v3").lm
    assert lm_active_params(lm) == 36_625_618_432
    assert round(lm_active_params(lm) / 1e9) == 37
    assert math.floor(lm_active_params(lm, include_embedding=True) / 1e9) == 37


def test_dense_active_equals_total_minus_embedding_when_untied():
    lm = load_model("llama3-8b").lm
    assert lm_active_params(lm) == lm_params(lm) - lm.vocab_size * lm.hidden_size
    assert lm_active_params(lm, include_embedding=True) == lm_params(lm)


def test_tied_head_counted_once_in_total_but_active_as_matmul():
    lm = load_model("qwen2.5-vl-3b").lm
    assert lm.tie_word_embeddings
    # total stores the shared matrix once; the per-token head matmul is active
    assert lm_active_params(lm) == lm_params(lm)
    assert lm_active_params(lm, include_embedding=True) == lm_params(lm) + lm.vocab_size * lm.hidden_size


# ----------------------------------------------------------------------------- DeepSeek-V3 + MTP


def _fp8_block_scale_count(lm) -> int:
    """weight_scale_inv tensors of the FP8 checkpoint: one F32 per 128x128 block of every FP8 Linear
    (all decoder-layer projections and experts; router, norms, embeddings, heads and eh_proj are BF16)."""
    h, H, m = lm.hidden_size, lm.num_heads, lm.mla

    def s(o, i):
        return math.ceil(o / 128) * math.ceil(i / 128)

    attn = (s(m.q_lora_rank, h) + s(H * m.qk_head_dim, m.q_lora_rank) + s(m.kv_lora_rank + m.qk_rope_head_dim, h)
            + s(H * (m.qk_nope_head_dim + m.v_head_dim), m.kv_lora_rank) + s(h, H * m.v_head_dim))
    f, fi = lm.moe.expert_intermediate_size, lm.intermediate_size
    expert = 2 * s(f, h) + s(h, f)
    moe = (lm.moe.num_experts + lm.moe.num_shared_experts) * expert
    dense = 2 * s(fi, h) + s(h, fi)
    layers = lm.num_layers * attn + lm.num_dense_layers * dense + lm.num_moe_layers * moe
    return layers + lm.num_mtp_layers * (attn + moe)


def test_deepseek_v3_main_model_671b():
    lm = load_model("deepseek-v3").lm
    # "671B of the Main Model weights" (README_WEIGHTS.md / model card); exact analytic value.
    assert lm_params(lm) == 671_026_419_200


def test_deepseek_v3_checkpoint_685b_exact():
    """Hub safetensors total for deepseek-ai/DeepSeek-V3: 684,531,386,000 (shown as "685B"); it includes the
    MTP layer 61 with its own embed_tokens / shared_head.head copies and the FP8 weight_scale_inv tensors."""
    spec = load_model("deepseek-v3")
    lm = spec.lm
    pc = count_params(spec)
    assert pc.total_with_mtp_checkpoint == total_params(spec, include_mtp="checkpoint") == 684_489_845_504
    assert pc.total_with_mtp_checkpoint + _fp8_block_scale_count(lm) == 684_531_386_000
    # card: "685B ... includes 671B of the Main Model weights and 14B of the MTP Module weights" --
    # 14B is the difference of the rounded totals; the stored MTP share is 13.46B.
    assert round((pc.total_with_mtp_checkpoint + _fp8_block_scale_count(lm)) / 1e9) == 685
    assert mtp_checkpoint_params(lm) == 13_463_426_304


def test_deepseek_v3_mtp_breakdown():
    lm = load_model("deepseek-v3").lm
    h, V = lm.hidden_size, lm.vocab_size
    layer = lm_layer_params(lm, moe_layer=True)  # layer 61 >= first_k_dense_replace: MoE
    unique = 2 * h + 2 * h * h + layer + h  # enorm, hnorm, eh_proj, decoder layer, shared_head.norm
    assert mtp_params(lm) == unique == 11_610_068_224
    assert mtp_checkpoint_params(lm) == unique + 2 * V * h
    assert lm_params(lm, include_mtp=True) == lm_params(lm) + unique
    assert total_params(load_model("deepseek-v3"), include_mtp=True) == 671_026_419_200 + unique


def test_deepseek_v3_router_has_correction_bias():
    lm = load_model("deepseek-v3").lm
    dense, moe = lm_layer_params(lm, False), lm_layer_params(lm, True)
    f = lm.moe.expert_intermediate_size
    assert moe - dense == (256 * 3 * 7168 * f + 3 * 7168 * f + 256 * 7168 + 256) - 3 * 7168 * lm.intermediate_size


def test_include_mtp_rejects_junk():
    with pytest.raises(ValueError, match="include_mtp"):
        lm_params(load_model("deepseek-v3"), include_mtp="yes")


def test_no_mtp_for_other_models():
    assert mtp_params(load_model("qwen3-30b-a3b").lm) == 0
    assert count_params(load_model("llama3-8b")).mtp_checkpoint == 0


# ----------------------------------------------------------------------------- breakdown consistency


@pytest.mark.parametrize("name", sorted(ROUNDED_TOTAL))
def test_param_count_breakdown_consistent(name):
    spec = load_model(name)
    pc = count_params(spec)
    assert isinstance(pc, ParamCount)
    assert pc.total == total_params(spec)
    assert pc.lm == lm_params(spec)
    assert pc.vision == vision_tower_params(spec) + merger_params(spec)
    # the head maps the hidden size onto the real vocabulary (Mllama's embedding has 8 extra rows the head lacks)
    assert pc.lm_head == (0 if spec.lm.tie_word_embeddings else spec.lm.hidden_size * spec.lm.vocab_size)
    assert pc.lm_embedding >= spec.lm.hidden_size * spec.lm.vocab_size
    assert 0 < pc.lm_active <= pc.lm + (pc.lm_embedding if spec.lm.tie_word_embeddings else 0)


def test_llama_attention_bias_adds_o_bias():
    """Llama's attention_bias puts a bias on q, k, v AND o (transformers LlamaAttention); Qwen2 has none on o."""
    cfg = {k: v for k, v in preset_config("llama3-8b").items() if not k.startswith("_")}
    base = load_model(cfg).lm
    biased = load_model({**cfg, "attention_bias": True}).lm
    assert lm_attention_params(biased) - lm_attention_params(base) == 4096 + 2 * 1024 + 4096
    q = load_model("qwen2.5-vl-7b").lm
    assert lm_attention_params(q) == 3584 * 3584 + 3584 + 2 * (3584 * 512 + 512) + 3584 * 3584


# ----------------------------------------------------------------------------- cross-check vs transformers


# presets of remote-code models (not in transformers 5.24): checked where said instead
REMOTE_CODE = {"kimi-vl-a3b-instruct": "kimi_vl is remote code: LM vs transformers' DeepseekV3 on the meta device "
                                       "and the tower by hand in tests/arch/test_kimi_vl.py"}


@pytest.mark.parametrize("name", sorted(ROUNDED_TOTAL))
def test_matches_transformers_modules(name):
    """Instantiate the preset with transformers on the meta device and sum the parameter shapes."""
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    if name in REMOTE_CODE:
        pytest.skip(REMOTE_CODE[name])
    cfg = {k: v for k, v in preset_config(name).items()
           if not k.startswith("_") and k not in ("auto_map", "quantization_config")}
    if "thinker_config" in cfg:  # Omni presets describe the thinker only (no talker / speech decoder)
        thinker = dict(cfg["thinker_config"])
        cls = {"qwen2_5_omni_thinker": "Qwen2_5OmniThinker",
               "qwen3_omni_moe_thinker": "Qwen3OmniMoeThinker"}[thinker.pop("model_type")]
        with torch.device("meta"):
            model = getattr(transformers, cls + "ForConditionalGeneration")(
                getattr(transformers, cls + "Config")(**thinker))
    else:
        hf_cfg = transformers.AutoConfig.for_model(**cfg)
        auto = transformers.AutoModelForImageTextToText if "vision_config" in cfg else transformers.AutoModelForCausalLM
        with torch.device("meta"):
            model = auto.from_config(hf_cfg)
    params = dict(model.named_parameters())  # tied weights appear once
    hf_total = sum(p.numel() for p in params.values())
    # Qwen-VL, InternVL, Gemma 3, LLaVA-OV (whose learned image_newline is counted with the projector)
    vision_modules = (".visual.", ".vision_tower.", ".multi_modal_projector.", ".image_newline")
    vision_modules += (".vision_model.", ".connector.")  # Idefics3 / SmolVLM
    vision_modules += (".model.merger.",)  # MiniCPM-V (a top-level merger beside vision_tower)
    hf_vision = sum(p.numel() for k, p in params.items() if any(m in f".{k}" for m in vision_modules))
    spec = load_model(name)
    expected = total_params(spec)
    if spec.lm.moe is not None and spec.lm.moe.router_bias and spec.family != "gpt_oss":
        # transformers registers DeepSeek-V3's e_score_correction_bias as a buffer, the checkpoint stores it
        # (gpt-oss's router bias is the router Linear's own bias: a parameter)
        expected -= spec.lm.num_moe_layers * spec.lm.moe.num_experts
    assert hf_total == expected
    assert hf_vision == count_params(spec).vision
