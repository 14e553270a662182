"""Non-Megatron formats, one test each, with hand-checked values."""

from __future__ import annotations

import json
import math
from datetime import datetime

import polars as pl
import pytest

from tests.support import write_log as write
from vlm_perf.ingest.logs import parse_logs


def test_nemo2_progress_printer_not_confused_with_megatron(tmp_path):
    text = "\n".join([
        "Training epoch 0, iteration 11/999 | lr: 0.0001 | global_step: 11 | consumed_samples: 1536 | "
        "reduced_train_loss: 2.345 | train_step_timing in s: 2.5 | TFLOPS_per_GPU: 1.234e+03 | "
        "global_batch_size: 128 | max_memory_allocated: 4.2e+10",
        "Validation epoch 0, iteration 3/10 | val_loss: 2.1",
        "Training epoch 0, iteration 12/999 | lr: 0.0001 | global_step: 12 | consumed_samples: 1664 | "
        "reduced_train_loss: 2.3 | train_step_timing in s: 2.4 | TFLOPS_per_GPU: 1.234e+03 | global_batch_size: 128",
    ]) + "\n"
    r = parse_logs([write(tmp_path, text)])
    rows = r.raw.rows(named=True)
    assert [x["framework"] for x in rows] == ["nemo2", "nemo2"]
    a = rows[0]
    assert a["iteration"] == 11 and a["lr"] == 1e-4 and a["consumed_samples"] == 1536
    assert a["loss"] == 2.345 and a["elapsed_s"] == 2.5 and a["tflops_per_gpu_logged"] == 1234.0
    assert a["global_batch_size"] == 128 and a["max_memory_allocated"] == 4.2e10  # bytes, as logged
    assert r.diagnostics.ignored == {"validation": 1}


def test_nemo1_progress_bar_postfix(tmp_path):
    text = ("Epoch 0: 10%|█         | 12/120 [00:24<03:36, 2.00s/it, reduced_train_loss=2.350, "
            "global_step=11.00, consumed_samples=2.56e+5, v_num=1]\n")
    r = parse_logs([write(tmp_path, text)])
    row = r.raw.row(0, named=True)
    assert row["framework"] == "nemo1"
    assert row["iteration"] == 11 and row["loss"] == 2.35
    assert row["consumed_samples"] == 256000 and row["elapsed_s"] == 2.0


def test_torchtitan_rank_prefix_ansi_thousands_and_percent_mfu(tmp_path):
    line = ("[rank0]:\x1b[92m[titan] 2025-03-04 05:06:07,123 - root - INFO - \x1b[31mstep: 12  \x1b[32mloss:  2.34567  "
            "\x1b[33mgrad_norm:  0.8123  \x1b[34mmemory: 40.12GiB(50.12%)  \x1b[35mtps: 12,345  "
            "\x1b[36mtflops: 1,234.56  \x1b[37mmfu: 43.21%\x1b[39m")
    na = "[rank0]:[titan] 2025-03-04 05:06:17,000 - root - INFO - step: 13  loss:  2.30000  memory: 40.00GiB(50.00%)  tps: 12,000  tflops: 1,200.00  mfu: N/A"
    r = parse_logs([write(tmp_path, line + "\n" + na + "\n")])
    a, b = r.raw.rows(named=True)
    assert a["framework"] == "torchtitan" and a["rank_label"] == "rank0"
    assert a["iteration"] == 12 and a["loss"] == 2.34567 and a["grad_norm"] == 0.8123
    assert a["tokens_per_s"] == 12345 and a["tflops_per_gpu_logged"] == 1234.56
    assert a["mfu_logged"] == pytest.approx(0.4321)
    assert a["memory_gib"] == 40.12 and a["memory_pct"] == 50.12
    assert a["timestamp"] == datetime(2025, 3, 4, 5, 6, 7, 123000)
    assert b["mfu_logged"] is None and b["iteration"] == 13


def test_hf_dicts_tqdm_cr_glued_nan_strings_curly(tmp_path):
    text = "\n".join([
        "***** Running training *****",
        " 10%|█         | 12/120 [00:24<03:36,  2.00s/it]\r{'loss': 1.2345, 'grad_norm': nan, 'learning_rate': 1e-05, 'epoch': 0.1}",
        " 20%|██        | 24/120 [00:48<03:12,  2.00s/it]{'loss': '0.8765', 'grad_norm': '1.234', 'learning_rate': '3e-05', 'epoch': '0.2'}",
        "{\u2018loss\u2019: 0.5, \u2018learning_rate\u2019: 2e-05, \u2018epoch\u2019: 0.3, \u2018step\u2019: 36}",
        "100%|██████████| 120/120 [04:00<00:00,  2.00s/it]{'train_runtime': 240.0, 'train_samples_per_second': 4.0, 'train_loss': 1.1, 'epoch': 1.0}",
    ]) + "\n"
    r = parse_logs([write(tmp_path, text)])
    rows = r.raw.rows(named=True)
    assert [x["framework"] for x in rows] == ["hf"] * 4
    assert rows[0]["iteration"] == 12 and rows[0]["loss"] == 1.2345 and math.isnan(rows[0]["grad_norm"])
    assert rows[0]["lr"] == 1e-5 and rows[0]["epoch"] == 0.1 and rows[0]["elapsed_s"] == 2.0
    assert rows[1]["iteration"] == 24 and rows[1]["loss"] == 0.8765 and rows[1]["lr"] == 3e-5
    assert rows[2]["iteration"] == 36 and rows[2]["loss"] == 0.5  # curly quotes normalised
    assert rows[3]["train_runtime"] == 240.0 and rows[3]["train_loss"] == 1.1
    assert r.diagnostics.failed == []


