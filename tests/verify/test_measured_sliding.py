"""Sliding-window LMs (Mistral; Qwen2 with use_sliding_window) against FlopCounterMode.

Eager attention computes the whole score square whatever the window mask, so the measurement equals
``--causal full``; the windowed ``--causal half`` count (what a windowed flash kernel computes) is checked
by hand arithmetic in tests/families/test_config_edge_cases.py. This checks that the sliding layers are parsed, grouped
and counted without losing or adding a GEMM, forward and training.
"""

from __future__ import annotations

import pytest

pytestmark = pytest.mark.measured
torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

TEXT = dict(vocab_size=300, hidden_size=64, intermediate_size=96, num_hidden_layers=3, num_attention_heads=4,
            num_key_value_heads=2, max_position_embeddings=512, sliding_window=16, bos_token_id=None,
            eos_token_id=None, pad_token_id=None)


def _measure(model, ids, training):
    from torch.utils.flop_counter import FlopCounterMode

    counter = FlopCounterMode(display=False)
    ctx = torch.enable_grad() if training else torch.no_grad()
    with ctx, counter:
        out = model(input_ids=ids, use_cache=False)
        if training:
            out.logits.mean().backward()
    return counter.get_total_flops()


@pytest.mark.parametrize("family, extra", [("mistral", {}),
                                           ("qwen2", {"use_sliding_window": True, "max_window_layers": 1})])
@pytest.mark.parametrize("mode", ["forward", "training"])
def test_sliding_window_lm_matches_eager_square(family, extra, mode):
    from vlm_perf.arch import spec_from_config
    from vlm_perf.flops import compute_flops
    from vlm_perf.stats import BatchStats

    cfg_cls, model_cls = {"mistral": ("MistralConfig", "MistralForCausalLM"),
                          "qwen2": ("Qwen2Config", "Qwen2ForCausalLM")}[family]
    config = getattr(transformers, cfg_cls)(**TEXT, **extra)
    config._attn_implementation = "eager"
    torch.manual_seed(0)
    model = getattr(transformers, model_cls)(config).to(torch.float64).eval()
    seq = 40  # longer than the window
    ids = torch.randint(0, 300, (1, seq))
    measured = _measure(model, ids, mode == "training")
    spec = spec_from_config(config.to_dict())
    assert spec.lm.sliding_window == 16 and len(spec.lm.sliding_layers) == (3 if family == "mistral" else 2)
    lib = compute_flops(spec, BatchStats.from_batch(seq_lens=[seq], spec=spec), mode=mode, causal="full")
    assert lib.total == measured
    half = compute_flops(spec, BatchStats.from_batch(seq_lens=[seq], spec=spec), mode=mode, causal="half")
    assert half.components["lm.attn_core"] < lib.components["lm.attn_core"] / 2  # the window saves work
