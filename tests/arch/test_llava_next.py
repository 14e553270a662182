"""LLaVA-NeXT family (``llava_next``): llava-v1.6-mistral-7b's parameter count by hand and against transformers'
meta-device count and the published 7.57B; tiles and image tokens at the released settings against transformers'
own ``LlavaNextProcessor`` and by hand; one-line errors for what is not modelled."""

from __future__ import annotations

import copy
import json
from pathlib import Path

import numpy as np
import pytest

from vlm_perf.arch import load_model, spec_from_config
from vlm_perf.arch.families import FAMILIES
from vlm_perf.arch.params import count_params
from vlm_perf.errors import ConfigError, UnsupportedModelError

RULE = FAMILIES["llava_next"].media
PRESETS = Path(__file__).parents[1] / "verify" / "families" / "presets"
V16 = json.loads((PRESETS / "llava-v1.6-mistral-7b-hf.json").read_text())
SIDECAR = json.loads((PRESETS / "presets.json").read_text())["llava-v1.6-mistral-7b-hf"]
PINPOINTS = [[336, 672], [672, 336], [672, 672], [1008, 336], [336, 1008]]
V16_PROCESSOR = {"preprocessor_config.json": {"size": {"shortest_edge": 336}, "crop_size": {"height": 336, "width": 336},
                                              "image_grid_pinpoints": PINPOINTS},
                 "processor_config.json": {"patch_size": 14, "num_additional_image_tokens": 1,
                                           "vision_feature_select_strategy": "default"}}


def _spec(config=V16, processor=None):
    return spec_from_config(copy.deepcopy(config), name="llava-next-test", processor=processor or {})


def test_v16_mistral_parameters_by_hand():
    """CLIP ViT-L/14-336 + 2-layer MLP projector + image_newline + Mistral-7B (MistralConfig defaults: hidden 4096,
    32 layers, 32 q / 8 kv heads; vocab 32064, untied)."""
    h, i = 1024, 4096
    clip_layer = 2 * (2 * h) + 4 * (h * h + h) + (h * i + i) + (i * h + h)
    tower = 3 * 14 * 14 * h + h + 577 * h + 2 * h + 24 * clip_layer + 2 * h  # conv, CLS, positions, pre/post LN
    projector = (h * 4096 + 4096) + (4096 * 4096 + 4096) + 4096  # + image_newline
    lm_layer = 2 * 4096 * 4096 + 2 * 4096 * 1024 + 3 * 4096 * 14336 + 2 * 4096
    lm = 2 * 32064 * 4096 + 32 * lm_layer + 4096
    c = count_params(_spec())
    assert (c.vision_tower, c.merger, c.lm) == (tower, projector, lm)
    assert c.total == 7_566_747_648
    assert c.total == SIDECAR["transformers_parameters"]  # transformers' meta-device count (test_presets re-derives it)
    assert abs(c.total - SIDECAR["published_total"]) <= SIDECAR["published_tolerance"]  # 7.57B
    assert count_params(load_model("llava-v1.6-mistral-7b")).total == c.total


@pytest.mark.parametrize("hw,tiles,tokens", [
    ((672, 672), 5, 576 + 48 * 48 + 48),  # 2 x 2 grid, nothing to unpad
    ((336, 336), 3, 576 + 24 * 24 + 24),  # best 336 x 672 (first among equals): 24 x 48 unpadded to 24 x 24
    ((500, 1000), 3, 576 + 24 * 48 + 24),  # 336 x 672 exactly fits the 1:2 aspect
])
def test_tiles_and_tokens_by_hand(hw, tiles, tokens):
    m = RULE.image(_spec(processor=V16_PROCESSOR), *hw)
    assert (m.tiles, m.visual_tokens, m.grid) == (tiles, tokens, (tiles, 24, 24))


def _hf_processor():
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import LlavaNextProcessor, PreTrainedTokenizerFast
    from transformers.models.llava_next.image_processing_pil_llava_next import LlavaNextImageProcessorPil

    words = Tokenizer(models.WordLevel({"<unk>": 0, "<image>": 1}, unk_token="<unk>"))
    words.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    tok = PreTrainedTokenizerFast(tokenizer_object=words, unk_token="<unk>",
                                  extra_special_tokens={"image_token": "<image>"})
    ip = LlavaNextImageProcessorPil(size={"shortest_edge": 336}, crop_size={"height": 336, "width": 336},
                                    image_grid_pinpoints=PINPOINTS)
    return LlavaNextProcessor(image_processor=ip, tokenizer=tok, patch_size=14,
                              vision_feature_select_strategy="default", num_additional_image_tokens=1)


@pytest.mark.parametrize("hw", [(480, 640), (1080, 1920), (50, 3000), (672, 672), (3000, 200), (17, 18)])
def test_tokens_match_transformers_processor(hw):
    pytest.importorskip("transformers")
    proc = _hf_processor()
    image = np.zeros((*hw, 3), dtype=np.uint8)
    out = proc(images=[image], text=["<image>"], return_tensors="np", input_data_format="channels_last")
    m = RULE.image(_spec(processor=V16_PROCESSOR), *hw)
    assert m.visual_tokens == int((out["input_ids"] == 1).sum())
    assert m.tiles == out["pixel_values"].shape[1]


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
    (_with(V16, ("vision_config", "model_type"), "pixtral"), UnsupportedModelError, "clip_vision_model only"),
    (_with(V16, ("vision_feature_select_strategy",), "full"), UnsupportedModelError, "'full' with a CLIP tower is not modelled for llava_next"),
    (_with(V16, ("image_grid_pinpoints",), [[336, 500]]), UnsupportedModelError, "not multiples"),
    (_with(V16, ("image_grid_pinpoints",), "anyres"), ConfigError, "image_grid_pinpoints"),
    (_with(V16, ("text_config", "model_type"), "gemma"), UnsupportedModelError, "text_config.model_type 'gemma'"),
    (_with(V16, ("vision_config",), None), ConfigError, "vision_config"),
])
def test_config_errors_are_one_line(config, error, match):
    with pytest.raises(error, match=match) as exc:
        spec_from_config(config, name="bad")
    assert "\n" not in str(exc.value)


@pytest.mark.parametrize("processor,match", [
    ({"preprocessor_config.json": {"crop_size": {"height": 224, "width": 224}}}, "crop_size"),
    ({"preprocessor_config.json": {"image_grid_pinpoints": [[336, 672]]}}, "image_grid_pinpoints"),
    ({"processor_config.json": {"patch_size": 14, "num_additional_image_tokens": 0}}, "num_additional_image_tokens"),
])
def test_processor_mismatch_is_refused(processor, match):
    with pytest.raises(UnsupportedModelError, match=match):
        RULE.image(_spec(processor=processor), 100, 100)


def test_tie_follows_the_top_level_flag_only():
    """LlavaNextConfig has no LlavaConfig tie rule: text_config's tie_word_embeddings does not tie the head."""
    assert _spec(_with(V16, ("text_config", "tie_word_embeddings"), True)).lm.tie_word_embeddings is False
    assert _spec(_with(V16, ("tie_word_embeddings",), True)).lm.tie_word_embeddings is True


def test_no_video():
    with pytest.raises(UnsupportedModelError, match="no video"):
        RULE.video(_spec(), 4, 100, 100)
