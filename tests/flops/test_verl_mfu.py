"""veRL / EasyR1 ``perf/mfu/actor`` reproduced (vlm_perf.flops.conventions.verl_mfu).

Independent references: (1) veRL's own ``FlopsCounter.estimate_flops`` and ``get_device_flops`` from the
installed package (``verl/utils/flops_counter.py``, v0.9.0; loaded on its own with ``verl.utils.device`` stubbed,
as tests/flops/test_framework_conventions.py does), combined with the worker formulas
(``estimated_flops * ppo_epochs / promised_flops / world_size`` in veRL's legacy ``fsdp_workers.update_actor`` and
EasyR1's; ``estimated_flops / promised_flops / world_size`` per ``train_batch`` and the mean in veRL 0.9.0's
``engine_workers._postprocess_output`` + ``ray_trainer._update_actor``) written out here; skipped when veRL is
not installed. (2) Hand arithmetic from the cited lines of ``_estimate_qwen2_flops`` on a tiny Qwen2, which runs
everywhere.
"""

from __future__ import annotations

import dataclasses
import importlib.util
import sys
import types
from pathlib import Path

import pytest

from vlm_perf.arch import load_model, spec_from_config
from vlm_perf.errors import ConfigError
from vlm_perf.flops.conventions.verl_mfu import (
    VERL_MFU_ENGINE,
    VERL_MFU_LEGACY,
    verl_counted_flops,
    verl_mfu_actor,
    verl_mfu_actor_engine,
)

TINY = {"model_type": "qwen2", "hidden_size": 64, "intermediate_size": 96, "num_hidden_layers": 2,
        "num_attention_heads": 4, "num_key_value_heads": 2, "vocab_size": 1000, "tie_word_embeddings": False,
        "max_position_embeddings": 4096}


def _tiny():
    return spec_from_config(TINY, name="tiny-qwen2")


@pytest.fixture(scope="module")
def verl_module():
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    found = importlib.util.find_spec("verl")
    if found is None or not found.submodule_search_locations:
        pytest.skip("veRL not installed (pip install --no-deps verl==0.9.0)")
    path = Path(found.submodule_search_locations[0]) / "utils" / "flops_counter.py"
    stubs = {"verl": types.ModuleType("verl"), "verl.utils": types.ModuleType("verl.utils"),
             "verl.utils.device": types.ModuleType("verl.utils.device")}
    stubs["verl.utils.device"].get_torch_device = lambda: torch.cpu  # type: ignore[attr-defined]
    saved = {k: sys.modules.get(k) for k in stubs}
    sys.modules.update(stubs)
    try:
        mod_spec = importlib.util.spec_from_file_location("_verl_flops_counter_mfu", path)
        module = importlib.util.module_from_spec(mod_spec)
        mod_spec.loader.exec_module(module)
    finally:
        for k, v in saved.items():
            if v is None:
                sys.modules.pop(k, None)
            else:
                sys.modules[k] = v
    return module, transformers


def _verl_config(transformers, preset_or_cfg):
    from vlm_perf.arch.presets_loader import preset_config

    cfg = dict(preset_or_cfg) if isinstance(preset_or_cfg, dict) else dict(preset_config(preset_or_cfg))
    return transformers.AutoConfig.for_model(**cfg)


CASES = [
    # (spec source, seq_lens (prompt + response per response), image grids, seconds, world size, ppo epochs)
    ("tiny", [100, 50, 77], [], 2.5, 4, 1),
    ("qwen2.5-vl-7b", [1500, 1200, 900, 2048], [(1, 28, 40), (1, 16, 16), (1, 28, 40), (1, 16, 16)], 31.0, 8, 2),
    ("qwen3-vl-8b", [3000, 2500], [(1, 64, 64), (1, 32, 48)], 12.0, 8, 1),
]


@pytest.mark.parametrize("source,seq_lens,grids,seconds,world,epochs", CASES, ids=[c[0] for c in CASES])
def test_legacy_formula_matches_verls_own_counter(verl_module, source, seq_lens, grids, seconds, world, epochs):
    module, transformers = verl_module
    spec = _tiny() if source == "tiny" else load_model(source)
    config = _verl_config(transformers, TINY if source == "tiny" else source)
    images = [h * w for t, h, w in grids for _ in range(t)] or None
    kwargs = {"images_seqlens": images} if images else {}
    estimated, promised = module.FlopsCounter(config).estimate_flops(seq_lens, seconds, **kwargs)
    assert promised == module.get_device_flops()  # TFLOP/s of the device veRL sees (CPU here: 448e9 / 1e12)
    logged = estimated * epochs / promised / world  # verl fsdp_workers / EasyR1: perf/mfu(_)actor
    ours = verl_mfu_actor(spec, seq_lens, seconds, world, promised * 1e12, grids, ppo_epochs=epochs)
    assert ours.mfu == pytest.approx(logged, rel=1e-12)
    assert ours.variant == "legacy" and ours.pin is VERL_MFU_LEGACY