def test_trainer_state_json(tmp_path):
    state = {"global_step": 20, "log_history": [
        {"epoch": 0.5, "grad_norm": 0.9, "learning_rate": 2e-05, "loss": 1.5, "step": 10},
        {"epoch": 1.0, "grad_norm": 0.7, "learning_rate": 1e-05, "loss": 1.2, "step": 20},
        {"epoch": 1.0, "step": 20, "total_flos": 1.5e15, "train_loss": 1.35, "train_runtime": 100.0},
    ]}
    p = write(tmp_path, json.dumps(state, indent=2), "trainer_state.json")
    r = parse_logs([p])
    rows = r.raw.rows(named=True)
    assert [x["iteration"] for x in rows] == [10, 20, 20]
    assert rows[0]["loss"] == 1.5 and rows[0]["lr"] == 2e-5 and rows[0]["grad_norm"] == 0.9
    assert rows[2]["total_flos"] == 1.5e15
    assert rows[0]["line"] < rows[1]["line"] < rows[2]["line"]
    assert [x["kind"] for x in rows] == ["train", "train", "summary"]
    it = r.iterations
    # issue 19: the end-of-run summary is kept in raw but is not an iteration (it used to merge into step 20)
    assert it.height == 2 and it.filter(pl.col("iteration") == 20).row(0, named=True)["train_runtime"] is None
    assert it.filter(pl.col("iteration") == 20).row(0, named=True)["loss"] == 1.2


def test_llamafactory_jsonl_with_resume(tmp_path):
    lines = [
        {"current_steps": 130, "total_steps": 200, "loss": 1.1, "lr": 2e-05, "epoch": 0.65, "percentage": 65.0,
         "elapsed_time": "0:10:00", "remaining_time": "0:05:23", "throughput": 1500.0, "total_tokens": 900000},
        {"current_steps": 140, "total_steps": 200, "loss": 1.05, "lr": 2e-05, "epoch": 0.7, "percentage": 70.0,
         "elapsed_time": "0:10:45", "remaining_time": "0:04:36", "throughput": 1510.0, "total_tokens": 974000},
        {"current_steps": 101, "total_steps": 200, "loss": 1.2, "lr": 2e-05, "epoch": 0.5, "percentage": 50.5,
         "elapsed_time": "0:01:10", "remaining_time": "0:11:00", "throughput": 9000.0, "total_tokens": 630000},
    ]
    r = parse_logs([write(tmp_path, "\n".join(json.dumps(x) for x in lines) + "\n", "trainer_log.jsonl")])
    rows = r.raw.rows(named=True)
    assert [x["framework"] for x in rows] == ["llamafactory"] * 3
    assert [x["iteration"] for x in rows] == [130, 140, 101]
    assert [x["segment"] for x in rows] == [0, 0, 1]  # steps went backwards -> restart
    assert rows[0]["elapsed_time_s"] == 600.0 and rows[2]["elapsed_time_s"] == 70.0
    assert rows[0]["throughput_tokens_per_s"] == 1500.0 and rows[0]["tokens_per_s"] is None
    assert r.iterations.get_column("iteration").to_list() == [101, 130, 140]


def test_swift_logging_jsonl(tmp_path):
    d = {"loss": 0.5, "grad_norm": 1.1, "learning_rate": 9e-05, "memory(GiB)": 42.1, "train_speed(iter/s)": 0.25,
         "token_acc": 0.8, "epoch": 0.1, "global_step/max_steps": "20/200", "percentage": "10.00%",
         "elapsed_time": "1m 20s", "remaining_time": "12m 0s"}
    r = parse_logs([write(tmp_path, json.dumps(d) + "\n", "logging.jsonl")])
    row = r.raw.row(0, named=True)
    assert row["framework"] == "swift" and row["iteration"] == 20 and row["max_steps"] == 200
    assert row["memory_gib"] == 42.1 and row["elapsed_s"] == 4.0 and row["percentage"] == 10.0
    assert row["elapsed_time_s"] == 80.0 and row["lr"] == 9e-5


