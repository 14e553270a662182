"""Metadata against the model's config, by defect class: a row with more visual tokens than LM tokens (images,
videos, pre-aggregated vision; seq_lens, lm_tokens or padded_tokens as the LM side; several merge sizes), and
media for a text-only model, are refused naming file:line; skip-bad counts and skips them. Expected token counts
are hand arithmetic here (merged tokens = t * (h / m) * (w / m))."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from vlm_perf.arch import load_model
from vlm_perf.errors import SchemaError
from vlm_perf.ingest.metadata_source import MetadataSource

VLMS = {"qwen2.5-vl-7b": 2, "internvl3-8b": 2, "smolvlm2-500m": 4, "gemma3-4b": 4}  # preset -> merge size (hand)
#: merged tokens a side of the grids below: Gemma 3's tower runs one fixed 64x64-patch tile (16 merged a side)
MERGED_SIDE = {"gemma3-4b": 16}
TEXT_ONLY = ["llama3-8b", "qwen3-30b-a3b", "deepseek-v3"]
OK_ROW = {"iteration": 1, "seq_lens": [4096]}


def _write(tmp_path: Path, rows: list[dict]) -> Path:
    path = tmp_path / "meta.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def _lm_side(kind: str, tokens: int) -> dict:
    return {"seq_lens": {"seq_lens": [tokens]}, "lm_tokens": {"lm_tokens": tokens, "lm_tokens_sq": tokens * tokens},
            "padded": {"padded_tokens": tokens}}[kind]


def _media(kind: str, m: int, merged_side: int) -> tuple[dict, int]:
    """A row's media with ``merged_side`` x ``merged_side`` merged tokens per frame, and the merged total."""
    side = merged_side * m
    if kind == "image":
        return {"image_grid_thw": [[1, side, side]]}, merged_side ** 2
    if kind == "video":
        return {"video_grid_thw": [[3, side, side]]}, 3 * merged_side ** 2
    patches = merged_side ** 2 * m * m
    return {"vision_patches": patches, "vision_patches_sq": patches ** 2, "vision_merged_tokens": merged_side ** 2}, \
        merged_side ** 2


@pytest.mark.parametrize("preset", VLMS)
@pytest.mark.parametrize("media", ["image", "video", "pre-aggregated"])
@pytest.mark.parametrize("lm", ["seq_lens", "lm_tokens", "padded"])
def test_more_visual_tokens_than_lm_tokens_is_refused_at_its_line(tmp_path, preset, media, lm):
    spec = load_model(preset)
    m = VLMS[preset]
    assert spec.vision.spatial_merge_size == m
    fields, visual = _media(media, m, MERGED_SIDE.get(preset, 8))
    row = {"iteration": 1, **fields, **_lm_side(lm, visual - 1)}
    path = _write(tmp_path, [OK_ROW, row])
    with pytest.raises(SchemaError, match=r"meta.jsonl:2: image_grid_thw: the row's media give more visual tokens"):
        MetadataSource(path, spec).read()
    # skip-bad: counted and skipped, the good row kept
    src = MetadataSource(path, spec, skip_bad=True).read()
    assert src.diagnostics.rows_skipped_total == 1 and src.per_iteration["lm_tokens"].to_list() == [4096]


@pytest.mark.parametrize("preset", VLMS)
@pytest.mark.parametrize("media", ["image", "video", "pre-aggregated"])
def test_exactly_as_many_visual_tokens_as_lm_tokens_is_accepted(tmp_path, preset, media):
    fields, visual = _media(media, VLMS[preset], MERGED_SIDE.get(preset, 8))
    src = MetadataSource(_write(tmp_path, [{"iteration": 1, **fields, "seq_lens": [visual]}]), load_model(preset))
    assert src.per_iteration["vision_merged_tokens"].to_list() == [visual]


def test_the_reported_case_five_thousand_times_the_flops(tmp_path):
    """One 100-token row with a 1x36x52 grid (468 merged tokens at merge 2): refused, as `flops` refuses it."""
    path = _write(tmp_path, [{"iteration": 1, "seq_lens": [100], "image_grid_thw": [[1, 36, 52]]}])
    with pytest.raises(SchemaError, match="meta.jsonl:1"):
        MetadataSource(path, load_model("qwen2.5-vl-7b")).read()


@pytest.mark.parametrize("preset", TEXT_ONLY)
@pytest.mark.parametrize("media", ["image", "video", "pre-aggregated"])
def test_media_for_a_text_only_model_is_refused_at_its_line(tmp_path, preset, media):
    fields, _ = _media(media, 2, 2)
    path = _write(tmp_path, [OK_ROW, OK_ROW, {"iteration": 2, "seq_lens": [4096], **fields}])
    with pytest.raises(SchemaError, match="meta.jsonl:3: media: the row has images or videos but the model has no "
                                          "vision tower"):
        MetadataSource(path, load_model(preset)).read()
    src = MetadataSource(path, load_model(preset), skip_bad=True).read()
    assert src.diagnostics.rows_skipped_total == 1 and src.per_iteration["iteration"].to_list() == [1]


