"""Log-prob head positions and the backward recompute (LogProbHead), by hand on a tiny Qwen2 LM (h 64, 4 heads x 16,
2 kv heads, MLP 96, V 1000); and the RL accounting over recorded steps (padding notes, log timings)."""

from __future__ import annotations

import pytest

from vlm_perf.arch import spec_from_config
from vlm_perf.errors import ConfigError
from vlm_perf.flops.generation import LogProbHead, actor_update_parts, logprob_forward_parts, rl_step_flops

from tests.support import TINY_QWEN2_CORE_PER_POSITION as CORE_PER_POSITION  # noqa: E402
from tests.support import TINY_QWEN2_HEAD as HEAD  # noqa: E402
from tests.support import TINY_QWEN2_PER_TOKEN_LAYER as PER_TOKEN_LAYER  # noqa: E402
from tests.support import TINY_QWEN2 as TINY  # noqa: E402


def _spec():
    return spec_from_config(TINY, name="tiny-qwen2")


def _body(lengths):  # the layers of eager (full-square) forwards over sequences of these lengths
    return sum(2 * (s * PER_TOKEN_LAYER + CORE_PER_POSITION * s * s) for s in lengths)


def test_logprob_forward_head_positions_by_hand():
    spec = _spec()
    prompts, responses = [6, 9], [4, 3]  # sequences of 10 and 12
    body = _body([10, 12])
    assert logprob_forward_parts(spec, prompts, responses, causal="full")["language_model"] == body + 22 * HEAD
    assert logprob_forward_parts(spec, prompts, responses, causal="full",
                                 head=LogProbHead("all_but_last"))["language_model"] == body + 20 * HEAD
    assert logprob_forward_parts(spec, prompts, responses, causal="full",
                                 head=LogProbHead("response"))["language_model"] == body + 7 * HEAD


def test_actor_update_head_by_hand():
    """Full training: the layers run forward + input grad + weight grad (x3); the head forward + 2 gradients on its
    positions, plus its recomputed logits when the head recomputes in backward."""
    spec = _spec()
    body = 3 * _body([10])
    plain = actor_update_parts(spec, [6], [4], causal="full")["language_model"]
    assert plain == body + 3 * 10 * HEAD
    trl_cpu = actor_update_parts(spec, [6], [4], causal="full", head=LogProbHead("all_but_last", True))
    assert trl_cpu["language_model"] == body + 4 * 9 * HEAD
    trl_gpu = actor_update_parts(spec, [6], [4], causal="full", head=LogProbHead("response", True))
    assert trl_gpu["language_model"] == body + 4 * 4 * HEAD
    no_recompute = actor_update_parts(spec, [6], [4], causal="full", head=LogProbHead("response"))
    assert no_recompute["language_model"] == body + 3 * 4 * HEAD


def test_rl_step_uses_the_head_in_every_log_prob_phase():
    spec = _spec()
    head = LogProbHead("response", True)
    step = rl_step_flops(spec, [6], [4], causal="full", head=head, ppo_epochs=2)
    totals = step.phase_totals()
    assert totals["old_log_prob"] == totals["ref"] == _body([10]) + 4 * HEAD
    assert totals["update_actor"] == 2 * (3 * _body([10]) + 4 * 4 * HEAD)
    # the default (every position, no recompute) is what it was before the head existed
    assert rl_step_flops(spec, [6], [4], causal="full").phase_totals()["ref"] == _body([10]) + 10 * HEAD


def test_bad_head_positions():
    with pytest.raises(ConfigError, match="log-prob head positions must be one of all, all_but_last, response"):
        LogProbHead("last")
    with pytest.raises(ConfigError, match="2 prompt lengths but 1 response lengths"):
        logprob_forward_parts(_spec(), [6, 9], [4])


def _record(rollout, phases_s=None):
    from vlm_perf.ingest.rl_metadata import RLRecord, RLSettings, RLStep, Rollout, Shapes

    settings = RLSettings("grpo", "trl", 2, 0.0, False, 1, False, False, "response", True)
    step = RLStep(1, 2.0, phases_s or {"generation": 1.5, "update_actor": 0.5}, Rollout(**rollout), {},
                  (Shapes(rollout["prompt_lens"], rollout["response_lens"]),))
    return RLRecord(settings, (step,))


