"""Gemma 3n's text decoder (transformers ``Gemma3nForCausalLM``) against FlopCounterMode, per module family, and
the parameter count against transformers' own.

Tiny random config: 6 layers [sliding, sliding, full, sliding, sliding, full] (window 8), hidden 64, 4 q / 2 kv
heads x 16, per-layer MLP widths [48, 48, 96, 96, 48, 48] (a list, as the released configs write it), activation
sparsity 0.95 on the first two layers (Gaussian top-k: elementwise), 3 AltUp streams, LAuReL rank 4, per-layer
inputs of width 8 from a 200-entry per-layer vocabulary, the last 2 layers KV-shared (one sliding, one full: they
reuse layers 3 and 2), tied head; float64, eager attention (every layer computes the whole square: ``causal="full"``).
"""

from __future__ import annotations

import re

import pytest

pytestmark = pytest.mark.measured
torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

VOCAB = 300
TYPES = ["sliding_attention", "sliding_attention", "full_attention"] * 2
TEXT = dict(vocab_size=VOCAB, vocab_size_per_layer_input=200, hidden_size=64, intermediate_size=[48, 48, 96, 96, 48, 48],
            num_hidden_layers=6, num_attention_heads=4, num_key_value_heads=2, head_dim=16, sliding_window=8,
            hidden_size_per_layer_input=8, laurel_rank=4, altup_num_inputs=3, num_kv_shared_layers=2,
            layer_types=TYPES, activation_sparsity_pattern=[0.95, 0.95, 0.0, 0.0, 0.0, 0.0],
            max_position_embeddings=512)
SHAPES = [(1, 6), (1, 21), (2, 13)]  # inside the window, beyond it, a batch


def _model(**over):
    config = transformers.Gemma3nTextConfig(**{**TEXT, **over})
    config._attn_implementation = "eager"
    torch.manual_seed(0)
    return transformers.Gemma3nForCausalLM(config).to(torch.float64)


@pytest.fixture(scope="module")
def model():
    return _model()


@pytest.fixture(scope="module")
def measured(model):
    """``_measure`` of the module's model, one FlopCounterMode run per (batch, seq, training) shared by the tests
    that read it (the forward per shape is read by the per-module test, the training test and the by-hand test)."""
    runs: dict = {}

    def get(batch, seq, training):
        if (batch, seq, training) not in runs:
            runs[batch, seq, training] = _measure(model, batch, seq, training)
        return runs[batch, seq, training]
    return get


def _measure(model, batch, seq, training):
    """FlopCounterMode: total and per module family (summed over layers)."""
    from torch.utils.flop_counter import FlopCounterMode

    torch.manual_seed(1)
    ids = torch.randint(0, VOCAB, (batch, seq))
    counter = FlopCounterMode(display=False)
    model.train(training)
    with (torch.enable_grad() if training else torch.no_grad()), counter:
        out = model(input_ids=ids, use_cache=False)
        if training:
            out.logits.mean().backward()
    counts = counter.get_flop_counts()

    def inside(*names):
        layer = re.compile(r"Gemma3nForCausalLM\.model\.layers\.\d+\.(%s)$" % "|".join(names))
        return sum(sum(v.values()) for k, v in counts.items() if layer.match(k))
    total = counter.get_total_flops()
    per_layer = inside("per_layer_input_gate", "per_layer_projection")
    model_level = sum(sum(counts.get(f"Gemma3nForCausalLM.model.{name}", {}).values())
                      for name in ("per_layer_model_projection",))
    return {"total": total, "attn": inside("self_attn"), "mlp": inside("mlp"), "laurel": inside("laurel"),
            "per_layer": per_layer + model_level,
            "head": sum(counts.get("Gemma3nForCausalLM.lm_head", {}).values())}


def _library(model, batch, seq, mode, causal="full"):
    from vlm_perf.arch import spec_from_config
    from vlm_perf.flops import compute_flops
    from vlm_perf.stats import BatchStats

    spec = spec_from_config(model.config.to_dict(), name="tiny-gemma3n")
    return compute_flops(spec, BatchStats.from_batch(seq_lens=[seq] * batch, spec=spec), mode=mode, causal=causal)


