"""Config parsing: the Hugging Face config traps, layouts and error messages."""

from __future__ import annotations

import copy
import json
import re

import pytest

from vlm_perf.arch import load_config_file, load_model, preset_config, spec_from_config
from vlm_perf.arch.params import count_params, total_params


def raw(name: str) -> dict:
    """A preset's config without the vlm-perf provenance keys."""
    return {k: v for k, v in copy.deepcopy(preset_config(name)).items() if not k.startswith("_vlm_perf")}


# ----------------------------------------------------------------------------- trap 1: Qwen2-VL widths


def test_qwen2_vl_embed_dim_is_vit_width_and_hidden_size_is_merger_output():
    v = load_model("qwen2-vl-7b").vision
    assert v.hidden_size == 1280  # vision_config.embed_dim
    assert v.intermediate_size == 1280 * 4  # embed_dim * mlp_ratio
    assert v.out_hidden_size == 3584  # vision_config.hidden_size
    assert not v.mlp_gated and v.norm == "layernorm" and v.head_dim == 80


def test_qwen2_vl_hidden_size_only_moves_merger_output():
    cfg = raw("qwen2-vl-7b")
    cfg["vision_config"]["hidden_size"] = 1000
    v = spec_from_config(cfg).vision
    assert (v.hidden_size, v.intermediate_size, v.out_hidden_size) == (1280, 5120, 1000)


def test_qwen2_vl_without_embed_dim_is_an_error_not_a_fallback_to_hidden_size():
    cfg = raw("qwen2-vl-7b")
    del cfg["vision_config"]["embed_dim"]
    with pytest.raises(ValueError, match=r"vision_config\.embed_dim"):
        spec_from_config(cfg)


def test_qwen2_vl_mlp_ratio_required():
    cfg = raw("qwen2-vl-7b")
    del cfg["vision_config"]["mlp_ratio"]
    with pytest.raises(ValueError, match=r"vision_config\.mlp_ratio"):
        spec_from_config(cfg)


# ----------------------------------------------------------------------------- trap 2: in_chans / in_channels


def test_in_chans_read_for_qwen2_5_vl():
    cfg = raw("qwen2.5-vl-7b")
    assert "in_chans" in cfg["vision_config"] and "in_channels" not in cfg["vision_config"]
    cfg["vision_config"]["in_chans"] = 1
    v = spec_from_config(cfg).vision
    assert v.in_channels == 1 and v.patch_volume == 1 * 2 * 14 * 14


def test_in_channels_read_for_qwen3_vl():
    cfg = raw("qwen3-vl-8b")
    cfg["vision_config"]["in_channels"] = 4
    assert spec_from_config(cfg).vision.in_channels == 4


def test_both_channel_keys_agree():
    cfg = raw("qwen2.5-vl-3b")
    cfg["vision_config"]["in_channels"] = 3
    assert spec_from_config(cfg).vision.in_channels == 3


def test_missing_channel_key_names_both_spellings():
    cfg = raw("qwen2.5-vl-7b")
    del cfg["vision_config"]["in_chans"]
    with pytest.raises(ValueError, match=r"vision_config\.in_channels or vision_config\.in_chans"):
        spec_from_config(cfg)


# ----------------------------------------------------------------------------- trap 3: flat vs nested


def _save_pretrained_qwen2_5_vl_3b() -> dict:
    """What a transformers >= 4.52 save_pretrained writes for Qwen2.5-VL-3B (built by hand): LM fields under
    text_config (model_type qwen2_5_vl_text, with its own tie flag), duplicates at the top level minus the
    tie flag, and a vision_config carrying both channel spellings."""
    flat = raw("qwen2.5-vl-3b")
    lm_keys = ["attention_dropout", "bos_token_id", "eos_token_id", "hidden_act", "hidden_size",
               "initializer_range", "intermediate_size", "max_position_embeddings", "max_window_layers",
               "num_attention_heads", "num_hidden_layers", "num_key_value_heads", "rms_norm_eps",
               "rope_scaling", "rope_theta", "sliding_window", "use_cache", "use_sliding_window", "vocab_size"]
    text = {k: flat[k] for k in lm_keys}
    text.update(model_type="qwen2_5_vl_text", tie_word_embeddings=True, torch_dtype="bfloat16",
                architectures=["Qwen2_5_VLForConditionalGeneration"])
    vision = dict(flat["vision_config"], in_channels=3, model_type="qwen2_5_vl", initializer_range=0.02)
    nested = {k: v for k, v in flat.items() if k not in ("vision_config", "tie_word_embeddings")}
    nested.update(text_config=text, vision_config=vision, transformers_version="4.52.4")
    return nested


