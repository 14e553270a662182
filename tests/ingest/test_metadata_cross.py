"""The per-sample text x vision statistics (``lm_x_vision_patches`` / ``lm_x_vision_frames``) read from metadata,
vectorised, against hand arithmetic and against ``BatchStats.from_batch`` on the same batch."""

from __future__ import annotations

import json

import pytest

from vlm_perf.arch import load_model
from vlm_perf.errors import SchemaError
from vlm_perf.ingest.metadata import iteration_stats
from vlm_perf.ingest.metadata_source import MetadataSource
from vlm_perf.stats import BatchStats


def _write(path, rows):
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def test_images_per_sample_gives_the_exact_sum_by_hand(tmp_path):
    # samples of 10, 20, 30 tokens own 1, 0, 2 images: [1,2,2] (4 patches, 1 frame), [1,4,4] (16, 1), [2,1,1] (2, 2)
    row = {"iteration": 1, "seq_lens": [10, 20, 30], "images_per_sample": [1, 0, 2],
           "image_grid_thw": [[1, 2, 2], [1, 4, 4], [2, 2, 2]]}
    s = iteration_stats(_write(tmp_path / "m.jsonl", [row])).stats_for(1)
    assert s.lm_x_vision_patches == 10 * 4 + 30 * (16 + 8)
    assert s.lm_x_vision_frames == 10 * 1 + 30 * (1 + 2)
    ref = BatchStats.from_batch(seq_lens=[10, 20, 30], image_grids=[(1, 2, 2), (1, 4, 4), (2, 2, 2)],
                                images_per_sample=[1, 0, 2])
    assert (ref.lm_x_vision_patches, ref.lm_x_vision_frames) == (s.lm_x_vision_patches, s.lm_x_vision_frames)


def test_without_it_the_longest_sample_bounds_the_sum(tmp_path):
    rows = [{"iteration": 1, "seq_lens": [10, 30], "image_grid_thw": [[1, 2, 2], [1, 4, 4]]},
            {"iteration": 1, "padded_tokens": 40, "samples": 2, "image_grid_thw": [[1, 2, 2]]}]
    s = iteration_stats(_write(tmp_path / "m.jsonl", rows)).stats_for(1)
    # row 1: longest 30 x 20 patches, 30 x 2 frames; row 2: two unpacked samples of 20 tokens: 20 x 4, 20 x 1
    assert (s.lm_x_vision_patches, s.lm_x_vision_frames) == (30 * 20 + 20 * 4, 30 * 2 + 20 * 1)


@pytest.mark.parametrize("counts", [[1], [1, 1, 1], [2, 1], [-1, 2]])
def test_inconsistent_counts_are_refused_naming_the_line(tmp_path, counts):
    good = {"iteration": 1, "seq_lens": [10, 30], "image_grid_thw": [[1, 2, 2]], "images_per_sample": [0, 1]}
    path = _write(tmp_path / "m.jsonl", [good, {**good, "images_per_sample": counts}])
    with pytest.raises(SchemaError) as info:
        MetadataSource(path, None).read()
    text = str(info.value)
    assert f"{path}:2" in text and "images_per_sample: must hold one non-negative integer" in text, text


def test_mllama_pixels_per_sample_end_to_end(tmp_path):
    """Llama-3.2-11B-Vision rows in pixels: every image is 4 tiles of 40x40 patches + 4 CLS for the cross-attention
    (V = 4 x 1601 = 6404 tokens), whatever its size; the core is 4·H·d·Σ S·V per cross-attention layer."""
    spec = load_model("llama3.2-11b-vision")
    row = {"schema_version": 2, "iteration": 1, "seq_lens": [100, 50], "images_per_sample": [2, 1],
           "image_sizes": [[560, 560], [300, 1200], [1000, 200]]}
    s = iteration_stats(_write(tmp_path / "m.jsonl", [row]), spec).stats_for(1)
    assert s.vision_patches == 3 * 4 * 1600
    assert s.lm_x_vision_patches + 4 * s.lm_x_vision_frames == 100 * 2 * 6404 + 50 * 6404


def test_inconsistent_counts_are_refused_with_one_polars_thread(tmp_path):
    """The same refusal when polars runs on one thread (a 1-core machine, POLARS_MAX_THREADS=1): it evaluates both
    branches of a when/then on every row, and the exact per-sample product of a row whose counts do not match
    seq_lens raised polars' ShapeError (an internal error) before the row's own check could name it."""
    import subprocess
    import sys

    good = {"iteration": 1, "seq_lens": [10, 30], "image_grid_thw": [[1, 2, 2]], "images_per_sample": [0, 1]}
    path = _write(tmp_path / "m.jsonl", [good, {**good, "images_per_sample": [1, 1, 1]}])
    code = ("import sys; from vlm_perf.ingest.metadata_source import MetadataSource; from vlm_perf.errors import "
            "SchemaError\ntry:\n    MetadataSource(sys.argv[1], None).read()\nexcept SchemaError as exc:\n"
            "    print(exc)")
    done = subprocess.run([sys.executable, "-c", code, str(path)], capture_output=True, text=True, timeout=300,
                          env={**__import__("os").environ, "POLARS_MAX_THREADS": "1"})
    assert done.returncode == 0, done.stderr
    assert f"{path}:2" in done.stdout and "images_per_sample: must hold one non-negative integer" in done.stdout
