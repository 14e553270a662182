"""generation_flops / rl_step_flops by hand on a tiny Qwen2 LM (h 64, 4 heads x 16, 2 kv heads, MLP 96, V 1000)."""

from __future__ import annotations

import pytest

from vlm_perf.arch import load_model, spec_from_config
from vlm_perf.arch.adapters import AdapterConfig
from vlm_perf.arch.trainability import Trainability
from vlm_perf.errors import ConfigError, UnsupportedModelError
from vlm_perf.flops.generation import generation_flops, rl_step_flops

from tests.support import TINY_QWEN2_CORE_PER_POSITION as CORE_PER_POSITION  # noqa: E402
from tests.support import TINY_QWEN2_HEAD as HEAD  # noqa: E402
from tests.support import TINY_QWEN2_PER_TOKEN_LAYER as PER_TOKEN_LAYER  # noqa: E402
from tests.support import TINY_QWEN2 as TINY  # noqa: E402


def _spec():
    return spec_from_config(TINY, name="tiny-qwen2")


def test_prefill_and_decode_by_hand():
    got = generation_flops(_spec(), [6], [4], causal="full")
    # prefill: 6 positions, eager square 6^2, head on the last position only
    assert got.prefill["language_model"] == 2 * (6 * PER_TOKEN_LAYER + CORE_PER_POSITION * 36) + HEAD
    # decode: 3 one-token steps attending to 7, 8 and 9 positions
    assert got.decode["language_model"] == 3 * (2 * PER_TOKEN_LAYER + HEAD) + 2 * CORE_PER_POSITION * (7 + 8 + 9)
    assert got.new_tokens == 4


def test_samples_add_up_and_empty_responses_cost_nothing():
    spec = _spec()
    a, b = generation_flops(spec, [6], [4]), generation_flops(spec, [9], [2])
    both = generation_flops(spec, [6, 9, 5], [4, 2, 0])
    assert both.total == a.total + b.total
    with pytest.raises(ConfigError, match="2 prompt lengths but 1"):
        generation_flops(spec, [6, 9], [4])


def test_rl_step_phases_by_hand():
    spec = _spec()
    forward = 2 * (10 * PER_TOKEN_LAYER + CORE_PER_POSITION * 100) + 10 * HEAD  # prompt 6 + response 4, eager
    step = rl_step_flops(spec, [6], [4], ppo_epochs=2, causal="full")
    totals = step.phase_totals()
    assert totals["old_log_prob"] == totals["ref"] == forward
    assert totals["update_actor"] == 2 * 3 * forward  # full training: x3, two epochs
    assert totals["generation"] == step.generation.total
    assert abs(sum(step.shares().values()) - 1) < 1e-12
    lora = rl_step_flops(spec, [6], [4], causal="full", reference=False,
                         trainability=Trainability(trainable=(), adapter=AdapterConfig(r=2, target_modules="all-linear")))
    assert "ref" not in lora.phases and lora.phase_totals()["update_actor"] < 3 * forward
    critic = rl_step_flops(spec, [6], [4], causal="full", critic=True)
    assert critic.phase_totals()["values"] == forward and critic.phase_totals()["update_critic"] == 3 * forward


def test_decode_in_a_sliding_window_layer_attends_to_the_window_only():
    from vlm_perf.flops.generation import _windowed

    assert _windowed(6, 4, 8) == 7 + 8 + 8  # steps attend to 7, 8, 9 -> clipped at the window 8
    spec = load_model("gemma3-4b")  # 5 of 6 layers slide (window 1024)
    short, long = generation_flops(spec, [500], [400]), generation_flops(spec, [3000], [400])
    assert long.decode["language_model"] - short.decode["language_model"] < \
        399 * 2500 * 2 * spec.lm.num_heads * 2 * spec.lm.head_dim * spec.lm.num_layers  # far less than unclipped


def test_decode_of_a_recurrent_layer_is_refused():
    spec = load_model("qwen3.5-35b-a3b")  # gated delta nets decode with a recurrent state
    with pytest.raises(UnsupportedModelError, match="gated_delta_net"):
        generation_flops(spec, [100], [10])


def test_phase_rates_from_verl_timings():
    from vlm_perf.flops.generation import phase_rates

    step = rl_step_flops(_spec(), [6], [4], causal="full")
    totals = step.phase_totals()
    rates = phase_rates(step, {"timing_s/gen": 2.0, "timing_s/update_actor": 0.5, "timing_s/reward": 0.1,
                               "timing_s/step": 3.0}, num_gpus=4)
    assert rates["generation"]["tflops_per_gpu"] == totals["generation"] / 2.0 / 4 / 1e12
    assert rates["update_actor"]["flops"] == totals["update_actor"]
    assert rates["reward"] == {"seconds": 0.1, "flops": 0, "tflops_per_gpu": 0.0}
    assert rates["ref"]["seconds"] is None and "step" not in rates


def test_per_call_adapter_terms_are_refused_in_generation():
    """DoRA's weight norm and a target_parameters delta are computed once per forward call (each decode step is
    one): not modelled in generation, refused by name rather than counted once."""
    spec = load_model("qwen3-30b-a3b")
    for adapter, name in ((AdapterConfig(r=4, target_modules=("q_proj",), use_dora=True), "DoRA"),
                          (AdapterConfig(r=4, target_modules=None, target_parameters=("experts.down_proj",)),
                           "target_parameters")):
        with pytest.raises(UnsupportedModelError, match=name):
            generation_flops(spec, [100], [10], adapters=Trainability(trainable=(), adapter=adapter))
