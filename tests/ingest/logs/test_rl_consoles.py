"""RL phase timers of NeMo-RL, DeepSpeed-Chat step 3 and current veRL (numpy reprs) -> ``phase_s_<phase>``, and the
RL phase table (``vlm_perf.flops.rl_step.phase_table``) built from a parsed log of each (issue 31 §3).

Fixtures: tests/ingest/logs/fixtures/public/{nemo_rl_grpo,deepspeed_chat_step3,verl_numpy_reprs}.log, each citing
the public sources it is shaped after (values invented). Every expected number is read off the fixture by hand;
the unaccounted seconds are hand arithmetic written here.
"""

from __future__ import annotations

from pathlib import Path

import polars as pl
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.support import write_log
from vlm_perf.errors import InputError
from vlm_perf.flops.generation import COMPOSITE_PHASES, PHASES
from vlm_perf.flops.rl_step import phase_table
from vlm_perf.ingest.logs import parse_logs, vocab

PUBLIC = Path(__file__).resolve().parent / "fixtures" / "public"


def _phases(table: pl.DataFrame, iteration: int) -> dict[str, float | None]:
    return {p: s for p, s in table.filter(pl.col("iteration") == iteration).select("phase", "seconds").iter_rows()}


def test_new_composite_phases_are_canonical():
    assert COMPOSITE_PHASES["logprobs"] == ("old_log_prob", "ref")
    assert COMPOSITE_PHASES["generate_experience"] == ("generation", "old_log_prob", "ref", "values", "reward")
    assert COMPOSITE_PHASES["ref_values"] == ("ref", "values")
    assert vocab._RL_PHASES == PHASES


# ---- NeMo-RL ------------------------------------------------------------------------------------------------

def test_nemo_rl_blocks_and_phase_table():
    r = parse_logs([PUBLIC / "nemo_rl_grpo.log"])
    assert r.diagnostics.failed == []
    it = r.iterations
    assert it.get_column("framework").to_list() == ["nemo-rl", "nemo-rl"]
    assert it.get_column("iteration").to_list() == [1, 2]
    assert it.get_column("loss").to_list() == [0.1032, 0.0875]
    assert it.get_column("response_len_mean").to_list() == [412.5, 398.25]
    t = phase_table(it)
    one = _phases(t, 1)
    assert one["generation"] == 32.52 and one["update_actor"] == 25.05 and one["logprobs"] == 4.78
    assert one["update_weights"] == 0.13
    assert one["timer:buffer_sampling"] == 1.38 and one["timer:data_processing"] == 0.23  # listed, not summed
    assert one["unaccounted"] == pytest.approx(66.55 - (32.52 + 25.05 + 4.78 + 0.13))
    two = _phases(t, 2)
    assert two["generation"] == 30.0 and two["reward"] == 0.75  # `generation` (older NeMo-RL) and reward_calculation
    assert two["unaccounted"] == pytest.approx(60.25 - (30.0 + 24.5 + 4.5 + 0.75 + 0.25))


def test_nemo_rl_step_without_metrics_and_validation_bullets(tmp_path):
    text = ("========================= Step 1/2 =========================\n"
            "▶ Preparing batch...\n"
            "========================= Step 2/2 =========================\n"
            "📊 Validation Results:\n  • Accuracy: 0.5\n"
            "📊 Training Results:\n  • Loss: 0.5\n⏱️  Timing:\n  • Total step time: 10.00s\n"
            "  • policy_training: 4.00s (40.0%)\n  • generation: 5.00s (50.0%)\n")
    r = parse_logs([write_log(tmp_path, text)])
    assert r.raw.get_column("iteration").to_list() == [2]  # step 1 printed nothing: no record
    row = r.raw.row(0, named=True)
    assert row["eval_accuracy"] == 0.5 and row["loss"] == 0.5 and row["phase_s_generation"] == 5.0
    assert r.diagnostics.ignored.get("no_metrics") == 1


