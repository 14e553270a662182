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


# ---- ms-swift's printed MFU and the Trainer's total_flos ------------------------------------------------------
# Lines shaped after real public ms-swift output: the log dict of modelscope/ms-swift PR #9431 ("'loss': 1.17579222,
# 'learning_rate': 2.5e-05, 'epoch': 0.02, 'global_step/max_steps': '1/63', 'elapsed_time': '5s', 'memory(GiB)':
# 16.12, 'train_speed(s/it)': 5.372522, 'MFU': 0.159499") and the peak lines of swift/callbacks/perf_log.py
# (on_init_end: "Specify theoretical max TFLOPS through ENV 'DEVICE_TFLOPS'. [{tflops} TFLOPS]"; PR #6434's log:
# "Estimate test finished. [7.9137353585254075 TFLOPS] Device count: [1]"). The run is the tiny REAL Qwen2-VL run
# (20 steps, 1 process), whose Trainer recorded state.total_flos = 16168739328 (measured_flops.json): the FLOPs
# here are the framework's own number, not vlm-perf's.

SWIFT_SPEED = 0.5  # train_speed(s/it) printed at both logging steps


def _trainer_total_flos() -> float:
    import json

    return json.loads((TINY / "measured_flops.json").read_text())["hf_trainer_total_flos"]["value"]


def _swift_run(tmp_path, peak_line: str, mfu_at_20: float, tail: str = "") -> Path:
    run = tmp_path / "run"
    shutil.copytree(TINY, run)
    (run / "run.yaml").write_text((run / "run.yaml").read_text().replace("log_interval: 1", "log_interval: 10"))
    lines = [peak_line]
    for step, loss, mfu in ((10, 3.9, 0.0008), (20, 3.65, mfu_at_20)):
        lines.append(f"{{'loss': {loss}, 'grad_norm': 1.5, 'learning_rate': 0.001, 'epoch': {step / 20}, "
                     f"'global_step/max_steps': '{step}/20', 'elapsed_time': '{int(step * SWIFT_SPEED)}s', "
                     f"'memory(GiB)': 0.5, 'train_speed(s/it)': {SWIFT_SPEED}, 'MFU': {mfu}}}")
    (run / "train.log").write_text("\n".join(lines) + "\n" + tail)
    return run


def _reconcile(run: Path) -> dict:
    from vlm_perf.ingest.log_facts import read_log_facts

    loaded = load_run(run)
    return log_reconcile(loaded.analysis, loaded.spec, read_log_facts([run / "train.log"]), loaded.raw)


def test_ms_swift_mfu_matches_hf_trainer_with_the_peak_it_printed(tmp_path):
    # ms-swift's on_log, by hand: round(total_flos / elapsed / (DEVICE_TFLOPS x devices x 1e12), 6), elapsed = the
    # summed step time since start = 20 steps x 0.5 s; DEVICE_TFLOPS = 1, one device
    printed = round(_trainer_total_flos() / (20 * SWIFT_SPEED) / (1 * 1 * 1e12), 6)
    assert printed == 0.001617
    run = _swift_run(tmp_path, "[INFO:swift] Specify theoretical max TFLOPS through ENV 'DEVICE_TFLOPS'. [1 TFLOPS]",
                     printed)
    m = _reconcile(run)["mfu"]
    assert m["status"] == "ok" and m["peak_tflops_per_device"] == 1.0 and m["peak_source"].startswith("DEVICE_TFLOPS")
    assert m["devices"] == 1 and "cumulative" in m["mode"]
    assert m["windows"] == 1 and m["printed_decimals"] == 6  # the step-10 line opens the run: not a window the means use
    assert {"hf-trainer", "ms-swift"} <= set(m["matches"]) and "exact" not in m["matches"]
    rows = {c["convention"]: c for c in m["conventions"]}
    assert rows["hf-trainer"]["mfu_median"] == pytest.approx(_trainer_total_flos() / 10 / 1e12, rel=1e-12)
    assert m["closest"] in ("hf-trainer", "ms-swift") and m["closest_minus_exact"]


def test_ms_swift_measured_peak_and_device_count_are_the_denominator(tmp_path):
    # the measured-matmul line names 0.5 TFLOP/s and 2 devices: the MFU divides by 0.5 x 2 = 1 TFLOP/s
    printed = round(_trainer_total_flos() / (20 * SWIFT_SPEED) / (0.5 * 2 * 1e12), 6)
    run = _swift_run(tmp_path, "[INFO:swift] Estimate test finished. [0.5 TFLOPS] Device count: [2]", printed)
    m = _reconcile(run)["mfu"]
    assert (m["peak_tflops_per_device"], m["devices"]) == (0.5, 2)
    assert "measured" in m["peak_source"] and "printed" in m["devices_source"]
    assert "hf-trainer" in m["matches"]


