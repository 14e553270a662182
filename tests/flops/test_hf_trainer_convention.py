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
