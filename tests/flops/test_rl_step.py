"""The RL step's phase table, rollout size and mean-length estimate (vlm_perf.flops.rl_step), by hand."""

from __future__ import annotations

import polars as pl
import pytest

from vlm_perf.arch import spec_from_config
from vlm_perf.errors import ConfigError
from vlm_perf.flops.generation import phase_rates, rl_step_flops
from vlm_perf.flops.rl_step import PHASE_TABLE_SCHEMA, phase_table, rl_samples_expr, rl_step_flops_estimate

TINY = {"model_type": "qwen2", "hidden_size": 64, "intermediate_size": 96, "num_hidden_layers": 2,
        "num_attention_heads": 4, "num_key_value_heads": 2, "vocab_size": 1000, "tie_word_embeddings": False,
        "max_position_embeddings": 4096}


def _spec():
    return spec_from_config(TINY, name="tiny-qwen2")


def _frame():
    return pl.DataFrame({"iteration": [1, 2], "elapsed_s": [10.0, None],
                         "phase_s_generation": [6.0, 5.0], "phase_s_update_actor": [2.0, 2.5],
                         "phase_s_reward": [0.5, None], "timer_s_generate_sequences": [5.5, 4.0],
                         "loss": [0.1, 0.2]})


def _row(t, it, phase):
    (row,) = t.filter((pl.col("iteration") == it) & (pl.col("phase") == phase)).rows(named=True)
    return row


def test_phase_table_by_hand():
    step = rl_step_flops(_spec(), [6, 9], [4, 2], causal="full")
    totals = step.phase_totals()
    t = phase_table(_frame(), step, num_gpus=4)
    assert dict(t.schema) == PHASE_TABLE_SCHEMA
    gen = _row(t, 1, "generation")
    assert gen["seconds"] == 6.0 and gen["flops"] == totals["generation"] and gen["in_sum"]
    assert gen["tflops_per_gpu"] == pytest.approx(totals["generation"] / 6.0 / 4 / 1e12)
    assert gen["share_of_step"] == pytest.approx(0.6)
    assert _row(t, 1, "reward")["flops"] == 0.0  # a phase with no model FLOPs here
    ref = _row(t, 1, "ref")  # a FLOPs phase the log has no timer for: kept, no seconds, no rate
    assert ref["seconds"] is None and ref["flops"] == totals["ref"] and ref["tflops_per_gpu"] is None
    timer = _row(t, 1, "timer:generate_sequences")
    assert timer["kind"] == "timer" and not timer["in_sum"] and timer["flops"] is None
    assert _row(t, 1, "unaccounted")["seconds"] == pytest.approx(10.0 - (6.0 + 2.0 + 0.5))
    assert _row(t, 2, "unaccounted")["seconds"] is None  # no step time
    assert _row(t, 2, "generation")["share_of_step"] is None
    # order: canonical phases first (in PHASES order), timers, the unaccounted row last
    phases = t.filter(pl.col("iteration") == 1).get_column("phase").to_list()
    assert phases[0] == "generation" and phases[-1] == "unaccounted" and phases.index("update_actor") < phases.index(
        "reward") < phases.index("timer:generate_sequences")


def test_phase_table_without_flops_or_gpus():
    t = phase_table(_frame())
    assert t.get_column("flops").null_count() == t.height and t.get_column("tflops_per_gpu").null_count() == t.height
    assert _row(t, 1, "unaccounted")["seconds"] == pytest.approx(1.5)


def test_phase_table_per_iteration_flops():
    flops = pl.DataFrame({"iteration": [1, 1, 2], "phase": ["generation", "update_actor", "generation"],
                          "flops": [8e12, 4e12, 1e12]})
    t = phase_table(_frame(), flops, num_gpus=2)
    assert _row(t, 1, "update_actor")["tflops_per_gpu"] == pytest.approx(4e12 / 2.0 / 2 / 1e12)
    assert _row(t, 2, "generation")["tflops_per_gpu"] == pytest.approx(1e12 / 5.0 / 2 / 1e12)
    assert _row(t, 2, "update_actor")["flops"] == 0.0  # no FLOPs given for that (iteration, phase)


def test_phase_table_errors():
    with pytest.raises(ConfigError, match="num_gpus"):
        phase_table(_frame(), num_gpus=0)
    with pytest.raises(ConfigError, match="not canonical"):
        phase_table(_frame().with_columns(pl.lit(1.0).alias("phase_s_gen")))
    with pytest.raises(ConfigError, match="iteration"):
        phase_table(_frame().drop("iteration"))
    with pytest.raises(ConfigError, match="missing flops"):
        phase_table(_frame(), pl.DataFrame({"iteration": [1], "phase": ["generation"]}))
    with pytest.raises(ConfigError, match="RLStepFlops or a polars DataFrame"):
        phase_table(_frame(), {"generation": 1.0})  # type: ignore[arg-type]


