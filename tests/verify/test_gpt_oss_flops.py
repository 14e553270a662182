"""gpt-oss (transformers ``GptOssForCausalLM``) against FlopCounterMode, per component, and its presets against
transformers' own parameter count.

Tiny random config: 4 layers (``layer_types`` sliding / full alternating, window 16), hidden 64, 4 q / 2 kv heads
x 16 (head_dim stated, not hidden / heads), attention bias and sinks, 8 experts of width 48, top-2, float64,
eager attention and **eager experts**. What the measurement shows:

* transformers' eager ``GptOssExperts.forward`` gathers each expert's tokens and runs only those: the measured
  MoE FLOPs are exactly top-k per token (+ the router), not dense over all experts, so ``exact`` (which bills
  top-k, as grouped-GEMM training kernels run) equals the reference to the FLOP. ``batched_mm`` measures the
  same. The DEFAULT experts implementation on CPU, ``grouped_mm``, is invisible to FlopCounterMode (no FLOP
  formula for ``_grouped_mm`` in torch 2.13: only the router is counted), so the harness must pin ``eager`` —
  measured below, so a torch that starts counting it shows up here;
* attention sinks add no FLOPs (a concatenated softmax column), sliding layers in eager compute the whole
  square (``--causal full``); ``--causal half`` with the window is hand-checked below.
"""

from __future__ import annotations

import pytest

pytestmark = pytest.mark.measured
torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

VOCAB = 300
TEXT = dict(vocab_size=VOCAB, hidden_size=64, intermediate_size=48, num_hidden_layers=4, num_attention_heads=4,
            num_key_value_heads=2, head_dim=16, num_local_experts=8, num_experts_per_tok=2, sliding_window=16,
            max_position_embeddings=512, bos_token_id=None, eos_token_id=None, pad_token_id=None,
            rope_parameters={"rope_type": "default", "rope_theta": 10000.0})
# (batch, sequence length): one sequence inside the window, one beyond it, a batch of two beyond it
SHAPES = [(1, 12), (1, 40), (2, 40)]


def _model(experts="eager", dtype=None, **over):
    config = transformers.GptOssConfig(**{**TEXT, **over})
    config._attn_implementation = "eager"
    config._experts_implementation = experts
    torch.manual_seed(0)
    return transformers.GptOssForCausalLM(config).to(dtype or torch.float64).eval()


@pytest.fixture(scope="module")
def model():
    return _model()


def _measure(model, batch, seq, training):
    """(total, FLOPs inside the MLP (MoE) modules, FLOPs inside the attention modules)."""
    from torch.utils.flop_counter import FlopCounterMode

    torch.manual_seed(1)
    ids = torch.randint(0, VOCAB, (batch, seq))
    counter = FlopCounterMode(display=False)
    model.requires_grad_(True)
    with (torch.enable_grad() if training else torch.no_grad()), counter:
        out = model(input_ids=ids, use_cache=False)
        if training:
            out.logits.mean().backward()
    counts = counter.get_flop_counts()

    def inside(suffix):
        return sum(sum(v.values()) for k, v in counts.items() if k.endswith(suffix))
    return counter.get_total_flops(), inside(".mlp"), inside(".self_attn")


def _library(model, batch, seq, mode, causal="full"):
    from vlm_perf.arch import spec_from_config
    from vlm_perf.flops import compute_flops
    from vlm_perf.stats import BatchStats

    spec = spec_from_config(model.config.to_dict(), name="tiny-gpt-oss")
    return compute_flops(spec, BatchStats.from_batch(seq_lens=[seq] * batch, spec=spec), mode=mode, causal=causal)


@pytest.mark.parametrize("batch,seq", SHAPES)
def test_exact_per_component_forward(model, batch, seq):
    total, mlp, attn = _measure(model, batch, seq, False)
    lib = _library(model, batch, seq, "forward")
    c = lib.components
    assert lib.total == total
    assert c["lm.routed_experts"] + c["lm.router"] == mlp  # top-k routed, not dense
    assert c.get("lm.shared_experts", 0) == 0
    assert c["lm.attn_proj"] + c["lm.attn_core"] == attn
    assert c["lm.logits"] == total - mlp - attn


