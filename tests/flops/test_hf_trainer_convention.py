"""``hf-trainer`` against transformers' own ``Trainer.floating_point_ops`` on tiny real models."""

from types import SimpleNamespace

import pytest

from vlm_perf.arch import spec_from_config
from vlm_perf.flops import compute_flops
from vlm_perf.stats import BatchStats

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")



def _measure_module():
    """tests/verify/measure.py (the tiny Qwen-VL model builders), loaded by path."""
    import importlib.util
    from pathlib import Path

    path = Path(__file__).resolve().parents[1] / "verify" / "measure.py"
    spec = importlib.util.spec_from_file_location("_vlm_perf_measure", path)
    module = importlib.util.module_from_spec(spec)
    import sys

    sys.modules.setdefault("_vlm_perf_measure", module)  # dataclasses look their module up
    spec.loader.exec_module(module)
    return module


build_model = _measure_module().build_model


def _trainer_flops(model, rows: int, length: int) -> int:
    """The Trainer's own function, unbound, on a micro-batch of input_ids (rows x padded length)."""
    inputs = {"input_ids": torch.zeros(rows, length, dtype=torch.long)}
    return transformers.Trainer.floating_point_ops(SimpleNamespace(model=model), inputs)


def _ours(config: dict, rows: int, length: int, mode: str = "training"):
    spec = spec_from_config(config, name="tiny")
    stats = BatchStats.from_batch(seq_len=length, samples=rows, spec=spec)
    return compute_flops(spec, stats, "hf-trainer", mode=mode)


@pytest.mark.parametrize("family", ["qwen2_vl", "qwen2_5_vl", "qwen3_vl", "qwen3_vl_moe"])
@pytest.mark.parametrize("tied", [False, True])
def test_total_flos_equals_the_trainers_function(family, tied):
    """Vision tower (conv patch embed in, Qwen3-VL's nn.Embedding position table out), every expert, untied or
    tied head: the same 6 * numel * N as transformers computes."""
    model = build_model(family, dtype=torch.float32, tie_word_embeddings=tied)
    config = model.config.to_dict()
    got = _ours(config, rows=3, length=41)
    assert got.total == _trainer_flops(model, 3, 41)
    assert got.vision > 0  # the tower's parameters are billed per LM token
    assert _ours(config, 3, 41, mode="forward").total * 3 == got.total


def test_total_flos_of_a_text_only_moe_lm():
    cfg = transformers.Qwen3MoeConfig(vocab_size=1000, hidden_size=64, intermediate_size=96, moe_intermediate_size=32,
                                      num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2, head_dim=16,
                                      num_experts=8, num_experts_per_tok=2, tie_word_embeddings=False)
    model = transformers.Qwen3MoeForCausalLM(cfg)
    d = model.config.to_dict()
    assert _ours(d, 2, 100).total == _trainer_flops(model, 2, 100)
    # every expert is billed: 8 experts' worth, not top-2
    n_experts = 2 * 8 * 3 * 64 * 32
    assert _ours(d, 2, 100).components["lm.routed_experts"] == 6 * 200 * n_experts


# ------------------------------------------------------------------------------------------------ ms-swift, LLaMA-Factory


def test_ms_swift_mfu_by_hand():
    # swift/callbacks/perf_log.py @ 3602360a5623: max_tflops = tflops * device_count (on_init_end);
    # on_log: mfu = total_flos / elapsed / (max_tflops * 1e12), logs['MFU'] = round(mfu, 6)
    from vlm_perf.flops.conventions.hf import ms_swift_mfu

    total_flos = 6 * 4 * 4096 * 8_030_261_248  # 6 * input_ids.numel() * N (Llama-3-8B without embeddings) x 4 steps
    elapsed, tflops, devices = 37.5, 989.0, 8
    assert ms_swift_mfu(total_flos, elapsed, tflops, devices) == round(total_flos / elapsed / (tflops * devices * 1e12), 6)
    assert ms_swift_mfu(total_flos, elapsed, tflops, devices) == 0.002661  # 7.894e14 / 37.5 s / 7.912e15 = 0.00266062
    with pytest.raises(ValueError):
        ms_swift_mfu(total_flos, 0, tflops, devices)


def test_ms_swift_flops_are_hf_trainers():
    from vlm_perf.arch import load_model

    spec = load_model("qwen3-vl-8b")
    stats = BatchStats.from_batch(seq_lens=[1000, 3096], padded_tokens=8192, samples=2, image_grids=[(1, 32, 32)],
                                  spec=spec)
    assert compute_flops(spec, stats, "ms-swift").total == compute_flops(spec, stats, "hf-trainer").total


def test_llamafactory_cal_mfu_by_hand():
    # scripts/stat_utils/cal_mfu.py @ ff6d4d12eeb0 compute_model_flops, BASE = 2: per token per layer mlp 3*2*h*F,
    # q and o 2*h*h each, k and v 2*h*h*G // H each; sdpa 2*2*h*s*s per layer per sample; embedding h*V, x2 untied;
    # non-embedding and embedding both x3 (include_backward)
    from vlm_perf.arch import load_model

    h, F, H, G, L, V = 4096, 14336, 32, 8, 32, 128256  # Llama-3-8B
    B, s = 4, 2048  # total_batch_size = per-device batch x world size, seq_length = cutoff_len
    mlp = B * s * L * 3 * 2 * h * F
    attn = B * s * L * (2 * h * h + 2 * h * h + 2 * (2 * h * h * G // H))
    sdpa = B * L * 2 * 2 * h * s * s
    emb = B * s * h * V * 2
    hand = 3 * (mlp + attn + sdpa) + 3 * emb
    spec = load_model("llama3-8b")
    stats = BatchStats.from_batch(seq_lens=[1000, 1048, 2048, 500, 1548, 2048], padded_tokens=B * s, samples=B)
    assert compute_flops(spec, stats, "llamafactory").total == hand
