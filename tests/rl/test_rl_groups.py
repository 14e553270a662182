"""A rollout holds whole groups of ``num_generations`` responses per prompt, and every recorded call holds at least
one sequence (issue 34, RL shapes).

Specification (`vlm_perf.ingest.rl_metadata`, `vlm_perf.analysis.rl.rl_accounting`):
* a rollout, log-prob forward or update microbatch whose ``prompt_lens`` / ``response_lens`` are empty is refused
  in one line naming ``steps.jsonl:line`` and the call (was: read, generation counted as 0 FLOPs beside its
  seconds); a step that generated nothing writes ``rollout: null`` (the sample's step 2 does: a near miss);
* GRPO-family trainers sample ``num_generations`` responses per prompt and need the generation batch of all
  data-parallel processes to be whole groups (TRL refuses a global batch not divisible by it). On one GPU the
  recorded rows are the whole batch: rows not a multiple of ``num_generations`` are refused naming file:line, the
  row count and the setting. On N GPUs only rows x N must be a multiple (each process records its share): a rollout
  that fails even that is a note naming the first step, not a refusal (some GPUs may only generate);
* settings that switch a role on (``reference`` / ``old_log_prob`` / ``critic`` true) while no step of the run
  records a forward of it are refused naming settings.json (the role's FLOPs would be silently missing); a role
  missing from some steps only is read (near miss: steps that reuse a rollout record none);
* hand arithmetic: 3 rows, num_generations 2, 1 GPU -> refused; 4 rows -> read; 1 row on 2 GPUs, num_generations 2
  -> 2 rows in all, read without a note; 3 rows on 2 GPUs, num_generations 4 -> 6 rows, a note.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from tests.support import edit_jsonl_line, run_main
from vlm_perf.analysis.rl import rl_accounting
from vlm_perf.arch import load_model
from vlm_perf.errors import SchemaError
from vlm_perf.ingest.rl_metadata import read_rl

ROOT = Path(__file__).resolve().parents[2]
RUN = ROOT / "sample_logs" / "qwen2-vl-tiny-grpo-real"
SPEC = load_model(str(RUN / "config.json"))
FUZZ = settings(derandomize=True, deadline=None, database=None, max_examples=60,
                suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
GRID = [1, 12, 16]  # the sample's grid: 48 visual tokens after the 2x2 merge, inside its 110-token prompts


def _rl(tmp_path: Path) -> Path:
    dst = tmp_path / "run"
    shutil.copytree(RUN, dst)
    return dst / "rl"


def _rows(call: dict, n: int) -> None:
    call.update(prompt_lens=[110] * n, response_lens=[8] * n, image_grid_thw=[GRID] * (2 * n))


def _generations(rl: Path, g: int) -> None:
    """Settings with ``num_generations`` g, and every recorded rollout made one group of g (consistent)."""
    obj = json.loads((rl / "settings.json").read_text())
    obj["num_generations"] = g
    (rl / "settings.json").write_text(json.dumps(obj))
    steps = rl / "steps.jsonl"
    for line, text in enumerate(steps.read_text().splitlines(), 1):
        if json.loads(text)["rollout"] is not None:
            edit_jsonl_line(steps, line, lambda o: _rows(o["rollout"], g))


# ---- empty calls -------------------------------------------------------------------------------------
@pytest.mark.parametrize("what,edit", [
    ("rollout", lambda o: _rows(o["rollout"], 0)),
    ("log_prob_forwards.ref", lambda o: _rows(o["log_prob_forwards"]["ref"][0], 0)),
    ("log_prob_forwards.old_log_prob", lambda o: _rows(o["log_prob_forwards"]["old_log_prob"][0], 0)),
    ("update", lambda o: _rows(o["update"][0], 0)),
])
def test_a_call_over_no_sequence_is_one_line_naming_file_line_and_call(tmp_path, what, edit):
    rl = _rl(tmp_path)
    edit_jsonl_line(rl / "steps.jsonl", 1, edit)
    with pytest.raises(SchemaError) as info:
        read_rl(rl)
    text = str(info.value)
    assert text.startswith(f"{rl / 'steps.jsonl'}:1") and f"{what}: holds no sequence" in text and "\n" not in text
    done = run_main("report", rl.parent, "-o", tmp_path / "out", "--causal", "full")
    assert done.returncode == 2 and "Traceback" not in done.stderr and "holds no sequence" in done.stderr


def test_a_step_without_a_rollout_writes_null_and_is_read(tmp_path):
    """Near miss: the sample's step 2 reuses step 1's rollout (num_iterations 2): rollout null, no generation."""
    record = read_rl(RUN / "rl")
    assert record.steps[1].rollout is None and "generation" not in record.steps[1].phases_s


# ---- whole groups of num_generations ----------------------------------------------------------------
@pytest.mark.parametrize("rows,g,gpus,outcome", [
    (3, 2, 1, "refused"), (4, 2, 1, "read"), (2, 2, 1, "read"), (1, 2, 1, "refused"), (6, 4, 1, "refused"),
    (1, 2, 2, "read"), (3, 4, 2, "note"), (2, 4, 2, "read"), (5, 1, 1, "read"),
])
def test_rollout_rows_against_num_generations_by_hand(tmp_path, rows, g, gpus, outcome):
    rl = _rl(tmp_path)
    _generations(rl, g)
    edit_jsonl_line(rl / "steps.jsonl", 1, lambda o: _rows(o["rollout"], rows))
    record = read_rl(rl)  # the rule needs the run's GPU count: it applies where the accounting gets it
    if outcome == "refused":
        with pytest.raises(SchemaError) as info:
            rl_accounting(SPEC, record, causal="full", num_gpus=gpus)
        text = str(info.value)
        assert text.startswith(f"{rl / 'steps.jsonl'}:1: rollout: {rows} generated sequence(s)"), text
        assert f"whole groups of num_generations {g}" in text
        return
    notes = rl_accounting(SPEC, record, causal="full", num_gpus=gpus).notes
    odd = [n for n in notes if "whole groups of num_generations" in n]
    assert (len(odd) == 1 and f"{rows * gpus} rows" in odd[0]) if outcome == "note" else not odd, notes


def test_the_cli_refuses_three_rollouts_for_two_generations_on_one_gpu(tmp_path):
    rl = _rl(tmp_path)
    edit_jsonl_line(rl / "steps.jsonl", 1, lambda o: _rows(o["rollout"], 3))
    done = run_main("report", rl.parent, "-o", tmp_path / "out", "--causal", "full")
    assert done.returncode == 2 and "Traceback" not in done.stderr
    assert f"{rl / 'steps.jsonl'}:1: rollout: 3 generated sequence(s) cannot be whole groups" in done.stderr
    assert len(done.stderr.strip().splitlines()) == 1


@pytest.mark.slow
@FUZZ
@given(rows=st.integers(0, 40), g=st.integers(1, 16), gpus=st.integers(1, 8), line=st.sampled_from([1, 3]))
def test_fuzz_rollout_rows_either_read_with_whole_groups_or_one_line(tmp_path_factory, rows, g, gpus, line):
    rl = _rl(tmp_path_factory.mktemp("rl"))
    _generations(rl, g)
    edit_jsonl_line(rl / "steps.jsonl", line, lambda o: _rows(o["rollout"], rows))
    try:
        record = read_rl(rl)
        accounting = rl_accounting(SPEC, record, causal="full", num_gpus=gpus)
    except SchemaError as exc:
        text = str(exc)
        assert "\n" not in text and text.startswith(f"{rl / 'steps.jsonl'}:{line}: rollout: "), text
        assert rows == 0 or (gpus == 1 and rows % g), (rows, g, gpus, text)
        return
    assert rows > 0 and (gpus > 1 or rows % g == 0)
    noted = any("whole groups of num_generations" in n for n in accounting.notes)
    assert noted == ((rows * gpus) % g != 0)
    counted = next(it for it in accounting.iterations if it.iteration == line)
    assert sum(counted.flops["generation"].values()) > 0


# ---- settings that switch a role on with no record of it ---------------------------------------------
@pytest.mark.parametrize("key,role", [("reference", "ref"), ("old_log_prob", "old_log_prob")])
def test_a_role_switched_on_that_no_step_records_is_refused(tmp_path, key, role):
    rl = _rl(tmp_path)
    steps = rl / "steps.jsonl"
    for line in range(1, len(steps.read_text().splitlines()) + 1):
        edit_jsonl_line(steps, line, lambda o: o["log_prob_forwards"].pop(role, None))
    with pytest.raises(SchemaError) as info:
        read_rl(rl)
    text = str(info.value)
    assert text.startswith(f"{rl / 'settings.json'}: says {key}: true but no step of steps.jsonl records a "
                           f"log_prob_forwards.{role} forward"), text


def test_a_role_missing_in_some_steps_only_is_read(tmp_path):
    """Near miss: the forwards belong to the steps that generate (num_iterations 2: every other step reuses the
    rollout and records none); one generating step without them is not the whole run switching the role off."""
    rl = _rl(tmp_path)
    edit_jsonl_line(rl / "steps.jsonl", 1, lambda o: o["log_prob_forwards"].pop("ref"))
    record = read_rl(rl)
    assert any(step.log_prob_forwards.get("ref") for step in record.steps)


def test_the_critic_switched_on_without_values_is_refused(tmp_path):
    rl = _rl(tmp_path)
    obj = json.loads((rl / "settings.json").read_text())
    obj["critic"] = True
    (rl / "settings.json").write_text(json.dumps(obj))
    with pytest.raises(SchemaError, match="says critic: true but no step of steps.jsonl records a "
                                          "log_prob_forwards.values forward"):
        read_rl(rl)
