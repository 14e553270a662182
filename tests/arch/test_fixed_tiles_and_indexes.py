"""Every tower that runs a fixed tile refuses other grids with the reason, and configs whose values contradict each
other are said (issue 34, impossible cross-config values).

Specification:
* a tower whose position embeddings have one entry per patch of a tile and that never interpolates them runs fixed
  tiles: PaliGemma, Gemma 3 and Aya Vision (SigLIP), LLaVA / LLaVA-NeXT with CLIP, LLaVA-OneVision (SigLIP), Llama 4,
  Mllama (its 4 tiles stacked: grid 1 x (4·side) x side), GOT-OCR2 / DeepSeek-VL / Janus (earlier). Each states
  ``spec.extra["fixed_grid_side"]``; ``BatchStats.from_batch`` (``flops --grid``) and the metadata reader refuse
  any other grid in one line naming the family, the tile and the position embeddings; the tile the family's own
  media rule derives from an image size is accepted (near miss). Pixtral (LLaVA with a Pixtral tower) and the
  Qwen towers take any grid (near miss);
* PaliGemma's ``num_image_tokens`` (text_config / vision_config) must equal the tower's (image_size/patch)^2
  patches (``0`` refused, naming the field); ``projection_dim`` != the LM width is refused (earlier, tested in
  test_paligemma.py);
* index lists (``global_attn_indexes``, ``fullatt_block_indexes``, ``deepstack_visual_indexes``,
  ``mlp_only_layers``, ``moe_layers``, ``cross_attention_layers``) with entries outside the layer count their
  section states are said in one note naming the field, the entries and the count (transformers ignores them and
  so does the count, verified in tests/verify/test_measured_deepstack_fullatt_indexes.py); the released presets
  and the family samples have none (near miss). Mllama refuses such ``cross_attention_layers`` (its layers are
  built from them).
Seeded fuzz: any grid for any fixed-tile preset is counted iff it is the tile, else one line.
"""

from __future__ import annotations

import pytest
from hypothesis import given, settings, strategies as st

from tests.arch.config_samples import preset_config, sample
from tests.support import run_main
from vlm_perf.arch import load_model
from vlm_perf.arch.fields import layer_index_note
from vlm_perf.arch.hf_config import spec_from_config
from vlm_perf.errors import ConfigError, InputError
from vlm_perf.stats import BatchStats

#: preset -> (tile side in patches, grid height of one image: Mllama stacks its tiles)
FIXED = {"gemma3-4b": (64, 64), "llama4-scout-17b-16e": (24, 24), "llava-onevision-qwen2-7b": (27, 27),
         "llava-v1.6-mistral-7b": (24, 24), "llama3.2-11b-vision": (40, 160), "paligemma-3b-224": (16, 16)}
FREE = ["qwen2.5-vl-7b", "mistral-small-3.1-24b", "internvl3-8b", "smolvlm2-500m"]
FUZZ = settings(derandomize=True, deadline=None, database=None, max_examples=80)


@pytest.mark.parametrize("preset", sorted(FIXED))
def test_a_fixed_tile_tower_states_its_tile_and_refuses_another_grid(preset):
    spec = load_model(preset)
    side, height = FIXED[preset]
    assert spec.extra["fixed_grid_side"] == side
    assert spec.extra.get("fixed_grid_height", side) == height
    BatchStats.from_batch(seq_lens=[8192], image_grids=[(1, height, side)], spec=spec)
    for grid in [(1, 20, 20), (1, 2 * height, side), (1, height, 2 * side), (1, 1 << 20, 1 << 20)]:
        with pytest.raises(InputError) as info:
            BatchStats.from_batch(seq_lens=[8192], image_grids=[grid], spec=spec)
        text = str(info.value)
        assert f"{spec.family} runs fixed {side}x{side}-patch tiles (its position embeddings have one entry per " \
               "patch of a tile)" in text and "\n" not in text, text


@pytest.mark.parametrize("preset", sorted(FIXED))
def test_the_cli_refuses_another_grid_in_one_line_and_counts_a_derived_image(preset):
    done = run_main("flops", "--model", preset, "--seq-len", "8192", "--grid", "1,20,20")
    err = done.stderr.strip()
    assert done.returncode == 2 and err.startswith("error: image grid #1: ") and len(err.splitlines()) == 1, err
    near = run_main("flops", "--model", preset, "--seq-len", "16384", "--image-size", "800,600")
    assert near.returncode == 0, near.stderr  # the family's own media rule gives its tile


@pytest.mark.parametrize("preset", FREE)
def test_towers_that_take_any_size_keep_taking_it(preset):
    spec = load_model(preset)
    assert "fixed_grid_side" not in spec.extra
    merge = spec.vision.spatial_merge_size
    BatchStats.from_batch(seq_lens=[8192], image_grids=[(1, 4 * merge, 6 * merge)], spec=spec)


def test_metadata_rows_with_another_grid_are_refused_for_a_fixed_tile_tower(tmp_path):
    import json

    (tmp_path / "config.json").write_text(json.dumps(preset_config("gemma3-4b")))
    rows = [{"iteration": 1, "microbatch": 0, "dp_rank": 0, "seq_lens": [4096], "image_grid_thw": [[1, 64, 64]]},
            {"iteration": 2, "microbatch": 0, "dp_rank": 0, "seq_lens": [4096], "image_grid_thw": [[1, 20, 20]]}]
    (tmp_path / "m.jsonl").write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    done = run_main("metadata", tmp_path / "m.jsonl", "--model", tmp_path / "config.json")
    assert done.returncode == 2 and "m.jsonl:2" in done.stderr and "fixed-size tiles" in done.stderr, done.stderr