def test_engine_formula_is_the_mean_of_minibatch_mfus(verl_module):
    module, transformers = verl_module
    spec, config = _tiny(), _verl_config(transformers, TINY)
    minibatches = [([120, 80], 1.5), ([300, 10, 40], 2.0), ([64], 0.25)]
    counter = module.FlopsCounter(config)
    per = []
    for lens, seconds in minibatches:
        estimated, promised = counter.estimate_flops(lens, seconds)
        per.append(estimated / promised / 2)  # engine_workers: estimated / promised / world_size (2 GPUs)
    logged = sum(per) / len(per)  # ray_trainer: reduce_metrics (mean) of perf/mfu/actor
    ours = verl_mfu_actor_engine(spec, minibatches, 2, module.get_device_flops() * 1e12)
    assert ours.mfu == pytest.approx(logged, rel=1e-12)
    assert ours.pin is VERL_MFU_ENGINE
    # a mean of ratios is not total FLOPs over total time
    assert ours.mfu != pytest.approx(ours.flops / ours.seconds / 2 / ours.peak_flops, rel=1e-3)


def test_legacy_by_hand_from_the_cited_lines():
    # verl/utils/flops_counter.py _estimate_qwen2_flops: head_dim = 64 // 4 = 16, q = 64, k = v = 2 * 16 = 32;
    # mlp_N = h * F * 3; attn_linear_N = h * (q + k + v + H * d); emd_and_lm_head_N = V * h * 2
    dense_n = (64 * 96 * 3 + 64 * (64 + 32 + 32 + 64)) * 2 + 1000 * 64 * 2
    seq = [100, 50]
    flops = 6 * dense_n * 150 + 6 * (100 ** 2 + 50 ** 2) * 16 * 4 * 2  # dense + attn_qkv_flops
    assert verl_counted_flops(_tiny(), seq) == flops
    # fsdp_workers.update_actor: estimated * ppo_epochs / promised / world_size; 3 s, 2 epochs, 4 GPUs, 1e12 peak
    got = verl_mfu_actor(_tiny(), seq, 3.0, 4, 1e12, ppo_epochs=2)
    assert got.mfu == pytest.approx(2 * flops / 3.0 / 1e12 / 4, rel=1e-12)
    assert got.flops == 2 * flops and got.seconds == 3.0


def test_difference_from_exact_is_the_embedding_gemm_on_a_text_model():
    # exact counts no input-embedding GEMM: veRL's 2*V*h in N_dense adds 6*V*h per token (x epochs); the rest of
    # this tiny model's update agrees term by term (linear 6*N*T, causal-half attention 6*S^2*d*H*L)
    got = verl_mfu_actor(_tiny(), [100, 50], 3.0, 4, 1e12, ppo_epochs=2)
    assert got.flops - got.exact_flops == 2 * 6 * 1000 * 64 * 150
    assert got.mfu / got.exact_mfu == pytest.approx(got.flops / got.exact_flops, rel=1e-12)


def test_vision_difference_on_a_vlm():
    # Qwen2.5-VL through veRL main's Qwen3-VL ViT formula (merger on P patches, no window attention): differs
    # from exact; video grids are not counted by veRL at all
    spec = load_model("qwen2.5-vl-7b")
    got = verl_mfu_actor(spec, [2048, 1024], 10.0, 8, 989e12, [(1, 28, 40), (1, 16, 16)])
    assert got.exact_flops is not None and got.flops != got.exact_flops
    no_exact = verl_mfu_actor(spec, [2048, 1024], 10.0, 8, 989e12, [(1, 28, 40), (1, 16, 16)], exact=False)
    assert no_exact.exact_mfu is None and no_exact.mfu == got.mfu


@pytest.mark.parametrize("kwargs,match", [
    ({"update_seconds": 0.0}, "update_seconds"), ({"num_gpus": 0}, "num_gpus"), ({"peak_flops": 0.0}, "peak_flops"),
    ({"ppo_epochs": 0}, "ppo_epochs"), ({"seq_lens": []}, "global_token_num"),
])
def test_bad_input_is_a_config_error(kwargs, match):
    args = {"seq_lens": [10], "update_seconds": 1.0, "num_gpus": 1, "peak_flops": 1e12, **kwargs}
    with pytest.raises(ConfigError, match=match):
        verl_mfu_actor(_tiny(), args.pop("seq_lens"), **args)
    with pytest.raises(ConfigError, match="at least one"):
        verl_mfu_actor_engine(_tiny(), [], 1, 1e12)
    with pytest.raises(ConfigError, match="seconds must be > 0"):
        verl_mfu_actor_engine(_tiny(), [([10], 0.0)], 1, 1e12)


