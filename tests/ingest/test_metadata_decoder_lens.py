"""The decoder statistics of an encoder-decoder LM (Florence-2) read from metadata (``decoder_lens``), vectorised,
against hand arithmetic and against ``BatchStats.from_batch`` on the same batch; the stand-in without them; refusals."""

from __future__ import annotations

import json

import pytest

from vlm_perf.arch import load_model
from vlm_perf.errors import SchemaError
from vlm_perf.ingest.metadata import iteration_stats
from vlm_perf.ingest.metadata_source import MetadataSource
from vlm_perf.stats import BatchStats

GRID = [1, 24, 24]  # Florence-2's 768 x 768 square: a 24 x 24 last stage, 577 LM tokens per image


def _write(path, rows):
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


@pytest.fixture(scope="module")
def spec():
    return load_model("florence-2-base")


def test_decoder_lens_by_hand_and_as_from_batch(tmp_path, spec):
    # samples of 600 and 590 encoder tokens with 20 and 7 label tokens
    row = {"iteration": 1, "seq_lens": [600, 590], "decoder_lens": [20, 7], "image_grid_thw": [GRID, GRID]}
    s = iteration_stats(_write(tmp_path / "m.jsonl", [row]), spec).stats_for(1)
    assert (s.lm_decoder_tokens, s.lm_decoder_tokens_sq, s.lm_decoder_x_encoder) == (27, 400 + 49, 20 * 600 + 7 * 590)
    ref = BatchStats.from_batch(seq_lens=[600, 590], image_grids=[GRID, GRID], spec=spec, decoder_lens=[20, 7])
    assert ref.as_dict() == {k: v for k, v in s.as_dict().items()}


def test_padded_rows_pair_with_the_uniform_length(tmp_path, spec):
    row = {"iteration": 1, "padded_tokens": 1200, "samples": 2, "decoder_lens": [30, 30], "image_grid_thw": [GRID, GRID]}
    s = iteration_stats(_write(tmp_path / "m.jsonl", [row]), spec).stats_for(1)
    assert (s.lm_decoder_tokens, s.lm_decoder_x_encoder) == (60, 60 * 600)


def test_without_decoder_lens_the_encoder_length_stands_in(tmp_path, spec):
    row = {"iteration": 1, "seq_lens": [600, 590], "image_grid_thw": [GRID, GRID]}
    s = iteration_stats(_write(tmp_path / "m.jsonl", [row]), spec).stats_for(1)
    assert (s.lm_decoder_tokens, s.lm_decoder_tokens_sq, s.lm_decoder_x_encoder) == (1190, 600 ** 2 + 590 ** 2,
                                                                                     600 ** 2 + 590 ** 2)
    ref = BatchStats.from_batch(seq_lens=[600, 590], image_grids=[GRID, GRID], spec=spec)
    assert ref.lm_decoder_x_encoder == s.lm_decoder_x_encoder


@pytest.mark.parametrize("lens", [[20], [20, 0], [20, 7, 3], [-1, 2]])
def test_bad_decoder_lens_are_refused_naming_the_line(tmp_path, spec, lens):
    good = {"iteration": 1, "seq_lens": [600, 590], "decoder_lens": [20, 7], "image_grid_thw": [GRID, GRID]}
    path = _write(tmp_path / "m.jsonl", [good, {**good, "decoder_lens": lens}])
    with pytest.raises(SchemaError) as info:
        MetadataSource(path, spec).read()
    text = str(info.value)
    assert f"{path}:2" in text and "decoder_lens: must hold one positive integer" in text, text


def test_pre_aggregated_lm_rows_cannot_pair_decoder_lens(tmp_path, spec):
    row = {"iteration": 1, "lm_tokens": 1190, "lm_tokens_sq": 708100, "decoder_lens": [20, 7]}
    path = _write(tmp_path / "m.jsonl", [row])
    with pytest.raises(SchemaError, match="decoder_lens: must hold one positive integer"):
        MetadataSource(path, spec).read()


def test_decoder_lens_on_a_decoder_only_model_is_refused(tmp_path):
    row = {"iteration": 1, "seq_lens": [600], "decoder_lens": [20]}
    path = _write(tmp_path / "m.jsonl", [row])
    with pytest.raises(SchemaError, match="decoder_lens: the model has no encoder-decoder language model"):
        MetadataSource(path, load_model("qwen2.5-vl-3b")).read()


def test_pixels_rows_go_through_the_family_rule(tmp_path, spec):
    """Schema v2: images in pixels become Florence-2's fixed (1, 24, 24) grids (any size: the processor resizes to the
    768 square), and the row's decoder statistics come with them."""
    row = {"schema_version": 2, "iteration": 1, "seq_lens": [590, 600], "decoder_lens": [12, 40],
           "image_sizes": [[480, 640], [1000, 200]]}
    s = iteration_stats(_write(tmp_path / "m.jsonl", [row]), spec).stats_for(1)
    assert (s.vision_frames, s.vision_patches, s.vision_merged_tokens) == (2, 2 * 576, 2 * 576)
    assert (s.lm_decoder_tokens, s.lm_decoder_x_encoder) == (52, 12 * 590 + 40 * 600)


def test_the_stand_in_is_counted_and_named(tmp_path, spec):
    rows = [{"iteration": 1, "seq_lens": [600], "image_grid_thw": [GRID]},
            {"iteration": 1, "seq_lens": [600], "decoder_lens": [9], "image_grid_thw": [GRID]},
            {"iteration": 2, "seq_lens": [590], "image_grid_thw": [GRID]}]
    d = iteration_stats(_write(tmp_path / "m.jsonl", rows), spec).diagnostics
    assert d.rows_decoder_assumed == 2
    assert any(n.startswith("assumed: 2 row(s) of an encoder-decoder model give no decoder_lens") for n in d.notes)
    exact = iteration_stats(_write(tmp_path / "e.jsonl", rows[1:2]), spec).diagnostics
    assert exact.rows_decoder_assumed == 0 and not any(n.startswith("assumed:") for n in exact.notes)