# ---- DeepSpeed-Chat step 3 ------------------------------------------------------------------------------------

def test_deepspeed_chat_both_prints_and_phase_table():
    r = parse_logs([PUBLIC / "deepspeed_chat_step3.log"])
    assert r.diagnostics.failed == []
    raw = r.raw.sort("line")
    assert raw.get_column("iteration").to_list() == [3183, 3184, 7]
    assert raw.get_column("loss").to_list() == [0.921875, 0.875, 0.25]  # act_loss / Actor Loss
    assert raw.get_column("critic_loss").to_list() == [0.515625, 0.5, 0.125]
    assert raw.get_column("reward_score").to_list() == [-7.80859375, -6.359375, -0.5]
    t = phase_table(raw)
    old = _phases(t, 3183)
    assert old["generation"] == 1.59 and old["ppo_train"] == 0.42 and old["timer:gather"] == 0.05
    assert old["unaccounted"] == pytest.approx(2.12 - (1.59 + 0.42))  # `Others` and the gather are unaccounted
    new = _phases(t, 7)
    assert new["generate_experience"] == 9.25 and new["ppo_train"] == 1.5
    assert new["unaccounted"] == pytest.approx(10.75 - (9.25 + 1.5))
    assert raw.filter(pl.col("iteration") == 7).get_column("tflops_per_gpu_logged").to_list() == [5.35]


def test_deepspeed_chat_timings_without_a_step_are_not_a_record(tmp_path):
    text = ("|E2E latency=2.12s |Gather latency=0.05s (2.36%) |Generate time=1.59s (75.00%) |Training time=0.42s "
            "(19.81%) |Others=0.06 (2.83%)|CurSamplesPerSec=1.89 |AvgSamplesPerSec=1.95\n")
    r = parse_logs([write_log(tmp_path, text)], empty_ok=True)
    assert r.raw.height == 0 and r.diagnostics.ignored.get("no_step") == 1


# ---- current veRL (numpy reprs) -----------------------------------------------------------------------------

def test_verl_numpy_reprs_phase_table():
    r = parse_logs([PUBLIC / "verl_numpy_reprs.log"])
    raw = r.raw.sort("line")
    assert raw.get_column("kind").to_list() == ["eval", "train", "train"]  # step 0: validation only
    it = r.iterations
    assert it.get_column("loss").to_list() == [-0.00066, -0.0005]
    assert it.get_column("mfu_logged").to_list() == [0.25, 0.26]
    assert it.get_column("tokens_per_s").to_list() == [1220.5, 1249.0]
    one = _phases(phase_table(it), 1)
    assert one["generation"] == 4.25 and one["update_actor"] == 22.25 and one["update_critic"] == 19.75
    assert one["timer:generate_sequences"] == 3.5  # nested in gen: listed, not summed
    assert one["unaccounted"] == pytest.approx(57.5 - (4.25 + 0.08 + 5.5 + 5.0 + 0.08 + 19.75 + 22.25 + 0.5))


# ---- seeded, bounded fuzzing of the new readers ---------------------------------------------------------------

_PIECES = ["•", "  • ", ":", "s", "%)", "(", "=", "|", " ", "1.5", "nan", "-", "Step 3/4", "=====", "E2E latency=",
           "step: ", "Latency: ", "ms", "9" * 40, "\r", "{", "'"]


@settings(derandomize=True, deadline=None, max_examples=60, suppress_health_check=list(HealthCheck))
@given(name=st.sampled_from(["nemo_rl_grpo.log", "deepspeed_chat_step3.log", "verl_numpy_reprs.log",
                             "siirl_grpo.log", "slime_grpo.log"]),
       where=st.floats(0, 1), pos=st.floats(0, 1), piece=st.sampled_from(_PIECES), n=st.integers(1, 4))
