"""RL (GRPO / PPO) logs: phase timers, rollout lengths and token counts become canonical columns (issue 18).

Fixtures: tests/ingest/logs/fixtures/public/{verl_grpo_phases,easyr1_console,trl_grpo_ppo,openrlhf_ppo}.log, each
citing the public issue or code it is shaped after (values invented). Expected numbers are read off the fixture
lines by hand; sums and quotients are hand arithmetic written here.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import polars as pl
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from vlm_perf.ingest.logs import parse_logs
from vlm_perf.ingest.logs import vocab
from vlm_perf.ingest.logs.vocab import lookup

PUBLIC = Path(__file__).resolve().parent / "fixtures" / "public"


def rows(name):
    r = parse_logs([PUBLIC / name])
    return r, r.raw.rows(named=True)


def by_line(rs, line):
    (row,) = [x for x in rs if x["line"] == line]
    return row


# ---- the vocabulary's timer rule ------------------------------------------------------------------

@pytest.mark.parametrize("key,column,mult", [
    ("timing_s/gen", "phase_s_generation", 1.0),
    ("timing_s/old_log_prob", "phase_s_old_log_prob", 1.0),
    ("timing_s/old", "phase_s_old_log_prob", 1.0),  # EasyR1's name
    ("timing_s/ref", "phase_s_ref", 1.0),
    ("timing_s/values", "phase_s_values", 1.0),
    ("timing_s/update_critic", "phase_s_update_critic", 1.0),
    ("timing_s/update_actor", "phase_s_update_actor", 1.0),
    ("timing_s/reward", "phase_s_reward", 1.0),
    ("timing_s/adv", "phase_s_adv", 1.0),
    ("timing_s/update_weights", "phase_s_update_weights", 1.0),
    ("timing_s/save_checkpoint", "phase_s_save_checkpoint", 1.0),
    ("timing_s/testing", "phase_s_testing", 1.0),
    ("timing_ms/update_actor", "phase_s_update_actor", 1e-3),
    ("timing_s/generate_sequences", "timer_s_generate_sequences", 1.0),  # nested in gen
    ("timing_s/reshard", "timer_s_reshard", 1.0),
    ("timing_s/start_profile", "timer_s_start_profile", 1.0),  # outside the step
    ("timing_s/Some-New.Timer", "timer_s_some_new_timer", 1.0),  # unknown: kept, named
    ("timing_s/step", "elapsed_s", 1.0),
    ("timing_s/agent_loop/tool_calls/mean", "", 1.0),  # a statistic within a phase: an extra
    ("response_length/mean", "response_len_mean", 1.0),
    ("prompt_length/max", "prompt_len_max", 1.0),
    ("response_length/clip_ratio", "response_clip_ratio", 1.0),
    ("completions/mean_length", "response_len_mean", 1.0),  # TRL GRPO
    ("completions/clipped_ratio", "response_clip_ratio", 1.0),
    ("completion_length", "response_len_mean", 1.0),  # older TRL GRPO
    ("train/response_length", "response_len_mean", 1.0),  # OpenRLHF W&B
    ("train/total_length", "sequence_len_mean", 1.0),
    ("perf/total_num_tokens", "step_tokens", 1.0),
    ("num_tokens", "tokens_seen", 1.0),
    ("perf/mfu_actor", "mfu_logged", 1.0),  # EasyR1
    ("perf/mfu/actor_infer", "mfu_old_log_prob_logged", 1.0),
    ("perf/mfu/critic", "mfu_critic_logged", 1.0),
    ("timing/generation", "phase_s_generation", 1.0),  # OpenRLHF PPOTrainer
    ("timing/make_experience", "phase_s_make_experience", 1.0),
    ("train/timing/ppo_train", "phase_s_ppo_train", 1.0),  # as its W&B logger prefixes it
    ("timing/broadcast", "phase_s_update_weights", 1.0),
    ("timing/step_total", "elapsed_s", 1.0),
    ("rollout/num_samples", "rl_samples", 1.0),
    ("rollout/response_length_mean", "response_len_mean", 1.0),
    ("rollout/truncated_rate", "response_clip_ratio", 1.0),
    ("profiling/Time taken: GRPOTrainer._generate", "timer_s_grpotrainer_generate", 1.0),  # TRL, W&B only
])

def test_rl_key_mapping(key, column, mult):
    m = lookup(key)
    assert m is not None and m.column == column and m.mult == mult, (key, m)
    assert m.why


def test_other_timing_keys_are_not_openrlhf_timers():
    assert lookup("timing/epoch_duration") is None  # another project's `timing/` key: unknown, an extra


def test_timer_values_take_their_own_unit():
    m = lookup("timing_s/gen")
    assert vocab.value_of("1500ms", m) == 1.5 and vocab.value_of("12.5", m) == 12.5


def test_unknown_and_nested_timers_say_why():
    assert "inside phase 'generation'" in lookup("timing_s/generate_sequences").why
    assert "outside the step" in lookup("timing_s/stop_profile").why
    assert "unknown RL timer" in lookup("timing_s/mystery").why


def test_one_truth_for_phases_and_column_prefixes():
    from vlm_perf.flops import rl_step
    from vlm_perf.flops.generation import NESTED_TIMERS, PHASE_TIMERS, PHASES

    assert vocab._RL_PHASES == PHASES
    assert (vocab.PHASE_PREFIX, vocab.TIMER_PREFIX) == (rl_step.PHASE_PREFIX, rl_step.TIMER_PREFIX)
    assert set(PHASE_TIMERS.values()) <= set(PHASES) and set(NESTED_TIMERS.values()) <= set(PHASES)
    for phase in PHASES:
        assert vocab.phase_column(phase) in vocab.RL_COLUMNS


# ---- veRL console ---------------------------------------------------------------------------------

def test_verl_grpo_phases():
    r, rs = rows("verl_grpo_phases.log")
    assert by_line(rs, 7)["kind"] == "eval"
    a = by_line(rs, 8)  # the hard-wrapped line 8-9 is one record
    assert (a["phase_s_generation"], a["phase_s_reward"], a["phase_s_old_log_prob"], a["phase_s_ref"],
            a["phase_s_adv"], a["phase_s_update_actor"], a["phase_s_update_weights"]) == (
        70.5, 1.2, 3.5, 3.3, 1.1, 14.0, 2.4)
    assert a["elapsed_s"] == 96.6 and a["mfu_logged"] == 0.412 and a["mfu_old_log_prob_logged"] == 0.233
    assert a["timer_s_generate_sequences"] == 66.1 and a["timer_s_wait_for_samples"] == 0.7
    assert a["timing_s_generation_timing_max"] == 66.3  # a statistic: kept as an extra, as printed
    assert (a["response_len_mean"], a["response_len_max"], a["response_len_min"]) == (310.25, 1024.0, 12.0)
    assert (a["prompt_len_mean"], a["prompt_len_max"], a["prompt_len_min"]) == (101.75, 256.0, 60.0)
    assert a["response_clip_ratio"] == 0.008  # re-joined across the wrap inside the key
    assert a["step_tokens"] == 421888.0 and a["tokens_per_s"] == 545.28
    assert "timing_s_step" not in r.raw.columns  # the same timer as perf/time_per_step: no duplicate column
    b = by_line(rs, 10)
    assert b["phase_s_generation"] == 68.25 and b["phase_s_reward"] is None and b["elapsed_s"] == 92.0
    assert r.diagnostics.failed_count == 0


def test_verl_file_logger_jsonl(tmp_path):
    p = tmp_path / "metrics.jsonl"
    p.write_text(json.dumps({"step": 3, "data": {"timing_s/gen": 12.5, "timing_s/update_actor": 4.25,
                                                 "timing_s/step": 20.0, "response_length/mean": 100.0,
                                                 "prompt_length/mean": 28.0, "perf/total_num_tokens": 8192}})
                 + "\n")
    (row,) = parse_logs([p]).raw.rows(named=True)
    assert row["framework"] == "verl-jsonl" and row["iteration"] == 3
    assert (row["phase_s_generation"], row["phase_s_update_actor"], row["elapsed_s"]) == (12.5, 4.25, 20.0)
    assert (row["response_len_mean"], row["prompt_len_mean"], row["step_tokens"]) == (100.0, 28.0, 8192.0)


def test_wandb_history_export(tmp_path):
    p = tmp_path / "history.csv"
    p.write_text("_step,timing_s/gen,timing_s/old,timing_s/step,perf/mfu_actor,response_length/mean,timing_s/zz\n"
                 "1,40.5,5.25,70.0,0.3,512.0,0.5\n")
    (row,) = parse_logs([p]).raw.rows(named=True)
    assert (row["phase_s_generation"], row["phase_s_old_log_prob"], row["mfu_logged"]) == (40.5, 5.25, 0.3)
    assert row["response_len_mean"] == 512.0 and row["timer_s_zz"] == 0.5


# ---- EasyR1, TRL, OpenRLHF ------------------------------------------------------------------------

def test_easyr1_console_blocks():
    r, rs = rows("easyr1_console.log")
    assert [x["framework"] for x in rs] == ["easyr1", "easyr1"]
    a = by_line(rs, 6)
    assert a["rank_label"] == "Runner pid=16098" and a["iteration"] == 1
    assert (a["phase_s_generation"], a["phase_s_old_log_prob"], a["phase_s_ref"], a["phase_s_reward"],
            a["phase_s_adv"], a["phase_s_update_actor"], a["elapsed_s"]) == (40.21, 5.103, 4.9, 2.112, 0.126, 17.5, 70.5)
    assert a["mfu_logged"] == 0.287 and a["loss"] == -0.004 and a["lr"] == 1e-06 and a["grad_norm"] == 0.123
    assert (a["prompt_len_mean"], a["response_len_mean"], a["response_clip_ratio"]) == (830.0, 530.0, 0.031)
    assert a["step_tokens"] == 696320.0 and a["critic_score_mean"] == 0.375  # a 3-level key, re-joined
    b = by_line(rs, 38)
    assert math.isnan(b["loss"]) and b["mfu_logged"] == 0.301 and b["phase_s_generation"] == 39.8
    assert r.diagnostics.ignored.get("no_metrics") == 1  # the bare `Step 3`
    assert r.diagnostics.failed_count == 0


def test_trl_grpo_and_ppo_dicts():
    r, rs = rows("trl_grpo_ppo.log")
    a = by_line(rs, 7)
    assert (a["response_len_mean"], a["response_len_min"], a["response_len_max"], a["response_clip_ratio"]) == (
        163.5, 78.0, 246.0, 0.0)
    assert a["tokens_seen"] == 280000.0 and a["elapsed_s"] == 12.25 and a["loss"] == -0.0312
    b = by_line(rs, 8)
    assert b["tokens_seen"] - a["tokens_seen"] == 4500.0  # cumulative: the step's tokens are the difference
    assert by_line(rs, 9)["response_len_mean"] == 378.25  # older TRL: completion_length
    ppo = by_line(rs, 10)
    assert ppo["kind"] == "train" and ppo["val_ratio"] == 0.97 and ppo["episode"] == 672


def test_openrlhf_postfix():
    r, rs = rows("openrlhf_ppo.log")
    a = by_line(rs, 9)
    assert a["iteration"] == 4 and a["response_len_mean"] == 300.5 and a["sequence_len_mean"] == 812.0
    assert by_line(rs, 10)["response_len_mean"] == 310.0
    g = by_line(rs, 11)  # `Global step 3: {status}`
    assert g["framework"] == "hf" and g["iteration"] == 3
    assert (g["phase_s_generation"], g["phase_s_make_experience"], g["phase_s_ppo_train"],
            g["phase_s_update_weights"]) == (60.5, 21.5, 30.25, 4.0)
    assert g["elapsed_s"] == 116.25 == 60.5 + 21.5 + 30.25 + 4.0  # step_total: the sum of the timers
    assert (g["rl_samples"], g["response_len_mean"], g["response_clip_ratio"]) == (1024.0, 512.5, 0.0625)


def test_explain_shows_the_rl_columns():
    from vlm_perf.ingest.logs.explain import explain_text

    text = explain_text(PUBLIC / "verl_grpo_phases.log")
    assert "RL step" in text and "phase_s_generation=70.5" in text and "timer_s_wait_for_samples=0.7" in text
    text = explain_text(PUBLIC / "easyr1_console.log")
    assert "format easyr1" in text and "phase_s_old_log_prob=5.103" in text
    assert "joined onto the EasyR1 `Step N` block" in text  # its YAML lines are not "ignored"


def test_rl_samples_and_phase_table_from_a_parsed_log():
    from vlm_perf.flops.rl_step import phase_table, rl_samples_expr

    it = parse_logs([PUBLIC / "verl_grpo_phases.log"]).iterations
    assert it.select(rl_samples_expr()).get_column("rl_samples").to_list() == [421888 // 412, 434176 // 424]
    t = phase_table(it)
    un = t.filter((pl.col("phase") == "unaccounted") & (pl.col("iteration") == 1)).row(0, named=True)
    assert un["seconds"] == pytest.approx(96.6 - (70.5 + 1.2 + 3.5 + 3.3 + 1.1 + 14.0 + 2.4))
    kept = t.filter(pl.col("phase") == "timer:wait_for_samples").row(0, named=True)
    assert kept["in_sum"] is False and kept["seconds"] == 0.7
    easy = parse_logs([PUBLIC / "easyr1_console.log"]).iterations
    assert easy.select(rl_samples_expr()).get_column("rl_samples").to_list()[0] == 696320 // (830 + 530)


# ---- seeded, bounded fuzzing of the new parsing ----------------------------------------------------

_NAMES = st.sampled_from(["gen", "old", "old_log_prob", "ref", "values", "adv", "reward", "update_actor",
                          "update_critic", "update_weights", "testing", "save_checkpoint", "generate_sequences",
                          "reshard", "mystery", "wait_x", "a.b-c"])
_VALUES = st.floats(min_value=0, max_value=1e5, allow_nan=False).map(lambda v: round(v, 3))


def _expected_column(name: str) -> str:
    m = lookup(f"timing_s/{name}")
    assert m is not None
    return m.column


@settings(derandomize=True, deadline=None, max_examples=60, suppress_health_check=list(HealthCheck))
@given(timers=st.dictionaries(_NAMES, _VALUES, min_size=1, max_size=8), step=st.integers(1, 10**6),
       prefix=st.sampled_from(["", "(TaskRunner pid=7) "]), easy=st.booleans())
def test_fuzz_timers_land_in_their_columns(tmp_path_factory, timers, step, prefix, easy):
    # two names may mean the same phase (`old`, `old_log_prob`): the first printed wins, the other is an extra
    if easy:
        body = [f"{prefix}Step {step}", f"{prefix}timing_s:"] + [f"{prefix}  {k}: {v}" for k, v in timers.items()]
        order = list(timers)  # EasyR1 blocks are read in printed order
    else:
        body = [f"{prefix}step:{step} - " + " - ".join(f"timing_s/{k}:{v}" for k, v in timers.items())]
        order = list(timers)
    p = tmp_path_factory.mktemp("fz") / "x.log"
    p.write_text("\n".join(body) + "\n")
    r = parse_logs([p])
    (row,) = r.raw.rows(named=True)
    assert row["iteration"] == step and r.diagnostics.failed_count == 0
    seen: set[str] = set()
    for k in order:
        col = _expected_column(k)
        if col in seen:
            continue
        seen.add(col)
        assert row[col] == timers[k], (k, col, row)


@settings(derandomize=True, deadline=None, max_examples=40, suppress_health_check=list(HealthCheck))
@given(where=st.integers(0, 200), piece=st.sampled_from(["", ":", "  ", "Step ", "Step 9", "\t", "{", "nan", ".inf",
                                                         "x" * 300, "9" * 400, "timing_s:", "  gen: 1e999"]),
       name=st.sampled_from(["easyr1_console.log", "verl_grpo_phases.log"]))
def test_fuzz_mutated_rl_fixture_never_crashes(tmp_path_factory, where, piece, name):
    lines = (PUBLIC / name).read_text().splitlines()
    i = where % len(lines)
    lines[i] = lines[i][: len(lines[i]) // 2] + piece + lines[i][len(lines[i]) // 2:]
    p = tmp_path_factory.mktemp("fz") / name
    p.write_text("\n".join(lines) + "\n")
    r = parse_logs([p])  # never raises: every line is a record, a counted non-record or a failure
    assert r.raw.height >= 1
    for c in r.raw.columns:
        if c.startswith(("phase_s_", "timer_s_")):
            assert r.raw.schema[c] == pl.Float64
