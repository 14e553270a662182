"""Mistral 3 family: Pixtral media rule against transformers' own resize function (hand cases + seeded bounded
fuzz), the real processor at Mistral-Small-3.1 sizes, the preset against its published total and transformers'
meta-device count, and clear errors for what is not modelled."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from vlm_perf.arch import load_model, preset_config, spec_from_config
from vlm_perf.arch.families import FAMILIES
from vlm_perf.arch.params import count_params
from vlm_perf.errors import ConfigError, UnsupportedModelError

RULE = FAMILIES["mistral3"].media


def _spec(longest_edge: int | None = None):
    processor = {"preprocessor_config.json": {"size": {"longest_edge": longest_edge}}} if longest_edge else {}
    return spec_from_config(preset_config("mistral-small-3.1-24b"), processor=processor)


def _hf_resize(h: int, w: int, longest: int, step: int) -> tuple[int, int]:
    from transformers.models.pixtral.image_processing_pil_pixtral import get_resize_output_image_size

    image = np.broadcast_to(np.zeros(1, np.uint8), (h, w, 3))  # shape only: no memory for big sizes
    return tuple(int(x) for x in get_resize_output_image_size(image, (longest, longest), (step, step),
                                                              input_data_format="channels_last"))


@pytest.mark.parametrize("size,resized", [((1080, 1920), (868, 1540)), ((100, 100), (112, 112)),
                                          ((1540, 1540), (1540, 1540)), ((3000, 500), (1540, 280))])
def test_resize_by_hand(size, resized):
    # 1080x1920: ratio 1920/1540; floor(1080/ratio) = 866 -> 868 (31 x 28); 1540 = 55 x 28
    # 3000x500: ratio 3000/1540; floor(500/ratio) = 256 -> 280 (10 x 28)
    spec = _spec()
    m = RULE.image(spec, *size)
    assert m.resized == resized
    assert m.resized == _hf_resize(*size, 1540, 28)
    rows, cols = resized[0] // 28, resized[1] // 28
    assert m.grid == (1, resized[0] // 14, resized[1] // 14)
    assert m.visual_tokens == rows * cols and m.detail["break_tokens"] == rows


def test_hand_case_arithmetic():
    ratio = 3000 / 1540
    assert math.floor(500 / ratio) == 256 and math.ceil(256 / 28) * 28 == 280


@settings(derandomize=True, deadline=None, max_examples=150)
@given(h=st.integers(1, 5000), w=st.integers(1, 5000), longest=st.sampled_from([64, 1024, 1540]))
def test_resize_fuzz_against_transformers(h, w, longest):
    spec = _spec(longest)
    try:
        m = RULE.image(spec, h, w)
    except UnsupportedModelError:
        assert math.floor(min(h, w) / max(h / longest, w / longest)) == 0
        return
    assert m.resized == _hf_resize(h, w, longest, 28)


@pytest.mark.parametrize("size", [(1080, 1920), (333, 4000)])
def test_real_processor_at_checkpoint_sizes(size):
    """The harness's HF processor (PixtralImageProcessorPil, processor's patch override) on the preset."""
    pytest.importorskip("torch")
    from tests.verify.families import load_preset, processor_media

    hf = processor_media("mistral3", load_preset("Mistral-Small-3.1-24B-Instruct-2503"), image_sizes=[size],
                         longest_edge=1540)
    m = RULE.image(_spec(), *size)
    assert hf["resized"] == [m.resized]
    assert hf["visual_tokens"] == m.visual_tokens


def test_preset_matches_published_total_and_transformers():
    torch = pytest.importorskip("torch")
    import transformers

    spec = load_model("mistral-small-3.1-24b")
    c = count_params(spec)
    assert c.total == 24_011_361_280  # reference analytic total (untied head); published "24B"
    assert abs(c.total - 24e9) < 0.5e9
    cfg = {k: v for k, v in preset_config("mistral-small-3.1-24b").items() if not k.startswith("_vlm_perf")}
    with torch.device("meta"):
        model = transformers.Mistral3ForConditionalGeneration(transformers.AutoConfig.for_model(**cfg))
    numel = lambda mod: sum(p.numel() for p in mod.parameters())
    assert c.total == numel(model)
    assert c.vision_tower == numel(model.model.vision_tower)
    assert c.merger == numel(model.model.multi_modal_projector)


def test_errors_are_one_line():
    cfg = preset_config("mistral-small-3.1-24b")
    with pytest.raises(UnsupportedModelError, match="vision_feature_layer"):
        spec_from_config(dict(cfg, vision_feature_layer=[-1, -2]))
    with pytest.raises(ConfigError, match="text_config"):
        spec_from_config({k: v for k, v in cfg.items() if k != "text_config"})
    with pytest.raises(UnsupportedModelError, match="video"):
        RULE.video(_spec(), 4, 100, 100)
    with pytest.raises(ConfigError, match="image size"):
        RULE.image(_spec(), 0, 100)
