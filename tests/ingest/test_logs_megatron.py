"""Megatron-family lines: every layout variant and the Megatron-specific quirks."""

from __future__ import annotations

import gzip
import math
from datetime import datetime

import polars as pl
import pytest
import zstandard

from tests.support import write_log as write
from vlm_perf.ingest.logs import CORE_COLUMNS, parse_logs


# Megatron-LM 2024+: timestamp, throughput, .6E lr
MLM_TS = (
    " [2024-05-01 12:00:10] iteration      100/    5000 | consumed samples:        12800 |"
    " elapsed time per iteration (ms): 1534.2 | throughput per GPU (TFLOP/s/GPU): 412.7 |"
    " learning rate: 1.500000E-04 | global batch size:   128 | lm loss: 2.345678E+00 |"
    " loss scale: 1.0 | grad norm: 0.812 | number of skipped iterations:   0 |"
    " number of nan iterations:   0 |"
)
# 2019-2023 legacy: no timestamp, .3E lr, no throughput
MLM_LEGACY = (
    " iteration      200/   10000 | consumed samples:        25600 | elapsed time per iteration (ms): 980.5 |"
    " learning rate: 3.000E-04 | global batch size:   128 | lm loss: 3.100000E+00 | loss scale: 65536.0 |"
    " grad norm: 1.250 | number of skipped iterations:   0 | number of nan iterations:   0 |"
)
# 2026: microseconds, energy/power
MLM_ENERGY = (
    " [2026-02-03 04:05:06.123456] iteration       10/     100 | consumed samples:          640 |"
    " elapsed time per iteration (ms): 2000.0 | throughput per GPU (TFLOP/s/GPU): 500.5 |"
    " energy per GPU (J/iter/GPU): 1400.0 | power per GPU (W/GPU): 700.0 |"
    " learning rate: 1.000000E-05 | global batch size:    64 | lm loss: 1.500000E+00 | loss scale: 1.0 |"
    " grad norm: 0.500 | number of skipped iterations:   0 | number of nan iterations:   0 |"
)


def test_megatron_lm_timestamp_throughput(tmp_path):
    r = parse_logs([write(tmp_path, MLM_TS + "\n")])
    assert list(r.raw.columns[: len(CORE_COLUMNS)]) == list(CORE_COLUMNS)
    row = r.raw.row(0, named=True)
    assert row["framework"] == "megatron"
    assert row["line"] == 1
    assert row["iteration"] == 100
    assert row["timestamp"] == datetime(2024, 5, 1, 12, 0, 10)
    assert row["elapsed_s"] == pytest.approx(1.5342)  # ms -> s
    assert row["tflops_per_gpu_logged"] == pytest.approx(412.7)
    assert row["lr"] == pytest.approx(1.5e-4)
    assert row["global_batch_size"] == 128
    assert row["consumed_samples"] == 12800
    assert row["loss"] == pytest.approx(2.345678)
    assert row["grad_norm"] == pytest.approx(0.812)
    assert row["skipped_iterations"] == 0 and row["nan_iterations"] == 0
    assert row["loss_scale"] == 1.0 and row["train_iters"] == 5000
    assert row["mfu_logged"] is None and row["tokens_per_s"] is None


def test_megatron_legacy_and_energy_layouts(tmp_path):
    r = parse_logs([write(tmp_path, MLM_LEGACY + "\n" + MLM_ENERGY + "\n")])
    legacy, energy = r.raw.sort("line").rows(named=True)
    assert legacy["timestamp"] is None and legacy["tflops_per_gpu_logged"] is None
    assert legacy["lr"] == pytest.approx(3e-4) and legacy["elapsed_s"] == pytest.approx(0.9805)
    assert legacy["loss_scale"] == 65536.0
    assert energy["timestamp"] == datetime(2026, 2, 3, 4, 5, 6, 123456)
    assert energy["energy_per_gpu_j_per_iter"] == 1400.0 and energy["power_per_gpu_w"] == 700.0
    assert energy["elapsed_s"] == pytest.approx(2.0)
    # legacy line restarts the iteration counter? no: 200 then 10 -> new segment
    assert [legacy["segment"], energy["segment"]] == [0, 1]


