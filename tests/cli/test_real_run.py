"""The bundled REAL run (sample_logs/qwen2-vl-tiny-real): `vlm-perf report` against torch's measured FLOPs.

The run is a real (tiny, CPU) HF Trainer run, not synthetic: scripts/make_real_run.py trained a
randomly initialised Qwen2-VL with eager attention while ``vlm_perf.capture.MetadataCallback``
recorded the metadata and torch's ``FlopCounterMode`` measured every FLOP of the same steps
(``measured_flops.json``). The measurement is independent of vlm-perf's formulas; the report's
``exact`` FLOPs (``--causal full``: eager attention computes the whole score square) must equal it
within 0.5%, per step and in total (they agree to the FLOP today; 0.5% is the issue's bound).
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
RUN = ROOT / "sample_logs" / "qwen2-vl-tiny-real"
TOLERANCE = 0.005
TOWER = ("vision.patch_embed", "vision.attn_proj", "vision.attn_core", "vision.mlp")

pytestmark = pytest.mark.skipif(not RUN.is_dir(), reason="sample_logs/qwen2-vl-tiny-real not present")


def _measured() -> dict:
    return json.loads((RUN / "measured_flops.json").read_text())


def _logged_steps() -> list[int]:
    """Steps the console log printed: tqdm's ``N/20`` drawn just before each loss dict."""
    text = (RUN / "train.log").read_text()
    return [int(m.group(1)) for m in re.finditer(r"(\d+)/\d+ \[[^\]]*\]\s*\{'loss'", text)]


def test_bundle_is_labelled_real_and_small():
    names = {p.name for p in RUN.iterdir()}
    assert {"train.log", "metadata", "measured_flops.json", "config.json", "run.yaml", "README.md"} <= names
    assert sum(p.stat().st_size for p in RUN.rglob("*") if p.is_file()) < 1024 * 1024
    manifest = yaml.safe_load((RUN / "run.yaml").read_text())
    assert manifest["synthetic"] is False and manifest["num_gpus"] == 1
    assert (RUN / "run.yaml").read_text().startswith("# REAL run")
    readme = (RUN / "README.md").read_text()
    assert "REAL" in readme and "scripts/make_real_run.py" in readme and "not synthetic" in readme
    assert _logged_steps() == list(range(1, 21))
    measured = _measured()
    assert measured["gradient_accumulation_steps"] > 1 and len(measured["per_step"]) == 20
    assert sum(s["flops"] for s in measured["per_step"]) == measured["total_flops"]


@pytest.fixture(scope="module")
def report(sample_report):
    out, summary, r = sample_report(RUN.name, "--causal", "full")  # shared with tests/cli/test_cli_first_use.py
    assert "Traceback" not in r.stderr
    return out, summary, r


def test_report_parses_every_logged_step(report):
    out, summary, _ = report
    steps = _logged_steps()
    assert summary["iterations"] == len(steps) == 20
    assert summary["logged_windows"] == 20
    assert summary["gaps"]["log_iterations_without_metadata"] == 0
    assert summary["gaps"]["metadata_iterations"] == 20
    assert summary["synthetic"] is False and summary["world_size"] == 1
    assert summary["inputs"]["causal"] == "full"
    assert summary["peak_tflops"] is None  # a CPU has no peak: MFU stays empty, and the report says so
    assert any("peak unknown" in m for m in summary["messages"])
    for name in ("report.md", "report.html"):
        assert (out / name).stat().st_size > 0


def test_report_exact_total_equals_measured(report):
    _, summary, _ = report
    measured = _measured()["total_flops"]
    exact = summary["conventions"]["exact"]["flops_total"]
    assert abs(exact / measured - 1) <= TOLERANCE, (exact, measured)
    # time-weighted rate = FLOPs / (seconds x 1 "GPU"): the same ratio
    assert summary["conventions"]["exact"]["tflops_per_gpu_mean"] > 0


def test_exact_per_step_and_per_part_equal_measured():
    from vlm_perf.pipeline import load_run

    loaded = load_run(RUN, causal="full")
    per_it = loaded.analysis.per_iteration
    exact = dict(zip(per_it["iteration"].to_list(), per_it["exact_total"].to_list()))
    measured = _measured()
    assert sorted(exact) == [s["iteration"] for s in measured["per_step"]] == list(range(1, 21))
    for step in measured["per_step"]:
        assert abs(exact[step["iteration"]] / step["flops"] - 1) <= TOLERANCE, step["iteration"]
    # by part, over the run: tower / merger / LM (forward + backward) against the counter's split
    by_part = measured["by_part"]
    parts = {p: by_part.get(f"forward.{p}", 0) + by_part.get(f"backward.{p}", 0) for p in ("tower", "merger", "lm")}
    library = {"tower": sum(per_it[f"flops.{c}"].sum() for c in TOWER),
               "merger": per_it["flops.vision.merger"].sum(),
               "lm": sum(per_it[c].sum() for c in per_it.columns if c.startswith("flops.lm."))}
    for part, value in parts.items():
        assert value > 0 and abs(library[part] / value - 1) <= TOLERANCE, (part, library[part], value)
    # the default (causal half) undercounts eager attention: the difference is exactly half the LM core
    half = load_run(RUN).analysis.per_iteration
    core = per_it["flops.lm.attn_core"].sum()
    assert half["exact_total"].sum() == pytest.approx(per_it["exact_total"].sum() - core / 2, rel=1e-12)


def test_report_rejects_a_bad_causal_rule(tmp_path):
    r = subprocess.run([sys.executable, "-m", "vlm_perf.cli", "report", str(RUN), "-o", str(tmp_path / "o"),
                        "--causal", "fulll"], capture_output=True, text=True)
    assert r.returncode == 2 and "Traceback" not in r.stderr
    assert "--causal must be half or full, got 'fulll'" in r.stderr
    assert not (tmp_path / "o").exists()


def test_causal_full_reaches_the_microbatch_vision_share():
    """--causal full changes the LM attention core, so the per-microbatch vision share moves too."""
    from vlm_perf.pipeline import load_run

    loaded = load_run(RUN, causal="full")
    full, half = loaded.context, load_run(RUN).context
    a, b = full.microbatch_vision_share, half.microbatch_vision_share
    # 4 microbatches per iteration, over the iterations of the windows the means use (the first window of the
    # run, its length assumed, is not one of them)
    used = loaded.analysis.selection.iterations()
    assert used.len() == 19 and len(a) == len(b) == 4 * used.len()
    assert all(x <= y for x, y in zip(a.to_list(), b.to_list()))  # more LM FLOPs -> smaller vision share
    assert any(x < y for x, y in zip(a.to_list(), b.to_list()))