def test_flat_and_nested_qwen2_5_vl_give_the_same_spec():
    flat = spec_from_config(raw("qwen2.5-vl-3b"))
    nested = spec_from_config(_save_pretrained_qwen2_5_vl_3b())
    assert nested.lm == flat.lm
    assert nested.vision == flat.vision
    assert total_params(nested) == total_params(flat) == 3_754_622_976


def test_nested_only_text_config_holds_lm_fields():
    cfg = _save_pretrained_qwen2_5_vl_3b()
    for key in list(cfg["text_config"]):
        if key != "model_type":
            cfg.pop(key, None)  # nothing duplicated at the top level
    spec = spec_from_config(cfg)
    assert spec.lm == spec_from_config(raw("qwen2.5-vl-3b")).lm


def test_nested_text_config_wins_over_stale_top_level_values():
    cfg = _save_pretrained_qwen2_5_vl_3b()
    cfg["num_hidden_layers"] = 1  # a stale top-level duplicate
    assert spec_from_config(cfg).lm.num_layers == 36


def test_model_type_from_top_level_for_nested_configs():
    cfg = raw("qwen3-vl-8b")
    assert cfg["text_config"]["model_type"] == "qwen3_vl_text"
    assert spec_from_config(cfg).model_type == "qwen3_vl"


# ----------------------------------------------------------------------------- trap 4: Qwen3-VL-MoE tie flag


def test_qwen3_vl_moe_top_level_tie_flag_wins():
    cfg = raw("qwen3-vl-30b-a3b")
    cfg["text_config"]["tie_word_embeddings"] = True  # what transformers v5 prints for the text sub-config
    spec = spec_from_config(cfg)
    assert spec.lm.tie_word_embeddings is False
    assert count_params(spec).lm_head == 151936 * 2048
    assert total_params(spec) == 31_070_754_032


def test_top_level_tie_true_ties():
    cfg = raw("qwen3-vl-30b-a3b")
    cfg["tie_word_embeddings"] = True
    assert total_params(spec_from_config(cfg)) == 31_070_754_032 - 151936 * 2048


def test_qwen3_vl_moe_num_local_experts_alias():
    cfg = raw("qwen3-vl-30b-a3b")
    cfg["text_config"]["num_local_experts"] = cfg["text_config"].pop("num_experts")
    assert spec_from_config(cfg).lm.moe.num_experts == 128


def test_qwen3_vl_moe_dense_intermediate_size_not_needed():
    cfg = raw("qwen3-vl-30b-a3b")
    del cfg["text_config"]["intermediate_size"]
    assert total_params(spec_from_config(cfg)) == 31_070_754_032


# ----------------------------------------------------------------------------- head_dim and MoE layout


def test_head_dim_read_not_derived():
    lm = load_model("qwen3-vl-32b").lm
    assert lm.head_dim == 128 != lm.hidden_size // lm.num_heads
    assert lm.q_width == 8192


def test_mlp_only_layers_and_sparse_step():
    cfg = raw("qwen3-30b-a3b")
    cfg["mlp_only_layers"] = [0, 47]
    lm = spec_from_config(cfg).lm
    assert lm.num_moe_layers == 46 and 0 not in lm.moe_layers and 47 not in lm.moe_layers
    cfg = raw("qwen3-30b-a3b")
    cfg["decoder_sparse_step"] = 2
    assert spec_from_config(cfg).lm.moe_layers == tuple(range(1, 48, 2))


# ----------------------------------------------------------------------------- errors


@pytest.mark.parametrize("name,section,key", [
    ("qwen3-vl-8b", "text_config", "num_hidden_layers"),
    ("qwen3-vl-30b-a3b", "text_config", "moe_intermediate_size"),
    ("qwen3-vl-8b", "vision_config", "depth"),
    ("qwen2.5-vl-7b", "", "hidden_size"),
    ("qwen2.5-vl-7b", "vision_config", "out_hidden_size"),
    ("qwen2.5-vl-7b", "vision_config", "fullatt_block_indexes"),
    ("llama3-8b", "", "vocab_size"),
    ("deepseek-v3", "", "kv_lora_rank"),
    ("deepseek-v3", "", "intermediate_size"),
])
def test_missing_needed_field_is_named(name, section, key):
    cfg = raw(name)
    target = cfg[section] if section else cfg
    del target[key]
    label = f"{section}.{key}" if section else key
    with pytest.raises(ValueError, match=r"(?<![\w.])" + re.escape(label)):
        spec_from_config(cfg)