def test_bridge_iteration_and_step_time_line(tmp_path):
    text = "\n".join([
        "Step Time : 2.50s GPU utilization: 401.2MODEL_TFLOP/s/GPU",
        " [2025-09-01 10:00:00] iteration       20/    1000 | consumed samples:         2560 |"
        " elapsed time per iteration (ms): 2500.0 | learning rate: 2.000000E-04 | global batch size:   128 |"
        " lm loss: 4.000000E+00 | loss scale: 1.0 | grad norm: 2.000 | number of skipped iterations:   0 |"
        " number of nan iterations:   0 |",
        "trainer/0 Step Time : 2.40s GPU utilization: 410.0 TFLOP/s/GPU",  # early variant, TorchX prefix
        " [2025-09-01 10:00:24] iteration       30/    1000 | consumed samples:         3840 |"
        " elapsed time per iteration (ms): 2400.0 | learning rate: 2.000000E-04 | global batch size:   128 |"
        " lm loss: 3.900000E+00 | loss scale: 1.0 | grad norm: 1.900 | number of skipped iterations:   0 |"
        " number of nan iterations:   0 |",
    ]) + "\n"
    r = parse_logs([write(tmp_path, text)])
    st = r.raw.filter(pl.col("framework") == "megatron-bridge").sort("line")
    assert st.get_column("iteration").to_list() == [20, 30]  # attached to the following iteration line
    assert st.get_column("model_tflops_per_gpu").to_list() == [401.2, 410.0]
    assert st.get_column("step_time_s").to_list() == [2.5, 2.4]
    assert st.get_column("rank_label").to_list() == [None, "trainer/0"]
    it = r.iterations
    assert it.height == 2  # step-time rows merged into their iteration
    row = it.row(0, named=True)
    assert row["loss"] == 4.0 and row["model_tflops_per_gpu"] == 401.2
    assert r.diagnostics.formats_seen == {"megatron": 2, "megatron-bridge": 2}


def test_megatron_deepspeed_fork_and_flagscale_prefix(tmp_path):
    ds = (" iteration      300/  100000 | consumed samples:       153600 | consumed tokens:    314572800 |"
          " elapsed time per iteration (ms): 3200.5 | learning rate: 5.000E-05 | global batch size:   512 |"
          " lm loss: 5.123456E+00 | loss scale: 4096.0 | grad norm: 0.700 | actual seqlen:  2048 |"
          " number of skipped iterations:   0 | number of nan iterations:   0 | samples per second: 159.975 |"
          " tokens per gpu per second (tgs): 5119.2 | TFLOPs: 145.32 |")
    fs = ("[default7]: [2024-06-01 00:00:01] iteration       40/     100 | consumed samples:          160 |"
          " elapsed time per iteration (ms): 1000.0 | learning rate: 1.000000E-04 | global batch size:     4 |"
          " lm loss: 7.000000E+00 | loss scale: 1.0 | grad norm: 3.000 | number of skipped iterations:    0 |"
          " number of nan iterations:    0 |")
    r = parse_logs([write(tmp_path, ds + "\n" + fs + "\n")])
    a, b = r.raw.sort("line").rows(named=True)
    assert a["consumed_tokens"] == 314572800 and a["actual_seqlen"] == 2048
    assert a["tokens_per_s"] == pytest.approx(5119.2) and a["tflops_per_gpu_logged"] == pytest.approx(145.32)
    assert a["samples_per_s"] == pytest.approx(159.975)
    assert b["rank_label"] == "default7" and b["iteration"] == 40 and b["nan_iterations"] == 0


def test_loss_dropped_when_nan_and_skipped_interval(tmp_path):
    nan_line = (" [2024-05-01 12:00:20] iteration      110/    5000 | consumed samples:        14080 |"
                " elapsed time per iteration (ms): 1500.0 | learning rate: 1.500000E-04 | global batch size:   128 |"
                " loss scale: 1.0 | grad norm: nan | number of skipped iterations:   0 | number of nan iterations:   1 |")
    skipped = (" [2024-05-01 12:00:30] iteration      120/    5000 | consumed samples:        15360 |"
               " elapsed time per iteration (ms): 1400.0 | learning rate: 1.500000E-04 | global batch size:   128 |"
               " loss scale: 0.5 | number of skipped iterations:  10 | number of nan iterations:   0 |")
    r = parse_logs([write(tmp_path, "\n".join([MLM_TS, nan_line, skipped]) + "\n")])
    rows = r.raw.sort("line").rows(named=True)
    assert rows[1]["loss"] is None and math.isnan(rows[1]["grad_norm"]) and rows[1]["nan_iterations"] == 1
    assert rows[2]["loss"] is None and rows[2]["grad_norm"] is None and rows[2]["skipped_iterations"] == 10
    assert r.diagnostics.failed == [] and r.diagnostics.partial == []  # missing != failed


