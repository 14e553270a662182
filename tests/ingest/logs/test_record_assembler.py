"""Records spread over lines are assembled into one record, bounded (issue 31 §2).

Classes, several shapes each (lines written here after public shapes):

* a metrics dict wrapped over lines after a prefix (``[metrics] step 60: {...`` then the rest), a dict
  pretty-printed one key per line (``json.dumps(indent=2)`` / ``pprint``), a number or a key cut mid-way by a
  terminal's hard wrap (HF / ms-swift console dicts: modelscope/ms-swift#4146 shows a ``'13/9\\n4'`` cut inside a
  value, huggingface/trl#4086 dicts after a tqdm bar);
* veRL's step dumped one ``key:value`` per line after a bare ``step:N`` (the key:value items of
  verl-project/verl#2060's step line, one per line), with a value wrapped mid-number;
* Composer / LLM-Foundry batch blocks (``[batch=12/100]:`` then indented ``Train key: value`` lines;
  mosaicml/composer console logger), which the generic extractor already joins;
* bounds: a dict that never closes is cut after ``DICT_MAX_LINES`` lines (reported as failed), a step dump after
  ``MAX_DUMP_LINES`` lines; the lines after it parse as usual.
"""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.support import write_log
from vlm_perf.errors import InputError
from vlm_perf.ingest.logs import parse_logs
from vlm_perf.ingest.logs.dicts import DICT_MAX_LINES


def _rows(tmp_path, text):
    r = parse_logs([write_log(tmp_path, text)], empty_ok=True)
    return r, sorted(r.raw.rows(named=True), key=lambda x: x["line"])


WRAPPED_DICTS = [
    # wrapped after a prefix, continuation lines indented
    ("[metrics] step 60: {'loss': 1.25, 'grad_norm': 0.5,\n 'learning_rate': 1e-05, 'epoch': 0.25,\n"
     " 'tokens_per_sec': 12345.5}\n", {"iteration": 60, "loss": 1.25, "lr": 1e-05, "tokens_per_s_total": 12345.5}),
    # pretty-printed JSON, one key per line
    ('{\n  "step": 61,\n  "loss": 1.125,\n  "grad_norm": 0.4\n}\n', {"iteration": 61, "loss": 1.125, "grad_norm": 0.4}),
    # pprint of a dict too wide for one line
    ("step 7: {'grad_norm': 0.75,\n 'learning_rate': 2e-05,\n 'loss': 0.875}\n", {"iteration": 7, "loss": 0.875,
                                                                                 "lr": 2e-05}),
    # a terminal's hard wrap mid-number and mid-key
    ("[metrics] step 62: {'loss': 1.0625, 'grad_norm': 0.3, 'learning_rate': 1.0e-0\n5, 'tokens_per_sec': 123\n45.5}\n",
     {"iteration": 62, "loss": 1.0625, "lr": 1e-05, "tokens_per_s_total": 12345.5}),
    # (a terminal cuts a full row: the piece before the cut is at least a row long)
    ("step 8: {'loss': 0.5, 'learning_rate': 1e-05, 'epoch': 0.125, 'grad_no\nrm': 0.25}\n",
     {"iteration": 8, "loss": 0.5, "grad_norm": 0.25}),
    # ms-swift: a value cut inside its string
    ("{'loss': 0.42675275, 'grad_norm': 18.54290199, 'learning_rate': 1e-06, 'global_step/max_steps': '13/9\n4', "
     "'percentage': '13.83%'}\n", {"iteration": 13, "loss": 0.42675275, "max_steps": 94.0}),
]


@pytest.mark.parametrize("text,want", WRAPPED_DICTS)
def test_wrapped_dict_is_one_record(tmp_path, text, want):
    r, rows = _rows(tmp_path, text)
    assert len(rows) == 1 and r.diagnostics.failed == []
    assert {k: rows[0][k] for k in want} == want
    assert rows[0]["line"] == 1


