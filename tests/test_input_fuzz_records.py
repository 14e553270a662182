"""Seeded, bounded fuzz of the run's other JSON records and of profiler traces (issue 34, crashes).

Specification:
* every small JSON record (rl/settings.json, each rl/steps.jsonl line, adapter_config.json, trainability.json;
  config.json and scheduler files already) is read by ONE loader, `vlm_perf.arch.validate.read_json_file` /
  `loads_json`: nesting beyond MAX_DEPTH, NaN / Infinity literals, duplicate keys and integers longer than
  Python reads are one-line errors naming the file (and line); never a RecursionError or a traceback;
* numbers are range-checked where they enter: an adapter's ``r`` / ``lora_alpha`` / rank_pattern values finite and
  at most MAX_SIZE; RL ``beta`` a finite weight >= 0; ``step_s`` seconds > 0;
* a Kineto trace whose ts / dur is Infinity or 1e300, an id wider than 64 bits, a rank in the file name beyond
  MAX_RANK, a ``vlm_perf_first_iteration`` beyond MAX_ITERATION, a truncated .json.gz: one line naming the file;
  a UTF-8 byte-order mark before the JSON is read as the same trace (near miss); Nsight rows with a NULL deviceId
  / streamId are skipped and named in a note with their count;
* ``report --log`` naming a file that holds records but no numbered iteration: one line naming it.
Accepted mutations are read exactly (the value that was written).
"""

from __future__ import annotations

import gzip
import json
import math
import shutil
import sqlite3
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from tests.support import run_main
from vlm_perf.arch.validate import MAX_DEPTH, MAX_SIZE
from vlm_perf.errors import VlmPerfError
from vlm_perf.ingest.adapter_config import read_adapter_config, read_trainability_record
from vlm_perf.ingest.rl_metadata import read_rl
from vlm_perf.ingest.traces import read_traces