def test_moe_mtp_unknown_keys_become_extras(tmp_path):
    line = (" [2025-01-01 00:00:00] iteration       50/    1000 | consumed samples:         6400 |"
            " elapsed time per iteration (ms): 3000.0 | learning rate: 1.000000E-04 | global batch size:   128 |"
            " lm loss: 2.000000E+00 | load_balancing_loss: 1.000000E-02 | mtp_1 loss: 2.100000E+00 |"
            " loss scale: 1.0 | grad norm: 0.900 | number of skipped iterations:   0 | number of nan iterations:   0 |")
    r = parse_logs([write(tmp_path, line + "\n" + MLM_TS + "\n")])
    row = r.raw.sort("line").row(0, named=True)
    assert row["load_balancing_loss"] == pytest.approx(0.01)
    assert row["mtp_1_loss"] == pytest.approx(2.1)
    assert row["loss"] == 2.0 and row["grad_norm"] == 0.9


def test_truncated_and_garbled_lines(tmp_path):
    trunc = " [2024-05-01 12:00:40] iteration      140/    5000 | consumed samples:        17920 | elapsed time per iter"
    cut_value = (" [2024-05-01 12:00:50] iteration      150/    5000 | consumed samples:        19200 |"
                 " elapsed time per iteration (ms): 15")
    garbled = (" [2024-05-01 12:01:00] iteration      160/    5000 | consumed samples:        2048x0 |"
               " elapsed time per iteration (ms): 1500.0 |")
    only_iter = " [2024-05-01 12:01:10] iteration"  # not even a record
    r = parse_logs([write(tmp_path, "\n".join([MLM_TS, trunc, cut_value, garbled, only_iter]) + "\n")])
    rows = {row["iteration"]: row for row in r.raw.rows(named=True)}
    assert rows[140]["consumed_samples"] == 17920 and rows[140]["elapsed_s"] is None
    assert rows[150]["consumed_samples"] == 19200 and rows[150]["elapsed_s"] is None  # '15' was cut
    assert rows[160]["consumed_samples"] is None and rows[160]["elapsed_s"] == 1.5
    d = r.diagnostics
    assert d.partial == [f"{tmp_path / 'train.log'}:3", f"{tmp_path / 'train.log'}:4"]
    assert d.records == 4 and d.lines_read == 5
    assert sum(d.ignored.values()) == 1  # the bare 'iteration' fragment


def test_ansi_and_carriage_return_and_non_ascii(tmp_path):
    coloured = "\x1b[32m" + MLM_TS.replace("iteration      100", "iteration      101") + "\x1b[0m"
    cr = "progress 50%\r" + MLM_TS.replace("iteration      100", "iteration      102")
    accent = MLM_TS.replace("iteration      100", "iteration      103").replace(" [2024", "é [2024")
    r = parse_logs([write(tmp_path, "\n".join([coloured, cr, accent]) + "\n")])
    rows = r.raw.sort("iteration").rows(named=True)
    assert [x["iteration"] for x in rows] == [101, 102, 103]
    assert all(x["loss"] == pytest.approx(2.345678) for x in rows)
    assert all(x["tflops_per_gpu_logged"] == pytest.approx(412.7) for x in rows)
    assert [x["line"] for x in rows] == [1, 2, 3]


def test_gzip_zstd_and_invalid_utf8(tmp_path):
    body = (MLM_TS + "\n").encode() + b"noise \xff\xfe here\n" + (MLM_LEGACY + "\n").encode()
    gz = tmp_path / "a.log.gz"
    gz.write_bytes(gzip.compress(body))
    zs = tmp_path / "b.log.zst"
    zs.write_bytes(zstandard.ZstdCompressor().compress(body))
    for path in (gz, zs):
        r = parse_logs([path])
        assert r.raw.get_column("iteration").to_list() == [100, 200]
        assert r.raw.get_column("line").to_list() == [1, 3]
        assert r.diagnostics.decode_errors == 2
        assert r.diagnostics.lines_read == 3


def test_arguments_block_run_config(tmp_path):
    args = "\n".join([
        "------------------------ arguments ------------------------",
        "  context_parallel_size ........................... 2",
        "  expert_model_parallel_size ...................... 1",
        "  global_batch_size ............................... 128",
        "  micro_batch_size ................................ 1",
        "  pipeline_model_parallel_size .................... 4",
        "  seq_length ...................................... 8192",
        "  tensor_model_parallel_size ...................... 8",
        "  world_size ...................................... 256",
        "-------------------- end of arguments ---------------------",
    ])
    r = parse_logs([write(tmp_path, args + "\n" + MLM_TS + "\n")])
    assert r.run_config == {
        "context_parallel_size": 2, "expert_model_parallel_size": 1, "global_batch_size": 128,
        "micro_batch_size": 1, "pipeline_model_parallel_size": 4, "seq_length": 8192,
        "tensor_model_parallel_size": 8, "world_size": 256,
    }


