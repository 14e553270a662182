"""Estimate mode (no metadata) set up from flags or run.yaml; image sizes become grids as HF's processor makes them."""

import json
from pathlib import Path

import numpy as np
import pytest

from tests.support import run_cli, run_main as cli  # in-process entry point; run_cli: a real subprocess
from vlm_perf.arch import load_model
from vlm_perf.flops import compute_flops
from vlm_perf.ingest.runconfig import image_grid_from_size
from vlm_perf.stats import BatchStats

ROOT = Path(__file__).resolve().parents[2]
SAMPLE_A = ROOT / "sample_logs" / "qwen3-vl-30b-a3b-sft"


@pytest.mark.parametrize("size", [(500, 700), (224, 224), (333, 901), (28, 1000), (640, 480)])
def test_image_grid_from_size_matches_the_hf_processor(size):
    pil = pytest.importorskip("PIL.Image")
    proc_mod = pytest.importorskip("transformers.models.qwen2_vl.image_processing_pil_qwen2_vl")
    processor = proc_mod.Qwen2VLImageProcessorPil()
    image = pil.fromarray(np.zeros((*size, 3), dtype=np.uint8))
    grid = tuple(int(x) for x in processor(images=[image], return_tensors="np")["image_grid_thw"][0])
    spec = load_model("qwen2.5-vl-7b").vision
    assert image_grid_from_size(*size, spec.patch_size, spec.spatial_merge_size) == grid


def _log_only_run(tmp_path, drop=("global_batch_size", "seq_length")):
    run = tmp_path / "run"
    run.mkdir()
    lines = [ln for ln in (SAMPLE_A / "train.log").read_text().splitlines() if not any(d in ln for d in drop)]
    (run / "train.log").write_text("\n".join(lines) + "\n")
    (run / "run.yaml").write_text("model: qwen3-vl-30b-a3b\nnum_gpus: 64\ngpu: GB200\n")
    return run


def test_missing_value_error_names_keys_and_flags(tmp_path):
    run = _log_only_run(tmp_path)
    r = run_cli("report", run, "-o", tmp_path / "out")
    assert r.returncode == 2 and "Traceback" not in r.stderr and len(r.stderr.strip().splitlines()) == 1
    for needle in (str(run), "seq_length", "--seq-length", "global_batch_size", "--global-batch-size", "--grid",
                   "--image-size", "image_grid", "image_size"):
        assert needle in r.stderr, needle


def test_flags_and_the_logged_batch_size_feed_the_estimate(tmp_path):
    run = _log_only_run(tmp_path)  # the arguments block no longer states the batch size; iteration lines do
    out = tmp_path / "out"
    r = cli("report", run, "-o", out, "--seq-length", "4096", "--grid", "1,32,32")
    assert r.returncode == 0, r.stderr
    s = json.loads((out / "summary.json").read_text())
    assert s["estimated"] and s["run_config"]["global_batch_size"] == 128
    assert s["run_config"]["sources"]["global_batch_size"] == "log:iteration lines"
    spec = load_model("qwen3-vl-30b-a3b")
    per_iteration = compute_flops(spec, BatchStats.from_batch(seq_len=4096, samples=128,
                                                              image_grids=[(1, 32, 32)] * 128, spec=spec))
    assert s["conventions"]["exact"]["flops_total"] == pytest.approx(per_iteration.total * s["iterations"], rel=1e-9)
    # the image size giving the same grid gives the same numbers (512 px = 32 patches of 16 px, merge 2)
    r2 = cli("report", run, "-o", tmp_path / "out2", "--seq-length", "4096", "--image-size", "512,512")
    assert r2.returncode == 0, r2.stderr
    s2 = json.loads((tmp_path / "out2" / "summary.json").read_text())
    assert s2["conventions"]["exact"]["flops_total"] == s["conventions"]["exact"]["flops_total"]


def test_grid_and_size_together_is_an_error(tmp_path):
    run = _log_only_run(tmp_path)
    r = cli("report", run, "-o", tmp_path / "out", "--seq-length", "4096", "--grid", "1,32,32",
            "--image-size", "512,512")
    assert r.returncode == 2 and "keep one" in r.stderr


