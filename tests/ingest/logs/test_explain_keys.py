"""`parse --explain` accounts for every key of every line shape it shows (issue 31 §5): mapped (to what), kept
as an extra (why), dropped (why), naming the line shape; a line that failed names the shape that failed."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.support import megatron_line, write_log
from vlm_perf.ingest.logs.explain import explain, explain_text
from vlm_perf.ingest.logs.keys import classify, line_keys
from vlm_perf.ingest.logs.preprocess import clean_line

FIXTURES = Path(__file__).resolve().parent / "fixtures"
ROOT = Path(__file__).resolve().parents[3]
ALL = (sorted(FIXTURES.glob("*.log")) + sorted(FIXTURES.glob("*.txt")) + sorted((FIXTURES / "public").glob("*.log"))
       + sorted(ROOT.glob("sample_logs/*/train.log")))
FATES = {"step", "mapped", "extra", "dropped"}


def _full(path: Path, line: int) -> str:
    with open(path, encoding="utf-8", errors="replace", newline="") as fh:
        for n, text in enumerate(fh.read().split("\n"), start=1):
            if n == line:
                return text
    return ""


@pytest.mark.parametrize("path", ALL, ids=lambda p: p.name if p.parent.name in ("fixtures", "public") else p.parent.name)
def test_no_key_of_any_fixture_goes_unaccounted(path):
    infos, _ = explain(path, max_shapes=10_000)
    seen = 0
    for info in infos:
        if info.framework is None and not info.keys:
            continue  # a line with no record and no step: no key was read from it (its reason is given)
        _, clean = clean_line(_full(path, info.first_line).split("\r")[-1])
        _, pairs = line_keys(clean)
        assert [k.key for k in info.keys] == [k for k, _ in pairs], (path.name, info.first_line)
        for k in info.keys:
            seen += 1
            assert k.fate in FATES and k.why, (path.name, info.first_line, k)
            if k.fate in ("mapped", "extra"):
                assert k.column, (path.name, info.first_line, k)
            if k.fate == "dropped":
                assert not k.why.startswith("not read by") or k.key in _NOT_READ_OK, (path.name, k)
    assert seen or path.name in _NO_KEYS, path.name


#: keys a reader deliberately does not read (their reason says which reader), and fixtures of keyless lines
_NOT_READ_OK = {"Job ID"}  # Megatron progress.txt: the job id is not a metric
_NO_KEYS: set[str] = set()


# ---- the reasons, one class at a time ------------------------------------------------------------------------

def _fates(line: str, row: dict | None) -> dict[str, tuple[str, str, str]]:
    _, pairs = line_keys(line)
    return {k: (f.fate, f.column, f.why) for k, v in pairs for f in [classify(k, v, row)]}


def test_wrapper_not_understood_and_list_of_several_values_are_dropped_with_the_reason():
    row = {"framework": "generic", "iteration": 3, "loss": 1.25}
    got = _fates("step: 3 | loss: 1.25 | grad_norm: Foo(0.5) | lr: [1e-05, 2e-05]", row)
    assert got["loss"][:2] == ("mapped", "loss")
    assert got["grad_norm"] == ("dropped", "", "wrapper Foo(...) not understood")
    assert got["lr"] == ("dropped", "", "a list of several values (not one number)")


def test_an_unwrapped_value_says_so():
    row = {"framework": "verl", "iteration": 1, "loss": -0.00066}
    fate, col, why = _fates("step:1 - actor/pg_loss:np.float64(-0.00066)", row)["actor/pg_loss"]
    assert (fate, col) == ("mapped", "loss") and "unwrapped from np.float64(...)" in why


def test_a_duplicate_key_says_which_column_it_lost_to():
    row = {"framework": "hf", "iteration": 1, "loss": 1.0}
    assert _fates("{'loss': 1.0, 'train_loss': 2.0}", row)["train_loss"] == (
        "dropped", "", "duplicate: 'loss' already holds another key's value")


def test_megatron_renamed_loss_says_why(tmp_path):
    p = write_log(tmp_path, megatron_line(1, 2.5, after_loss=" loss: 9.0 |") + "\n")
    info = next(i for i in explain(p)[0] if i.framework == "megatron")
    fate = next(k for k in info.keys if k.key == "loss")
    assert (fate.fate, fate.column) == ("extra", "loss_extra") and "a second key for 'loss'" in fate.why
    assert next(k for k in info.keys if k.key == "lm loss").column == "loss"


def test_multi_word_keys_are_accounted(tmp_path):
    p = write_log(tmp_path, "Iter 10: Train loss 2.363, Learning Rate 1.000e-05, It/sec 1.022, Tokens/sec 88.083, "
                            "Trained Tokens 862, Peak mem 9.707 GB\n")
    info = next(i for i in explain(p)[0] if i.framework == "generic")
    fates = {k.key: (k.fate, k.column) for k in info.keys}
    assert fates["Train loss"] == ("mapped", "loss") and fates["Learning Rate"] == ("mapped", "lr")
    assert fates["Tokens/sec"] == ("mapped", "tokens_per_s_total") and fates["Peak mem"] == ("extra", "peak_mem")


def test_a_line_without_a_record_drops_its_keys_with_the_reason(tmp_path):
    p = write_log(tmp_path, "step=10, skipped=0, lr=[1e-05], mom=[(0.9, 0.95)]\n"
                            "[metrics] step 3: {'loss': 1.0, 'grad_norm': 0.5}\n")
    info = next(i for i in explain(p)[0] if i.first_line == 1)
    assert "no training metric (a learning rate alone is not one)" in info.why_not
    assert {k.key for k in info.keys} >= {"lr"} and all(k.fate in ("dropped", "step") for k in info.keys)


def test_a_wrapped_dict_that_never_closes_names_the_wrap(tmp_path):
    p = write_log(tmp_path, "[metrics] step 60: {'loss': 1.25,\n" + "".join(f" 'k{i}': {i},\n" for i in range(70)))
    info = next(i for i in explain(p)[0] if i.first_line == 1)
    assert info.why_not.startswith("failed: a metrics dict opens here and did not close")


def test_joined_lines_are_accounted_against_their_record():
    text = explain_text(FIXTURES / "public" / "deepspeed_chat_step3.log", max_shapes=100)
    assert "joined onto the deepspeed-chat record of line 11" in text
    assert "act_loss -> loss" in text


def test_cli_explain_prints_every_key(cli):
    res = cli("parse", str(FIXTURES / "public" / "verl_numpy_reprs.log"), "--explain")
    assert res.exit_code == 0, res.output
    assert "every key (veRL step line, 24)" in res.output and "unwrapped from np.float64(...)" in res.output
