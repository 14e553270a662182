"""RL metadata (rl/settings.json + rl/steps.jsonl): the bundled records read back; bad input is a one-line
SchemaError naming the file (and line) and the field, also through `vlm-perf report` (exit 2, no traceback)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from tests.support import edit_jsonl_line

from vlm_perf.errors import SchemaError
from vlm_perf.ingest.rl_metadata import find_rl, read_rl

ROOT = Path(__file__).resolve().parents[2]
RUN = ROOT / "sample_logs" / "qwen2-vl-tiny-grpo-real"

pytestmark = pytest.mark.skipif(not RUN.is_dir(), reason="sample_logs/qwen2-vl-tiny-grpo-real not present")


def test_bundle_reads():
    record = read_rl(find_rl(RUN))
    s = record.settings
    assert (s.algorithm, s.framework, s.num_generations, s.num_iterations) == ("grpo", "trl", 2, 2)
    assert s.reference and s.old_log_prob and not s.critic and s.beta == 0.04
    assert (s.head_positions, s.head_backward_recompute) == ("all_but_last", True)
    assert [st.iteration for st in record.steps] == list(range(1, 7))
    assert [st.rollout is not None for st in record.steps] == [True, False] * 3
    assert set(record.steps[0].log_prob_forwards) == {"old_log_prob", "ref"}
    assert find_rl(ROOT / "sample_logs" / "qwen2-vl-tiny-real") is None


def _copy(tmp_path) -> Path:
    dst = tmp_path / "rl"
    shutil.copytree(RUN / "rl", dst)
    return dst


def _edit_settings(folder: Path, **changes) -> None:
    obj = json.loads((folder / "settings.json").read_text())
    for key, value in changes.items():
        if value is None:
            obj.pop(key)
        else:
            obj[key] = value
    (folder / "settings.json").write_text(json.dumps(obj))


def _edit_step(folder: Path, line: int, edit) -> None:
    edit_jsonl_line(folder / "steps.jsonl", line, edit)


@pytest.mark.parametrize("changes, message", [
    ({"schema": "vlm-perf-rl/9"}, "schema must be 'vlm-perf-rl/1'"),
    ({"algorithm": "sft"}, "algorithm must be one of"),
    ({"num_generations": None}, "missing field 'num_generations'"),
    ({"num_generations": "2"}, "field 'num_generations' must be int, got str"),
    ({"reference": 1}, "field 'reference' must be bool, got int"),
    ({"num_iterations": 0}, "num_generations and num_iterations must be from 1 to"),
    ({"logprob_head": {"positions": "some", "backward_recompute": True}}, "logprob_head.positions must be one of"),
])
def test_bad_settings(tmp_path, changes, message):
    folder = _copy(tmp_path)
    _edit_settings(folder, **changes)
    with pytest.raises(SchemaError, match=message) as info:
        read_rl(folder)
    assert str(info.value).startswith(str(folder / "settings.json"))


def _set(key, value):
    return lambda obj: obj.__setitem__(key, value)


@pytest.mark.parametrize("edit, message", [
    (_set("iteration", 0), "iteration must be >= 1"),
    (_set("iteration", 1), "iteration 1 appears twice"),
    (lambda o: o.pop("step_s"), "missing field 'step_s'"),
    (lambda o: o["phases_s"].__setitem__("gen", 1.0), "phases_s: unknown phase 'gen'"),
    (lambda o: o["phases_s"].__setitem__("update_actor", -3), "phases_s.update_actor must be seconds >= 0"),
    (lambda o: o["rollout"]["response_lens"].append(8), "rollout: 2 prompt_lens but 3 response_lens"),
    (lambda o: o["rollout"]["prompt_lens"].__setitem__(0, 0), "prompt_lens must hold integers >= 1"),
    (lambda o: o["rollout"].__setitem__("image_grid_thw", [[1, 2]]), r"image_grid_thw rows must be \[t, h, w\]"),
    (lambda o: o["log_prob_forwards"].__setitem__("reward", []), "log_prob_forwards: unknown role 'reward'"),
    (_set("update", {}), "update must be a list of microbatches"),
])
def test_bad_steps_name_file_and_line(tmp_path, edit, message):
    folder = _copy(tmp_path)
    _edit_step(folder, 3, edit)
    with pytest.raises(SchemaError, match=message) as info:
        read_rl(folder)
    assert str(info.value).startswith(f"{folder / 'steps.jsonl'}:3")


def test_not_json_and_empty(tmp_path):
    folder = _copy(tmp_path)
    with open(folder / "steps.jsonl", "a") as fh:
        fh.write("{not json\n")
    with pytest.raises(SchemaError, match=r"steps\.jsonl:7: not valid JSON"):
        read_rl(folder)
    (folder / "steps.jsonl").write_text("\n")
    with pytest.raises(SchemaError, match="no steps"):
        read_rl(folder)
    (folder / "steps.jsonl").unlink()
    with pytest.raises(SchemaError, match="no steps.jsonl beside settings.json"):
        read_rl(folder)
    (folder / "settings.json").write_text("[1, 2]")
    with pytest.raises(SchemaError, match="must be a JSON object"):
        read_rl(folder)


def test_report_on_broken_rl_metadata_is_one_line(tmp_path, cli_proc):
    run = tmp_path / "run"
    shutil.copytree(RUN, run)
    _edit_step(run / "rl", 2, _set("phases_s", {"gen": 1.0}))
    r = cli_proc("report", run, "-o", tmp_path / "out", "--causal", "full")
    assert r.returncode == 2 and "Traceback" not in r.stderr
    assert f"{run / 'rl' / 'steps.jsonl'}:2: phases_s: unknown phase 'gen'" in r.stderr
    assert not (tmp_path / "out").exists()
