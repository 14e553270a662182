"""A report raises its own red flags: a wrong GPU count, a NaN step time, missing DP-rank metadata.

Each case starts from the bundled SYNTHETIC sample run (vlm_perf.synth, seed 2575), breaks one
thing by hand, and checks that the first lines of report.md / report.html, the terminal summary and
summary.json's ``checks`` name the problem, and that ``--strict`` turns a failed check into exit 4.
"""

import gzip
import json
import re
import shutil
from pathlib import Path

import pytest

from tests.support import copy_sample, run_cli, run_main as cli  # run_cli: a real subprocess

ROOT = Path(__file__).resolve().parents[2]
SAMPLE_A = ROOT / "sample_logs" / "qwen3-vl-30b-a3b-sft"


def first_lines(out: Path, n: int = 16) -> str:
    """The lead of report.md: the verdict, the headline numbers' table, the checks line and every failed or warned
    check (a failed check before the numbers)."""
    return "\n".join((out / "report.md").read_text().splitlines()[:n])


def html_head(out: Path) -> str:
    """The report.html text up to the first section heading (h2): the checks headline."""
    page = (out / "report.html").read_text()
    return re.sub(r"<[^>]+>", " ", page[page.index("<h1>"):page.index("<h2>")])


@pytest.fixture(scope="module")
def clean(tmp_path_factory):
    out = tmp_path_factory.mktemp("clean")
    r = run_cli("report", SAMPLE_A, "-o", out, "--strict")
    assert r.returncode == 0, r.stderr  # the sample passes --strict: no failed check
    return json.loads((out / "summary.json").read_text())


def _tflops(summary, conv="exact"):
    return summary["conventions"][conv]["tflops_per_gpu_mean"]


def test_clean_sample_states_every_check(clean, tmp_path):
    names = [c["name"] for c in clean["checks"]]
    assert set(names) == {"log_crosscheck", "mfu_plausibility", "step_times", "metadata_coverage",
                          "metadata_replay", "restarts_and_gaps", "headline_numbers", "log_files", "metadata_vs_log",
                          "parallelism", "log_vs_model", "training_regime", "configuration"}
    assert clean["checks_failed"] == [] and clean["checks_status"] == "warn"  # the sample has one restart
    assert {c["name"]: c["status"] for c in clean["checks"]}["restarts_and_gaps"] == "warn"


def test_wrong_gpu_count(tmp_path):
    out = tmp_path / "out"
    r = cli("report", SAMPLE_A, "--gpus", "32", "-o", out)
    assert r.returncode == 0, r.stderr  # without --strict the report is written and the exit is 0
    head = first_lines(out)
    assert "FAILED" in head and "MISMATCH" in head and "fits 64 GPUs, not 32" in head, head
    assert "MISMATCH" in html_head(out) and "fits 64 GPUs, not 32" in html_head(out)
    assert r.stderr.splitlines()[0].startswith("FAIL") and "MISMATCH" in r.stderr.splitlines()[0]
    s = json.loads((out / "summary.json").read_text())
    # named twice, independently: the log's number fits 64 GPUs, and dp x tp x pp = 64
    assert s["checks_failed"] == ["log_crosscheck", "parallelism"] and s["checks"][0]["status"] == "fail"
    assert "32 GPUs" in s["checks"][1]["summary"] and "= 64" in s["checks"][1]["summary"]
    assert s["log_crosscheck"]["ratio_logged_to_recomputed"] == pytest.approx(0.5, rel=0.01)
    strict = cli("report", SAMPLE_A, "--gpus", "32", "-o", tmp_path / "strict", "--strict")
    assert strict.returncode == 4 and "FAILED (log_crosscheck, parallelism)" in strict.stdout
    assert (tmp_path / "strict" / "report.md").exists()  # --strict still writes the report


def _break_step_time(tmp_path, iteration: int, value: str) -> Path:
    run = copy_sample(tmp_path / "run")
    log = run / "train.log"
    pattern = re.compile(rf"(iteration +{iteration}/ +\d+ \|.*?elapsed time per iteration \(ms\): )[0-9.]+")
    text, n = pattern.subn(lambda m: m.group(1) + value, log.read_text(), count=1)
    assert n == 1
    log.write_text(text)
    return run


@pytest.mark.parametrize("value, named", [("nan", "1 NaN"), ("inf", "1 inf"), ("-3.0", "1 non-positive"),
                                          ("9999999.0", "1 outlier")])
def test_one_bad_step_time_is_excluded_and_counted(tmp_path, clean, value, named):
    run = _break_step_time(tmp_path, 50, value)
    out = tmp_path / "out"
    r = cli("report", run, "-o", out)
    assert r.returncode == 0, r.stderr
    s = json.loads((out / "summary.json").read_text())
    step = next(c for c in s["checks"] if c["name"] == "step_times")
    assert step["status"] == "warn" and named in step["summary"] and "iteration 50" in step["summary"]
    assert named in first_lines(out)
    # one window of 38 left out: the headline stays finite and within 1% of the clean run's
    for conv in ("megatron-lm", "exact"):
        assert _tflops(s, conv) == pytest.approx(_tflops(clean, conv), rel=0.01)
    assert s["logged_tflops_per_gpu_mean"] == pytest.approx(clean["logged_tflops_per_gpu_mean"], rel=0.01)
    assert s["windows_used"] == clean["windows_used"] - 1


def test_missing_dp_ranks_are_detected_and_excluded(tmp_path, clean, sample_run):
    run = sample_run()
    src = run / "metadata.jsonl.gz"
    rows = gzip.decompress(src.read_bytes()).decode().splitlines()
    # half the DP ranks (4..7 of 8) lost their metadata files for iterations 41..80
    kept = [ln for ln in rows if not (41 <= json.loads(ln)["iteration"] <= 80 and json.loads(ln)["dp_rank"] >= 4)]
    assert len(rows) - len(kept) == 40 * 64
    src.write_bytes(gzip.compress(("\n".join(kept) + "\n").encode()))
    out = tmp_path / "out"
    r = cli("report", run, "-o", out, "--strict")
    assert r.returncode == 4, r.stderr
    head = first_lines(out)
    assert "metadata coverage" in head and "40 iterations (41..80)" in head and "50% of the 128 samples" in head
    assert "missing DP ranks" in html_head(out)
    s = json.loads((out / "summary.json").read_text())
    cov = s["metadata_coverage"]
    assert cov["iterations_short"] == 40 and cov["short_iterations_range"] == [41, 80]
    assert "metadata_coverage" in s["checks_failed"]
    # the 8 windows over 41..80 are excluded, so the headline does not move by the missing half
    assert s["windows_used"] == clean["windows_used"] - 8
    assert _tflops(s) == pytest.approx(_tflops(clean), rel=0.01)
    # the cross-check compares only complete windows: still ok
    assert s["log_crosscheck"]["status"] == "ok"


def test_estimate_mode_cross_checks_too(tmp_path):
    run = tmp_path / "run"
    run.mkdir()
    shutil.copy(SAMPLE_A / "train.log", run)
    shutil.copy(SAMPLE_A / "run.yaml", run)
    out = tmp_path / "out"
    r = cli("report", run, "-o", out, "--gpus", "32")
    assert r.returncode == 0, r.stderr
    s = json.loads((out / "summary.json").read_text())
    assert s["estimated"] is True
    cc = next(c for c in s["checks"] if c["name"] == "log_crosscheck")
    assert cc["status"] == "fail" and "against the estimate" in cc["summary"]
    assert "ESTIMATE" in first_lines(out, 14)
