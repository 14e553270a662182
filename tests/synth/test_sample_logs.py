"""The bundled sample_logs/: present, labelled SYNTHETIC, small, and reproducible from their presets."""

from __future__ import annotations

import gzip
import json
import statistics
from pathlib import Path

import pytest
import yaml

from vlm_perf.arch import load_model
from vlm_perf.flops import compute_flops
from vlm_perf.stats import BatchStats
from vlm_perf.synth import RUN_PRESETS, SAMPLE_RUNS, generate_run

ROOT = Path(__file__).resolve().parents[2] / "sample_logs"
FILES = ("train.log", "metadata.jsonl.gz", "run.yaml", "synthetic.yaml")

pytestmark = pytest.mark.skipif(not ROOT.is_dir(), reason="sample_logs/ not present")


def test_sample_logs_present_labelled_and_small():
    total = sum(p.stat().st_size for p in ROOT.rglob("*") if p.is_file())
    assert total <= 3 * 1024 * 1024
    readme = (ROOT / "README.md").read_text()
    assert "SYNTHETIC" in readme
    for name in SAMPLE_RUNS:
        run_dir = ROOT / name
        manifest = yaml.safe_load((run_dir / "run.yaml").read_text())
        assert manifest["synthetic"] is True and manifest["generator"] == "vlm_perf.synth"
        assert manifest["seed"] == RUN_PRESETS[name].seed
        assert (run_dir / "train.log").read_text().startswith("# SYNTHETIC LOG")
        assert f"--preset {name}" in readme


def test_pr2575_sample_headline_numbers():
    """Sample (a): logged (megatron-lm) ~494 and PR #2575 with-vision ~554 TFLOP/s/GPU, recomputed."""
    run_dir = ROOT / "qwen3-vl-30b-a3b-sft"
    manifest = yaml.safe_load((run_dir / "run.yaml").read_text())
    spec = load_model(manifest["model"])
    totals: dict[int, BatchStats] = {}
    with gzip.open(run_dir / "metadata.jsonl.gz", "rt") as fh:
        for line in fh:
            row = json.loads(line)
            stats = BatchStats.from_batch(seq_lens=row["seq_lens"], image_grids=row["image_grid_thw"],
                                          samples=row["samples"], padded_tokens=row["padded_tokens"], spec=spec)
            totals[row["iteration"]] = totals[row["iteration"]] + stats if row["iteration"] in totals else stats
    run = sum(list(totals.values())[1:], next(iter(totals.values())))
    ratio = compute_flops(spec, run, "mbridge-pr2575").total / compute_flops(spec, run, "megatron-lm").total
    assert ratio == pytest.approx(554 / 494, abs=0.01)
    assert 0.17 <= run.vision_merged_tokens / run.lm_tokens <= 0.23
    expected = yaml.safe_load((run_dir / "synthetic.yaml").read_text())["expected"]
    assert expected["logged_tflops_per_gpu_median"] == pytest.approx(494, abs=5)
    assert expected["mbridge_pr2575_tflops_per_gpu_median"] == pytest.approx(554, abs=5)
    # the logged lines themselves centre on ~494
    logged = [float(line.split("throughput per GPU (TFLOP/s/GPU): ")[1].split(" ")[0])
              for line in (run_dir / "train.log").read_text().splitlines() if "throughput per GPU" in line]
    assert statistics.median(logged) == pytest.approx(494, abs=6)


@pytest.mark.slow
@pytest.mark.parametrize("name", SAMPLE_RUNS)
def test_sample_logs_regenerate_byte_identical(name, tmp_path):
    out = generate_run(RUN_PRESETS[name], tmp_path / name)
    for fname in FILES:
        assert (out / fname).read_bytes() == (ROOT / name / fname).read_bytes(), f"{name}/{fname}"
