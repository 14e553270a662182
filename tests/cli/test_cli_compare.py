"""`vlm-perf compare` on two bundled runs: its numbers are the two reports' own numbers."""

import json
from pathlib import Path

import pytest

from tests.support import run_cli, run_main as cli  # in-process entry point; run_cli: a real subprocess

ROOT = Path(__file__).resolve().parents[2]
RUN_A = ROOT / "sample_logs" / "qwen3-30b-a3b-text"  # before: the text-only control
RUN_B = ROOT / "sample_logs" / "qwen3-vl-30b-a3b-sft"  # after: image SFT


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("compare")
    summaries = []
    for name, run in (("a", RUN_A), ("b", RUN_B)):
        r = cli("report", run, "-o", tmp / name)
        assert r.returncode == 0, r.stderr
        summaries.append(json.loads((tmp / name / "summary.json").read_text()))
    r = run_cli("compare", RUN_A, RUN_B, "--json", "-o", tmp / "cmp")
    assert r.returncode == 0, r.stderr
    return summaries, json.loads(r.stdout), tmp / "cmp"


def test_json_deltas_equal_the_reports_numbers(runs):
    (sa, sb), out, _ = runs
    assert set(out) == set(sa["conventions"]) & set(sb["conventions"])
    for conv, entry in out.items():
        a, b = sa["conventions"][conv]["tflops_per_gpu_mean"], sb["conventions"][conv]["tflops_per_gpu_mean"]
        assert entry["a"] == pytest.approx(a, rel=1e-12) and entry["b"] == pytest.approx(b, rel=1e-12)
        assert entry["delta"] == pytest.approx(b - a, rel=1e-12) and entry["ratio"] == pytest.approx(b / a, rel=1e-12)
        ma, mb = sa["conventions"][conv]["mfu_mean"], sb["conventions"][conv]["mfu_mean"]
        assert entry["mfu"]["delta"] == pytest.approx(mb - ma, rel=1e-12)


def test_page_and_decomposition(runs):
    (sa, sb), _, out = runs
    for name in ("compare.json", "compare.md", "compare.html", "compare.png"):
        assert (out / name).stat().st_size > 0
    cmp = json.loads((out / "compare.json").read_text())
    d = cmp["decomposition"]
    ta, tb = sa["step"]["seconds_per_iteration"], sb["step"]["seconds_per_iteration"]
    fa, fb = sa["step"]["exact_flops_per_iteration"], sb["step"]["exact_flops_per_iteration"]
    assert d["step_time_delta_s"] == pytest.approx(tb - ta)
    assert d["data_changed_s"] + d["system_changed_s"] == pytest.approx(tb - ta, rel=1e-9)
    # hand arithmetic: same GPU count, so data = (F_B - F_A) * t_A / F_A, system = t_B - t_A * F_B / F_A
    assert d["data_changed_s"] == pytest.approx((fb - fa) * ta / fa, rel=1e-9)
    assert d["system_changed_s"] == pytest.approx(tb - ta * fb / fa, rel=1e-9)
    # the step block reproduces the report's exact TFLOP/s/GPU: F / (t * G * 1e12)
    assert fb / (tb * 64 * 1e12) == pytest.approx(sb["conventions"]["exact"]["tflops_per_gpu_mean"], rel=1e-9)
    assert cmp["runs"]["a"]["logged"]["convention"] == "megatron-lm"
    assert cmp["step"]["visual_token_share"]["a"] == 0 and cmp["step"]["visual_token_share"]["b"] > 0.1
    assert "data changed" in (out / "compare.md").read_text()


def test_missing_run_is_one_line_error(tmp_path):
    r = cli("compare", RUN_A, tmp_path / "nope")
    assert r.returncode == 2 and r.stderr.startswith("error: ") and "Traceback" not in r.stderr