@pytest.mark.parametrize("batch,seq", SHAPES)
def test_exact_per_module_forward(model, measured, batch, seq):
    """Every module family equals the measurement to the FLOP."""
    m = measured(batch, seq, False)
    c = _library(model, batch, seq, "forward").components
    assert sum(c.values()) == m["total"]
    assert c["lm.attn_proj"] + c["lm.attn_core"] == m["attn"]
    assert c["lm.dense_mlp"] == m["mlp"]
    assert c["lm.laurel"] == m["laurel"]
    assert c["lm.per_layer_input"] == m["per_layer"]
    assert c["lm.logits"] == m["head"]
    # what remains (AltUp predict / correct, the stream projections) is AltUp's
    assert c["lm.altup"] == m["total"] - m["attn"] - m["mlp"] - m["laurel"] - m["per_layer"] - m["head"]


@pytest.mark.parametrize("batch,seq", SHAPES)
def test_exact_training(model, measured, batch, seq):
    """Training equals the measurement to the FLOP. Everything trains (both embedding tables too, so even layer 0's
    GEMMs pay their input gradient): every component is 3x its forward, the AltUp stream mix (two activation
    operands, no weight: forward + 2 input gradients) too. FlopCounterMode attributes backward GEMMs to the module
    whose hook is active, not to the module of the forward GEMM, so the per-module split is pinned by the forward
    test; here: the measured training total is 3x the measured forward."""
    total = measured(batch, seq, True)["total"]
    forward = measured(batch, seq, False)["total"]
    lib, fwd = _library(model, batch, seq, "training"), _library(model, batch, seq, "forward")
    assert lib.total == total == 3 * forward
    assert lib.components == {k: 3 * v for k, v in fwd.components.items()}


def test_forward_by_hand(model, measured):
    """Hand arithmetic, 1 x 21 tokens (h 64, n 3 streams, L 6, p 8, r 4, H 4 x d 16, kv 2 x 16, V 300):
    attention projections: 4 layers q+k+v+o = 2·21·64·(64 + 32 + 32 + 64), 2 KV-shared layers q+o only = 2·21·64·128;
    core 6 layers x 4·64·21² (eager square); MLP 2·3·21·64·(48·4 + 96·2); AltUp per layer 2·21·(2·64·3 + 27 + 9)
    + 2·21·64·9, plus stream projections 2·2·21·64·64·2; LAuReL 6·2·2·21·64·4; per-layer input 6·2·2·21·64·8 +
    2·21·64·48; logits 2·21·64·300."""
    S = 21
    expect = {
        "lm.attn_proj": 4 * 2 * S * 64 * (64 + 32 + 32 + 64) + 2 * 2 * S * 64 * 128,
        "lm.attn_core": 6 * 4 * 64 * S * S,
        "lm.dense_mlp": 2 * 3 * S * 64 * (48 * 4 + 96 * 2),
        "lm.altup": 6 * (2 * S * (2 * 64 * 3 + 27 + 9) + 2 * S * 64 * 9) + 2 * 2 * (2 * S * 64 * 64),
        "lm.laurel": 6 * 2 * 2 * S * 64 * 4,
        "lm.per_layer_input": 6 * 2 * 2 * S * 64 * 8 + 2 * S * 64 * 48,
        "lm.logits": 2 * S * 64 * VOCAB,
    }
    c = _library(model, 1, S, "forward").components
    assert {k: v for k, v in c.items() if v} == expect
    assert sum(expect.values()) == measured(1, S, False)["total"]


def test_parameters_equal_transformers(model):
    from vlm_perf.arch import spec_from_config
    from vlm_perf.arch.blocks import SharedKVDecoderAttention, inventory_params

    spec = spec_from_config(model.config.to_dict())
    assert spec.family == "gemma3n_text"
    assert inventory_params(spec.blocks) == sum(p.numel() for p in model.parameters())
    assert sum(b.count for b in spec.blocks if isinstance(b, SharedKVDecoderAttention)) == 2
    assert spec.lm.sliding_layers == (0, 1, 3, 4) and spec.lm.sliding_window == 8


@pytest.mark.parametrize("over", [dict(num_kv_shared_layers=0, intermediate_size=40, altup_num_inputs=4),
                                  dict(tie_word_embeddings=False, attention_bias=True, layer_types=None,
                                       num_kv_shared_layers=0)])
