"""The canonical metric vocabulary (vlm_perf/ingest/logs/vocab.py): every mapping decision, one
line each, with the expected number worked out by hand (ms / 1000, % / 100, the key's scale)."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from vlm_perf.ingest.logs import vocab
from vlm_perf.ingest.logs.generic import extract, find_step, pairs
from vlm_perf.ingest.logs.vocab import lookup, value_of

# (key as printed, value as printed, column or None, expected number)
CASES = [
    # prefixes
    ("train/loss", "1.25", "loss", 1.25),
    ("train/grad_norm", "0.5", "grad_norm", 0.5),
    ("train/lr", "2e-5", "lr", 2e-5),
    ("train/mfu", "0.22", "mfu_logged", 0.22),
    ("trainer/learning_rate", "3e-4", "lr", 3e-4),
    ("actor/grad_norm", "0.02", "grad_norm", 0.02),
    ("timing_s/step", "40.5", "elapsed_s", 40.5),
    ("perf/throughput", "1500", "tokens_per_s", 1500.0),
    ("perf/time_per_step", "45.6", "elapsed_s", 45.6),
    ("perf/mfu/actor", "0.31", "mfu_logged", 0.31),
    ("actor/pg_loss", "-0.01", "loss", -0.01),
    # scale in the key: the printed number is in units of the scale
    ("actor/lr(1e-4)", "0.1", "lr", 0.1 * 1e-4),
    ("train/lr(1e-3)", "0.02", "lr", 0.02 * 1e-3),
    # units in the key
    ("time_per_iteration_ms", "5.2K", "elapsed_s", 5200 / 1000),
    ("elapsed_time_per_iteration_ms", "2512.5", "elapsed_s", 2.5125),
    ("elapsed time per iteration (ms)", "2512.5", "elapsed_s", 2.5125),
    ("train/time(s)", "0.88", "elapsed_s", 0.88),
    ("train_step_timing in s", "2.5", "elapsed_s", 2.5),
    ("step_time_s", "1.5", "elapsed_s", 1.5),
    ("mfu(%)", "40", "mfu_logged", 0.40),
    ("mfu_pct", "35.5", "mfu_logged", 0.355),
    # units on the value win
    ("dt", "523.45ms", "elapsed_s", 0.52345),
    ("step_time", "1.25s", "elapsed_s", 1.25),
    ("time_per_iteration_ms", "2.5s", "elapsed_s", 2.5),
    ("mfu", "45.2%", "mfu_logged", 0.452),
    ("mfu", "0.45", "mfu_logged", 0.45),  # no percent sign: a fraction, as printed
    # scope: per GPU vs the job
    ("tokens_per_sec_per_gpu", "790", "tokens_per_s", 790.0),
    ("tokens_per_sec", "6.3K", "tokens_per_s_total", 6300.0),
    ("tokens/s/device", "8672.5", "tokens_per_s", 8672.5),
    ("Tokens/s/GPU", "100", "tokens_per_s", 100.0),
    ("tok/sec", "1,001,234", "tokens_per_s_total", 1001234.0),
    ("tps", "12,345", "tokens_per_s", 12345.0),  # torchtitan's tps is per device
    ("tgs", "3000", "tokens_per_s", 3000.0),
    ("throughput/device/tokens_per_sec", "100", "tokens_per_s", 100.0),
    ("throughput/tokens_per_sec", "800", "tokens_per_s_total", 800.0),
    ("model_tflops_per_gpu", "16.6", "tflops_per_gpu_logged", 16.6),
    ("TFLOP/s/GPU", "401.2", "tflops_per_gpu_logged", 401.2),
    ("tflops", "314.7", "tflops_per_gpu_logged", 314.7),
    ("TFLOPS_per_GPU", "1.2e3", "tflops_per_gpu_logged", 1200.0),
    # synonyms
    ("lm_loss", "2.5", "loss", 2.5),
    ("reduced_train_loss", "2.5", "loss", 2.5),
    ("loss/train/total", "10.4", "loss", 10.4),
    ("learning_rate", "1e-5", "lr", 1e-5),
    ("learning rate", "1e-5", "lr", 1e-5),
    ("grad norm", "2", "grad_norm", 2.0),
    ("time", "0.4177", "elapsed_s", 0.4177),
    ("global batch size", "256", "global_batch_size", 256.0),
    ("consumed_samples", "1,536", "consumed_samples", 1536.0),
    # deliberately not mapped (kept as extras)
    ("lrm", "1.0", None, None),
    ("data_time", "0.01", None, None),
    ("hardware_tflops_per_gpu", "16.6", None, None),
    ("time/batch", "11", None, None),
    ("time/train", "0.25", None, None),
    ("train_time", "29736ms", None, None),
    ("train_runtime", "240", None, None),
    ("step_avg", "258ms", None, None),
    ("throughput", "1234", None, None),
    ("memory", "41GiB", None, None),
    ("val/loss", "2.0", None, None),
    ("eval_loss", "2.0", None, None),
    ("val-core/openai/gsm8k/acc/mean@1", "0.5", None, None),
    ("step", "10", None, None),
    ("global_step", "10", None, None),
]


@pytest.mark.parametrize("key,raw,column,expected", CASES)
def test_mapping_decision(key, raw, column, expected):
    m = lookup(key)
    if column is None:
        assert m is None or m.column == "", (key, m)
        return
    assert m is not None and m.column == column, (key, m)
    assert value_of(raw, m) == pytest.approx(expected, rel=1e-12), (key, raw, m.why)
    assert m.why  # every mapping says which rule decided


def test_values():
    assert value_of("5.2K") == 5200 and value_of("1.5M") == 1.5e6 and value_of("2B") == 2e9 and value_of("3T") == 3e12
    assert value_of("12,345") == 12345 and value_of("1.2e+03") == 1200
    assert math.isnan(value_of("nan")) and value_of("-inf") == -math.inf
    assert value_of("15266MB") == 15266 and value_of("41.00GiB") == 41.0  # a memory unit is not a K/M/G scale
    assert value_of("n/a") is None and value_of("abc") is None


def test_synonyms_are_unique_and_docs_in_sync():
    seen = {}
    for f in vocab.FIELDS:
        for s in f.synonyms:
            assert s not in seen, s
            seen[s] = f.column
    doc = (Path(__file__).resolve().parents[3] / "docs" / "log-formats.md").read_text(encoding="utf-8")
    assert vocab.docs_markdown() in doc, "run: python -m vlm_perf.ingest.logs.formats"


def test_eval_and_summary_keys():
    assert vocab.is_eval_key("eval_loss") and vocab.is_eval_key("val/acc") and vocab.is_eval_key("val-aux/x@4")
    assert not vocab.is_eval_key("loss") and not vocab.is_eval_key("interval")
    assert "train_runtime" in vocab.SUMMARY_KEYS


# ---- the generic extractor's step and pair shapes ------------------------------------------------

@pytest.mark.parametrize("text,n,total,kind", [
    ("Iter(train) [  10/5705]  lr: 1e-5", 10, 5705, "train"),
    ("Iter(val) [ 5/50]  acc: 0.5", 5, 50, "eval"),
    ("Epoch(train)  [2][ 10/500]  loss: 1.0", 510, None, "train"),  # (2 - 1) * 500 + 10
    ("[epoch=1][batch=12/100]: loss: 1", 12, 100, "train"),
    ("Epoch: [3]  [ 20/782]  loss: 1.0 (1.1)", 3 * 782 + 20, None, "train"),
    ("Test:  [ 0/50]  acc1: 80.0", 0, 50, "eval"),
    ("epoch: 0, global_step: 10, step: 3, loss: 2", 10, None, "train"),  # global_step wins
    ("step: 640/644  loss: 2", 640, 644, "train"),
    ("step 00010/05000 (0.20%) | loss: 6.9", 10, 5000, "train"),
    ("Epoch 9: |          | 12/? [00:05<00:00,  2.50it/s, train_loss=1.2]", 12, None, "train"),
])
def test_find_step(text, n, total, kind):
    st = find_step(text)
    assert st is not None and (st.n, st.total, st.kind) == (n, total, kind)


def test_no_step_in_keys_that_only_contain_the_word():
    assert find_step("time_per_step: 3.0 | timing_s/step: 2.0") is None
    assert find_step("Step Time : 2.50s") is None


def test_pairs_shapes():
    assert pairs("a: 1 | b: 2") == [("a", "1"), ("b", "2")]
    assert pairs("a=1, b=2.5e-3") == [("a", "1"), ("b", "2.5e-3")]
    assert ("loss", "1.9455") in pairs("time 0.41 (1.87)\tloss 1.9455 (1.9647)")
    assert ("time", "0.0007") not in pairs("data time 0.0007 (1.4)\tloss 2")  # `data time` is not `time`


def test_generic_needs_a_known_metric():
    assert extract("step 5: saving checkpoint to /ckpt/step_5").record is None
    assert extract("global_step=10, RunningAvgSamplesPerSec=16.1").record is None
    ex = extract("step: 3 | loss: 2.5 | foo_bar: 7")
    assert ex.record["loss"] == 2.5 and ex.record["foo_bar"] == 7 and ex.unknown == ["foo_bar"]


def test_generic_kinds():
    assert extract("step 0: val/loss: 2.3").kind == "eval"
    assert extract("step 9: train_runtime: 240, loss: 1.0").kind == "summary"


def test_described_bar_with_a_metric_postfix_is_a_record(tmp_path):
    from vlm_perf.ingest.logs import parse_logs

    p = tmp_path / "x.log"
    p.write_text("train:   5%|5         | 50/1000 [00:10<03:10,  2.00s/it, loss=2.31, lr=1e-4]\n"
                 "Map (num_proc=8):  50%|#####     | 500/1000 [00:01<00:01, 400.00 examples/s]\n", encoding="utf-8")
    r = parse_logs([p])
    assert r.raw.select("framework", "iteration", "loss", "lr", "elapsed_s").rows() == [("generic", 50, 2.31, 1e-4, 2.0)]
    assert r.diagnostics.ignored == {"progress_bar": 1}  # the data-loading bar is still just a bar
