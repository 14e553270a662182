"""RL seconds are validated against each other wherever they enter (issue 34, silent numbers): a step's recorded
phases, a log's phase timers and the settings the records must agree with; an rl/ folder that cannot be read is
said, not silently left out."""

from __future__ import annotations

import json
import math
import shutil
from pathlib import Path

import polars as pl
import pytest

from tests.support import edit_jsonl_line
from hypothesis import given, settings
from hypothesis import strategies as st

from vlm_perf.analysis.rl import log_phase_timings, rl_accounting
from vlm_perf.arch import load_model
from vlm_perf.errors import SchemaError
from vlm_perf.ingest.rl_metadata import phase_seconds_problem, read_rl

from tests.support import run_main

ROOT = Path(__file__).resolve().parents[2]
RUN = ROOT / "sample_logs" / "qwen2-vl-tiny-grpo-real"


def _copy(tmp_path) -> Path:
    dst = tmp_path / "run"
    shutil.copytree(RUN, dst)
    return dst


def _edit_step(folder: Path, line: int, edit) -> None:
    edit_jsonl_line(folder / "steps.jsonl", line, edit)


# ---- one rule for every source of a step's seconds ---------------------------------------------------
@pytest.mark.parametrize("step,phases,needle", [
    (2.0, {"generation": 1.0, "other": 0.99}, None),
    (2.0, {"generation": 1.0, "update_actor": 1.0, "other": 0.015}, None),  # within 1% + 1 ms: rounded timers
    (2.0, {"generation": 15.0, "update_actor": 5.0}, "add up to 20 s, more than the step's 2 s (+900.0%"),
    (2.0, {"generation": -5.0}, "phase generation is -5.0 s"),
    (2.0, {"generation": math.nan}, "phase generation is nan s"),
    (2.0, {"generation": math.inf}, "phase generation is inf s"),
])
def test_phase_seconds_rule(step, phases, needle):
    problem = phase_seconds_problem(step, phases)
    assert (problem is None) if needle is None else (needle in problem), problem


@pytest.mark.parametrize("edit,needle", [
    (lambda o: o.__setitem__("phases_s", {"generation": 10 * o["step_s"]}), "more than the step's"),
    (lambda o: o["phases_s"].__setitem__("other", o["step_s"]), "more than the step's"),
    (lambda o: o.__setitem__("step_s", 0.01), "more than the step's 0.01 s"),
])
def test_recorded_phases_longer_than_the_step_name_file_and_line(tmp_path, edit, needle):
    run = _copy(tmp_path)
    _edit_step(run / "rl", 3, edit)
    with pytest.raises(SchemaError, match=needle) as info:
        read_rl(run / "rl")
    assert str(info.value).startswith(f"{run / 'rl' / 'steps.jsonl'}:3: phases_s:")
    done = run_main("report", run, "-o", tmp_path / "out", "--causal", "full")
    assert done.returncode == 2 and "Traceback" not in done.stderr and "steps.jsonl:3: phases_s" in done.stderr
    assert len(done.stderr.strip().splitlines()) == 1


# ---- a log's phase timers replace recorded seconds only when they are seconds of the step ------------------
SPEC = load_model(str(RUN / "config.json"))
RECORD = read_rl(RUN / "rl")


@pytest.mark.parametrize("timers,used", [
    ({"phase_s_generation": [0.5]}, True),
    ({"phase_s_generation": [-5.0]}, False),                         # timing_s/gen:-5
    ({"phase_s_generation": [math.nan]}, False),
    ({"phase_s_generation": [1e9]}, False),
    ({"phase_s_generation": [2.0], "phase_s_update_actor": [2.0]}, False),  # 4 s in a 2.96 s step
    ({"phase_s_reward": [-1.0], "phase_s_generation": [0.5]}, False),  # a bad timer without FLOPs here too
])
def test_log_phase_timers_are_validated_before_they_replace_the_record(timers, used):
    frame = pl.DataFrame({"iteration": [1], **timers})
    accounting = rl_accounting(SPEC, RECORD, timings_s=log_phase_timings(frame), causal="full")
    first = accounting.iterations[0]
    if used:
        assert first.seconds["generation"] == 0.5 and not accounting.notes
    else:
        assert first.seconds == RECORD.steps[0].phases_s
        (note,) = [n for n in accounting.notes if "phase timers" in n]
        assert "iteration 1:" in note and "recorded phases_s are used" in note


@settings(max_examples=60, deadline=None, derandomize=True)
@given(values=st.dictionaries(st.sampled_from(["generation", "ref", "update_actor", "reward", "other"]),
                              st.floats(allow_nan=True, allow_infinity=True, width=64), min_size=1, max_size=5))