@pytest.mark.parametrize("batch,seq", SHAPES)
def test_exact_training(model, batch, seq):
    """Training equals the measurement to the FLOP. FlopCounterMode attributes the backward of the gathered
    experts outside the ``.mlp`` modules, so the per-component check is: the measured training total is 3x the
    measured forward (every GEMM pays its weight and input gradient: the embedding trains, so even layer 0's
    projections need their input gradient), and each library component is 3x its forward, which the forward
    test pins per module."""
    total, _, _ = _measure(model, batch, seq, True)
    forward, _, _ = _measure(model, batch, seq, False)
    lib, fwd = _library(model, batch, seq, "training"), _library(model, batch, seq, "forward")
    assert lib.total == total == 3 * forward
    assert lib.components == {k: 3 * v for k, v in fwd.components.items()}


def test_routed_is_top_k_not_dense_by_hand(model):
    """Hand arithmetic: 4 layers x 40 tokens x (top-2 x 2·3·64·48 + 2·64·8) forward inside the MoE modules;
    the dense alternative (every token through all 8 experts) would be 4x the routed part."""
    _, mlp, _ = _measure(model, 1, 40, False)
    routed = 4 * 40 * 2 * (2 * 3 * 64 * 48)
    router = 4 * 40 * 2 * 64 * 8
    assert mlp == routed + router == 6_062_080
    assert mlp != 4 * 40 * 8 * (2 * 3 * 64 * 48) + router


@pytest.mark.parametrize("experts, counted", [("batched_mm", "all"), ("grouped_mm", "router only")])
def test_other_experts_implementations(experts, counted):
    """batched_mm measures the same top-k FLOPs; grouped_mm (transformers' default) is not counted by
    FlopCounterMode on CPU: only the router's 4·40·2·64·8 remains (why the harness pins eager)."""
    m = _model(experts, dtype=torch.float32)  # grouped_mm refuses float64
    _, mlp, _ = _measure(m, 1, 40, False)
    router = 4 * 40 * 2 * 64 * 8
    assert mlp == (6_062_080 if counted == "all" else router)


def test_sliding_layers_and_sinks_read_from_the_model(model):
    from vlm_perf.arch import spec_from_config
    from vlm_perf.arch.blocks import SinkDecoderAttention, inventory_params

    spec = spec_from_config(model.config.to_dict())
    assert spec.family == "gpt_oss"
    assert spec.lm.sliding_window == 16 and spec.lm.sliding_layers == (0, 2)
    assert spec.lm.head_dim == 16 and spec.lm.moe.top_k == 2
    assert sum(b.count for b in spec.blocks if isinstance(b, SinkDecoderAttention)) == 4
    assert inventory_params(spec.blocks) == sum(p.numel() for p in model.parameters())


def test_windowed_causal_half_by_hand(model):
    """--causal half: full layers bill S²/2 of the square, sliding layers (window 16, query included) the
    causal band: Σ_i min(i + 1, 16) score entries per head. Per entry 2·2·d FLOPs (Q K^T and A V) x 4 heads."""
    seq, per_entry = 40, 2 * 2 * 16 * 4
    band = sum(min(i + 1, 16) for i in range(seq))
    lib = _library(model, 1, seq, "forward", causal="half")
    full_half = seq * seq / 2
    assert lib.components["lm.attn_core"] == 2 * per_entry * full_half + 2 * per_entry * (seq * seq - (seq - 16) ** 2) / 2
    # the library's windowed half (S² − (S−W)²)/2 differs from the exact band by the diagonal terms: state it
    assert abs((seq * seq - (seq - 16) ** 2) / 2 - band) <= 16


@pytest.mark.parametrize("name, total, active", [("gpt-oss-20b", 20_914_757_184, 3_608_307_264),
                                                 ("gpt-oss-120b", 116_829_156_672, 5_132_849_472)])
def test_presets_equal_meta_device_count_and_the_model_card(name, total, active):
    """Model card (gpt-oss, OpenAI 2025): 20.91B total / 3.61B active; 116.83B / 5.13B."""
    from vlm_perf.arch import load_model, preset_config
    from vlm_perf.arch.params import lm_active_params, total_params

    cfg = {k: v for k, v in preset_config(name).items() if not k.startswith("_") and k != "quantization_config"}
    with torch.device("meta"):
        meta = transformers.GptOssForCausalLM(transformers.GptOssConfig(**cfg))
    spec = load_model(name)
    assert total_params(spec) == sum(p.numel() for p in meta.parameters()) == total
    assert round(total / 1e7) == round({"gpt-oss-20b": 20.91e9, "gpt-oss-120b": 116.83e9}[name] / 1e7)
    assert lm_active_params(spec) == active
    assert round(active / 1e7) == round({"gpt-oss-20b": 3.61e9, "gpt-oss-120b": 5.13e9}[name] / 1e7)