def test_verl_console_ray_prefix_wrap_and_jsonl(tmp_path):
    text = "\n".join([
        "(TaskRunner pid=1234) step:0 - val-core/math/acc/mean@1:0.41",
        "(TaskRunner pid=1234) step:1 - actor/pg_loss:0.0123 - actor/grad_norm:0.5 - perf/mfu/actor:0.287 - response_length/me",
        "an:345.6 - perf/throughput:1234.5 - perf/time_per_step:12.3 - val-core/acc:-0.000",
        "(TaskRunner pid=1234) step:2 - actor/pg_loss:0.0110 - mfu/actor:0.30 - perf/throughput:1300.0",
    ]) + "\n"
    r = parse_logs([write(tmp_path, text)])
    rows = r.raw.rows(named=True)
    assert [x["iteration"] for x in rows] == [0, 1, 2]
    one = rows[1]
    assert one["rank_label"] == "TaskRunner pid=1234"
    assert one["loss"] == 0.0123 and one["grad_norm"] == 0.5 and one["mfu_logged"] == 0.287
    assert one["response_len_mean"] == 345.6  # wrapped key re-joined (the vocabulary column of response_length/mean)
    assert one["tokens_per_s"] == 1234.5 and one["elapsed_s"] == 12.3
    assert one["val_core_acc"] == 0.0 and math.copysign(1, one["val_core_acc"]) == 1.0
    assert rows[2]["mfu_logged"] == 0.30
    assert rows[0]["val_core_math_acc_mean_1"] == 0.41 and rows[0]["mfu_logged"] is None
    assert r.diagnostics.ignored == {"joined_continuation": 1}

    jl = "\n".join(json.dumps(x) for x in [
        {"step": 1, "data": {"actor/pg_loss": 0.02, "perf/mfu/actor": 0.25, "perf/throughput": 1000.0}},
        {"step": 2, "data": {"actor/pg_loss": 0.01, "perf/mfu/actor": 0.26, "perf/throughput": 1010.0}},
    ]) + "\n"
    r2 = parse_logs([write(tmp_path, jl, "exp.jsonl")])
    assert r2.raw.get_column("framework").to_list() == ["verl-jsonl"] * 2
    assert r2.raw.get_column("mfu_logged").to_list() == [0.25, 0.26]
    assert r2.raw.get_column("tokens_per_s").to_list() == [1000.0, 1010.0]


def test_tensorboard_events(tmp_path):
    pytest.importorskip("tbparse")
    from tensorboard.compat.proto.event_pb2 import Event
    from tensorboard.compat.proto.summary_pb2 import Summary
    from tensorboard.summary.writer.event_file_writer import EventFileWriter

    w = EventFileWriter(str(tmp_path / "tb"))
    for step, (loss, it_time) in enumerate([(3.0, 2.0), (2.5, 1.9), (2.25, 1.8)], start=1):
        for tag, v in (("lm loss", loss), ("iteration-time", it_time), ("throughput", 400.0 + step)):
            w.add_event(Event(wall_time=1000.0 + step, step=step, summary=Summary(value=[Summary.Value(tag=tag, simple_value=v)])))
    w.close()
    r = parse_logs([tmp_path / "tb"])
    it = r.iterations
    assert it.get_column("iteration").to_list() == [1, 2, 3]
    assert it.get_column("loss").to_list() == [3.0, 2.5, 2.25]
    assert it.get_column("elapsed_s").to_list() == pytest.approx([2.0, 1.9, 1.8])
    assert it.get_column("tflops_per_gpu_logged").to_list() == [401.0, 402.0, 403.0]
    assert r.diagnostics.formats_seen == {"tensorboard": 3}


@pytest.mark.parametrize("damage", ["flip", "truncate"])
def test_tensorboard_corrupt_event_file_is_reported_not_truncated(tmp_path, damage):
    pytest.importorskip("tbparse")
    from tensorboard.compat.proto.event_pb2 import Event
    from tensorboard.compat.proto.summary_pb2 import Summary
    from tensorboard.summary.writer.event_file_writer import EventFileWriter

    from vlm_perf.errors import InputError

    w = EventFileWriter(str(tmp_path / "tb"))
    for step in range(1, 21):
        w.add_event(Event(wall_time=1000.0 + step, step=step,
                          summary=Summary(value=[Summary.Value(tag="lm loss", simple_value=3.0 - step / 10)])))
    w.close()
    (event,) = list((tmp_path / "tb").iterdir())
    data = bytearray(event.read_bytes())
    if damage == "flip":
        data[len(data) // 2] ^= 0xFF  # one byte inside a record in the middle of the run
    else:
        data = data[: len(data) - 7]
    event.write_bytes(bytes(data))
    with pytest.raises(InputError, match=r"event record \d+ at byte \d+|truncated event record"):
        parse_logs([tmp_path / "tb"])