def test_fuzz_mutated_rl_console_never_crashes(tmp_path_factory, name, where, pos, piece, n):
    lines = (PUBLIC / name).read_text(encoding="utf-8").split("\n")
    i = int(where * (len(lines) - 1))
    j = int(pos * len(lines[i]))
    lines[i] = lines[i][:j] + piece * n + lines[i][j:]
    p = write_log(tmp_path_factory.mktemp("rlc"), "\n".join(lines))
    try:
        r = parse_logs([p], empty_ok=True)
    except InputError:
        return
    if r.raw.height and any(c.startswith("phase_s_") for c in r.raw.columns):
        phase_table(r.iterations)  # the table is built from whatever was read


# ---- siiRL and slime (timers through the vocabulary) ------------------------------------------------------------

@pytest.mark.parametrize("key,column", [
    ("perf/delta_time/rollout", "phase_s_generation"), ("perf/delta_time/actor_log_prob", "phase_s_old_log_prob"),
    ("perf/delta_time/ref", "phase_s_ref"), ("perf/delta_time/reward", "phase_s_reward"),
    ("perf/delta_time/advantage", "phase_s_adv"), ("perf/delta_time/actor", "phase_s_update_actor"),
    ("perf/delta_time/critic", "phase_s_update_critic"), ("perf/delta_time/step", "elapsed_s"),
    ("perf/delta_time/graph_execution", "timer_s_graph_execution"), ("perf/delta_time/reference", "timer_s_reference"),
    ("perf/rollout_time", "phase_s_generation"), ("perf/log_probs_time", "phase_s_old_log_prob"),
    ("perf/ref_log_probs_time", "phase_s_ref"), ("perf/actor_train_time", "phase_s_update_actor"),
    ("perf/step_time", "elapsed_s"), ("perf/train_wait_time", "timer_s_train_wait"),
    ("perf/update_weights_time", "timer_s_update_weights"), ("train/perf/actor_train_time", "phase_s_update_actor"),
    ("rollout/response_len/mean", "response_len_mean"), ("rollout/truncated_ratio", "response_clip_ratio"),
])
def test_siirl_and_slime_keys(key, column):
    assert vocab.lookup(key).column == column


def test_other_perf_time_keys_are_not_slime_timers():
    assert vocab.lookup("perf/max_memory_time") is None  # not one of slime's timers: the usual rules (none)
    assert vocab.lookup("perf/time_per_step").column == "elapsed_s"  # veRL's whole key, unchanged


def test_siirl_phase_table():
    it = parse_logs([PUBLIC / "siirl_grpo.log"]).iterations
    assert it.get_column("loss").to_list() == [0.003, 0.004]
    one = _phases(phase_table(it), 1)
    assert (one["generation"], one["old_log_prob"], one["ref"], one["reward"], one["adv"], one["update_actor"]) == (
        16.75, 10.75, 28.125, 0.25, 0.05, 72.25)
    assert one["timer:graph_execution"] == 128.3 and one["timer:reference"] == 28.175  # kept, not summed
    assert one["unaccounted"] == pytest.approx(129.5 - (16.75 + 10.75 + 28.125 + 0.25 + 0.05 + 72.25))


def test_slime_two_perf_dicts_of_a_rollout_make_one_step():
    r = parse_logs([PUBLIC / "slime_grpo.log"])
    assert r.diagnostics.failed == []
    it = r.iterations
    assert it.get_column("iteration").to_list() == [0, 1]
    assert it.get_column("response_len_mean").to_list() == [2773.5, 2801.25]
    one = _phases(phase_table(it), 0)
    assert one["generation"] == 371.25 and one["old_log_prob"] == 18.25 and one["update_actor"] == 60.0
    assert one["timer:train_wait"] == 372.0 and one["timer:update_weights"] == 4.5
    assert one["unaccounted"] == pytest.approx(450.5 - (371.25 + 18.25 + 60.0))


def test_slime_eval_dict_is_an_evaluation(tmp_path):
    text = ("(RolloutManager pid=1) [2026-04-15 07:50:00] rollout.py:90 - eval 0: {'eval/gsm8k': 0.5}\n"
            "(RolloutManager pid=1) [2026-04-15 07:57:53] rollout.py:1193 - perf 0: {'perf/rollout_time': 10.5}\n")
    r = parse_logs([write_log(tmp_path, text)])
    assert r.raw.sort("line").get_column("kind").to_list() == ["eval", "train"]


