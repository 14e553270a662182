"""Record kinds everywhere: end-of-run summaries, evaluation and validation-only records are never training
iterations; W&B history exports with oddities are named in a note (issue 31 §4).

Shapes (written here after public logs, not copied):

* ms-swift's console / ``logging.jsonl`` dicts with ``global_step/max_steps`` (modelscope/ms-swift#4146,
  modelscope/ms-swift#9261), its end-of-run summary dict (``train_runtime`` ... next to ``global_step/max_steps``,
  swift/trainers/patcher.py ``add_train_message`` adds the progress keys to every log, modelscope/ms-swift#8007)
  and its result dict with ``last_model_checkpoint`` / ``best_model_checkpoint`` (modelscope/ms-swift#4366);
* HF Trainer's ``{'train_runtime': ..., 'train_samples_per_second': ...}`` and ``{'eval_loss': ...}`` console dicts;
* veRL's validation-only ``step:0 - val-core/...:`` line (verl-project/verl#2060), also with the
  ``training/global_step`` counter a later veRL prints on every step (the same issue's step:1 line) and with the
  ``timing_s/testing`` timer;
* W&B ``run.history()`` / ``scan_history()`` dumps (``_step``, ``_runtime``, ``train/loss``, ``eval/loss``).
"""

from __future__ import annotations

import json

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.support import write_log
from vlm_perf.errors import InputError
from vlm_perf.ingest.logs import parse_logs
from vlm_perf.ingest.logs.vocab import record_kind


@pytest.mark.parametrize("keys,kind", [
    (["loss", "grad_norm", "epoch"], "train"),
    (["eval_loss", "eval_runtime", "epoch"], "eval"),
    (["val-core/openai/gsm8k/acc/mean@1", "val-aux/openai/gsm8k/reward/mean@1"], "eval"),
    (["val-core/x/acc/mean@1", "training/global_step", "training/epoch", "timing_s/testing"], "eval"),
    (["train_runtime", "train_loss", "epoch", "global_step/max_steps"], "summary"),
    (["last_model_checkpoint", "best_model_checkpoint", "global_step"], "summary"),
    (["epoch", "global_step/max_steps", "percentage", "elapsed_time"], "other"),
    (["Step", "Epoch"], "other"),
    (["loss", "val/loss"], "train"),  # a training step that also carries an evaluation: still an iteration
])
def test_record_kind_rule(keys, kind):
    assert record_kind(keys) == kind


SWIFT_STEP = ("{'loss': 0.42, 'grad_norm': 18.5, 'learning_rate': 1e-06, 'memory(GiB)': 69.19, "
              "'train_speed(iter/s)': 0.0104, 'epoch': 0.28, 'global_step/max_steps': '%d/94', 'percentage': '13.83%%', "
              "'elapsed_time': '19m 58s', 'remaining_time': '2h 4m 27s'}")


@pytest.mark.parametrize("summary", [
    # the end-of-run summary at the last step, with ms-swift's progress keys
    "{'train_runtime': 9000.5, 'train_samples_per_second': 1.3, 'train_steps_per_second': 0.01, 'total_flos': 1.2e18, "
    "'train_loss': 0.45, 'epoch': 1.0, 'global_step/max_steps': '94/94', 'percentage': '100.00%', "
    "'elapsed_time': '2h 30m 0s', 'remaining_time': '0s', 'memory(GiB)': 69.19, 'train_speed(iter/s)': 0.0104}",
    # the result dict printed after training
    "{'last_model_checkpoint': '/out/v0/checkpoint-94', 'best_model_checkpoint': None, 'best_metric': None, "
    "'global_step': 94, 'memory': {'cuda:0': '69.19GiB'}}",
    # a progress-only dict (no metric): not an iteration either
    "{'epoch': 1.0, 'global_step/max_steps': '94/94', 'percentage': '100.00%', 'elapsed_time': '2h 30m 0s'}",
])
def test_swift_summaries_are_not_iterations(tmp_path, summary):
    text = "\n".join([SWIFT_STEP % 93, SWIFT_STEP % 94, summary]) + "\n"
    r = parse_logs([write_log(tmp_path, text)])
    assert r.iterations.get_column("iteration").to_list() == [93, 94]
    assert r.iterations.get_column("loss").to_list() == [0.42, 0.42]
    assert r.raw.filter(r.raw["line"] == 3).get_column("kind").to_list()[0] in ("summary", "other")


