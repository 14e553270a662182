"""Auditable peaks: every MFU carries the value, dtype, dense flag, clock convention and source."""

import json
from pathlib import Path

import pytest

from vlm_perf.hardware import PEAKS, device_peak, peak_flops, peak_used, resolve_gpu
from tests.support import run_main  # the CLI entry point in-process (same exit statuses, one-line errors)

ROOT = Path(__file__).resolve().parents[1]


def test_required_devices_have_bf16_and_fp8_where_the_vendor_gives_it():
    for name in ("H100 SXM", "H200", "H800", "B200", "B300", "GB200", "GB300", "MI300X", "MI325X", "MI355X",
                 "TPU v7"):
        assert "fp8" in PEAKS[name].tflops, name
    for name in ("H20", "A100", "A800", "TPU v5p", "TPU v6e"):
        assert "bf16" in PEAKS[name].tflops


def test_tpu7x_from_google_docs():
    # docs.cloud.google.com/tpu/docs/tpu7x: "Peak compute per chip (BF16) 2307, (FP8) 4614"
    for raw in ("TPU7x", "tpu v7", "Ironwood", "TPU 7x"):
        assert resolve_gpu(raw) == "TPU v7"
    assert peak_flops("tpu7x") == 2307e12 and peak_flops("tpu7x", "fp8") == 4614e12


def test_alternative_clock_figures_follow_their_stated_derivation():
    # VeOmni PR #986: SM count x 8192 dense BF16 FLOP/clock/SM x boost clock
    b200 = device_peak("B200").describe()["alternatives"]
    (label, value), = b200.items()
    assert value == 2382 and "986" in label
    assert 148 * 8192 * 1.965e9 / 1e12 == pytest.approx(value, rel=2e-4)
    (label, value), = device_peak("GB200").describe()["alternatives"].items()
    assert value == 2565 and 152 * 8192 * 2.06e9 / 1e12 == pytest.approx(value, rel=2e-4)
    # AMD: CUs x peak engine clock x dense BF16 FLOP/clock/CU
    assert 304 * 2.1e9 * 2048 / 1e12 == pytest.approx(device_peak("MI300X").tflops["bf16"], abs=0.05)
    assert 256 * 2.4e9 * 4096 / 1e12 == pytest.approx(device_peak("MI355X").tflops["bf16"], abs=0.05)
    assert set(device_peak("MI300X").alternatives.values()) == {1300, 1336}


def test_describe_is_a_complete_audit_record():
    for name, p in PEAKS.items():
        rec = p.describe("bf16")
        assert rec["dense"] is True and "sparsity" in rec["sparsity"] and rec["clock"] and rec["source"]
        assert rec["tflops"] == p.tflops["bf16"] and rec["device"] == name and rec["override"] is False
    assert device_peak("B200").describe("fp8")["alternatives"] == {}  # the boost figures are bf16 only
    assert peak_used("MI300X", "bf16")["uncertain"] is True


def test_override_is_recorded_next_to_the_table_value():
    rec = peak_used("H100", "bf16", 800.0)
    assert rec["override"] and rec["tflops"] == 800.0 and rec["table_tflops"] == 989.0
    assert peak_used(None, "bf16") is None and peak_used("H100", "bf16")["tflops"] == 989.0


def test_report_states_the_peak_and_override_wins(tmp_path):
    run = ROOT / "sample_logs" / "qwen3-vl-30b-a3b-sft"
    r = run_main("report", str(run), "-o", str(tmp_path),
                 "--peak-tflops", "2565")
    assert r.returncode == 0, r.stderr
    s = json.loads((tmp_path / "summary.json").read_text())
    assert s["peak_tflops"] == 2565 and s["peak"]["override"] and s["peak"]["table_tflops"] == 2500
    exact = s["conventions"]["exact"]
    assert exact["mfu_mean"] == pytest.approx(exact["tflops_per_gpu_mean"] / 2565)
    assert "Peak used for MFU" in (tmp_path / "report.md").read_text()
