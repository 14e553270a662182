"""W&B run-history exports (shapes of the web UI's panel CSV and of run.history()/scan_history() dumps)."""

from __future__ import annotations

import math

import polars as pl

from vlm_perf.ingest.logs import parse_logs


def test_history_dump_csv_with_pandas_index_and_megatron_keys(tmp_path):
    p = tmp_path / "history.csv"
    p.write_text(
        ",_step,_runtime,_timestamp,iteration-time,throughput/tflops/device,lm loss,learning-rate,batch-size\n"
        "0,10,25.5,1717236000.5,2.5,401.2,8.25,3e-05,256\n"
        "1,20,50.5,1717236025.5,2.4,405.0,NaN,6e-05,256\n"
        "2,30,75.0,1717236050.0,2.45,,7.5,9e-05,not-a-number\n")
    r = parse_logs([p])
    rows = r.raw.rows(named=True)
    assert [x["framework"] for x in rows] == ["wandb"] * 3
    assert [x["iteration"] for x in rows] == [10, 20, 30] and [x["line"] for x in rows] == [2, 3, 4]
    assert [x["elapsed_s"] for x in rows] == [2.5, 2.4, 2.45]
    assert rows[0]["tflops_per_gpu_logged"] == 401.2 and rows[2]["tflops_per_gpu_logged"] is None
    assert rows[0]["loss"] == 8.25 and math.isnan(rows[1]["loss"]) and rows[0]["lr"] == 3e-5
    assert rows[0]["global_batch_size"] == 256 and rows[2]["global_batch_size"] is None
    assert rows[0]["runtime_s"] == 25.5 and rows[0]["timestamp"].year == 2024
    assert r.diagnostics.partial == [f"{p}:4"]  # 'not-a-number' is said, not silently dropped


def test_panel_export_csv_strips_run_prefix_and_bands(tmp_path):
    p = tmp_path / "wandb_export_2025-01-01.csv"
    p.write_text('"Step","qwen-vl-sft - train/loss","qwen-vl-sft - train/loss__MIN","qwen-vl-sft - train/loss__MAX"\n'
                 '"5","1.5","1.4","1.6"\n"10","1.25","1.2","1.3"\n')
    r = parse_logs([p])
    assert r.raw.get_column("iteration").to_list() == [5, 10]
    assert r.raw.get_column("loss").to_list() == [1.5, 1.25]
    assert not [c for c in r.raw.columns if "min" in c or "max" in c]


def test_scan_history_jsonl_and_parquet_hf_and_verl_keys(tmp_path):
    p = tmp_path / "scan_history.jsonl"
    p.write_text('{"_step": 0, "train/global_step": 5, "train/loss": 2.0, "train/learning_rate": 1e-05, '
                 '"train/grad_norm": Infinity, "_runtime": 10.0}\n'
                 '{"_step": 1, "train/global_step": 10, "train/loss": 1.5, "perf/mfu/actor": 0.31, '
                 '"perf/throughput": 1500.0, "media": {"_type": "image"}}\n')
    r = parse_logs([p])
    a, b = r.raw.rows(named=True)
    assert (a["iteration"], b["iteration"]) == (5, 10) and a["wandb_step"] == 0.0
    assert a["loss"] == 2.0 and a["lr"] == 1e-5 and a["grad_norm"] == math.inf
    assert b["mfu_logged"] == 0.31 and b["tokens_per_s"] == 1500.0
    q = tmp_path / "history.parquet"
    pl.DataFrame({"_step": [1, 2], "train/loss": [0.5, 0.25], "iteration-time": [1.0, 1.1]}).write_parquet(q)
    r2 = parse_logs([q])
    assert r2.raw.get_column("iteration").to_list() == [1, 2]
    assert r2.raw.get_column("elapsed_s").to_list() == [1.0, 1.1]


def test_two_keys_for_one_core_column_stay_distinct(tmp_path):
    p = tmp_path / "history.csv"
    p.write_text("_step,train/loss,lm loss\n1,2.0,3.0\n")
    row = parse_logs([p]).raw.row(0, named=True)
    assert row["loss"] == 2.0 and row["loss_extra"] == 3.0
