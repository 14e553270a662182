"""Matching a printed TFLOP/s to the conventions that could have printed it, within its print precision."""

import json

import pytest

from vlm_perf.errors import ConfigError
from vlm_perf.flops.conventions.reconcile import print_half_unit


@pytest.mark.parametrize("text,half", [("554.3", 0.05), ("554", 0.5), ("5.543e2", 0.05), ("1,029", 0.5),
                                       ("0.0125", 0.00005)])
def test_print_precision(text, half):
    assert print_half_unit(text) == pytest.approx(half)


@pytest.mark.parametrize("bad", ["abc", "1.2.3", "", "nan"])
def test_bad_printed_number(bad):
    with pytest.raises(ConfigError):
        print_half_unit(bad)


def test_verls_published_value_is_matched_by_verl_only(cli):
    # veRL tests/utils/test_flops_counter.py: Qwen3-VL-8B, seqlens [512, 1024, 2048] with images of the same
    # per-frame lengths, dt = 1 s -> 195.379819708416 TFLOP/s; printed with two decimals
    r = cli("flops", "--model", "qwen3-vl-8b", "--seq-lens", "512,1024,2048",
            "--grid", "1,16,32", "--grid", "1,32,32", "--grid", "1,32,64",
            "--convention", "all", "--json", "--log-tflops", "195.38", "--step-time", "1")
    assert r.exit_code == 0, r.output
    rec = json.loads(r.stdout)["reconcile"]
    assert set(rec["matches"]) == {"verl", "verl@v0.7.1"}  # the two veRL versions agree on Qwen3-VL
    assert rec["closest"] in rec["matches"]
    diff = rec["closest_minus_exact"]
    assert diff["lm.logits"] > 0  # veRL bills the input embedding as a GEMM
    assert diff["vision.merger"] > 0  # and its merger on every patch


def test_log_tflops_needs_a_step_time(cli):
    r = cli("flops", "--model", "llama3-8b", "--seq-len", "128",
            "--convention", "all", "--log-tflops", "1.0")
    assert r.exit_code != 0


def test_flops_gpu_gives_each_readings_mfu_of_the_gpus_peak(cli):
    """`flops --gpu H100-SXM` (report's flag, the same peak table): each convention's TFLOP/s/GPU over the
    H100's dense bf16 peak, 989 TFLOP/s (NVIDIA's datasheet 1979 with sparsity, halved); --peak-tflops wins."""
    args = ("flops", "--model", "llama3-8b", "--seq-length", "4096", "--convention", "all", "--json",
            "--log-tflops", "400", "--step-time", "1")
    r = cli(*args, "--gpu", "H100-SXM")
    assert r.exit_code == 0, r.output
    rec = json.loads(r.stdout)["reconcile"]
    assert rec["peak"]["tflops"] == pytest.approx(989.0)
    for reading in rec["conventions"]:
        assert reading["mfu"] == pytest.approx(reading["tflops_per_gpu"] / 989.0)
    r = cli(*args, "--gpu", "H100-SXM", "--peak-tflops", "500")
    assert r.exit_code == 0, r.output
    rec = json.loads(r.stdout)["reconcile"]
    assert rec["peak"]["tflops"] == 500.0 and rec["peak"]["table_tflops"] == pytest.approx(989.0)
    assert all(x["mfu"] == pytest.approx(x["tflops_per_gpu"] / 500.0) for x in rec["conventions"])


@pytest.mark.parametrize("extra,message", [
    (("--gpu", "H100-SXM"), "give --log-tflops"),  # one batch's FLOPs have no time: no MFU to give
    (("--log-tflops", "400", "--step-time", "1", "--gpu", "NoSuchGPU-9000"), "--peak-tflops"),
    (("--log-tflops", "400", "--step-time", "1", "--dtype", "fp8"), "give --gpu"),
])
def test_flops_peak_flags_are_refused_where_they_change_nothing(extra, message):
    from tests.support import run_main  # the entry point: one error line, exit status 2

    r = run_main("flops", "--model", "llama3-8b", "--seq-length", "128", *extra)
    assert r.returncode == 2, r.stderr
    assert message in r.stderr and len(r.stderr.strip().splitlines()) == 1