def test_swift_logging_jsonl_summary_is_not_an_iteration(tmp_path):
    rows = [{"loss": 1.2, "grad_norm": 2.5, "learning_rate": 1e-05, "global_step/max_steps": "1/2"},
            {"loss": 1.1, "grad_norm": 2.4, "learning_rate": 1e-05, "global_step/max_steps": "2/2"},
            {"train_runtime": 50.5, "train_loss": 1.15, "global_step/max_steps": "2/2", "train_speed(iter/s)": 0.04}]
    p = write_log(tmp_path, "\n".join(json.dumps(x) for x in rows) + "\n", "logging.jsonl")
    r = parse_logs([p])
    assert r.iterations.get_column("loss").to_list() == [1.2, 1.1]
    assert r.raw.get_column("kind").to_list() == ["train", "train", "summary"]


@pytest.mark.parametrize("step0", [
    "step:0 - val-aux/openai/gsm8k/reward/mean@1:0.565 - val-core/openai/gsm8k/acc/mean@1:0.508",
    "step:0 - val-core/openai/gsm8k/acc/mean@1:0.508 - training/global_step:0 - training/epoch:0",
    "step:0 - val-core/openai/gsm8k/acc/mean@1:np.float64(0.508) - timing_s/testing:35.2",
])
def test_verl_validation_only_step_is_an_evaluation(tmp_path, step0):
    text = (step0 + "\n"
            "step:1 - actor/pg_loss:0.001 - actor/grad_norm:0.02 - perf/mfu/actor:0.343 - training/global_step:1 - "
            "timing_s/gen:74.0 - timing_s/update_actor:14.3 - timing_s/step:96.5\n")
    r = parse_logs([write_log(tmp_path, text)])
    assert r.raw.get_column("kind").to_list() == ["eval", "train"]
    assert r.iterations.get_column("iteration").to_list() == [1]


def test_hf_console_summary_and_eval_dicts(tmp_path):
    text = (" 50%|#####     | 1/2 [00:02<00:02,  2.00s/it]\r{'loss': 1.5, 'grad_norm': 0.5, 'learning_rate': 1e-05, "
            "'epoch': 0.5}\n 50%|#####     | 1/2 [00:02<00:02,  2.00s/it]\n"
            "{'eval_loss': 1.4, 'eval_runtime': 3.1, 'eval_samples_per_second': 10.0, 'epoch': 0.5}\n"
            "100%|##########| 2/2 [00:04<00:00,  2.00s/it]\r{'loss': 1.25, 'grad_norm': 0.4, 'learning_rate': 5e-06, "
            "'epoch': 1.0}\n100%|##########| 2/2 [00:04<00:00,  2.00s/it]\n"
            "{'train_runtime': 4.5, 'train_samples_per_second': 3.5, 'train_steps_per_second': 0.44, 'train_loss': 1.375, "
            "'epoch': 1.0}\n")
    r = parse_logs([write_log(tmp_path, text)])
    assert sorted(r.raw.get_column("kind").to_list()) == ["eval", "summary", "train", "train"]
    assert r.iterations.get_column("loss").to_list() == [1.5, 1.25]


# ---- W&B history exports ----------------------------------------------------------------------------------

def test_wandb_row_kinds(tmp_path):
    rows = [{"_step": 0, "eval/loss": 2.0}, {"_step": 1, "train/loss": 1.9, "train/global_step": 1},
            {"_step": 2, "train/loss": 1.8, "train/global_step": 2},
            {"_step": 3, "train/train_runtime": 100.5, "train/global_step": 2}]
    p = write_log(tmp_path, "\n".join(json.dumps(x) for x in rows) + "\n", "history.jsonl")
    r = parse_logs([p])
    assert r.raw.sort("line").get_column("kind").to_list() == ["eval", "train", "train", "summary"]
    assert r.iterations.get_column("loss").to_list() == [1.9, 1.8]


def test_wandb_negative_step_is_named_and_dropped(tmp_path):
    text = "_step,train/loss\n-1,9.5\n0,2.0\n1,1.9\n"
    p = write_log(tmp_path, text, "history.csv")
    r = parse_logs([p])
    assert r.iterations.get_column("iteration").to_list() == [0, 1]
    assert any(n.startswith(f"{p}:2: 1 row(s) with a negative step") for n in r.diagnostics.notes)


def test_wandb_jsonl_negative_step(tmp_path):
    p = write_log(tmp_path, '{"_step": 0, "train/loss": 2.0}\n{"_step": -5, "train/loss": 7.0}\n', "history.jsonl")
    r = parse_logs([p])
    assert r.raw.get_column("loss").to_list() == [2.0]
    assert any(n.startswith(f"{p}:2: 1 row(s) with a negative step") for n in r.diagnostics.notes)


