"""gpt_oss config reading: class defaults, layer types, and one-line typed refusals (FLOPs and parameters are
measured against transformers in tests/verify/test_gpt_oss_flops.py)."""

from __future__ import annotations

import pytest

from vlm_perf.arch import preset_config, spec_from_config
from vlm_perf.errors import ConfigError


def _cfg(**over):
    cfg = {k: v for k, v in preset_config("gpt-oss-20b").items() if not k.startswith("_")}
    cfg.update(over)
    return {k: v for k, v in cfg.items() if v is not ...}


def test_preset_layers_alternate_sliding_first():
    lm = spec_from_config(_cfg()).lm
    assert lm.sliding_window == 128 and lm.sliding_layers == tuple(range(0, 24, 2))
    assert lm.moe_layers == tuple(range(24)) and lm.moe.top_k == 4 and lm.qkv_bias


def test_class_defaults_when_fields_are_absent():
    """GptOssConfig: head_dim 64, 8 KV heads, window 128, attention bias, even layers sliding."""
    lm = spec_from_config(_cfg(layer_types=..., head_dim=..., num_key_value_heads=..., sliding_window=...,
                               attention_bias=...)).lm
    assert (lm.head_dim, lm.num_kv_heads, lm.sliding_window, lm.qkv_bias) == (64, 8, 128, True)
    assert lm.sliding_layers == tuple(range(0, 24, 2))


def test_null_window_means_every_layer_full():
    lm = spec_from_config(_cfg(sliding_window=None)).lm
    assert lm.sliding_window is None and lm.sliding_layers == ()


@pytest.mark.parametrize("over, match", [
    ({"layer_types": ["sliding_attention", "chunked_attention"] * 12}, "layer_types has 'chunked_attention'"),
    ({"num_experts_per_tok": 33}, "num_experts_per_tok"),
    ({"num_local_experts": None}, "num_local_experts"),
])
def test_bad_configs_are_one_line_config_errors(over, match):
    with pytest.raises(ConfigError, match=match) as err:
        spec_from_config(_cfg(**over))
    assert "\n" not in str(err.value)


def test_gpt_oss_20b_training_by_hand():
    """One 4096-token sequence, training (x3), causal half, written out from the published shapes: 24 layers,
    hidden 2880, 64 q / 8 kv heads x 64, 32 experts top-4 of width 2880, vocab 201088, window 128 on 12 layers."""
    from vlm_perf.arch import load_model
    from vlm_perf.flops import compute_flops
    from vlm_perf.stats import BatchStats

    spec = load_model("gpt-oss-20b")
    s, h, q, kv, layers = 4096, 2880, 64 * 64, 8 * 64, 24
    c = compute_flops(spec, BatchStats.from_batch(seq_lens=[s], spec=spec), mode="training", causal="half").components
    assert c["lm.attn_proj"] == 3 * layers * s * 2 * (h * (q + 2 * kv) + q * h)
    per_sq = 2 * 64 * 2 * 64  # Q K^T and A V per score entry, 64 heads x 64
    full, sliding = per_sq * s * s / 2, per_sq * (s * s - (s - 128) ** 2) / 2
    assert c["lm.attn_core"] == 3 * 12 * (full + sliding)
    assert c["lm.routed_experts"] == 3 * layers * s * 4 * 2 * 3 * h * 2880
    assert c["lm.router"] == 3 * layers * s * 2 * h * 32
    assert c["lm.logits"] == 3 * s * 2 * h * 201088
    assert c.get("lm.shared_experts", 0) == 0 and c.get("lm.dense_mlp", 0) == 0


def test_lmspec_helpers_see_sinks_and_biases():
    """One truth: helpers that take only the LMSpec (per-layer params) build the same gpt-oss blocks.
    By hand, gpt-oss-20b layer: q/k/v/o with bias + 64 sinks + 32 experts x (3·h·F + 2F + h) + router E·h + E
    + two RMSNorms."""
    from vlm_perf.arch import load_model
    from vlm_perf.arch.params import lm_layer_params

    h, f, e = 2880, 2880, 32
    attention = h * 4096 + 4096 + 2 * (h * 512 + 512) + 4096 * h + h + 64
    moe = e * (3 * h * f + 2 * f + h) + e * h + e
    assert lm_layer_params(load_model("gpt-oss-20b").lm, moe_layer=True) == attention + moe + 2 * h