def test_a_scaled_ms_swift_mfu_matches_nothing(tmp_path):
    printed = round(1.1 * _trainer_total_flos() / (20 * SWIFT_SPEED) / 1e12, 6)
    run = _swift_run(tmp_path, "[INFO:swift] Specify theoretical max TFLOPS through ENV 'DEVICE_TFLOPS'. [1 TFLOPS]",
                     printed)
    m = _reconcile(run)["mfu"]
    assert m["matches"] == []
    hf = next(c for c in m["conventions"] if c["convention"] == "hf-trainer")
    assert hf["rel_diff_median"] == pytest.approx(1 / 1.1 - 1, abs=1e-3)


def test_a_logged_mfu_without_any_peak_says_so(tmp_path):
    run = _swift_run(tmp_path, "[INFO:swift] no peak line", 0.001617)  # and run.yaml names no GPU
    m = _reconcile(run)["mfu"]
    assert m["status"] == "no_peak" and "peak" in m["message"]


def test_total_flos_printed_by_the_trainer_is_hf_trainer_exactly(tmp_path, cli):
    total = _trainer_total_flos()
    gf = int(total) >> 30  # transformers' metrics_format: FLOPs / 2**30, rounded down
    assert gf == 15
    tail = (f"{{'train_runtime': 10.2, 'train_samples_per_second': 7.8, 'train_steps_per_second': 1.96, "
            f"'total_flos': {total}, 'train_loss': 3.85, 'epoch': 1.0}}\n"
            "***** train metrics *****\n"
            "  epoch                    =        1.0\n"
            f"  total_flos               = {gf:>9}GF\n")
    run = _swift_run(tmp_path, "[INFO:swift] Specify theoretical max TFLOPS through ENV 'DEVICE_TFLOPS'. [1 TFLOPS]",
                     0.001617, tail)
    t = _reconcile(run)["total_flos"]
    assert t["status"] == "ok" and len(t["printed"]) == 2
    exact_value, console = t["printed"]
    assert exact_value["value"] == total and exact_value["conventions"][0]["rel_diff"] == 0.0
    assert {"hf-trainer", "ms-swift"} == set(exact_value["matches"])
    assert console["interval"] == [15 * 2 ** 30, 16 * 2 ** 30] and "hf-trainer" in console["matches"]
    assert "exact" not in console["matches"]
    # the report says it
    out = tmp_path / "out"
    r = cli("report", str(run), "-o", str(out))
    assert r.exit_code == 0, (r.output, r.exception)
    md = (out / "report.md").read_text()
    assert "The Trainer's total\\_flos as the log printed it" in md or "The Trainer's total_flos as the log printed it" in md
    assert "Every registered convention against the MFU the log printed" in md


def test_a_wrong_gf_matches_nothing(tmp_path):
    run = _swift_run(tmp_path, "[INFO:swift] Specify theoretical max TFLOPS through ENV 'DEVICE_TFLOPS'. [1 TFLOPS]",
                     0.001617, "  total_flos               =        14GF\n")
    (console,) = _reconcile(run)["total_flos"]["printed"]
    assert console["matches"] == []


def test_an_mfu_over_the_peak_carries_its_reason_in_the_row(sample_report):
    """hf-trainer / ms-swift bill every expert's parameters per LM token: on the MoE sample their implied MFU is over
    100%, and the row says why (the convention's documented deviation) rather than a bare 183.9%."""
    out, s, _ = sample_report("qwen3-vl-30b-a3b-sft")
    over = {c["convention"]: c["mfu_mean"] for c in s["log_reconcile"]["conventions"] if (c["mfu_mean"] or 0) > 1}
    assert set(over) >= {"hf-trainer", "ms-swift"}
    md = (out / "report.md").read_text()
    for name, mfu in over.items():
        (row,) = [line for line in md.splitlines() if line.startswith(f"| {name} | ") and "vs printed" not in line
                  and f"{100 * mfu:.1f}%" in line]
        assert "over 100% of the peak, not achievable" in row and "expert" in row  # its deviation: all experts billed
    assert "not achievable" not in next(line for line in md.splitlines() if line.startswith("| exact | "))