def test_fuzz_timers_never_give_impossible_seconds(values):
    frame = pl.DataFrame({"iteration": [1], **{f"phase_s_{k}": [v] for k, v in values.items()}})
    accounting = rl_accounting(SPEC, RECORD, timings_s=log_phase_timings(frame), causal="full")
    secs = accounting.iterations[0].seconds
    step = RECORD.steps[0].step_s
    assert all(v is not None and math.isfinite(v) and v >= -1e-6 for v in secs.values())
    assert sum(secs.values()) <= step * 1.01 + 1e-3


# ---- settings against the records ------------------------------------------------------------------
@pytest.mark.parametrize("key,role", [("reference", "ref"), ("old_log_prob", "old_log_prob")])
def test_a_setting_that_switches_off_forwards_the_records_hold_is_refused(tmp_path, key, role):
    run = _copy(tmp_path)
    obj = json.loads((run / "rl" / "settings.json").read_text())
    obj[key] = False
    (run / "rl" / "settings.json").write_text(json.dumps(obj))
    with pytest.raises(SchemaError, match=f"log_prob_forwards.{role} holds 1 forward.s. but .*{key}: false") as info:
        read_rl(run / "rl")
    assert str(info.value).startswith(f"{run / 'rl' / 'steps.jsonl'}:1")


def test_critic_values_without_a_critic_are_refused(tmp_path):
    run = _copy(tmp_path)
    _edit_step(run / "rl", 1, lambda o: o["log_prob_forwards"].__setitem__("values", o["log_prob_forwards"]["ref"]))
    with pytest.raises(SchemaError, match="log_prob_forwards.values holds 1 forward.s. but .*critic: false"):
        read_rl(run / "rl")


# ---- an rl/ folder without its settings is said -----------------------------------------------------
def test_missing_settings_are_said_not_silently_dropped(tmp_path):
    run = _copy(tmp_path)
    (run / "rl" / "settings.json").unlink()
    done = run_main("report", run, "-o", tmp_path / "out", "--causal", "full")
    assert done.returncode == 0, done.stderr
    summary = json.loads((tmp_path / "out" / "summary.json").read_text())
    assert not summary.get("rl")
    text = (tmp_path / "out" / "report.md").read_text()
    assert "RL section left out:" in text and "steps.jsonl has no settings.json beside it" in text


def test_the_consistent_grpo_run_passes_strict(tmp_path):
    done = run_main("report", RUN, "--strict", "-o", tmp_path / "out", "--causal", "full")
    assert done.returncode == 0, done.stdout[-1500:] + done.stderr[-1500:]


# ---- shapes the records cannot hold ------------------------------------------------------------------
def test_zero_completions_are_one_line_naming_file_and_line(tmp_path):
    run = _copy(tmp_path)
    _edit_step(run / "rl", 1, lambda o: o["rollout"].__setitem__("response_lens", [0, 0]))
    done = run_main("report", run, "-o", tmp_path / "out", "--causal", "full")
    assert done.returncode == 2 and "max()" not in done.stderr and "Traceback" not in done.stderr
    assert f"{run / 'rl' / 'steps.jsonl'}:1: rollout: every one of its 2 response_lens is 0" in done.stderr
    from vlm_perf.errors import ConfigError
    from vlm_perf.flops.generation import generation_flops

    with pytest.raises(ConfigError, match="no completion"):
        generation_flops(SPEC, [10, 10], [0, 0])


@pytest.mark.parametrize("where,edit", [
    ("rollout", lambda o: o["rollout"].__setitem__("image_grid_thw", [[1, 64, 64]] * 4)),
    ("rollout", lambda o: o["rollout"].__setitem__("prompt_lens", [20, 20])),
    ("log_prob_forwards.ref", lambda o: o["log_prob_forwards"]["ref"][0].__setitem__("image_grid_thw",
                                                                                      [[4, 32, 32]])),
    ("update", lambda o: o["update"][0].__setitem__("video_grid_thw", [[8, 64, 64]])),
])
def test_visual_tokens_beyond_the_prompt_are_named(tmp_path, where, edit):
    run = _copy(tmp_path)
    _edit_step(run / "rl", 1, edit)
    record = read_rl(run / "rl")
    with pytest.raises(SchemaError, match=rf"steps\.jsonl:1: {where}: its image/video grids make [\d,]+ visual "
                                          r"tokens for .*more than its prompts' [\d,]+ tokens"):
        rl_accounting(SPEC, record, causal="full")
    done = run_main("report", run, "-o", tmp_path / "out", "--causal", "full")
    assert done.returncode == 2 and f"steps.jsonl:1: {where}: its image/video grids" in done.stderr
