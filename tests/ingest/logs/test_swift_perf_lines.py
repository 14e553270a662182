"""ms-swift's MFU and the peak it divides by, and the Trainer's printed total_flos, as the log readers see them.

Lines shaped after real public ms-swift output: the log dict of modelscope/ms-swift PR #9431 (restoring the
perf_log MFU) and the on_init_end lines of swift/callbacks/perf_log.py (the measured-peak line as printed in
PR #6434's description); the console total_flos line is transformers' Trainer.log_metrics, where metrics_format
prints int(total_flos) >> 30 followed by "GF".
"""

from __future__ import annotations

import pytest

from vlm_perf.ingest.log_facts import read_file_facts, scan_lines
from vlm_perf.ingest.logs import parse_logs
from vlm_perf.ingest.logs.vocab import lookup

SWIFT_DICT = ("{'loss': 1.17579222, 'learning_rate': 2.5e-05, 'epoch': 0.02, 'global_step/max_steps': '1/63', "
              "'elapsed_time': '5s', 'memory(GiB)': 16.12, 'train_speed(s/it)': 5.372522, 'MFU': 0.159499}")


def test_the_mfu_key_is_a_fraction():
    m = lookup("MFU")
    assert m is not None and (m.column, m.mult, m.quantity) == ("mfu_logged", 1.0, "fraction")


def test_an_ms_swift_dict_gives_its_mfu_and_step_time(tmp_path):
    log = tmp_path / "train.log"
    log.write_text(SWIFT_DICT + "\n")
    it = parse_logs([log]).iterations
    row = it.row(0, named=True)
    assert (row["framework"], row["iteration"], row["mfu_logged"], row["elapsed_s"]) == ("swift", 1, 0.159499, 5.372522)


def test_peak_lines_and_total_flos_gf(tmp_path):
    log = tmp_path / "train.log"
    log.write_text("[INFO:swift] Specify theoretical max TFLOPS through ENV 'DEVICE_TFLOPS'. [320 TFLOPS]\n"
                   "[INFO:swift] Estimating device TFLOPS baseline. Device: [cuda:0] dtype: [torch.float16]\n"
                   "[INFO:swift] Estimate test finished. [7.9137353585254075 TFLOPS] Device count: [1]\n"
                   + SWIFT_DICT + "\n"
                   "***** train metrics *****\n"
                   "  total_flos               =   123456GF\n")
    f = read_file_facts(log)
    assert f.device_peaks == [(320.0, None, "DEVICE_TFLOPS", 1), (pytest.approx(7.9137353585254075), 1, "measured", 3)]
    assert f.total_flos_gf == [(123456, 6)]


@pytest.mark.parametrize("text", [
    "[INFO:swift] Estimate test finished. [nan TFLOPS] Device count: [1]",
    "[INFO:swift] Specify theoretical max TFLOPS through ENV 'DEVICE_TFLOPS'. [0 TFLOPS]",
    "[INFO:swift] Specify theoretical max TFLOPS through ENV 'DEVICE_TFLOPS'. [-3 TFLOPS]",
    "  total_flos               =   12.5GF",
    "peak [989 TFLOPS] from somewhere else",
])
def test_malformed_or_foreign_lines_give_no_fact(text):
    f = scan_lines("x.log", [(1, text)])
    assert f.device_peaks == [] and f.total_flos_gf == []