def test_accounting_notes_padding_and_prefers_log_timings():
    from vlm_perf.analysis.rl import rl_accounting

    spec = _spec()
    padded = _record({"prompt_lens": (6, 9), "response_lens": (4, 2), "padded_prompt_len": (9,),
                      "generated_steps": (5,)})
    acc = rl_accounting(spec, padded, causal="full")
    assert any("ran 5 decode steps for responses of at most 4 tokens" in n for n in acc.notes)
    assert any("left-padded to 9 positions" in n for n in acc.notes)
    assert acc.headline() == "GRPO: generation 75.0% of the step time"
    phases = {p.name: p for p in acc.phases()}
    assert phases["generation"].tflops_per_gpu == pytest.approx(phases["generation"].flops / 1.5 / 1e12)
    assert set(phases) == {"generation", "update_actor"}  # no reference, no old log-probs: not counted, not shown
    timed = rl_accounting(spec, padded, causal="full", timings_s={1: {"generation": 0.5, "update_actor": 1.5}})
    assert timed.headline() == "GRPO: generation 25.0% of the step time"
    clean = _record({"prompt_lens": (6, 6), "response_lens": (4, 4), "padded_prompt_len": (6,),
                     "generated_steps": (4,)})
    assert rl_accounting(spec, clean, causal="full").notes == ()


def test_log_phase_timings_and_response_check():
    import polars as pl

    from vlm_perf.analysis.rl import log_phase_timings, log_response_check, rl_accounting

    frame = pl.DataFrame({"iteration": [1, 2], "phase_s_generation": [0.5, None], "phase_s_reward": [0.25, None],
                          "phase_s_update_actor": [0.75, None], "response_len_mean": [3.0, None]})
    timings = log_phase_timings(frame)
    assert timings == {1: {"generation": 0.5, "other": 0.25, "update_actor": 0.75}}  # reward: no FLOPs -> other
    record = _record({"prompt_lens": (6, 9), "response_lens": (4, 2)})
    acc = rl_accounting(_spec(), record, causal="full", timings_s=timings)
    seconds = acc.iterations[0].seconds
    assert seconds == {"generation": 0.5, "update_actor": 0.75, "other": 0.25 + (2.0 - 1.5)}  # the step stays whole
    assert log_response_check(record, frame) == (1, [])  # mean of (4, 2) = 3, as logged
    checked, bad = log_response_check(record, frame.with_columns(pl.col("response_len_mean") * 2))
    assert checked == 1 and bad == ["iteration 1: the log's mean response length 6 differs from the recorded "
                                    "rollout's 3"]
    assert log_phase_timings(pl.DataFrame({"iteration": [1]})) == {}


def test_a_lora_policy_runs_its_adapters_in_generation_and_old_log_probs_by_hand():
    """LoRA r=2 on every LM Linear: per token and layer 2·r·(n_in + n_out) over q (64->64), k and v (64->32),
    o (64->64), gate and up (64->96), down (96->64). The old-policy pass and generation (6 prompt + 3 decode tokens)
    run the adapters; the reference (a separate model, or the policy with its adapter disabled) does not."""
    from vlm_perf.arch.adapters import AdapterConfig
    from vlm_perf.arch.trainability import Trainability
    from vlm_perf.flops.generation import generation_flops

    spec = _spec()
    lora = Trainability(trainable=(), adapter=AdapterConfig(r=2, target_modules="all-linear"))
    per_token = 2 * 2 * (128 + 96 + 96 + 128 + 160 + 160 + 160) * 2  # two layers
    step = rl_step_flops(spec, [6], [4], causal="full", trainability=lora)
    totals = step.phase_totals()
    assert totals["old_log_prob"] - totals["ref"] == per_token * 10
    plain = generation_flops(spec, [6], [4], causal="full").total
    assert step.generation.total - plain == per_token * (6 + 3)
    dora = Trainability(trainable=(), adapter=AdapterConfig(r=2, target_modules="all-linear", use_dora=True))
    from vlm_perf.errors import UnsupportedModelError

    with pytest.raises(UnsupportedModelError, match="generation under DoRA"):
        rl_step_flops(spec, [6], [4], trainability=dora)


def test_phase_utilisation_against_a_stated_peak():
    from vlm_perf.analysis.rl import rl_accounting

    record = _record({"prompt_lens": (6, 9), "response_lens": (4, 2)})
    acc = rl_accounting(_spec(), record, causal="full", num_gpus=2, peak_tflops=1e-6)
    gen = next(p for p in acc.phases() if p.name == "generation")
    assert gen.tflops_per_gpu == pytest.approx(gen.flops / 1.5 / 2 / 1e12)
    assert gen.mfu == pytest.approx(gen.tflops_per_gpu / 1e-6)
    block = acc.to_dict()
    assert block["mfu"] == pytest.approx(block["tflops_per_gpu"] / 1e-6)
    assert rl_accounting(_spec(), record, causal="full").to_dict()["mfu"] is None