@FUZZ
@given(preset=st.sampled_from(sorted(FIXED)), t=st.integers(1, 4), h=st.integers(1, 200), w=st.integers(1, 200))
def test_fuzz_any_grid_is_the_tile_or_one_line(preset, t, h, w):
    spec = load_model(preset)
    side, height = FIXED[preset]
    try:
        stats = BatchStats.from_batch(seq_lens=[1 << 20], image_grids=[(t, h, w)], spec=spec)
    except InputError as exc:
        assert "\n" not in str(exc) and (h, w) != (height, side) or "multiple" in str(exc) or "merge" in str(exc)
        return
    assert (h, w) == (height, side) and stats.vision_patches == t * h * w


# ---- PaliGemma's stated token count ------------------------------------------------------------------
@pytest.mark.parametrize("section", ["text_config", "vision_config"])
@pytest.mark.parametrize("value", [0, 255, 1024, -1, True, "256"])
def test_paligemma_num_image_tokens_must_be_the_towers_patches(section, value):
    config = preset_config("paligemma-3b-224")
    config[section]["num_image_tokens"] = value
    with pytest.raises(ConfigError, match=rf"{section}\.num_image_tokens .* differs from the 256 patches"):
        spec_from_config(config, name="p")


def test_paligemma_with_the_stated_count_or_none_is_read():
    config = preset_config("paligemma-3b-224")
    assert spec_from_config(config, name="p").extra["image_seq_length"] == 256
    for section in ("text_config", "vision_config"):
        config[section].pop("num_image_tokens")
    assert spec_from_config(config, name="p").extra["image_seq_length"] == 256


# ---- index lists against layer counts ----------------------------------------------------------------
def test_layer_index_note_by_hand():
    assert layer_index_note("x", (0, 1, 2), 3) is None
    note = layer_index_note("vision_config.global_attn_indexes", (2, 5, 8, 11), 6)
    assert note.startswith("vision_config.global_attn_indexes names layers 8, 11 but there are 6 layers (0..5)")
    assert "-1" in layer_index_note("k", (-1, 0), 4)


@pytest.mark.parametrize("build,field", [
    (lambda: _edit(sample("got_ocr2"), ("vision_config", "global_attn_indexes"), [1, 7, 40]),
     "vision_config.global_attn_indexes names layers 7, 40 but there are 3 layers"),
    (lambda: _edit(sample("deepseek_vl_hybrid"), ("high_res_vision_config", "global_attn_indexes"), [1, 9]),
     "high_res_vision_config.global_attn_indexes names layers 9 but there are 3 layers"),
    (lambda: _edit(preset_config("qwen2.5-vl-7b"), ("vision_config", "fullatt_block_indexes"), [7, 15, 23, 31, 99]),
     "vision_config.fullatt_block_indexes names layers 99 but there are 32 layers"),
    (lambda: _edit(preset_config("qwen3-vl-8b"), ("vision_config", "deepstack_visual_indexes"), [8, 16, 240]),
     "vision_config.deepstack_visual_indexes names layers 240 but there are 27 layers"),
])
def test_an_index_beyond_the_layers_is_a_note_naming_field_entries_and_count(build, field):
    spec = spec_from_config(build(), name="t")
    notes = [n for n in spec.extra.get("notes", []) if "select no layer" in n]
    assert len(notes) == 1 and field in notes[0], spec.extra.get("notes")
    done_notes = spec.extra["notes"]
    assert all("\n" not in n for n in done_notes)


def test_the_flops_command_shows_the_note(tmp_path):
    import json

    config = _edit(preset_config("qwen2.5-vl-7b"), ("vision_config", "fullatt_block_indexes"), [7, 15, 23, 31, 40])
    (tmp_path / "config.json").write_text(json.dumps(config))
    done = run_main("flops", "--model", tmp_path / "config.json", "--seq-len", "512", "--grid", "1,16,16")
    assert done.returncode == 0, done.stderr
    said = " ".join((done.stdout + done.stderr).split())  # the terminal may wrap the note at any width
    assert "fullatt_block_indexes names layers 40 but there are 32 layers" in said


def test_mllama_cross_attention_layers_beyond_the_layers_are_refused():
    config = _edit(preset_config("llama3.2-11b-vision"), ("text_config", "cross_attention_layers"), [3, 99])
    with pytest.raises(ConfigError, match="cross_attention_layers .* must index the 40 layers"):
        spec_from_config(config, name="m")


def test_released_presets_and_samples_have_no_index_note():
    import os
    from pathlib import Path

    from tests.arch.config_samples import SAMPLES

    presets = Path(__file__).resolve().parents[2] / "vlm_perf" / "arch" / "presets"
    for name in sorted(os.listdir(presets)):
        assert not [n for n in load_model(name[:-5]).extra.get("notes", []) if "select no layer" in n], name
    for key in SAMPLES:
        try:
            spec = spec_from_config(sample(key), name=key)
        except (ConfigError, InputError):  # samples that need processor files etc.: not this test's subject
            continue
        assert not [n for n in spec.extra.get("notes", []) if "select no layer" in n], key


def _edit(config: dict, path: tuple, value) -> dict:
    node = config
    for key in path[:-1]:
        node = node[key]
    node[path[-1]] = value
    return config