# ---- ROLL (time/<name> timers; a W&B history export of an RLVR run) ---------------------------------------------
# roll_rlvr_history.jsonl (JSON lines hold no comment) is shaped after alibaba/ROLL roll/pipeline/rlvr/rlvr_pipeline.py
# (metrics_mgr.add_metric("time/step_generate", ...), "time/step_total", "time/ref_log_probs_values",
# "time/old_log_probs", "time/step_train", "time/step_model_update", "system/tps"), https://github.com/alibaba/ROLL/pull/46
# (the time metrics moved out of the timer's `with` block) and https://github.com/alibaba/ROLL/pull/170 (system/tps
# timers); the per-worker `time/<role>/<stage>/total` statistics are kept as extras. Values invented.

@pytest.mark.parametrize("key,column", [
    ("time/step_total", "elapsed_s"), ("time/step_generate", "phase_s_generation"),
    ("time/old_log_probs", "phase_s_old_log_prob"), ("time/ref_log_probs_values", "phase_s_ref_values"),
    ("time/step_train", "phase_s_ppo_train"), ("time/step_model_update", "phase_s_update_weights"),
    ("time/val_step", "phase_s_testing"),
])
def test_roll_keys(key, column):
    assert vocab.lookup(key).column == column


def test_roll_other_time_keys_keep_their_rules():
    assert vocab.lookup("time/batch").column == ""  # Composer's batch counter (a whole key), unchanged
    assert vocab.lookup("time/actor_train/train_step/total") is None  # a per-worker statistic: an extra


def test_roll_phase_table_from_a_wandb_export():
    it = parse_logs([PUBLIC / "roll_rlvr_history.jsonl"]).iterations
    assert it.get_column("elapsed_s").to_list() == [880.25, 870.5]
    zero = _phases(phase_table(it), 0)
    assert (zero["generation"], zero["ref_values"], zero["old_log_prob"], zero["ppo_train"], zero["update_weights"]) == (
        96.75, 141.75, 148.0, 452.0, 20.25)
    assert zero["unaccounted"] == pytest.approx(880.25 - (96.75 + 141.75 + 148.0 + 452.0 + 20.25))


def test_roll_phase_table_from_its_stdout_tracker_console():
    """ROLL's stdout tracker prints `metrics_tag: {"step": N, "metrics": {...}}` (fixture header: the tracker and the
    pipeline at their commits): the nested metrics are the step's record, read as the W&B export's keys are."""
    it = parse_logs([PUBLIC / "roll_stdout_tracker.log"]).iterations
    assert it.get_column("iteration").to_list() == [0, 1]
    assert it.get_column("elapsed_s").to_list() == [880.0, 870.5]
    one = _phases(phase_table(it), 1)
    assert (one["generation"], one["ref_values"], one["old_log_prob"], one["ppo_train"], one["update_weights"]) == (
        91.25, 140.5, 146.75, 451.0, 20.25)
    assert one["unaccounted"] == pytest.approx(870.5 - (91.25 + 140.5 + 146.75 + 451.0 + 20.25))


def test_a_step_and_metrics_dict_is_one_record_in_any_trainer_line(tmp_path):
    """The shape, not the framework: any line holding {"step": N, "metrics": {...}} is the step beside its metrics
    (a key the step dict holds itself wins over a nested one of the same name)."""
    text = ('x metrics_tag: {"step": 7, "metrics": {"loss": 1.5, "lr": 1e-05, "step": 99}}\n'
            'x metrics_tag: {"step": 8, "metrics": {"loss": 1.25, "lr": 1e-05}}\n')
    it = parse_logs([write_log(tmp_path, text)]).iterations
    assert it.get_column("iteration").to_list() == [7, 8]
    assert it.get_column("loss").to_list() == [1.5, 1.25]