def test_progress_txt_records_and_restart_banner(tmp_path):
    text = "\n".join([
        "2024-05-01 10:00:00\tJob ID: 4242\t# GPUs: 64\tStarting job",
        "2024-05-01 11:00:00\tJob ID: 4242\t# GPUs: 64\tSaved checkpoint\tIteration: 1000\t"
        "Job throughput: 410.5 TFLOP/s/GPU\tCumulative throughput: 410.5 TFLOP/s/GPU\t"
        "Floating-point operations: 1.23e+19\tTokens (in billions): 4.10",
        "2024-05-01 12:30:00\tJob ID: 4243\t# GPUs: 64\tStarting job",
        "2024-05-01 13:00:00\tJob ID: 4243\t# GPUs: 64\tSaved checkpoint\tIteration: 2000\t"
        "Job throughput: 405.0 TFLOP/s/GPU\tCumulative throughput: 407.7 TFLOP/s/GPU\t"
        "Floating-point operations: 2.46e+19\tTokens (in billions): 8.20",
    ]) + "\n"
    r = parse_logs([write(tmp_path, text, "progress.txt")])
    rows = r.raw.rows(named=True)
    assert [x["iteration"] for x in rows] == [1000, 2000]
    assert [x["segment"] for x in rows] == [0, 1]  # the second "Starting job" opens a segment
    assert rows[0]["tflops_per_gpu_logged"] == 410.5
    assert rows[1]["cumulative_throughput"] == 407.7
    assert rows[0]["floating_point_operations"] == 1.23e19
    assert rows[0]["timestamp"] == datetime(2024, 5, 1, 11, 0, 0)
    assert r.run_config["world_size"] == 64
    assert r.diagnostics.formats_seen == {"megatron-progress": 2}


def test_rare_keys_in_a_large_batch_are_not_lost(tmp_path):
    """Keys are probed on a sample of big batches; a key that only appears mid-file (skipped
    samples, a MoE loss) must still be extracted via the field-count check."""
    def line(i: int, extra: str = "") -> str:
        return (f" iteration {i:8d}/   10000 | consumed samples: {i * 8:12d} |{extra}"
                f" elapsed time per iteration (ms): 1000.0 | learning rate: 1.000000E-04 | global batch size:     8 |"
                f" lm loss: 2.000000E+00 | loss scale: 1.0 | number of skipped iterations:   0 |"
                f" number of nan iterations:   0 |")
    lines = [line(i) for i in range(1, 6001)]
    lines[5499] = line(5500, " skipped samples:           16 |")
    lines[5799] = line(5800).replace(" loss scale:", " load_balancing_loss: 5.000000E-02 | loss scale:")
    r = parse_logs([write(tmp_path, "\n".join(lines) + "\n")])
    raw = r.raw
    assert raw.height == 6000 and raw.get_column("iteration").to_list() == list(range(1, 6001))
    assert raw.filter(pl.col("iteration") == 5500).row(0, named=True)["skipped_samples"] == 16
    assert raw.get_column("skipped_samples").null_count() == 5999
    assert raw.filter(pl.col("iteration") == 5800).row(0, named=True)["load_balancing_loss"] == 0.05
    assert raw.get_column("elapsed_s").null_count() == 0


def test_yaml_config_dump_feeds_run_config(tmp_path):
    # an indented YAML dump of the run configuration (the shape Megatron-Bridge prints its config in)
    dump = (
        "------- Task Configuration -------\n"
        "model:\n"
        "  tensor_model_parallel_size: 4\n"
        "  pipeline_model_parallel_size: 2\n"
        "  context_parallel_size: 1\n"
        "  expert_model_parallel_size: 8\n"
        "train:\n"
        "  micro_batch_size: 1\n"
        "  global_batch_size: 128\n"
        "dataset:\n"
        "  sequence_length: 4096\n"
        "  num_workers: 8\n"
    )
    p = write(tmp_path, dump + MLM_TS + "\n")
    result = parse_logs([p])
    cfg = result.run_config
    assert cfg["tensor_model_parallel_size"] == 4 and cfg["pipeline_model_parallel_size"] == 2
    assert cfg["expert_model_parallel_size"] == 8 and cfg["context_parallel_size"] == 1
    assert cfg["micro_batch_size"] == 1 and cfg["global_batch_size"] == 128 and cfg["seq_length"] == 4096
    assert "num_workers" not in cfg
    assert result.raw.height == 1
    d = result.diagnostics.to_dict()
    assert d["ignored"].get("arguments", 0) == 7  # every kept key counted, nothing silently dropped
