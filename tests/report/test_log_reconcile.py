"""The report's reconciliation of the log's printed TFLOP/s/GPU with every registered convention (variants
included), reusing `flops.conventions.reconcile`: matches within print precision, the closest one's
component differences from exact, refusals with their reason."""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import pytest

from vlm_perf.analysis.log_reconcile import log_reconcile, printed_decimals
from vlm_perf.flops.conventions import names
from vlm_perf.pipeline import load_run

ROOT = Path(__file__).resolve().parents[2]
TEXT = ROOT / "sample_logs" / "qwen3-30b-a3b-text"   # Megatron-LM log: prints megatron-lm's formula
VIDEO = ROOT / "sample_logs" / "qwen2.5-vl-7b-video"
TINY = ROOT / "sample_logs" / "qwen2-vl-tiny-real"  # HF Trainer: prints no TFLOP/s


def test_printed_decimals_by_hand():
    assert printed_decimals([554.3, 12.25]) == 2
    assert printed_decimals([554.0, 12.0]) == 0
    assert printed_decimals([0.1, 60.4]) == 1


@pytest.mark.parametrize("sample", [TEXT, VIDEO])
def test_megatron_log_matches_megatron_lm_and_every_convention_is_listed(sample):
    loaded = load_run(sample)
    r = log_reconcile(loaded.analysis, loaded.spec)
    assert r["status"] == "ok" and r["printed_decimals"] == 1  # "throughput per GPU (TFLOP/s/GPU): 572.8"
    assert "megatron-lm" in r["matches"] and r["closest"] in r["matches"]
    assert "exact" not in r["matches"]
    listed = {c["convention"] for c in r["conventions"]} | set(r["not_defined"])
    assert listed == set(names())  # every registered convention and variant: a number or a reason
    assert not {c["convention"] for c in r["conventions"]} & set(r["not_defined"])
    # the closest one's difference from exact, per component, sums to the run totals' difference
    rows = {c["convention"]: c for c in r["conventions"]}
    summary = loaded.analysis.convention_summary()
    diff = sum(d["delta_flops"] for d in r.get("closest_minus_exact", []))
    assert diff == pytest.approx(summary[r["closest"]]["flops_total"] - summary["exact"]["flops_total"], rel=1e-9)
    assert rows["exact"]["tflops_per_gpu_mean"] == summary["exact"]["tflops_per_gpu_mean"]


def test_a_scaled_log_matches_nothing(tmp_path):
    """Every printed number x 1.1 (rewritten at the log's own precision): no convention reproduces it."""
    run = tmp_path / "run"
    shutil.copytree(TEXT, run)
    log = (run / "train.log").read_text()
    log = re.sub(r"(throughput per GPU \(TFLOP/s/GPU\): )([0-9.]+)", lambda m: f"{m.group(1)}{1.1 * float(m.group(2)):.1f}",
                 log)
    (run / "train.log").write_text(log)
    loaded = load_run(run)
    r = log_reconcile(loaded.analysis, loaded.spec)
    meg = next(c for c in r["conventions"] if c["convention"] == "megatron-lm")
    assert meg["windows_matched"] == 0 and not meg["matches"]
    assert meg["rel_diff_median"] == pytest.approx(1 / 1.1 - 1, abs=2e-4)


def test_no_printed_number_is_said(tmp_path, cli):
    out = tmp_path / "out"
    r = cli("report", str(TINY), "-o", str(out))
    assert r.exit_code == 0, (r.output, r.exception)
    md = (out / "report.md").read_text()
    assert "Every registered convention against the log's number: " in md