def test_records_around_a_wrapped_dict_are_unchanged(tmp_path):
    text = ("{'loss': 2.0, 'step': 1}\n"
            "[metrics] step 2: {'loss': 1.5,\n 'grad_norm': 0.5}\n"
            "{'loss': 1.0, 'step': 3}\n")
    _, rows = _rows(tmp_path, text)
    assert [(x["line"], x["iteration"], x["loss"]) for x in rows] == [(1, 1, 2.0), (2, 2, 1.5), (4, 3, 1.0)]


VERL_DUMPS = [
    ("step:63\nactor/pg_loss:0.015\nactor/grad_norm:0.25\ntiming_s/gen:12.5\ntiming_s/step:40.25\n",
     {"iteration": 63, "loss": 0.015, "grad_norm": 0.25, "phase_s_generation": 12.5, "elapsed_s": 40.25}),
    # a value wrapped mid-number
    ("step:64\nactor/pg_loss:0.01\ntiming_s/step:40.2\n5\n", {"iteration": 64, "loss": 0.01, "elapsed_s": 40.25}),
    # with the Ray prefix on every line
    ("(TaskRunner pid=1) step:65\n(TaskRunner pid=1) actor/pg_loss:np.float64(0.5)\n(TaskRunner pid=1) perf/mfu/actor:0.25\n",
     {"iteration": 65, "loss": 0.5, "mfu_logged": 0.25}),
]


@pytest.mark.parametrize("text,want", VERL_DUMPS)
def test_verl_key_per_line_dump_is_one_record(tmp_path, text, want):
    r, rows = _rows(tmp_path, text)
    assert len(rows) == 1 and r.diagnostics.failed == []
    assert {k: rows[0][k] for k in want} == want


@pytest.mark.parametrize("cut", [7, 8, 9, 10, 24, 25, 30])  # inside the step, at and around the separators
def test_verl_line_cut_anywhere_is_one_record(tmp_path, cut):
    line = "step:63 - actor/pg_loss:0.015 - actor/grad_norm:0.25 - timing_s/step:40.25"
    _, rows = _rows(tmp_path, line[:cut] + "\n" + line[cut:].lstrip() + "\n")
    assert [(x["iteration"], x["loss"], x["grad_norm"], x["elapsed_s"]) for x in rows] == [(63, 0.015, 0.25, 40.25)]


def test_verl_dump_then_a_normal_step(tmp_path):
    text = "step:1\nactor/pg_loss:0.5\nstep:2 - actor/pg_loss:0.25 - timing_s/step:40.0\n"
    _, rows = _rows(tmp_path, text)
    assert [(x["iteration"], x["loss"]) for x in rows] == [(1, 0.5), (2, 0.25)]


COMPOSER = [
    ("[batch=12/100]:\n\t Train time/batch: 11\n\t Train loss/train/total: 11.6525\n\t Train throughput/device/tokens_per_sec: 100.5\n",
     {"iteration": 12, "loss": 11.6525, "tokens_per_s": 100.5}),
    ("[epoch=1][batch=13/100]:\n\t Train loss/train/total: 10.5\n\t Train time/train: 0.0081\n",
     {"iteration": 13, "loss": 10.5}),
]


@pytest.mark.parametrize("text,want", COMPOSER)
def test_composer_batch_block_is_one_record(tmp_path, text, want):
    _, rows = _rows(tmp_path, text)
    assert len(rows) == 1
    assert {k: rows[0][k] for k in want} == want


def test_a_dict_that_never_closes_is_cut_and_reported(tmp_path):
    body = "".join(f" 'k{i}': {i},\n" for i in range(DICT_MAX_LINES + 20))
    text = "step 5: {'loss': 1.0,\n" + body + "{'loss': 2.0, 'step': 9}\n"
    r, rows = _rows(tmp_path, text)
    assert r.diagnostics.failed == [f"{tmp_path / 'train.log'}:1"]  # the unclosed dict: failed, never silent
    assert [(x["iteration"], x["loss"]) for x in rows] == [(9, 2.0)]  # the line after it still parses


def test_a_step_dump_is_bounded(tmp_path):
    from vlm_perf.ingest.logs.verl import MAX_DUMP_LINES

    text = "step:1\n" + "".join(f"x/k{i}:{i}\n" for i in range(MAX_DUMP_LINES + 5)) + "step:2 - actor/pg_loss:0.5\n"
    _, rows = _rows(tmp_path, text)
    assert [x["iteration"] for x in rows if x["framework"] == "verl"][-1] == 2


