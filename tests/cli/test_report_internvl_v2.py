"""`vlm-perf report` end to end on a small hand-written InternVL run with schema v2 metadata (pixels).

The run (written here, not a real job): a tiny InternVL3-shaped config (the famverify harness's
``tiny_config``: 32-px tiles, patch 4, CLS token per tile, Qwen2 LM), its preprocessor_config.json,
a Megatron-style log of 6 iterations at 500 ms on 2 GPUs, and per-microbatch metadata giving images
in pixels (``image_sizes``) with the tiles HF's processor produced (``image_tiles``).

Expected FLOPs are computed independently of the reader and of vlm-perf's media rule: tiles come from
transformers' own ``GotOcr2ImageProcessorPil`` (``processor_media``), grids are (tiles, 8, 8) by hand
(32 px / 4 px), statistics from ``BatchStats.from_batch`` and FLOPs from ``compute_flops``; the vision
tower's forward FLOPs per tile are also written out by hand.
"""

from __future__ import annotations

import json

import pytest

pytest.importorskip("transformers")

from tests.verify.families import processor_media  # noqa: E402
from tests.verify.families.internvl import tiny_config  # noqa: E402
from tests.support import run_main  # the CLI entry point in-process (same exit statuses, one-line errors)

PROCESSOR = {"size": {"height": 32, "width": 32}, "min_patches": 1, "max_patches": 6, "crop_to_patches": False}
RANK_IMAGES = {0: [(48, 80), (32, 32)], 1: [(100, 30)]}
RANK_SEQ = {0: [150], 1: [60, 40]}
ITERATIONS, STEP_MS, GPUS = 6, 500.0, 2


def _log_line(it: int) -> str:
    return (f" [2026-01-01 00:00:{it:02d}] iteration {it:8d}/{ITERATIONS:8d} | consumed samples: {2 * it:10d} | "
            f"elapsed time per iteration (ms): {STEP_MS} | learning rate: 1.000000E-05 | global batch size:     2 | "
            "lm loss: 1.000000E+00 | loss scale: 1.0 | grad norm: 1.000 | number of skipped iterations:   0 | "
            "number of nan iterations:   0 |")


@pytest.fixture(scope="module")
def internvl_run(tmp_path_factory):
    config = tiny_config()
    tiles = {r: processor_media("internvl", config, image_sizes=s, max_patches=6)["tiles"]
             for r, s in RANK_IMAGES.items()}
    run = tmp_path_factory.mktemp("internvl_run")
    (run / "model").mkdir()
    (run / "model" / "config.json").write_text(json.dumps(config.to_dict()))
    (run / "model" / "preprocessor_config.json").write_text(json.dumps(PROCESSOR))
    (run / "run.yaml").write_text(f"model: model\nnum_gpus: {GPUS}\ngpu: H100\ndtype: bf16\nlog_interval: 1\n")
    (run / "train.log").write_text("".join(_log_line(it) + "\n" for it in range(1, ITERATIONS + 1)))
    rows = [{"schema_version": 2, "iteration": it, "microbatch": 0, "dp_rank": r, "samples": 1,
             "seq_lens": RANK_SEQ[r], "image_sizes": [list(s) for s in RANK_IMAGES[r]], "image_tiles": tiles[r]}
            for it in range(1, ITERATIONS + 1) for r in RANK_IMAGES]
    (run / "metadata.jsonl").write_text("".join(json.dumps(row) + "\n" for row in rows))
    out = run / "out"
    r = run_main("report", str(run), "-o", str(out))
    assert r.returncode == 0, r.stderr
    return run, out, json.loads((out / "summary.json").read_text()), tiles, config


def test_report_exact_flops_equal_independent_arithmetic(internvl_run):
    from vlm_perf.arch import spec_from_config
    from vlm_perf.flops import compute_flops
    from vlm_perf.stats import BatchStats

    _, out, summary, tiles, config = internvl_run
    assert tiles == {0: [7, 1], 1: [4]}  # GotOcr2 tiling: 48x80 -> 2x3 + thumbnail, 32x32 -> 1, 100x30 -> 3x1 + 1
    spec = spec_from_config(config.to_dict(), name="tiny-internvl", processor={"preprocessor_config.json": PROCESSOR})
    per_iteration = sum(
        compute_flops(spec, BatchStats.from_batch(seq_lens=RANK_SEQ[r], samples=1,
                                                  image_grids=[(n, 8, 8) for n in tiles[r]], spec=spec)).total
        for r in RANK_IMAGES)
    exact = summary["conventions"]["exact"]
    assert exact["flops_total"] == pytest.approx(ITERATIONS * per_iteration, rel=1e-12)
    # every window is one 500-ms iteration on 2 GPUs; the first window (after the start) is excluded from means
    assert exact["tflops_per_gpu_mean"] == pytest.approx(per_iteration / (STEP_MS / 1e3) / GPUS / 1e12, rel=1e-9)
    assert "megatron-lm" not in summary["conventions"]  # no LM-only formula for InternVL: exact only, no crash
    assert summary["diagnostics"]["metadata"]["rows_media_in_pixels"] == ITERATIONS * len(RANK_IMAGES)
    for name in ("report.md", "report.html", "tflops.png", "mfu.png"):
        assert (out / name).stat().st_size > 0

    # the tower's forward by hand, per tile: conv 64 patches x (3*4*4 -> 32); 2 layers on 64 patches + 1 CLS
    # of q,k,v,o 32x32, scores+values 2 * 2 * 65^2 * 32, MLP 32 -> 48 -> 32
    conv = 2 * 64 * 48 * 32
    layer = 2 * 65 * 4 * 32 * 32 + 2 * 2 * 65 * 65 * 32 + 2 * 65 * 2 * 32 * 48
    stats = BatchStats.from_batch(seq_lens=[150], image_grids=[(11, 8, 8)], spec=spec)
    assert stats.vision_cls_tokens == 11
    assert compute_flops(spec, stats, mode="forward").parts["vision_tower"] == 11 * (conv + 2 * layer)


def test_report_rejects_bad_v2_metadata_with_file_line(internvl_run, tmp_path):
    import shutil

    run, _, _, _, _ = internvl_run
    broken = tmp_path / "run"
    shutil.copytree(run, broken, ignore=shutil.ignore_patterns("out"))
    lines = (broken / "metadata.jsonl").read_text().splitlines()
    lines[2] = lines[2].replace('"image_tiles": [7, 1]', '"image_tiles": [6, 1]')
    (broken / "metadata.jsonl").write_text("\n".join(lines) + "\n")
    r = run_main("report", str(broken), "-o", str(tmp_path / "o"))
    assert r.returncode != 0 and "Traceback" not in r.stderr
    assert "metadata.jsonl:3" in r.stderr and "image_tiles: differs" in r.stderr, r.stderr