# ---- AReaL (timeperf/<name> timers in its W&B history; the master worker's end-to-end line) ---------------------
# areal_history.jsonl (JSON lines hold no comment: its citation header is areal_history.jsonl.source) is shaped
# after AReaL's stats_tracker docs
# (`with stats_tracker.record_timing("rollout")` -> key "timeperf/rollout") and its GRPO example loops
# (record_timing("rollout" / "recompute_logp" / "ref_logp" / "compute_advantage" / "train_step" / "update_weights"),
# https://github.com/inclusionAI/AReaL; the console line after its v0.2 blog's "Monitoring the Training Process"
# (master worker `Epoch 1/1 step 1/19 (global step 1) finishes. ... #End to end# execution time: *2124.429*s.`).
# Values invented.

@pytest.mark.parametrize("key,column", [
    ("timeperf/rollout", "phase_s_generation"), ("timeperf/recompute_logp", "phase_s_old_log_prob"),
    ("timeperf/ref_logp", "phase_s_ref"), ("timeperf/critic_values", "phase_s_values"),
    ("timeperf/compute_advantage", "phase_s_adv"), ("timeperf/train_step", "phase_s_update_actor"),
    ("timeperf/update_weights", "phase_s_update_weights"), ("timeperf/e2e", "elapsed_s"),
])
def test_areal_keys(key, column):
    assert vocab.lookup(key).column == column


def test_areal_fraction_is_not_a_timer():
    assert vocab.lookup("timeperf/rollout_wait_fraction") is None  # a fraction: an extra, never seconds


def test_areal_phase_table_from_a_wandb_export():
    it = parse_logs([PUBLIC / "areal_history.jsonl"]).iterations
    zero = _phases(phase_table(it), 0)
    assert (zero["generation"], zero["old_log_prob"], zero["ref"], zero["adv"], zero["update_actor"],
            zero["update_weights"]) == (150.5, 20.25, 18.75, 0.5, 95.0, 10.25)
    assert zero["unaccounted"] == pytest.approx(300.25 - (150.5 + 20.25 + 18.75 + 0.5 + 95.0 + 10.25))


@pytest.mark.parametrize("line,want", [
    ("(master_worker/0 pid=96390, ip=10.0.0.1) 20250222-11:11:56.997 master worker INFO: Epoch 1/1 step 1/19 (global "
     "step 1) finishes. Average #tokens per batch is 111847. #End to end# execution time: *2124.429*s. Total time "
     "consumption: 2283.862s. ", (1, 2124.429, 2283.862)),
    ("20240607-10:00:00.000 master worker INFO: Epoch 2/3 step 4 (global step 24) finishes. #End to end# execution "
     "time: *35.500*s. Total time consumption: 900.250s. Estimated remaining time: 100.000s. ", (24, 35.5, 900.25)),
])
def test_areal_master_worker_step_line(tmp_path, line, want):
    r = parse_logs([write_log(tmp_path, line + "\n")])
    row = r.raw.row(0, named=True)
    assert (row["framework"], row["iteration"], row["elapsed_s"], row["total_time_s"]) == ("areal", *want)


# ---- AReaL 0.1-0.2 (ReaLHF) per-RPC timings: `Model rpc <name> finished. Request-reply time Xs.` -----------------
# areal_realhf_rpcs.log cites its sources in its header (a real console's prefix from areal-project/AReaL#145, the
# line's format string in realhf/system/model_function_call.py at a named commit).

def test_areal_rpc_lines_become_the_steps_phases():
    it = parse_logs([PUBLIC / "areal_realhf_rpcs.log"]).iterations
    assert it.get_column("iteration").to_list() == [14, 15]
    first = it.row(0, named=True)
    assert (first["phase_s_generation"], first["phase_s_reward"], first["phase_s_ref"], first["phase_s_old_log_prob"],
            first["phase_s_update_actor"]) == (412.3456, 2.2544, 25.289, 25.5, 224.611)
    assert it.row(1, named=True)["phase_s_update_actor"] == 350.75  # two actor_train calls: 300.5 + 50.25
    zero = _phases(phase_table(it), 14)
    assert zero["unaccounted"] == pytest.approx(706.147 - 690.0)  # the RPCs by hand: 690.0 s of the step