# ---- seeded, bounded fuzzing of the assembler -------------------------------------------------------------------

_CUTS = st.lists(st.integers(1, 200), min_size=0, max_size=4)
_LINES = ["[metrics] step 60: {'loss': 1.25, 'grad_norm': 0.5, 'learning_rate': 1e-05, 'tokens_per_sec': 12345.5}",
          '{"step": 61, "loss": 1.125, "grad_norm": 0.4}',
          "step:63 - actor/pg_loss:0.015 - actor/grad_norm:0.25 - timing_s/gen:12.5 - timing_s/step:40.25"]


@settings(derandomize=True, deadline=None, max_examples=150, suppress_health_check=list(HealthCheck))
@given(which=st.integers(0, len(_LINES) - 1), cuts=_CUTS, junk=st.sampled_from(["", "{", "}", "{{", "'", "\n"]))
def test_fuzz_a_record_cut_anywhere_never_crashes_and_never_invents(tmp_path_factory, which, cuts, junk):
    line = _LINES[which]
    pieces, pos = [], 0
    for c in sorted(set(min(c, len(line)) for c in cuts)):
        pieces.append(line[pos:c])
        pos = c
    pieces.append(line[pos:])
    text = "\n".join(p for p in pieces if p) + junk + "\n{'loss': 3.0, 'step': 99}\n"
    try:
        r = parse_logs([write_log(tmp_path_factory.mktemp("asm"), text)], empty_ok=True)
    except InputError:
        return
    rows = r.raw.rows(named=True)
    assert any(x["iteration"] == 99 and x["loss"] == 3.0 for x in rows) or junk in ("{", "{{")
    if junk not in ("", "\n"):
        return  # a brace or quote glued to the last piece may end the assembly early: only no crash is asked
    for x in rows:  # a record cut anywhere is assembled whole: its loss is the printed one, never a prefix
        if x["iteration"] not in (99, None) and x.get("loss") is not None:
            assert x["loss"] in (1.25, 1.125, 0.015)


def test_a_stray_brace_does_not_swallow_the_next_records(tmp_path):
    # a `{` glued before a line of complete dicts (found by the fuzz test on a real HF console log): the held dict
    # ends at the next dict or bar, fails, and every later record is read as before
    lines = ["{ 10%|#         | 1/10 [00:01<00:09,  1.0s/it]"] + [
        f"{{'loss': {1 + i / 10}, 'grad_norm': 0.5, 'learning_rate': 1e-05, 'epoch': {i / 10}, 'step': {i}}}"
        for i in range(2, 6)]
    r, rows = _rows(tmp_path, "\n".join(lines) + "\n")
    assert [x["iteration"] for x in rows] == [2, 3, 4, 5]
    assert r.diagnostics.failed == []  # the bar line holds no dict: counted as a progress bar


def test_a_short_line_with_a_stray_brace_holds_nothing(tmp_path):
    # found by the fuzz test: `{` glued before a comment line; the lines after it (a restart banner, a Megatron-Bridge
    # Step Time line) are read as before
    text = ("{# a comment\n# another\n[launcher] 2025-09-14 08:00:00 Starting job 1 (attempt 1)\n"
            "step 3: {'loss': 0.5,\n"  # a dict that stays open: the prose after it is not dict content
            "saving checkpoint at iteration 3\n{'loss': 0.25, 'step': 4}\n")
    r, rows = _rows(tmp_path, text)
    assert [(x["iteration"], x["loss"]) for x in rows] == [(4, 0.25)]
    assert r.diagnostics.failed == [f"{tmp_path / 'train.log'}:4"]  # the unclosed dict: failed, named


def test_a_nested_dict_value_continues_the_held_dict(tmp_path):
    text = "step 3: {'loss': 0.5,\n 'memory': {'cuda:0': 12.5},\n 'grad_norm': 0.25}\n"
    _, rows = _rows(tmp_path, text)
    assert [(x["iteration"], x["loss"], x["grad_norm"]) for x in rows] == [(3, 0.5, 0.25)]
