"""LLaVA-OneVision family: config reading, anyres media rule vs transformers' own code, CLI, hand arithmetic.

The media reference is transformers itself: ``image_size_to_num_patches`` (modeling: how many tiles the model
takes from pixel_values) and ``LlavaOnevisionProcessor._get_number_of_features`` (the placeholder count the
processor writes, which the model's ``get_placeholder_mask`` validates), called with the released
checkpoint's settings (so400m 384 px, patch 14, the 36 default pinpoints, ``anyres_max_9``).
"""

from __future__ import annotations

import functools
import json

import pytest
from hypothesis import given, settings, strategies as st

from tests.support import run_main as run_cli  # in-process entry point (flops keeps subprocess tests in tests/cli)
from vlm_perf.arch import load_model, preset_config, spec_from_config
from vlm_perf.arch.families import FAMILIES
from vlm_perf.errors import ConfigError, UnsupportedModelError
from vlm_perf.flops import compute_flops
from vlm_perf.stats import BatchStats

RULE = FAMILIES["llava_onevision"].media


def raw(name="llava-onevision-qwen2-7b"):
    return {k: v for k, v in preset_config(name).items() if not k.startswith("_")}


@functools.lru_cache(maxsize=None)
def _hf():
    """(config, image processor) as the released -hf checkpoint ships them."""
    transformers = pytest.importorskip("transformers")
    from transformers.models.llava_onevision.image_processing_pil_llava_onevision import \
        LlavaOnevisionImageProcessorPil

    cfg = transformers.LlavaOnevisionConfig(**{k: v for k, v in raw().items() if k != "model_type"})
    return cfg, LlavaOnevisionImageProcessorPil()


def hf_tiles_and_tokens(h: int, w: int) -> tuple[int, int]:
    from transformers.models.llava_onevision.modeling_llava_onevision import image_size_to_num_patches

    from tests.verify.families.llava_onevision import lm_tokens_one_image

    cfg, proc = _hf()
    return (image_size_to_num_patches((h, w), cfg.image_grid_pinpoints, cfg.vision_config.image_size),
            lm_tokens_one_image(cfg, proc, h, w))


@pytest.mark.parametrize("hw", [(480, 640), (1080, 1920), (384, 3000), (384, 384), (4000, 300), (10, 10),
                                (2304, 2304), (1000, 1001)])
def test_anyres_tiles_and_tokens_match_transformers(hw):
    media = RULE.image(load_model("llava-onevision-qwen2-7b"), *hw)
    assert (media.tiles, media.visual_tokens) == hf_tiles_and_tokens(*hw)
    assert media.grid == (media.tiles, 27, 27)


@settings(derandomize=True, deadline=None, max_examples=200)
@given(h=st.integers(1, 6000), w=st.integers(1, 6000))
def test_anyres_fuzzed_against_transformers(h, w):
    media = RULE.image(load_model("llava-onevision-qwen2-7b"), h, w)
    assert (media.tiles, media.visual_tokens) == hf_tiles_and_tokens(h, w)


def test_multi_image_and_video_tokens_by_hand():
    spec = load_model("llava-onevision-qwen2-7b")
    one = RULE.image(spec, 480, 640, multi_image=True)
    assert (one.tiles, one.grid, one.visual_tokens) == (1, (1, 27, 27), 729 + 1)
    video = RULE.video(spec, 16, 720, 1280)
    assert video.grid == (16, 27, 27) and video.visual_tokens == 16 * 14 * 14 + 1


def test_projector_runs_on_every_tile_before_unpadding():
    """384x3000 -> pinpoint 384x2304 (1 x 6 tiles + base = 7 tiles): the projector processes 7 x 729 rows,
    the LM sees 729 + 21 unpadded rows x 162 + 21 newlines = 4152 tokens."""
    spec = load_model("llava-onevision-qwen2-7b")
    media = RULE.image(spec, 384, 3000)
    assert media.tiles == 7 and media.visual_tokens == 729 + 21 * 162 + 21
    stats = BatchStats.from_batch(seq_len=5000, image_grids=[media.grid], spec=spec)
    parts = compute_flops(spec, stats, mode="forward").parts
    rows, hv, ht = 7 * 729, 1152, 3584
    assert parts["projector"] == 2 * rows * (hv * ht + ht * ht)


@pytest.mark.parametrize("change,error,needle", [
    (lambda c: c.update(vision_feature_select_strategy="default"), UnsupportedModelError, "full"),
    (lambda c: c.update(vision_aspect_ratio="anyres"), UnsupportedModelError, "anyres_max_N"),
    (lambda c: c.update(image_grid_pinpoints=[[384]]), ConfigError, "image_grid_pinpoints"),
    (lambda c: c["text_config"].update(model_type="gemma3_text"), UnsupportedModelError, "text_config.model_type"),
    (lambda c: c["text_config"].pop("hidden_size"), ConfigError, "text_config.hidden_size"),
    (lambda c: c["vision_config"].update(model_type="clip_vision_model"), UnsupportedModelError, "SigLIP"),
    (lambda c: c.update(vision_feature_layer=[]), ConfigError, "vision_feature_layer"),
])
def test_bad_configs_are_refused_with_the_field_named(change, error, needle):
    cfg = json.loads(json.dumps(raw()))
    change(cfg)
    with pytest.raises(error, match=needle):
        spec_from_config(cfg)


def test_tie_flag_from_text_config_and_vision_defaults():
    """LlavaOnevisionConfig: a false top-level tie flag takes text_config's true one; an omitted
    vision_config is so400m-384 with 26 layers and no head (the class's sub-config defaults)."""
    cfg = raw()
    cfg["text_config"] = {**cfg["text_config"], "tie_word_embeddings": True}
    cfg["tie_word_embeddings"] = False
    assert spec_from_config(cfg).lm.tie_word_embeddings
    no_vision = {k: v for k, v in raw().items() if k != "vision_config"}
    assert spec_from_config(no_vision).blocks == load_model("llava-onevision-qwen2-7b").blocks


def test_processor_files_must_agree_with_the_model_config():
    bad = spec_from_config(raw(), processor={"processor_config.json": {"num_image_tokens": 576}})
    with pytest.raises(UnsupportedModelError, match="num_image_tokens"):
        RULE.image(bad, 480, 640)
    ok = spec_from_config(raw(), processor={"processor_config.json": {"num_image_tokens": 729,
                                                                      "vision_aspect_ratio": "anyres_max_9"},
                                            "preprocessor_config.json": {"size": {"height": 384, "width": 384}}})
    assert RULE.image(ok, 480, 640) == RULE.image(load_model("llava-onevision-qwen2-7b"), 480, 640)
    assert RULE.settings(ok)["source"] == "processor files"


def test_cli_seq_len_counts_lm_placeholders_not_projector_rows():
    """7 x 729 = 5103 projector rows but 4152 LM tokens: --seq-len 4500 is valid, 4000 is not."""
    r = run_cli("flops", "--model", "llava-onevision-qwen2-7b", "--seq-len", "4500", "--image-size", "384,3000",
                "--json", timeout=120)
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)
    assert out["media"][0]["visual_tokens"] == 4152 and out["media"][0]["tiles"] == 7
    assert set(out["parts"]) == {"vision_tower", "projector", "language_model"}
    assert out["stats"]["vision_merged_tokens"] == 7 * 729
    r = run_cli("flops", "--model", "llava-onevision-qwen2-7b", "--seq-len", "4000", "--image-size", "384,3000",
                timeout=120)
    assert r.returncode != 0 and "4152 visual tokens" in r.stderr and "Traceback" not in r.stderr
