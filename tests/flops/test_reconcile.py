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