def test_wandb_duplicate_header_is_named_and_kept_as_an_extra(tmp_path):
    p = write_log(tmp_path, "_step,train/loss,train/loss,train/loss\n0,2.0,3.0,4.0\n1,1.5,3.5,4.5\n", "history.csv")
    r = parse_logs([p])
    assert r.raw.get_column("loss").to_list() == [2.0, 1.5]
    assert r.raw.get_column("train_loss_extra").to_list() == [3.0, 3.5]
    assert r.raw.get_column("train_loss_extra2").to_list() == [4.0, 4.5]
    assert any(f"{p}:1: the header names 'train/loss' 3 times" in n for n in r.diagnostics.notes)


def test_wandb_empty_header_name_is_named(tmp_path):
    p = write_log(tmp_path, "_step,,train/loss\n0,7,2.0\n1,8,1.5\n", "history.csv")
    r = parse_logs([p])
    assert r.raw.get_column("loss").to_list() == [2.0, 1.5]
    assert any(f"{p}:1: the header has 1 column(s) without a name (column 2): their 2 value(s) dropped" == n
               for n in r.diagnostics.notes)


@pytest.mark.parametrize("name,text,line", [
    ("history.csv", "_step,train/loss,train/lr\n0,2.0,1e-5\n1,1.9,1e400\n", 3),
    ("history.csv", "_step,train/loss\n0,2.0\n1," + "9" * 400 + "\n", 3),
    ("history.jsonl", '{"_step": 0, "train/loss": 2.0}\n{"_step": 1, "train/loss": -1e999}\n', 2),
    ("history.jsonl", '{"_step": 0, "train/loss": 2.0, "x": ' + "9" * 400 + '}\n', 1),
])
def test_wandb_number_beyond_float64_is_named_and_partial(tmp_path, name, text, line):
    p = write_log(tmp_path, text, name)
    r = parse_logs([p])
    assert any(n.startswith(f"{p}:{line}: 1 value(s) of ") and "overflow float64" in n for n in r.diagnostics.notes)
    assert f"{p}:{line}" in r.diagnostics.partial
    assert not any(v in (float("inf"), float("-inf")) for c in r.raw.columns if r.raw.schema[c].is_float()
                   for v in r.raw.get_column(c).to_list())


def test_wandb_literal_infinity_is_a_value_not_an_overflow(tmp_path):
    p = write_log(tmp_path, "_step,train/loss\n0,inf\n1,1.5\n", "history.csv")
    r = parse_logs([p])
    assert r.raw.get_column("loss").to_list()[0] == float("inf")
    assert not any("overflow" in n for n in r.diagnostics.notes)


_CELLS = ["0", "1", "-1", "2.5", "", "1e400", "-1e999", "9" * 30, "nan", "inf", "x", '"a,b"', "1,5"]
_HEADS = ["_step", "train/loss", "eval/loss", "", "train/train_runtime", "lr", "train/loss", "Step"]


@settings(derandomize=True, deadline=None, max_examples=60, suppress_health_check=list(HealthCheck))
@given(st.lists(st.sampled_from(_HEADS), min_size=1, max_size=6),
       st.lists(st.lists(st.sampled_from(_CELLS), min_size=0, max_size=7), max_size=6))
def test_wandb_csv_reader_fuzz_never_crashes_nor_keeps_inf_from_an_overflow(tmp_path_factory, heads, rows):
    if "_step" not in heads:
        heads = ["_step", *heads]
    text = ",".join(heads) + "\n" + "".join(",".join(r) + "\n" for r in rows)
    p = write_log(tmp_path_factory.mktemp("wb"), text, "history.csv")
    try:
        r = parse_logs([p], empty_ok=True)
    except InputError:
        return
    if "iteration" in r.raw.columns:
        assert all(v is None or v >= 0 for v in r.raw.get_column("iteration").to_list())


def test_tensorboard_step_with_only_evaluation_tags_is_an_evaluation(tmp_path):
    pytest.importorskip("tbparse")
    from tensorboard.compat.proto.event_pb2 import Event
    from tensorboard.compat.proto.summary_pb2 import Summary
    from tensorboard.summary.writer.event_file_writer import EventFileWriter

    w = EventFileWriter(str(tmp_path / "tb"))
    events = [(0, "eval/loss", 2.5), (1, "train/loss", 2.0), (1, "eval/loss", 2.4), (2, "train/loss", 1.5),
              (3, "train/train_runtime", 60.0)]
    for step, tag, v in events:
        w.add_event(Event(wall_time=1000.0 + step, step=step, summary=Summary(value=[Summary.Value(tag=tag, simple_value=v)])))
    w.close()
    r = parse_logs([tmp_path / "tb"])
    assert r.raw.sort("iteration").get_column("kind").to_list() == ["eval", "train", "train", "summary"]
    assert r.iterations.get_column("iteration").to_list() == [1, 2]  # step 1 holds a training loss: an iteration