def test_estimate_image_size_uses_the_family_rule():
    """run.yaml image_size goes through the family's processor rule: for a Qwen-VL model, HF's own
    resize (pixel bounds included: a 4000x4000 image is shrunk to max_pixels, which plain rounding
    would not do); for InternVL its tiling, with one CLS token per tile."""
    from vlm_perf.arch import load_model
    from vlm_perf.pipeline import estimate_from_config

    class Config:
        seq_length, global_batch_size, image_grid, images_per_sample = 8192, 2, None, 1
        image_size = (4000, 4000)

    qwen = estimate_from_config(Config, load_model("qwen2.5-vl-7b"))
    # the reference checkpoints' max_pixels (12,845,056; families/media.py) bounds the grid, plain rounding does not
    assert qwen.vision_patches <= 2 * 12845056 // (14 * 14)
    assert qwen.vision_patches < 2 * image_grid_from_size(4000, 4000, 14, 2)[1] * image_grid_from_size(4000, 4000, 14, 2)[2]
    Config.image_size = (448, 448)
    internvl = estimate_from_config(Config, load_model("internvl3-8b"))
    assert (internvl.vision_patches, internvl.vision_cls_tokens) == (2 * 32 * 32, 2)  # one 448 px tile each


def test_estimate_refuses_media_whose_projector_rows_are_not_the_grid_fold(tmp_path):
    """Phi-4-multimodal's projector rows (separators, un-padded crops) are not the grid's m x m fold: a 90x130
    image is a (36, 32, 32) crop grid, whose fold is 36 x 16 x 16 = 9216 rows, while its rule writes
    2 (global) + 16 x 16 + 16 + u_h (u_w + 1) rows, fewer. A stated image_grid cannot carry those rows: like the
    metadata path (code 36) the estimate refuses it with one typed line. A stated image_size goes through the
    family's rule, so the estimate and the explore helper bill the rule's rows (2 samples x 1 image), not the fold."""
    from tests.arch.config_samples import sample

    from vlm_perf.analysis.explore.sample import sample_stats
    from vlm_perf.arch import spec_from_config
    from vlm_perf.arch.families import FAMILIES
    from vlm_perf.errors import UnsupportedModelError
    from vlm_perf.pipeline import estimate_from_config

    spec = spec_from_config(sample("phi4_multimodal"), name="t", processor={
        "preprocessor_config.json": {"size": {"height": 64, "width": 64}, "patch_size": 2}})
    item = FAMILIES["phi4_multimodal"].media.image(spec, 90, 130)
    assert item.merged_tokens is not None and item.merged_tokens < item.grid[0] * 16 * 16

    class Config:
        seq_length, global_batch_size, image_grid, images_per_sample = 8192, 2, None, 1
        image_size = (90, 130)

    stats = estimate_from_config(Config, spec)
    assert stats.vision_merged_tokens == 2 * item.merged_tokens != 2 * item.grid[0] * 16 * 16
    assert stats.vision_patches == 2 * item.grid[0] * item.grid[1] * item.grid[2]
    Config.image_size, Config.image_grid = None, (36, 32, 32)
    with pytest.raises(UnsupportedModelError, match="per-image grids"):
        estimate_from_config(Config, spec)
    assert sample_stats(spec, (90, 130), 1, 100)[0].vision_merged_tokens == item.merged_tokens
    # the metadata path keeps its own reason for the same image in pixels (code 36, not "no pixel rule")
    from vlm_perf.errors import SchemaError
    from vlm_perf.ingest.metadata_source import MetadataSource

    path = tmp_path / "m.jsonl"
    path.write_text(json.dumps({"schema_version": 2, "iteration": 0, "seq_lens": [4000], "image_sizes": [[90, 130]]}))
    with pytest.raises(SchemaError, match="m.jsonl:1: image_grid_thw: the model's image tokens"):
        MetadataSource([path], spec).read()


def test_estimate_from_an_image_size_keeps_every_grid_of_a_sliced_image():
    """MiniCPM-V 4.6 splits a 1344 x 1344 image into an overview plus slices of another shape; the run estimate
    (run.yaml image_size) holds every grid of each image, as `flops --image-size` does (commands.flops.derive_media),
    so both give the same tower statistics for 3 samples x 2 images."""
    from vlm_perf.arch import load_model
    from vlm_perf.commands.flops import derive_media
    from vlm_perf.pipeline import estimate_from_config
    from vlm_perf.stats import BatchStats

    spec = load_model("minicpm-v-4.6")
    (item,) = derive_media(spec, [(1344, 1344)], [])
    assert len(item.grids) > 1

    class Config:
        seq_length, global_batch_size, image_grid, images_per_sample = 4096, 3, None, 2
        image_size = (1344, 1344)

    stats = estimate_from_config(Config, spec)
    want = BatchStats.from_batch(seq_len=4096, samples=3, image_grids=list(item.grids) * 6, spec=spec)
    assert (stats.vision_patches, stats.vision_merged_tokens, stats.vision_frames) == \
        (want.vision_patches, want.vision_merged_tokens, want.vision_frames)
    assert stats.vision_patches == 6 * sum(t * h * w for t, h, w in item.grids)