def test_missing_vision_config_for_a_vlm():
    cfg = raw("qwen3-vl-4b")
    del cfg["vision_config"]
    with pytest.raises(ValueError, match="vision_config"):
        spec_from_config(cfg)


def test_non_integer_dimension_rejected():
    cfg = raw("llama3-8b")
    cfg["hidden_size"] = 4096.5
    with pytest.raises(ValueError, match="hidden_size"):
        spec_from_config(cfg)


@pytest.mark.parametrize("model_type", ["fuyu", "kosmos-2", None])  # internvl, gemma3, llava_onevision: supported since issue 11; paligemma since issue 21; mllama since issue 21; blip-2 since issue 33
def test_unsupported_model_type(model_type):
    cfg = raw("llama3-8b")
    cfg["model_type"] = model_type
    with pytest.raises(ValueError, match=r"unsupported model_type.*supported: .*qwen3_vl_moe"):
        spec_from_config(cfg)


@pytest.mark.parametrize("typo,suggestion", [
    ("qwen3-vl-30b", "qwen3-vl-30b-a3b"),
    ("qwen2.5-vl-8b", "qwen2.5-vl-7b"),  # "qwen25-vl-7b" now resolves (punctuation variant, test_presets_loader)
    ("llama3-8", "llama3-8b"),
    ("deepseek-v3.1", "deepseek-v3"),
])
def test_unknown_preset_suggests_close_names(typo, suggestion):
    with pytest.raises(ValueError, match=r"unknown model preset.*did you mean .*" + re.escape(suggestion)):
        load_model(typo)


def test_unknown_preset_without_close_match_lists_presets():
    with pytest.raises(ValueError, match="known presets: .*qwen3-vl-8b"):
        load_model("zzzz")


# ----------------------------------------------------------------------------- files


def test_load_from_file_and_directory(tmp_path):
    path = tmp_path / "config.json"
    path.write_text(json.dumps(raw("qwen3-vl-4b")))
    from_file = load_model(str(path))
    from_dir = load_model(tmp_path)
    assert from_file.lm == from_dir.lm == load_model("qwen3-vl-4b").lm
    assert from_file.vision == load_model("qwen3-vl-4b").vision
    assert load_config_file(tmp_path) == raw("qwen3-vl-4b")


def test_load_from_dict():
    assert load_model(raw("llama3-70b")).lm == load_model("llama3-70b").lm


def test_bad_json_reports_line(tmp_path):
    path = tmp_path / "config.json"
    path.write_text('{\n  "model_type": "llama",\n  oops\n}')
    with pytest.raises(ValueError, match=r"config\.json:3: not valid JSON"):
        load_config_file(path)


def test_missing_file(tmp_path):
    with pytest.raises(ValueError, match="no such config file"):
        load_model(str(tmp_path / "nope" / "config.json"))


# ----------------------------------------------------------------------------- parser issues (reported)
#
# hf_config.py's docstring promises "no silent default changes a result (the only defaults are the
# transformers class defaults for optional switches)". These optional keys fall back to a value that is
# NOT the transformers class default, silently changing parameter counts / FLOPs. Expected behaviour:
# use the class default, or raise ValueError naming the key.


_SILENT_DEFAULTS = [
    # (preset, section, key, transformers class default)
    ("qwen3-vl-8b", "vision_config", "num_position_embeddings", 2304),  # parser: 0 -> drops 2.65M-param table
    ("qwen3-vl-8b", "vision_config", "deepstack_visual_indexes", [8, 16, 24]),  # parser: () -> drops 3 mergers
    ("deepseek-v3", "", "first_k_dense_replace", 3),  # parser: 0 -> all 61 layers MoE
    ("deepseek-v3", "", "n_shared_experts", 1),  # parser: 0 -> drops shared experts
    ("deepseek-v3", "", "num_nextn_predict_layers", 1),  # parser: 0 (DeepseekV3Config default is 1)
    ("qwen2.5-vl-7b", "vision_config", "window_size", 112),  # parser: None -> all layers full attention
]


@pytest.mark.parametrize("name,section,key,class_default", _SILENT_DEFAULTS)
def test_omitted_optional_key_uses_class_default_or_errors(name, section, key, class_default):
    cfg = raw(name)
    target = cfg[section] if section else cfg
    assert target[key] == class_default  # the preset uses the class default value
    del target[key]
    try:
        spec = spec_from_config(cfg)
    except ValueError as exc:
        assert key in str(exc)
        return
    reference = spec_from_config(raw(name))
    assert spec.lm == reference.lm and spec.vision == reference.vision
