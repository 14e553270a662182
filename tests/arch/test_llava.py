"""LLaVA family (``llava``): LLaVA-1.5-7B's parameter count by hand and against transformers' meta-device count and
the published 7.06B, image tokens by hand and against transformers' own image processors (hand cases + seeded,
bounded fuzz), exact FLOPs of one 7B image by hand, and one-line errors for what is not modelled."""

from __future__ import annotations

import copy
import json
import math
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from vlm_perf.arch import spec_from_config
from vlm_perf.arch.families import FAMILIES
from vlm_perf.arch.params import count_params
from vlm_perf.errors import ConfigError, UnsupportedModelError

RULE = FAMILIES["llava"].media
PRESETS = Path(__file__).parents[1] / "verify" / "families" / "presets"
LLAVA_15 = json.loads((PRESETS / "llava-1.5-7b-hf.json").read_text())  # the hub config.json, partial text_config
SIDECAR = json.loads((PRESETS / "presets.json").read_text())["llava-1.5-7b-hf"]
# llava-1.5-7b-hf preprocessor_config.json / processor_config.json values
LLAVA_15_PROCESSOR = {"preprocessor_config.json": {"size": {"shortest_edge": 336}, "do_center_crop": True,
                                                   "crop_size": {"height": 336, "width": 336}},
                      "processor_config.json": {"patch_size": 14, "num_additional_image_tokens": 1,
                                                "vision_feature_select_strategy": "default"}}
PIXTRAL = {"model_type": "llava", "vision_feature_layer": -1, "vision_feature_select_strategy": "full",
           "vision_config": {"model_type": "pixtral", "hidden_size": 1024, "intermediate_size": 4096,
                             "num_hidden_layers": 24, "num_attention_heads": 16, "patch_size": 16, "image_size": 1024},
           "text_config": {"model_type": "mistral", "hidden_size": 5120, "intermediate_size": 14336,
                           "num_hidden_layers": 40, "num_attention_heads": 32, "num_key_value_heads": 8,
                           "head_dim": 128, "vocab_size": 131072, "sliding_window": None}}


def _spec(config=LLAVA_15, processor=None):
    return spec_from_config(copy.deepcopy(config), name="llava-test", processor=processor or {})


def test_llava_15_parameters_by_hand():
    """CLIP ViT-L/14-336 + 2-layer MLP projector + Vicuna-7B (LlamaConfig defaults, vocab 32064)."""
    h, i = 1024, 4096
    layer = 2 * (2 * h) + 4 * (h * h + h) + (h * i + i) + (i * h + h)
    tower = 3 * 14 * 14 * h + h + (24 * 24 + 1) * h + 2 * h + 24 * layer + 2 * h  # conv, CLS, positions, pre/post LN
    projector = (h * 4096 + 4096) + (4096 * 4096 + 4096)
    lm_layer = 4 * 4096 * 4096 + 3 * 4096 * 11008 + 2 * 4096
    lm = 2 * 32064 * 4096 + 32 * lm_layer + 4096  # untied embedding + head, final norm
    c = count_params(_spec())
    assert (c.vision_tower, c.merger) == (tower, projector) == (303_507_456, 20_979_712)
    assert c.total == tower + projector + lm == 7_063_427_072


def test_llava_15_total_matches_transformers_and_published():
    c = count_params(_spec())
    assert c.total == SIDECAR["transformers_parameters"]  # transformers' meta-device count (test_presets re-derives it)
    assert abs(c.total - SIDECAR["published_total"]) <= SIDECAR["published_tolerance"]  # 7.06B


def test_llava_15_image_tokens_and_flops_by_hand():
    """One image of any size: 576 LM tokens; the tower sees 577 positions (CLS) in all 24 layers; training back-
    propagates through 23 of them (vision_feature_layer -2: the last layer's output reaches no loss)."""
    from vlm_perf.flops import compute_flops
    from vlm_perf.stats import BatchStats

    spec = _spec(processor=LLAVA_15_PROCESSOR)
    m = RULE.image(spec, 480, 640)
    assert (m.resized, m.grid, m.visual_tokens) == ((336, 336), (1, 24, 24), 576)
    stats = BatchStats.from_batch(seq_lens=[1000], image_grids=[m.grid], spec=spec)
    n, s, h = 576, 577, 1024
    conv = 2 * n * 588 * h
    layer = 2 * s * (4 * h * h + 2 * h * 4096) + 4 * h * s * s
    projector = 2 * n * (h * 4096 + 4096 * 4096)
    fw = compute_flops(spec, stats, mode="forward", causal="full")
    assert fw.parts["vision_tower"] == conv + 24 * layer
    assert fw.parts["projector"] == projector
    tr = compute_flops(spec, stats, mode="training", causal="full")
    assert tr.parts["vision_tower"] == 2 * conv + 23 * 3 * layer + layer  # pixels need no gradient
    assert tr.parts["projector"] == 3 * projector
    frozen = compute_flops(spec, stats, mode="training", causal="full", frozen=("vision_tower",))
    assert frozen.parts["vision_tower"] == conv + 24 * layer
    assert frozen.parts["projector"] == projector + 2 * n * h * 4096 + 2 * (2 * n * 4096 * 4096)  # fc1: weight grad