def test_other_configs_parameters_and_forward(over):
    """No KV sharing / one MLP width / 4 streams; an untied head with attention biases and the default layer
    pattern (every 5th layer full): parameters and forward FLOPs still equal transformers'."""
    m = _model(**over)
    from vlm_perf.arch import spec_from_config
    from vlm_perf.arch.blocks import inventory_params

    spec = spec_from_config(m.config.to_dict())
    assert inventory_params(spec.blocks) == sum(p.numel() for p in m.parameters())
    assert _library(m, 1, 11, "forward").total == _measure(m, 1, 11, False)["total"]


def test_causal_half_windows_by_hand(model):
    """--causal half: full layers bill S²/2, sliding layers (window 8) (S² − (S − 8)²)/2 per head entry set."""
    S, per = 21, 4 * 64
    c = _library(model, 1, S, "forward", causal="half").components
    assert c["lm.attn_core"] == 2 * per * S * S / 2 + 4 * per * (S * S - (S - 8) ** 2) / 2


@pytest.mark.parametrize("bad, message", [
    (dict(intermediate_size=[48, 48]), "intermediate_size lists 2 widths for 6 layers"),
    (dict(num_kv_shared_layers=6), "num_kv_shared_layers 6 must be below"),
    (dict(num_kv_shared_layers=4, layer_types=["full_attention"] * 2 + ["sliding_attention"] * 4),
     "must each have an earlier, unshared layer"),
    (dict(intermediate_size=[48, 48, -1, 96, 48, 48]), "intermediate_size must be an integer from 0"),
])
def test_bad_configs_are_refused_in_one_line(bad, message):
    from vlm_perf.arch import spec_from_config
    from vlm_perf.errors import ConfigError

    config = {"model_type": "gemma3n_text", **TEXT, **bad}
    with pytest.raises(ConfigError, match=message):
        spec_from_config(config, source="cfg.json")


def test_hf_trainer_convention_equals_transformers(model):
    """``hf-trainer`` (6 x tokens x num_parameters(exclude_embeddings=True)): both embedding tables are
    ``nn.Embedding`` subclasses (excluded), the head is tied (excluded with them); equals transformers' own
    ``Trainer.floating_point_ops`` on the tiny model."""
    from types import SimpleNamespace

    from vlm_perf.arch import spec_from_config
    from vlm_perf.flops import compute_flops
    from vlm_perf.stats import BatchStats

    ids = torch.zeros((2, 13), dtype=torch.long)
    expect = transformers.Trainer.floating_point_ops(SimpleNamespace(model=model), {"input_ids": ids})
    spec = spec_from_config(model.config.to_dict())
    lib = compute_flops(spec, BatchStats.from_batch(seq_lens=[13, 13], spec=spec), convention="hf-trainer")
    assert lib.total == expect


def test_class_default_config_equals_transformers_meta_count():
    """Gemma3nTextConfig's class defaults (the docstring's checkpoint google/gemma-3n-E4B: 35 layers, h 2048, MLP
    16384, 15 KV-shared layers, 4 streams, per-layer width 256 over a 262,144-entry table): the inventory read from
    the written-out config AND from a bare ``{"model_type": "gemma3n_text"}`` (the family's defaults) equals
    transformers' meta-device count of Gemma3nForCausalLM. Not a preset: the hub's text_config was not verified
    here, and the published totals (E2B / E4B) include the vision and audio towers."""
    from vlm_perf.arch import spec_from_config
    from vlm_perf.arch.blocks import inventory_params

    config = transformers.Gemma3nTextConfig()
    with torch.device("meta"):
        meta = sum(p.numel() for p in transformers.Gemma3nForCausalLM(config).parameters())
    assert inventory_params(spec_from_config(config.to_dict()).blocks) == meta == 6_835_235_568
    assert inventory_params(spec_from_config({"model_type": "gemma3n_text"}).blocks) == meta


def test_whole_gemma3n_is_refused_naming_the_tower():
    """model_type gemma3n (Gemma3nForConditionalGeneration): a one-line typed refusal naming the MobileNetV5 tower
    and the supported text decoder, never a number without the tower."""
    from vlm_perf.arch import spec_from_config
    from vlm_perf.errors import UnsupportedModelError

    config = transformers.Gemma3nConfig(text_config=TEXT).to_dict()
    with pytest.raises(UnsupportedModelError, match="MobileNetV5.*gemma3n_text") as err:
        spec_from_config(config, source="config.json")
    assert "\n" not in str(err.value)