@pytest.mark.parametrize("preset", TEXT_ONLY)
def test_text_rows_for_a_text_only_model_are_read(tmp_path, preset):
    rows = [OK_ROW, {"iteration": 1, "seq_lens": [10, 20], "image_grid_thw": []}]
    src = MetadataSource(_write(tmp_path, rows), load_model(preset)).read()
    assert src.per_iteration["lm_tokens"].to_list() == [4126]


def test_pixel_rows_are_exempt_from_the_token_rule(tmp_path):
    """Schema v2 rows (media in pixels): the processor's placeholder count may be below the merged grid tokens
    (LLaVA-OneVision unpadding), so the grid rule does not apply to them."""
    spec = load_model("qwen2.5-vl-7b")
    row = {"iteration": 1, "schema_version": 2, "seq_lens": [100], "image_sizes": [[448, 448]]}
    src = MetadataSource(_write(tmp_path, [row]), spec).read()
    assert src.per_iteration["vision_merged_tokens"].to_list() == [256]  # 448/14/2 = 16 -> 16 x 16


def test_parquet_rows_name_the_row(tmp_path):
    import pyarrow as pa
    import pyarrow.parquet as pq

    path = tmp_path / "meta.parquet"
    pq.write_table(pa.table({"iteration": [1, 1], "seq_lens": [[4096], [10]],
                             "image_grid_thw": [[[1, 4, 4]], [[1, 40, 40]]]}), path)
    with pytest.raises(SchemaError, match="meta.parquet:2"):
        MetadataSource(path, load_model("qwen2.5-vl-7b")).read()


@pytest.mark.parametrize("family", ["got_ocr2", "janus", "deepseek_vl", "deepseek_vl_hybrid"])
def test_fixed_tile_towers_refuse_other_grids_as_from_batch_does(tmp_path, family):
    """A fixed-tile tower (SAM patch embed, a SigLIP position table without interpolation: spec.extra
    fixed_grid_side) runs only side x side tiles; ``BatchStats.from_batch`` refuses another grid, and so must a
    metadata row: GOT-OCR2 counts its tiles as vision_patches // (side x side), so a [1, side/2, side/2] grid was
    billed 0 tower FLOPs (a silent under-count). A [tiles, side, side] row is read: tiles x side x side patches."""
    from tests.arch.config_samples import sample

    from vlm_perf.arch import spec_from_config
    from vlm_perf.errors import InputError
    from vlm_perf.stats import BatchStats

    spec = spec_from_config(sample(family), name="t")
    side = spec.extra["fixed_grid_side"]
    for key in ("image_grid_thw", "video_grid_thw"):
        for grid in ([1, side // 2, side // 2], [1, 2 * side, 2 * side], [2, side, 2 * side]):
            with pytest.raises(InputError, match="fixed"):  # the in-memory path's refusal
                BatchStats.from_batch(seq_lens=[4000], spec=spec, **{key.split("_")[0] + "_grids": [grid]})
            with pytest.raises(SchemaError, match=f"meta.jsonl:1: {key}: .*fixed"):
                MetadataSource(_write(tmp_path, [{"iteration": 1, "seq_lens": [4000], key: [grid]}]), spec).read()
    src = MetadataSource(_write(tmp_path, [{"iteration": 1, "seq_lens": [4000], "image_grid_thw": [[3, side, side]]}]),
                         spec)
    assert src.per_iteration["vision_patches"].to_list() == [3 * side * side]


def test_audio_rows_of_an_unmodelled_encoder_name_that_reason(tmp_path):
    """Phi-4-multimodal with time_reduction 4 has an audio encoder whose geometry is not modelled (spec.audio None):
    `vlm-perf flops` refuses its clips with that reason; a metadata row with audio_frames is refused naming it too,
    not with 'the model has no audio encoder' (code 35, for models without one)."""
    from tests.arch.config_samples import sample

    from vlm_perf.arch import spec_from_config

    config = sample("phi4_multimodal")
    config["audio_config"]["time_reduction"] = 4
    spec = spec_from_config(config, name="t")
    assert spec.audio is None
    path = _write(tmp_path, [{"schema_version": 2, "iteration": 1, "seq_lens": [400], "audio_frames": [98]}])
    with pytest.raises(SchemaError, match="meta.jsonl:1: audio_frames: .*geometry is not modelled"):
        MetadataSource(path, spec).read()
    with pytest.raises(SchemaError, match="meta.jsonl:1: audio_frames: the row has audio clips but the model has no"):
        MetadataSource(path, load_model("qwen2.5-vl-7b")).read()


def test_audio_rows_of_a_model_without_an_encoder_keep_code_35(tmp_path):
    """Nemotron omni without audio_config has no audio encoder: its audio rows say so (code 35), not 'geometry'."""
    from tests.arch.config_samples import sample

    from vlm_perf.arch import spec_from_config

    config = {k: v for k, v in sample("nemotron_h_omni").items() if k != "audio_config"}
    spec = spec_from_config(config, name="t")
    assert spec.audio is None
    path = _write(tmp_path, [{"schema_version": 2, "iteration": 1, "seq_lens": [400], "audio_frames": [98]}])
    with pytest.raises(SchemaError, match="meta.jsonl:1: audio_frames: the row has audio clips but the model has no"):
        MetadataSource(path, spec).read()