@pytest.mark.parametrize("size", [(480, 640), (336, 336), (1000, 20), (7, 7)])
def test_clip_rule_against_transformers_processor(size):
    from transformers.models.clip.image_processing_pil_clip import CLIPImageProcessorPil

    pre = LLAVA_15_PROCESSOR["preprocessor_config.json"]
    proc = CLIPImageProcessorPil(size=pre["size"], crop_size=pre["crop_size"], do_center_crop=True)
    image = np.zeros((*size, 3), np.uint8)
    pixels = proc([image], return_tensors="np", input_data_format="channels_last")["pixel_values"]
    m = RULE.image(_spec(processor=LLAVA_15_PROCESSOR), *size)
    assert tuple(pixels.shape[-2:]) == m.resized
    assert m.visual_tokens == (pixels.shape[-2] // 14) * (pixels.shape[-1] // 14)


def test_clip_rule_tokens_agree_with_llava_processor_formula():
    """LlavaProcessor: (H // patch) * (W // patch) + num_additional_image_tokens, minus 1 under "default"."""
    assert (336 // 14) * (336 // 14) + 1 - 1 == RULE.image(_spec(processor=LLAVA_15_PROCESSOR), 10, 10).visual_tokens


def _hf_pixtral(h: int, w: int, longest: int, step: int) -> tuple[int, int]:
    from transformers.models.pixtral.image_processing_pil_pixtral import get_resize_output_image_size

    image = np.broadcast_to(np.zeros(1, np.uint8), (h, w, 3))
    return tuple(int(x) for x in get_resize_output_image_size(image, (longest, longest), (step, step),
                                                              input_data_format="channels_last"))


@pytest.mark.parametrize("size,resized", [((1080, 1920), (576, 1024)), ((100, 100), (112, 112)), ((3000, 500), (1024, 176))])
def test_pixtral_resize_by_hand(size, resized):
    # 1080x1920: ratio 1920/1024 = 1.875; floor(1080/1.875) = 576 (36 x 16); 3000x500: floor(500/2.9296875) = 170 -> 176
    spec = _spec(PIXTRAL)
    m = RULE.image(spec, *size)
    assert m.resized == resized == _hf_pixtral(*size, 1024, 16)
    rows, cols = resized[0] // 16, resized[1] // 16
    assert m.grid == (1, rows, cols) and m.visual_tokens == rows * cols and m.detail["break_tokens"] == rows


@settings(derandomize=True, deadline=None, max_examples=120)
@given(h=st.integers(1, 5000), w=st.integers(1, 5000), longest=st.sampled_from([64, 1024]))
def test_pixtral_resize_fuzz_against_transformers(h, w, longest):
    spec = _spec(PIXTRAL, {"preprocessor_config.json": {"size": {"longest_edge": longest}}})
    try:
        m = RULE.image(spec, h, w)
    except UnsupportedModelError:
        assert math.floor(min(h, w) / max(h / longest, w / longest)) == 0
        return
    assert m.resized == _hf_pixtral(h, w, longest, 16)


@settings(derandomize=True, deadline=None, max_examples=25)
@given(h=st.integers(1, 400), w=st.integers(1, 400))
def test_clip_rule_fuzz_against_transformers(h, w):
    from transformers.models.clip.image_processing_pil_clip import CLIPImageProcessorPil

    proc = CLIPImageProcessorPil(size={"shortest_edge": 336}, crop_size={"height": 336, "width": 336})
    pixels = proc([np.zeros((h, w, 3), np.uint8)], return_tensors="np", input_data_format="channels_last")["pixel_values"]
    assert tuple(pixels.shape[-2:]) == RULE.image(_spec(processor=LLAVA_15_PROCESSOR), h, w).resized


def test_pixtral_12b_shape_parameters_by_hand():
    c = count_params(_spec(PIXTRAL))
    h, i = 1024, 4096
    tower = 3 * 16 * 16 * h + h + 24 * (2 * h + 4 * h * h + 3 * h * i)  # conv, ln_pre, layers (no biases)
    assert c.vision_tower == tower
    assert c.merger == (h * 5120 + 5120) + (5120 * 5120 + 5120)


def _with(config, path, value):
    cfg = copy.deepcopy(config)
    node = cfg
    for key in path[:-1]:
        node = node[key]
    if value is None:
        node.pop(path[-1])
    else:
        node[path[-1]] = value
    return cfg


@pytest.mark.parametrize("config,error,match", [
    (_with(LLAVA_15, ("vision_config", "model_type"), "siglip_vision_model"), UnsupportedModelError,
     "vision_config.model_type 'siglip_vision_model'"),
    (_with(PIXTRAL, ("vision_feature_select_strategy",), "default"), UnsupportedModelError, "'default' with a Pixtral"),
    (_with(LLAVA_15, ("vision_feature_select_strategy",), "cls"), ConfigError, "vision_feature_select_strategy"),
    (_with(LLAVA_15, ("vision_feature_layer",), 25), ConfigError, "vision_feature_layer 25"),
    (_with(LLAVA_15, ("vision_feature_layer",), []), ConfigError, "empty list"),
    (_with(LLAVA_15, ("vision_config", "hidden_size"), "big"), ConfigError, "vision_config.hidden_size"),
    (_with(LLAVA_15, ("vision_config", "num_attention_heads"), 7), ConfigError, "not divisible"),
    (_with(LLAVA_15, ("vision_config", "image_size"), 10), ConfigError, "smaller than patch_size"),
    (_with(LLAVA_15, ("text_config",), None), ConfigError, "text_config"),
    (_with(LLAVA_15, ("text_config", "model_type"), "gemma"), UnsupportedModelError, "text_config.model_type 'gemma'"),
    (_with(PIXTRAL, ("text_config", "hidden_size"), "big"), ConfigError, "text_config.hidden_size"),
])
def test_config_errors_are_one_line(config, error, match):
    with pytest.raises(error, match=match) as exc:
        spec_from_config(config, name="bad")
    assert "\n" not in str(exc.value)


@pytest.mark.parametrize("processor,match", [
    ({"preprocessor_config.json": {"crop_size": {"height": 224, "width": 224}}}, "differs from vision_config.image_size"),
    ({"processor_config.json": {"patch_size": 14, "num_additional_image_tokens": 0}}, "575 image tokens"),
    ({"processor_config.json": {"vision_feature_select_strategy": "full", "num_additional_image_tokens": 1}},
     "disagrees with the model config"),
    ({"preprocessor_config.json": {"do_center_crop": False, "size": {"shortest_edge": 336}}}, "without center crop"),
])
def test_processor_mismatch_is_refused(processor, match):
    with pytest.raises(UnsupportedModelError, match=match):
        RULE.image(_spec(processor=processor), 100, 100)


def test_full_strategy_on_clip_feeds_the_cls_row_to_the_projector_and_the_lm():
    """LLaVA-1.5-7B with "full": 577 projector rows and 577 LM image tokens per image (LlavaProcessor: 24^2 + 1,
    no - 1), the tower unchanged; the projector's FLOPs grow by exactly one row: 2 x (1024 x 4096 + 4096 x 4096)."""
    from vlm_perf.flops import compute_flops
    from vlm_perf.stats import BatchStats

    full = _spec(_with(LLAVA_15, ("vision_feature_select_strategy",), "full"),
                 processor={**LLAVA_15_PROCESSOR, "processor_config.json": {
                     **LLAVA_15_PROCESSOR["processor_config.json"], "vision_feature_select_strategy": "full"}})
    default = _spec(processor=LLAVA_15_PROCESSOR)
    assert RULE.image(full, 500, 300).visual_tokens == 577 and RULE.image(default, 500, 300).visual_tokens == 576
    assert count_params(full).total == count_params(default).total
    grids = [RULE.image(full, 500, 300).grid] * 2
    a = compute_flops(full, BatchStats.from_batch(seq_lens=[2000], image_grids=grids, spec=full), mode="forward").components
    b = compute_flops(default, BatchStats.from_batch(seq_lens=[2000], image_grids=grids, spec=default),
                      mode="forward").components
    assert a["vision.merger"] - b["vision.merger"] == 2 * 2 * (1024 * 4096 + 4096 * 4096)  # one row per image
    assert {k: v for k, v in a.items() if k != "vision.merger"} == {k: v for k, v in b.items() if k != "vision.merger"}
    with pytest.raises(UnsupportedModelError, match="disagrees with the model config"):
        RULE.image(_spec(_with(LLAVA_15, ("vision_feature_select_strategy",), "full"), processor=LLAVA_15_PROCESSOR),
                   100, 100)


def test_no_video_and_bad_sizes():
    with pytest.raises(UnsupportedModelError, match="no video"):
        RULE.video(_spec(), 4, 100, 100)
    with pytest.raises(Exception, match="image size"):
        RULE.image(_spec(), 0, 100)
