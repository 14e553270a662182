"""Real-world fidelity: log shapes modelled on public logs (GitHub issues, framework docs), written
for these tests. Expected values are read off the lines by hand."""

from __future__ import annotations

import math

import pytest

from vlm_perf.ingest.logs import parse_logs

BAR = " {pct:3d}%|{fill:<10}| {n}/{total} [{el}<{rem}, {rate}s/it]"


def bar(n, total=120, rate="2.00"):
    pct = int(100 * n / total)
    return BAR.format(pct=pct, fill="#" * (pct // 10), n=n, total=total, el="00:24", rem="03:36", rate=rate)


def write(tmp_path, text, name="train.log"):
    p = tmp_path / name
    p.write_text(text, encoding="utf-8")
    return p


# ---- HF Trainer family ------------------------------------------------------------------------

def test_hf_step_is_the_bar_redrawn_after_the_dict(tmp_path):
    # tqdm.write: the bar shown before the dict is stale (11, rate-limited redraw); the redraw after
    # the dict shows the logged global_step (12)
    text = "\n".join([
        "***** Running training *****",
        "  Total optimization steps = 120",
        bar(11) + "\r" + " " * 40 + "\r{'loss': 1.25, 'grad_norm': 0.5, 'learning_rate': 1e-05, 'epoch': 0.1}",
        bar(12) + "\r" + bar(13) + "\r" + bar(24, rate="1.50") + "\r{'loss': 0.75, 'learning_rate': 2e-05, 'epoch': 0.2}",
        bar(24, rate="1.50") + "\r" + bar(25),
    ]) + "\n"
    r = parse_logs([write(tmp_path, text)])
    rows = r.raw.rows(named=True)
    assert [x["iteration"] for x in rows] == [12, 24]
    assert [x["loss"] for x in rows] == [1.25, 0.75]
    assert rows[1]["elapsed_s"] == 1.5


def test_hf_literal_caret_m_and_non_training_bars(tmp_path):
    text = "\n".join([
        "Map: 100%|##########| 1000/1000 [00:00<00:00, 12000.00 examples/s]",
        "Loading checkpoint shards: 100%|##########| 4/4 [00:05<00:00,  1.25s/it]",
        "{'eval_loss': 1.5, 'epoch': 0.0}",  # no training bar yet: no step (not 4, not 1000)
        "  Total optimization steps = 50",
        bar(5, 50) + "^M{'loss': 2.0, 'learning_rate': 5e-06, 'epoch': 0.1}",
        bar(5, 50),
        " 40%|####      | 2/5 [00:01<00:01,  2.00it/s]",  # the evaluation bar: another total
        "{'eval_loss': 1.9, 'epoch': 0.1}",  # evaluated at global step 5: the training bar's, not the eval bar's 2
    ]) + "\n"
    r = parse_logs([write(tmp_path, text)])
    rows = r.raw.rows(named=True)
    assert [x["iteration"] for x in rows] == [None, 5, 5]
    assert rows[1]["loss"] == 2.0
    assert r.diagnostics.ignored.get("progress_bar", 0) >= 3


def test_hf_deepspeed_timer_lines_between_bar_and_dict(tmp_path):
    text = "\n".join([
        "  Total optimization steps = 100",
        bar(10, 100),
        "[2024-06-01 10:00:00,123] [INFO] [logging.py:96:log_dist] [Rank 0] step=10, skipped=0, lr=[1e-05], mom=[(0.9, 0.95)]",
        "[2024-06-01 10:00:00,124] [INFO] [timer.py:260:stop] epoch=0/micro_step=40/global_step=10, "
        "RunningAvgSamplesPerSec=12.3, CurrSamplesPerSec=12.5, MemAllocated=30.1GB, MaxMemAllocated=35.2GB",
        "{'loss': 1.1, 'learning_rate': 1e-05, 'epoch': 0.5}",
        bar(10, 100),
    ]) + "\n"
    r = parse_logs([write(tmp_path, text)])
    row = r.raw.row(0, named=True)
    assert row["iteration"] == 10 and row["loss"] == 1.1


# ---- Megatron family ------------------------------------------------------------------------------

FULL = (" [2025-09-01 08:00:10] iteration        5/      50 | consumed samples:          640 | "
        "elapsed time per iteration (ms): 2500.0 | throughput per GPU (TFLOP/s/GPU): 401.2 | learning rate: "
        "1.000000E-05 | global batch size:   128 | lm loss: 2.345678E+00 | loss scale: 1.0 | grad norm: 0.876 | "
        "number of skipped iterations:   0 | number of nan iterations:   0 |")


@pytest.mark.parametrize("width", [80, 120, 200])
def test_megatron_hard_wrapped_record_is_rejoined(tmp_path, width):
    pieces = [FULL[i:i + width] for i in range(0, len(FULL), width)]
    r = parse_logs([write(tmp_path, "\n".join(pieces) + "\n" + FULL.replace("    5/", "    6/") + "\n")])
    a, b = r.raw.rows(named=True)
    for row in (a, b):
        assert row["elapsed_s"] == 2.5 and row["tflops_per_gpu_logged"] == 401.2 and row["lr"] == 1e-5
        assert row["loss"] == 2.345678 and row["grad_norm"] == 0.876 and row["nan_iterations"] == 0
    assert [a["iteration"], b["iteration"]] == [5, 6] and a["line"] == 1
    assert r.diagnostics.partial_count == 0 and r.diagnostics.ignored["joined_continuation"] == len(pieces) - 1


def test_megatron_elapsed_ms_unit_variant_and_tokens_per_gpu(tmp_path):
    line = (" [2025-09-01 08:00:10] iteration       10/     100 | consumed samples:         1280 | "
            "elapsed time per iteration: 2512.5 ms | tokens/sec/gpu: 12345.6 | learning rate: 1.0E-05 | "
            "global batch size:   128 | lm loss: 2.5 |")
    r = parse_logs([write(tmp_path, line + "\n")])
    row = r.raw.row(0, named=True)
    assert row["elapsed_s"] == pytest.approx(2.5125) and row["tokens_per_s"] == 12345.6
    assert row["loss"] == 2.5 and r.diagnostics.partial_count == 0


def test_srun_prefix_with_eta_field(tmp_path):
    line = ("12: [2025-09-01 08:00:10] iteration       10/     100 | consumed samples:         1280 | "
            "elapsed time per iteration (ms): 2000.0 | learning rate: 1.0E-05 | global batch size:   128 | "
            "lm loss: 2.5 | ETA: 0:03:00 |")
    r = parse_logs([write(tmp_path, line + "\n")])
    row = r.raw.row(0, named=True)
    assert row["rank_label"] == "12" and row["iteration"] == 10 and row["elapsed_s"] == 2.0 and row["loss"] == 2.5
    # a field that is never a number is not kept, said once, and no line is "partial" for it
    assert r.diagnostics.partial_count == 0
    assert any("'ETA' is not a number (e.g. '0:03:00')" in n for n in r.diagnostics.notes)


def test_gpt_neox_lm_loss_and_approx_flops(tmp_path):
    line = (" samples/sec: 97.245 | iteration       10/  320000 | elapsed time per iteration (ms): 4211.9 | "
            "learning rate: 1.500E-06 | approx flops per GPU: 112.9TFLOPS | lm_loss: 1.0943E+01 | "
            "loss scale: 65536.0 | number of skipped iterations:   0 | number of nan iterations:   0 |")
    r = parse_logs([write(tmp_path, line + "\n")])
    row = r.raw.row(0, named=True)
    assert row["framework"] == "megatron" and row["iteration"] == 10
    assert row["loss"] == 10.943 and row["tflops_per_gpu_logged"] == pytest.approx(112.9)
    assert row["elapsed_s"] == pytest.approx(4.2119) and r.diagnostics.partial_count == 0


# ---- NeMo 1, MaxText, NeMo Automodel ---------------------------------------------------------------

def test_nemo1_current_lightning_bar(tmp_path):
    text = ("Epoch 0: :   3%|▎         | 9/300 [00:39<21:06, reduced_train_loss=nan.0, global_step=9e+3, "
            "consumed_samples=2.88e+5, train_step_timing in s=4.21, v_num=0]\n")
    r = parse_logs([write(tmp_path, text)])
    row = r.raw.row(0, named=True)
    assert row["framework"] == "nemo1" and row["iteration"] == 9000
    assert math.isnan(row["loss"]) and row["consumed_samples"] == 288000
    assert row["elapsed_s"] == 4.21 and "s" not in r.raw.columns  # `train_step_timing in s`, not a key `s`


def test_maxtext_completed_step(tmp_path):
    text = "\n".join([
        "I0219 19:34:48.976376 136489015797568 train.py:1020] completed step: 9, seconds: 5.667, "
        "TFLOP/s/device: 134.924, Tokens/s/device: 8672.758, total_weights: 196608, loss: 10.374",
        "completed step: 15108, seconds: 2.164, TFLOP/s: 36.771, loss: 2.173",
    ]) + "\n"
    r = parse_logs([write(tmp_path, text)])
    a, b = r.raw.rows(named=True)
    assert a["framework"] == "maxtext" and a["iteration"] == 9 and a["elapsed_s"] == 5.667
    assert a["tflops_per_gpu_logged"] == 134.924 and a["tokens_per_s"] == 8672.758 and a["loss"] == 10.374
    assert a["total_weights"] == 196608
    assert b["iteration"] == 15108 and b["tflops_per_gpu_logged"] == 36.771 and b["tokens_per_s"] is None


def test_nemo_automodel_step_line(tmp_path):
    text = ("2025-06-01 10:00:00 | INFO | root | step 4 | epoch 0 | loss 1.2345 | grad_norm 3.4567 | lr 1.00e-05 | "
            "mem 45.67 GiB | tps 9876.54(1234.57/gpu) | num_label_tokens 8192\n")
    r = parse_logs([write(tmp_path, text)])
    row = r.raw.row(0, named=True)
    assert row["framework"] == "automodel" and row["iteration"] == 4 and row["loss"] == 1.2345
    assert row["grad_norm"] == 3.4567 and row["lr"] == 1e-5 and row["mem_gib"] == 45.67
    assert row["tokens_per_s"] == 1234.57 and row["tokens_per_s_total"] == 9876.54


def test_nanotron_iteration_line_with_suffixes(tmp_path):
    text = ("[0428 09:17:07|DP=0|PP=0|TP=0|lighteval.trainer]: iteration: 12 / 100 | consumed_tokens: 49.2K | "
            "elapsed_time_per_iteration_ms: 5.2K | tokens_per_sec: 6.3K | tokens_per_sec_per_gpu: 790 | "
            "global_batch_size: 16 | lm_loss: 10.8 | lr: 0.0003 | model_tflops_per_gpu: 16.6 | "
            "hardware_tflops_per_gpu: 16.6 | grad_norm: 11.3\n"
            "[0428 09:17:12|DP=0|PP=0|TP=0|lighteval.trainer]: iteration: 13 / 100 | consumed_tokens: 53.2K\n")
    r = parse_logs([write(tmp_path, text)])
    a, b = r.raw.rows(named=True)
    assert a["framework"] == "nanotron" and a["iteration"] == 12 and a["elapsed_s"] == pytest.approx(5.2)
    assert a["tokens_per_s"] == 790 and a["tokens_per_s_total"] == 6300 and a["loss"] == 10.8
    assert a["tflops_per_gpu_logged"] == 16.6 and a["hardware_tflops_per_gpu"] == 16.6 and a["global_batch_size"] == 16
    assert a["consumed_tokens"] == pytest.approx(49200)
    assert b["iteration"] == 13 and b["loss"] is None  # trailing fields omitted


def test_litgpt_step_is_the_optimizer_step(tmp_path):
    text = ("Epoch 1 | iter 100 step 25 | loss train: 3.456, val: n/a | iter time: 512.33 ms (step) "
            "remaining time: 1:23:45\n"
            "Epoch 1 | iter 104 step 26 | loss train: 3.401, val: 3.5 | iter time: 498.00 ms (step)\n")
    r = parse_logs([write(tmp_path, text)])
    a, b = r.raw.rows(named=True)
    assert a["framework"] == "litgpt" and (a["iteration"], b["iteration"]) == (25, 26)
    assert a["micro_iter"] == 100 and a["loss"] == 3.456 and a["val_loss"] is None
    assert a["iter_time_s"] == pytest.approx(0.51233) and a["elapsed_s"] is None and b["val_loss"] == 3.5