def test_phase_table_of_an_empty_frame_and_a_frame_without_timers():
    empty = pl.DataFrame({"iteration": [], "elapsed_s": []}, schema={"iteration": pl.Int64, "elapsed_s": pl.Float64})
    assert phase_table(empty).height == 0
    only_step = pl.DataFrame({"iteration": [3], "elapsed_s": [4.0]})
    (row,) = phase_table(only_step).rows(named=True)
    assert row["phase"] == "unaccounted" and row["seconds"] is None  # no phase timed: nothing to subtract


def test_rl_samples_expr():
    df = pl.DataFrame({"step_tokens": [421888.0, 10.0, None], "prompt_len_mean": [101.75, 0.0, 1.0],
                       "response_len_mean": [310.25, 0.0, 1.0]})
    assert df.select(rl_samples_expr()).get_column("rl_samples").to_list() == [421888 // 412, None, None]


def test_estimate_is_the_mean_lengths_repeated_and_says_so():
    spec = _spec()
    est = rl_step_flops_estimate(spec, 3, 6.4, 3.6, ppo_epochs=2)
    one = rl_step_flops(spec, [6], [4], ppo_epochs=2)
    for phase, flops in one.phase_totals().items():
        assert est.phase_totals()[phase] == 3 * flops  # FLOPs add over samples
    assert est.notes[0].startswith("ESTIMATE") and "quadratic" in est.notes[0]
    assert any("vision tower" in n for n in est.notes)


def test_estimate_under_counts_a_spread_of_lengths():
    spec = _spec()
    spread = rl_step_flops(spec, [50, 150], [20, 180])  # mean prompt 100, mean response 100
    est = rl_step_flops_estimate(spec, 2, 100.0, 100.0)
    assert est.total < spread.total
    # linear terms agree: the difference is attention only (sum(L^2) > n * mean(L)^2)
    assert est.phase_totals()["update_actor"] < spread.phase_totals()["update_actor"]


@pytest.mark.parametrize("args,match", [((0, 10.0, 5.0), "samples"), ((2.5, 10.0, 5.0), "samples"),
                                        ((2, 0.2, 5.0), "mean prompt"), ((2, 10.0, -1.0), "mean response")])
def test_estimate_bad_input(args, match):
    with pytest.raises(ConfigError, match=match):
        rl_step_flops_estimate(_spec(), *args)


def test_phase_rates_prefers_the_phase_timer_to_a_nested_one():
    step = rl_step_flops(_spec(), [6], [4], causal="full")
    both = phase_rates(step, {"timing_s/generate_sequences": 1.9, "timing_s/gen": 2.0, "timing_s/start_profile": 9.0},
                       num_gpus=1)
    assert both["generation"]["seconds"] == 2.0 and "start_profile" not in both
    nested_only = phase_rates(step, {"timing_s/generate_sequences": 1.9}, num_gpus=1)
    assert nested_only["generation"]["seconds"] == 1.9


def test_estimate_frame_equals_the_per_step_estimate_on_every_row():
    from vlm_perf.arch import load_model
    from vlm_perf.flops.rl_step import rl_estimate_flops_frame

    it = pl.DataFrame({"iteration": [1, 2, 3, 4, 5], "prompt_len_mean": [101.75, 101.5, 300.2, None, 50.0],
                       "response_len_mean": [310.25, 322.5, 7.0, 5.0, 0.2],
                       "step_tokens": [421888.0, 434176.0, 3072.0, 5.0, 100.0]})
    for spec, grids in ((_spec(), ()), (load_model("qwen2.5-vl-7b"), [(1, 16, 16)])):
        frame, notes = rl_estimate_flops_frame(spec, it, image_grids_per_sample=grids, ppo_epochs=2)
        assert notes[0].startswith("ESTIMATE")
        assert sorted(set(frame.get_column("iteration").to_list())) == [1, 2, 3]  # 4: no prompt; 5: N rounds to 0
        for iteration, p, n, k in ((1, 101.75, 310.25, 1024), (2, 101.5, 322.5, 1024), (3, 300.2, 7.0, 10)):
            want = rl_step_flops_estimate(spec, k, p, n, image_grids_per_sample=grids, ppo_epochs=2).phase_totals()
            got = dict(frame.filter(pl.col("iteration") == iteration).select("phase", "flops").iter_rows())
            assert got.keys() == want.keys()
            for phase in want:
                assert got[phase] == pytest.approx(want[phase], rel=1e-9), (spec.name, iteration, phase)


def test_estimate_frame_refuses_a_non_polynomial_model_and_bad_input():
    from vlm_perf.arch import load_model
    from vlm_perf.errors import UnsupportedModelError
    from vlm_perf.flops.rl_step import rl_estimate_flops_frame

    it = pl.DataFrame({"iteration": [1, 2], "prompt_len_mean": [500.0, 3000.0], "response_len_mean": [400.0, 400.0]})
    with pytest.raises(UnsupportedModelError, match="polynomial"):
        rl_estimate_flops_frame(load_model("gemma3-4b"), it, samples=2)  # sliding window 1024 is crossed
    with pytest.raises(ConfigError, match="no sample count"):
        rl_estimate_flops_frame(_spec(), it)
    with pytest.raises(ConfigError, match="missing prompt_len_mean"):
        rl_estimate_flops_frame(_spec(), it.drop("prompt_len_mean"), samples=2)
    with pytest.raises(ConfigError, match="samples must be"):
        rl_estimate_flops_frame(_spec(), it, samples=0)
    frame, _ = rl_estimate_flops_frame(_spec(), it.with_columns(pl.lit(None, pl.Float64).alias("response_len_mean")),
                                       samples=2)
    assert frame.height == 0


def test_estimate_frame_feeds_the_phase_table():
    from vlm_perf.flops.rl_step import rl_estimate_flops_frame

    it = pl.DataFrame({"iteration": [1], "elapsed_s": [10.0], "phase_s_generation": [6.0], "phase_s_update_actor": [3.0],
                       "prompt_len_mean": [6.0], "response_len_mean": [4.0]})
    frame, _ = rl_estimate_flops_frame(_spec(), it, samples=3, causal="full")
    t = phase_table(it, frame, num_gpus=1)
    want = rl_step_flops(_spec(), [6] * 3, [4] * 3, causal="full").phase_totals()
    assert _row(t, 1, "update_actor")["flops"] == pytest.approx(want["update_actor"], rel=1e-12)
    assert _row(t, 1, "ref")["seconds"] is None


def test_composite_phases_take_the_flops_of_the_phases_inside():
    step = rl_step_flops(_spec(), [6], [4], causal="full", critic=True)
    totals = step.phase_totals()
    it = pl.DataFrame({"iteration": [3], "elapsed_s": [116.25], "phase_s_generation": [60.5],
                       "phase_s_make_experience": [21.5], "phase_s_ppo_train": [30.25], "phase_s_update_weights": [4.0]})
    t = phase_table(it, step, num_gpus=2)
    assert set(t.get_column("phase")) == {"generation", "make_experience", "ppo_train", "update_weights", "unaccounted"}
    mk = _row(t, 3, "make_experience")
    assert mk["flops"] == totals["old_log_prob"] + totals["ref"] + totals["values"]
    assert _row(t, 3, "ppo_train")["flops"] == totals["update_actor"] + totals["update_critic"]
    assert _row(t, 3, "unaccounted")["seconds"] == pytest.approx(0.0)  # OpenRLHF's step_total is their sum
    rates = phase_rates(step, {"make_experience": 21.5, "ppo_train": 30.25}, num_gpus=2)
    assert rates["ppo_train"]["flops"] == totals["update_actor"] + totals["update_critic"]
    assert "update_actor" not in rates and "ref" not in rates and rates["generation"]["seconds"] is None


def test_step_summary_by_hand():
    from vlm_perf.flops.rl_step import STEP_SUMMARY_SCHEMA, step_summary

    step = rl_step_flops(_spec(), [6, 9], [4, 2], causal="full")
    totals = step.phase_totals()
    s = step_summary(phase_table(_frame(), step, num_gpus=4), num_gpus=4)
    assert dict(s.schema) == STEP_SUMMARY_SCHEMA and s.get_column("iteration").to_list() == [1, 2]
    one = s.row(0, named=True)
    assert one["phases_s"] == 8.5 and one["unaccounted_s"] == pytest.approx(1.5) and one["update_actor_s"] == 2.0
    assert one["flops"] == sum(totals.values())  # every phase's FLOPs, timed or not
    assert one["tflops_per_gpu"] == pytest.approx(sum(totals.values()) / 10.0 / 4 / 1e12)
    assert one["update_actor_share"] == pytest.approx(0.2)
    two = s.row(1, named=True)
    assert two["step_s"] is None and two["tflops_per_gpu"] is None and two["phases_s"] == 7.5
    assert step_summary(phase_table(_frame()), 1).get_column("flops").null_count() == 2
    with pytest.raises(ConfigError, match="not a phase table"):
        step_summary(_frame(), 1)
    with pytest.raises(ConfigError, match="num_gpus"):
        step_summary(phase_table(_frame()), 0)