def test_areal_rpc_names_map_through_the_one_table():
    from vlm_perf.flops.generation import AREAL_RPCS

    assert AREAL_RPCS == {"actor_gen": "generation", "actor_inf": "old_log_prob", "ref_inf": "ref",
                          "critic_inf": "values", "rew_inf": "reward", "actor_train": "update_actor",
                          "critic_train": "update_critic"}
    assert set(AREAL_RPCS.values()) <= set(PHASES)


_STEP = ("(MasterWorker pid=7) 20250701-22:52:55.934 worker INFO: Epoch 1/1 step {g}/9 (global step {g}) finishes. "
         "#End to end# execution time: *{e2e}*s. Total time consumption: 9999.000s. ")
_RPC = ("(MasterWorker pid=7) 20250701-22:50:00.000 realhf.system.model_function_call INFO: Model rpc {name} "
        "finished. Request-reply time {t}s. Detailed time stats:")


def test_areal_rpc_near_misses(tmp_path):
    lines = [_RPC.format(name="actor_gen", t="10.0000"), _RPC.format(name="my_custom_rpc", t="2.5000"),
             _STEP.format(g=1, e2e="20.000"),
             _STEP.format(g=2, e2e="5.000")]  # a step with no RPC line before it: no phase, still a step
    it = parse_logs([write_log(tmp_path, "\n".join(lines) + "\n")]).iterations
    one, two = it.row(0, named=True), it.row(1, named=True)
    assert one["phase_s_generation"] == 10.0 and one["timer_s_my_custom_rpc"] == 2.5  # unknown RPC: kept, not summed
    assert two["phase_s_generation"] is None and two["elapsed_s"] == 5.0


def test_areal_rpc_with_negative_seconds_is_a_failed_line(tmp_path):
    lines = [_RPC.format(name="actor_gen", t="-5.0000"), _STEP.format(g=1, e2e="20.000")]
    r = parse_logs([write_log(tmp_path, "\n".join(lines) + "\n")])
    assert r.diagnostics.failed_count == 1 and r.iterations.row(0, named=True).get("phase_s_generation") is None


_RPCS = ["actor_gen", "actor_inf", "ref_inf", "critic_inf", "rew_inf", "actor_train", "critic_train"]


@pytest.mark.slow
@settings(derandomize=True, deadline=None, database=None, max_examples=60,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(steps=st.lists(st.lists(st.tuples(st.sampled_from(_RPCS), st.integers(0, 10_000)), max_size=8),
                      min_size=1, max_size=5))
def test_fuzz_areal_rpc_seconds_sum_per_step_and_phase(tmp_path_factory, steps):
    from vlm_perf.flops.generation import AREAL_RPCS

    lines, want = [], []
    for g, calls in enumerate(steps, start=1):
        sums: dict[str, float] = {}
        for name, centis in calls:
            lines.append(_RPC.format(name=name, t=f"{centis / 100:.4f}"))
            column = "phase_s_" + AREAL_RPCS[name]
            sums[column] = sums.get(column, 0.0) + centis / 100
        lines.append(_STEP.format(g=g, e2e="1000.000"))
        want.append(sums)
    it = parse_logs([write_log(tmp_path_factory.mktemp("areal"), "\n".join(lines) + "\n")]).iterations
    assert it.get_column("iteration").to_list() == list(range(1, len(steps) + 1))
    for row, sums in zip(it.iter_rows(named=True), want):
        for column, value in sums.items():
            assert row[column] == pytest.approx(value), (column, row[column], value)
        assert all(row[c] is None for c in it.columns if c.startswith("phase_s_") and c not in sums)