ROOT = Path(__file__).resolve().parents[1]
GRPO = ROOT / "sample_logs" / "qwen2-vl-tiny-grpo-real"
LORA = ROOT / "sample_logs" / "qwen2-vl-tiny-lora-real"
NSYS = ROOT / "tests" / "ingest" / "fixtures" / "traces" / "nsys_tiny.sqlite"
FUZZ = settings(derandomize=True, deadline=None, database=None, max_examples=120,
                suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
DEEP = "[" * 100_000 + "]" * 100_000
HOSTILE_VALUES = ["NaN", "Infinity", "-Infinity", "1e300", "-1", "0", "1" + "0" * 30, "9" * 5001, '"12"', "null",
                  "true", "[1]", "{}", "[" * 70 + "]" * 70]


def _one_line(exc: BaseException, *names: str) -> None:
    text = str(exc)
    assert "\n" not in text and len(text) < 600, text
    for name in names:
        assert name in text, (name, text)


def _rl_folder(tmp_path: Path) -> Path:
    folder = tmp_path / "rl"
    shutil.copytree(GRPO / "rl", folder)
    return folder


# ------------------------------------------------------------------------------------- deep nesting
def _deep_cases(tmp_path: Path):
    rl = _rl_folder(tmp_path)
    yield "settings.json", lambda: ((rl / "settings.json").write_text(DEEP), lambda: read_rl(rl))[1]
    rl2 = _rl_folder(tmp_path / "b")
    yield "steps.jsonl:2", lambda: (_append_line(rl2 / "steps.jsonl", DEEP, at=2), lambda: read_rl(rl2))[1]
    adapter = tmp_path / "adapter_config.json"
    yield "adapter_config.json", lambda: (adapter.write_text(DEEP), lambda: read_adapter_config(adapter))[1]
    record = tmp_path / "trainability.json"
    yield "trainability.json", lambda: (record.write_text(DEEP), lambda: read_trainability_record(record))[1]


def _append_line(path: Path, line: str, at: int) -> None:
    lines = path.read_text().splitlines()
    lines.insert(at - 1, line)
    path.write_text("\n".join(lines) + "\n")


def test_100000_deep_json_is_one_line_in_every_reader(tmp_path):
    for name, arm in _deep_cases(tmp_path):
        read = arm()
        with pytest.raises(VlmPerfError) as exc:
            read()
        _one_line(exc.value, name, "nested deeper")


def test_nesting_just_past_the_limit_is_refused_and_at_it_read(tmp_path):
    record = tmp_path / "trainability.json"
    inner = "[" * (MAX_DEPTH - 2) + "]" * (MAX_DEPTH - 2)
    record.write_text(json.dumps({"requires_grad": ["x.weight"]})[:-1] + f', "extra": {inner}}}')
    assert read_trainability_record(record).requires_grad == ("x.weight",)
    inner = "[" * (MAX_DEPTH + 1) + "]" * (MAX_DEPTH + 1)
    record.write_text(json.dumps({"requires_grad": ["x.weight"]})[:-1] + f', "extra": {inner}}}')
    with pytest.raises(VlmPerfError) as exc:
        read_trainability_record(record)
    _one_line(exc.value, "trainability.json", f"nested deeper than {MAX_DEPTH}")


# ---------------------------------------------------------------------------------- RL settings / steps
_SETTINGS = json.loads((GRPO / "rl" / "settings.json").read_text())
_STEP = json.loads((GRPO / "rl" / "steps.jsonl").read_text().splitlines()[0])


@FUZZ
@given(key=st.sampled_from(["beta", "num_generations", "num_iterations", "reference", "algorithm"]),
       value=st.sampled_from(HOSTILE_VALUES))
def test_rl_settings_mutations_error_in_one_line_or_read_exactly(tmp_path_factory, key, value):
    rl = _rl_folder(tmp_path_factory.mktemp("rl"))
    text = json.dumps(_SETTINGS).replace(f'"{key}": {json.dumps(_SETTINGS[key])}', f'"{key}": {value}')
    (rl / "settings.json").write_text(text)
    try:
        record = read_rl(rl)
    except VlmPerfError as exc:
        _one_line(exc, "settings.json")
        return
    got = getattr(record.settings, key)
    written = json.loads(value)
    assert got == written and not (isinstance(got, float) and not math.isfinite(got))
    if key == "beta":
        assert 0 <= got < 1e6


@FUZZ
@given(key=st.sampled_from(["step_s", "iteration", "phases_s.generation", "rollout.prompt_lens"]),
       value=st.sampled_from(HOSTILE_VALUES))
def test_rl_step_mutations_error_in_one_line_or_read_exactly(tmp_path_factory, key, value):
    rl = _rl_folder(tmp_path_factory.mktemp("rl"))
    lines = (rl / "steps.jsonl").read_text().splitlines()
    step = json.loads(lines[0])
    node = step
    *parents, leaf = key.split(".")
    for part in parents:
        node = node[part]
    node[leaf] = "__X__"
    lines[0] = json.dumps(step).replace('"__X__"', value)
    (rl / "steps.jsonl").write_text("\n".join(lines) + "\n")
    try:
        record = read_rl(rl)
    except VlmPerfError as exc:
        _one_line(exc, "steps.jsonl:1")
        return
    first = record.steps[0]
    if key == "step_s":
        assert first.step_s == json.loads(value) and 0 < first.step_s < 1e7
    if key == "phases_s.generation":
        assert first.phases_s["generation"] == json.loads(value) and math.isfinite(first.phases_s["generation"])


# ---------------------------------------------------------------------------------------- adapter
@FUZZ
@given(key=st.sampled_from(["r", "lora_alpha", "lora_dropout", "rank_pattern", "alpha_pattern"]),
       value=st.sampled_from(HOSTILE_VALUES))
def test_adapter_number_mutations_error_in_one_line_or_read_exactly(tmp_path_factory, key, value):
    folder = tmp_path_factory.mktemp("a")
    data = json.loads((LORA / "adapter_config.json").read_text())
    data[key] = "__X__"
    text = json.dumps(data).replace('"__X__"', value if key not in ("rank_pattern", "alpha_pattern")
                                    else '{"q_proj": ' + value + "}")
    path = folder / "adapter_config.json"
    path.write_text(text)
    try:
        adapter = read_adapter_config(path)
    except VlmPerfError as exc:
        _one_line(exc, "adapter_config.json")
        return
    if key == "r":  # null: PEFT's default rank (8), as if the key were absent
        assert adapter.r == (8 if value == "null" else json.loads(value)) and 0 < adapter.r <= MAX_SIZE
    if key == "rank_pattern":
        assert adapter.rank_pattern == {"q_proj": json.loads(value)} and 0 < adapter.rank_pattern["q_proj"] <= MAX_SIZE


@pytest.mark.parametrize("field, value", [("r", "Infinity"), ("r", "1e300"), ("lora_alpha", "NaN"),
                                          ("r", "9" * 5001)])
def test_adapter_numbers_out_of_range_are_one_line_through_the_cli(tmp_path, field, value):
    data = json.loads((LORA / "adapter_config.json").read_text())
    data[field] = "__X__"
    path = tmp_path / "adapter_config.json"
    path.write_text(json.dumps(data).replace('"__X__"', value))
    r = run_main("flops", "--model", "qwen2.5-vl-7b", "--seq-len", "512", "--grid", "1,16,16", "--adapter", path)
    assert r.returncode == 2 and r.stderr.strip().count("\n") == 0, r.stderr
    assert str(path) in r.stderr and field in r.stderr or value[:9] in r.stderr or "digits" in r.stderr


# ----------------------------------------------------------------------------------------- traces
_STEP_EVENT = {"ph": "X", "cat": "user_annotation", "name": "ProfilerStep#0", "pid": 1, "tid": 1, "ts": 0,
               "dur": 100}


def _kineto(path: Path, extra: str = "", head: str = "") -> Path:
    path.write_text('{' + head + '"traceEvents": [' + json.dumps(_STEP_EVENT) + extra + "]}")
    return path


@pytest.mark.parametrize("extra, head, name", [
    (', {"ph": "X", "cat": "cpu_op", "name": "a", "pid": 1, "tid": 1, "ts": Infinity, "dur": 5}', "", "t.json"),
    (', {"ph": "X", "cat": "cpu_op", "name": "a", "pid": 1, "tid": 1, "ts": 1e300, "dur": 5}', "", "t.json"),
    (', {"ph": "X", "cat": "cpu_op", "name": "a", "pid": 1, "tid": 1, "ts": 5, "dur": -1e300}', "", "t.json"),
    (', {"ph": "X", "cat": "cpu_op", "name": "a", "pid": 1, "tid": 1, "ts": 5, "dur": 1, '
     '"args": {"External id": ' + str(2**127 - 1) + '}}', "", "t.json"),
    (', {"ph": "X", "cat": "cpu_op", "name": "a", "pid": ' + str(2**64) + ', "tid": 1, "ts": 5, "dur": 1}', "",
     "t.json"),
    ("", "", "rank" + "9" * 25 + ".json"),
    ("", '"distributedInfo": {"rank": 99999999999999999999}, ', "t.json"),
    ("", '"vlm_perf_first_iteration": ' + "1" + "0" * 30 + ", ", "t.json"),
])
def test_out_of_range_trace_numbers_are_one_line_naming_the_file(tmp_path, extra, head, name):
    path = _kineto(tmp_path / name, extra, head)
    r = run_main("trace", path)
    assert r.returncode == 2, (r.stdout, r.stderr)
    assert r.stderr.startswith("error: ") and r.stderr.strip().count("\n") == 0, r.stderr
    assert str(path) in r.stderr


def test_a_truncated_gzip_trace_is_one_line(tmp_path):
    whole = gzip.compress(_kineto(tmp_path / "w.json").read_bytes() * 50)
    path = tmp_path / "rank0.json.gz"
    path.write_bytes(whole[: len(whole) // 2])
    r = run_main("trace", path)
    assert r.returncode == 2 and r.stderr.strip().count("\n") == 0, r.stderr
    assert str(path) in r.stderr and "truncated" in r.stderr


def test_a_byte_order_mark_before_a_kineto_trace_reads_the_same_trace(tmp_path):
    plain = _kineto(tmp_path / "plain.json", ', {"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": 1, '
                                             '"tid": 1, "ts": 10, "dur": 20}')
    bom = tmp_path / "bom.json"
    bom.write_bytes(b"\xef\xbb\xbf" + plain.read_bytes())
    assert read_traces(bom).events.equals(read_traces(plain).events)


@pytest.mark.parametrize("column", ["deviceId", "streamId"])
def test_nsight_rows_with_a_null_device_or_stream_are_skipped_and_named(tmp_path, column):
    path = tmp_path / "rank0.sqlite"
    shutil.copy(NSYS, path)
    with sqlite3.connect(path) as db:
        total = db.execute("SELECT COUNT(*) FROM CUPTI_ACTIVITY_KIND_KERNEL").fetchone()[0]
        db.execute(f"UPDATE CUPTI_ACTIVITY_KIND_KERNEL SET {column} = NULL WHERE rowid = "
                   "(SELECT MIN(rowid) FROM CUPTI_ACTIVITY_KIND_KERNEL)")
    partial = read_traces(path)
    kernels = partial.events.filter(partial.events["kind"] == "kernel").height
    assert kernels == total - 1
    assert any("1 row(s) of CUPTI_ACTIVITY_KIND_KERNEL with a NULL" in n for n in partial.notes)


# ------------------------------------------------------------------------------------- report --log
def test_report_log_without_numbered_iterations_is_one_line(tmp_path):
    run = tmp_path / "run"
    shutil.copytree(ROOT / "sample_logs" / "qwen2-vl-tiny-real", run)
    log = tmp_path / "hf.log"
    log.write_text('{"loss": 1.0, "epoch": 0.1}\n')
    r = run_main("report", run, "-o", tmp_path / "out", "--log", log)
    assert r.returncode == 2 and r.stderr.strip().count("\n") == 0, r.stderr
    assert str(log) in r.stderr and "no numbered training iteration" in r.stderr


@pytest.mark.parametrize("name, text", [
    ("trainer_state.json", '{"log_history": ' + DEEP + "}"),
    ("wandb.jsonl", '{"_step": 1, "x": ' + DEEP + "}\n"),
    ("wandb2.jsonl", '{"_step": 1, "train/loss": 2.0}\n{"_step": 2, "x": ' + DEEP + "}\n"),
])
def test_deep_structured_logs_never_crash(tmp_path, name, text):
    """A structured log nested 100,000 deep: a one-line error naming it, or its other records read (the deep
    record counted as a failed line); never a RecursionError."""
    path = tmp_path / name
    path.write_text(text)
    r = run_main("parse", path)
    assert r.returncode in (0, 2), r.stderr
    if r.returncode == 2:
        assert r.stderr.strip().count("\n") == 0 and name in r.stderr
