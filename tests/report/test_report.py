"""The report writes its four outputs with the summary.json contract."""

import json

import numpy as np
import polars as pl

from vlm_perf.analysis import analyze_run
from vlm_perf.arch import load_model
from vlm_perf.report import ReportContext, write_report


def _run():
    rng = np.random.default_rng(1)
    its = np.arange(1, 201)
    patches = rng.integers(0, 40, its.size) * 1024  # 0..39 frames of 32x32 patches per iteration
    stats = pl.DataFrame({
        "iteration": its, "lm_tokens": np.full(its.size, 64 * 4096), "lm_tokens_sq": np.full(its.size, 64 * 4096**2),
        "lm_sequences": 64, "lm_samples": 64, "lm_padded_tokens": 64 * 4096,
        "vision_patches": patches, "vision_patches_sq_frame": patches * 1024, "vision_merged_tokens": patches // 4,
        "vision_window_sq": patches * 1024})
    log = pl.DataFrame({"segment": 0, "iteration": np.arange(10, 201, 10), "elapsed_s": rng.uniform(9, 11, 20),
                        "tflops_per_gpu_logged": 400.0})
    return analyze_run(log, load_model("qwen3-vl-30b-a3b"), stats, world_size=64, peak_tflops=989.0,
                       log_interval=10)


def test_report_files_and_contract(tmp_path):
    run = _run()
    paths = write_report(run, tmp_path, ReportContext(run="synthetic-test", gpu="H100", synthetic=True))
    for name in ("summary.json", "report.md", "report.html", "tflops.png", "mfu.png", "components.png",
                 "vision_share.png", "step_time.png"):
        assert (tmp_path / name).stat().st_size > 0, name
    summary = json.loads((tmp_path / "summary.json").read_text())
    for key in ("iterations", "world_size", "gpu", "peak_tflops", "vision_share_mean", "conventions",
                "log_crosscheck", "diagnostics"):
        assert key in summary
    assert summary["iterations"] == 200 and summary["world_size"] == 64 and summary["peak_tflops"] == 989.0
    for conv in ("megatron-lm", "exact", "megatron-bridge", "mbridge-pr2575"):
        entry = summary["conventions"][conv]
        assert entry["tflops_per_gpu_mean"] > 0 and 0 < entry["mfu_mean"] < 1
    assert summary["conventions"]["exact"]["tflops_per_gpu_mean"] > summary["conventions"]["megatron-lm"][
        "tflops_per_gpu_mean"]
    page = (tmp_path / "report.html").read_text()
    assert page.count("data:image/png;base64,") == 5 and 'src="http' not in page
    assert "SYNTHETIC" in (tmp_path / "report.md").read_text()
    assert paths["report.html"].exists()