def test_log_frame_reproduces_the_legacy_formula_row_by_row():
    import polars as pl

    from vlm_perf.flops.conventions.verl_mfu import verl_mfu_actor_log_frame

    spec = load_model("qwen2.5-vl-7b")
    it = pl.DataFrame({"iteration": [1, 2, 3], "mfu_logged": [0.3, 0.31, None], "prompt_len_mean": [100.25, 200.0, 50.0],
                       "response_len_mean": [300.0, 99.6, 10.0], "step_tokens": [400.25 * 1024, 299.6 * 512, 0.0],
                       "phase_s_update_actor": [14.0, 12.5, 3.0]})
    got = verl_mfu_actor_log_frame(spec, it, 8, 989e12, [(1, 16, 16)], ppo_epochs=2)
    for row, (n, length) in zip(got.rows(named=True)[:2], [(1024, 400), (512, 300)]):
        want = verl_mfu_actor(spec, [length] * n, row["update_s"], 8, 989e12, [(1, 16, 16)] * n, ppo_epochs=2,
                              exact=False)
        assert (row["samples"], row["seq_len"]) == (n, length)
        assert row["mfu_verl_estimate"] == pytest.approx(want.mfu, rel=1e-9)
        assert row["ratio"] == pytest.approx(row["mfu_logged"] / want.mfu, rel=1e-9)
    assert got.row(2, named=True)["mfu_verl_estimate"] is None  # no samples (step_tokens 0)
    with pytest.raises(ConfigError, match="missing phase_s_update_actor"):
        verl_mfu_actor_log_frame(spec, it.drop("phase_s_update_actor"), 8, 989e12)
    with pytest.raises(ConfigError, match="no sample count"):
        verl_mfu_actor_log_frame(spec, it.drop("step_tokens"), 8, 989e12)


# ---- EasyR1's own copy of the counter (hiyouga/EasyR1 verl/utils/flops_counter.py @ 13e956285434) -------------

def test_easyr1_dense_formula_by_hand():
    from vlm_perf.flops.conventions.verl_mfu import easyr1_counted_flops

    # _estimate_llama_flops: head_dim = hidden // heads; dense_N as veRL's; attn_qkv_flops = 12 * sum(L^2) * d * H * L
    dense_n = (64 * 96 * 3 + 64 * (64 + 32 + 32 + 64)) * 2 + 1000 * 64 * 2
    want = 6 * dense_n * 150 + 12 * (100 ** 2 + 50 ** 2) * 16 * 4 * 2
    assert easyr1_counted_flops(_tiny(), [100, 50]) == want
    # through the legacy MFU: estimated * ppo_epochs / (promised * world_size)
    got = verl_mfu_actor(_tiny(), [100, 50], 2.0, 4, 312e12, ppo_epochs=2, convention="easyr1")
    assert got.mfu == pytest.approx(want / 2.0 * 2 / (312e12 * 4), rel=1e-12)
    # a Qwen3 config's head_dim (32) is ignored by the dense formula: hidden // heads = 16
    qwen3 = spec_from_config({**TINY, "model_type": "qwen3", "head_dim": 32}, name="tiny-qwen3")
    n3 = (64 * 96 * 3 + 64 * (64 + 32 + 32 + 64)) * 2 + 1000 * 64 * 2
    assert easyr1_counted_flops(qwen3, [100]) == 6 * n3 * 100 + 12 * 100 ** 2 * 16 * 4 * 2


def test_easyr1_moe_formula_by_hand_and_vision_ignored():
    from vlm_perf.flops.conventions.verl_mfu import easyr1_counted_flops

    cfg = {"model_type": "qwen3_moe", "hidden_size": 64, "intermediate_size": 96, "moe_intermediate_size": 32,
           "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 32,
           "vocab_size": 1000, "num_experts": 8, "num_experts_per_tok": 2, "tie_word_embeddings": False,
           "max_position_embeddings": 4096, "decoder_sparse_step": 1, "mlp_only_layers": []}
    spec = spec_from_config(cfg, name="tiny-qwen3-moe")
    # _estimate_qwen2_moe_flops: head_dim from the config (32); moe_mlp_N = h * top_k * moe_inter * 3 + h * E
    n = ((64 * 2 * 32 * 3 + 64 * 8) + 64 * (4 * 32 + 2 * 2 * 32 + 4 * 32)) * 2 + 1000 * 64 * 2
    assert easyr1_counted_flops(spec, [100, 50]) == 6 * n * 150 + 12 * (100 ** 2 + 50 ** 2) * 32 * 4 * 2
    vl = load_model("qwen2.5-vl-7b")  # text only: images change nothing
    assert verl_counted_flops(vl, [1000], [(1, 28, 40)], "easyr1") == verl_counted_flops(vl, [1000], (), "easyr1")
    with pytest.raises(ConfigError, match="logs MFU 0"):
        easyr1_counted_flops(dataclasses.replace(load_model("llama3-8b"), family="gemma3"), [10])


def test_easyr1_device_table_quirk():
    from vlm_perf.flops.conventions.verl_mfu import easyr1_promised_flops

    # get_device_flops tests substrings in order H100/H800, A100/A800, L40, L20, H20, 910B: an H200 matches "H20"
    assert easyr1_promised_flops("NVIDIA H100 80GB HBM3") == 989e12
    assert easyr1_promised_flops("NVIDIA H200") == 148e12
    assert easyr1_promised_flops("NVIDIA L40S") == 181.05e12
    assert easyr1_promised_flops("NVIDIA B200") == float("inf")  # unknown: MFU 0
