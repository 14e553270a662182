"""Gemma 3 family: config reading, media rule vs transformers' own image processor, hand-arithmetic FLOPs.

The media checks run ``Gemma3ImageProcessorPil`` (transformers) with ``Gemma3Processor.images_kwargs`` as
``ProcessorMixin`` passes them, and its own ``pan_and_scan`` on zero-stride images (only the shape is read).
"""

from __future__ import annotations

import functools
import json

import pytest
from hypothesis import given, settings, strategies as st

from vlm_perf.arch import load_model, preset_config, spec_from_config
from vlm_perf.arch.families import FAMILIES
from vlm_perf.arch.families.gemma3 import Gemma3Media, pan_and_scan_crops
from vlm_perf.errors import ConfigError, UnsupportedModelError
from vlm_perf.flops import compute_flops
from vlm_perf.stats import BatchStats


def raw(name="gemma3-4b"):
    return {k: v for k, v in preset_config(name).items() if not k.startswith("_")}


# ----------------------------------------------------------------------------- config


def test_sliding_layers_from_the_pattern_and_layer_types():
    lm = load_model("gemma3-4b").lm
    assert lm.sliding_window == 1024
    assert tuple(i for i in range(34) if i not in lm.sliding_layers) == (5, 11, 17, 23, 29)  # every 6th is full
    cfg = raw()
    cfg["text_config"] = {**cfg["text_config"], "num_hidden_layers": 4,
                          "layer_types": ["full_attention", "sliding_attention", "full_attention", "full_attention"]}
    assert spec_from_config(cfg).lm.sliding_layers == (1,)


def test_released_minimal_config_uses_the_class_defaults():
    """gemma-3-4b-it's hub text_config lists only a few fields; transformers fills the rest (8 heads, 4 KV,
    head_dim 256, vocab 262208, pattern 6, tied head): so does the family."""
    cfg = raw()
    keep = ("model_type", "hidden_size", "intermediate_size", "num_hidden_layers", "sliding_window", "rope_scaling")
    cfg["text_config"] = {k: v for k, v in cfg["text_config"].items() if k in keep}
    del cfg["tie_word_embeddings"]
    assert spec_from_config(cfg).blocks == load_model("gemma3-4b").blocks


@pytest.mark.parametrize("change,error,needle", [
    (lambda c: c.pop("vision_config"), ConfigError, "vision_config"),
    (lambda c: c.update(mm_tokens_per_image=200), ConfigError, "mm_tokens_per_image"),
    (lambda c: c.update(mm_tokens_per_image=100), ConfigError, "mm_tokens_per_image"),  # 10 does not divide 64
    (lambda c: c["text_config"].update(use_bidirectional_attention=True), UnsupportedModelError, "bidirectional"),
    (lambda c: c["text_config"].update(layer_types=["full_attention"]), ConfigError, "layer_types"),
    (lambda c: c["text_config"].update(hidden_size=2560.5), ConfigError, "hidden_size"),
    (lambda c: c["vision_config"].update(image_size=[896, 448]), UnsupportedModelError, "square"),
])
def test_bad_configs_are_refused_with_the_field_named(change, error, needle):
    cfg = json.loads(json.dumps(raw()))
    change(cfg)
    with pytest.raises(error, match=needle):
        spec_from_config(cfg)


def test_vision_use_head_defaults_to_siglips_true():
    """An omitted vision_use_head is SiglipVisionConfig's True: the pooling head is stored and runs."""
    from vlm_perf.arch.blocks import SiglipPoolingHead

    cfg = raw()
    del cfg["vision_config"]["vision_use_head"]
    heads = [b for b in spec_from_config(cfg).blocks if isinstance(b, SiglipPoolingHead)]
    assert len(heads) == 1 and heads[0].params() == 1152 + (3 * 1152 * 1152 + 3 * 1152) + (1152 * 1152 + 1152) \
        + 2 * 1152 + (1152 * 4304 + 4304 + 4304 * 1152 + 1152)


def test_text_only_gemma3_matches_transformers_parameters():
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    text = dict(model_type="gemma3_text", vocab_size=500, hidden_size=64, intermediate_size=96, num_hidden_layers=7,
                num_attention_heads=4, num_key_value_heads=2, head_dim=16, sliding_window=16, attention_bias=True)
    spec = spec_from_config(text)
    assert spec.family == "gemma3_text" and not spec.is_vlm
    assert len(spec.lm.sliding_layers) == 6  # pattern 6: layer 5 full, the rest sliding
    with torch.device("meta"):
        hf = transformers.Gemma3ForCausalLM(transformers.Gemma3TextConfig(**{k: v for k, v in text.items()
                                                                              if k != "model_type"}))
    from vlm_perf.arch.params import count_params

    assert count_params(spec).total == sum(p.numel() for p in hf.parameters())


# ----------------------------------------------------------------------------- media rule vs HF


@functools.lru_cache(maxsize=None)
def _hf_processor(size: int = 896):
    pytest.importorskip("transformers")
    from transformers.models.gemma3.image_processing_pil_gemma3 import Gemma3ImageProcessorPil

    return Gemma3ImageProcessorPil(size={"height": size, "width": size})


@pytest.mark.parametrize("hw", [(480, 640), (1080, 1920), (50, 3000), (896, 896), (3000, 200)])
def test_every_image_is_one_fixed_size_image(hw):
    """What Gemma3Processor actually does: pan-and-scan forced off -> one 896x896 image, 256 tokens."""
    import numpy as np
    from transformers import Gemma3Processor

    from tests.verify.families.common import processor_images_kwargs

    out = _hf_processor()([np.zeros((*hw, 3), dtype=np.uint8)], input_data_format="channels_last",
                          **processor_images_kwargs(Gemma3Processor))
    spec = load_model("gemma3-4b")
    media = FAMILIES["gemma3"].media.image(spec, *hw)
    assert media.grid == (len(out["pixel_values"]), 64, 64) == (1, 64, 64)
    assert media.resized == tuple(out["pixel_values"][0].shape[-2:])
    assert media.visual_tokens == 256 and media.detail["crops"] == int(out["num_crops"][0]) == 0


def _hf_crops(proc, h: int, w: int, **kw) -> int:
    import numpy as np

    image = np.broadcast_to(np.zeros((3, 1, 1), dtype=np.uint8), (3, h, w))  # CHW, no memory
    return len(proc.pan_and_scan(image, **kw))


PAS_DEFAULTS = dict(pan_and_scan_min_crop_size=256, pan_and_scan_max_num_crops=4,
                    pan_and_scan_min_ratio_to_activate=1.2)


@settings(derandomize=True, deadline=None, max_examples=150)
@given(h=st.integers(1, 5000), w=st.integers(1, 5000), min_crop=st.sampled_from([8, 64, 256]),
       max_crops=st.integers(2, 6), ratio=st.sampled_from([1.0, 1.2, 2.0]))
def test_pan_and_scan_crops_fuzzed_against_transformers(h, w, min_crop, max_crops, ratio):
    kw = dict(pan_and_scan_min_crop_size=min_crop, pan_and_scan_max_num_crops=max_crops,
              pan_and_scan_min_ratio_to_activate=ratio)
    assert pan_and_scan_crops(h, w, min_crop, max_crops, ratio) == _hf_crops(_hf_processor(), h, w, **kw)


@pytest.mark.parametrize("hw", [(300, 1200), (1200, 300), (500, 520), (256, 2000), (100, 900)])
def test_pan_and_scan_media_when_the_caller_turns_it_on(hw):
    spec = load_model("gemma3-4b")
    media = Gemma3Media(pan_and_scan=True).image(spec, *hw)
    crops = _hf_crops(_hf_processor(), *hw, **PAS_DEFAULTS)
    assert media.grid == (1 + crops, 64, 64) and media.visual_tokens == 256 * (1 + crops)


def test_no_video_and_mismatched_processor_size_refused():
    spec = load_model("gemma3-4b")
    with pytest.raises(UnsupportedModelError, match="no video"):
        FAMILIES["gemma3"].media.video(spec, 8, 480, 640)
    bad = spec_from_config(raw(), processor={"preprocessor_config.json": {"size": {"height": 448, "width": 448}}})
    with pytest.raises(UnsupportedModelError, match="448"):
        FAMILIES["gemma3"].media.image(bad, 480, 640)


# ----------------------------------------------------------------------------- FLOPs by hand


def test_gemma3_4b_lm_attention_core_by_hand():
    """gemma3-4b, one 8192-token sequence with 2 images: 5 full + 29 sliding (W = 1024) layers, 8 heads x 256.
    causal half: full s^2/2, sliding s^2/2 - (s-W)^2/2 = s*W - W^2/2, plus 256^2/2 per image per layer
    (bidirectional image blocks); causal full: the square in all 34 layers."""
    spec = load_model("gemma3-4b")
    s, w, n = 8192, 1024, 256
    stats = BatchStats.from_batch(seq_lens=[s], image_grids=[(1, 64, 64)] * 2, spec=spec)
    per_entry = 2 * 8 * 2 * 256  # 2 FLOPs x heads x (QK^T + AV) x head_dim
    half = compute_flops(spec, stats, mode="forward", causal="half").components["lm.attn_core"]
    assert half == per_entry * (5 * s * s / 2 + 29 * (s * w - w * w / 2) + 34 * 2 * n * n / 2)
    full = compute_flops(spec, stats, mode="forward", causal="full").components["lm.attn_core"]
    assert full == per_entry * 34 * s * s


def test_gemma3_4b_vision_by_hand():
    """One image: SigLIP 27 layers x 4096 patches (1152 wide, MLP 4304), patch embed 588 -> 1152, projector
    256 pooled tokens x 1152 -> 2560."""
    spec = load_model("gemma3-4b")
    stats = BatchStats.from_batch(seq_lens=[1000], image_grids=[(1, 64, 64)], spec=spec)
    parts = compute_flops(spec, stats, mode="forward").parts
    p, h, i = 4096, 1152, 4304
    layer = 2 * p * h * 3 * h + 2 * p * h * h + 4 * h * p * p + 2 * 2 * p * h * i
    assert parts["vision_tower"] == 2 * p * 3 * 14 * 14 * h + 27 * layer
    assert parts["projector"] == 2 * 256 * h * 2560


def test_named_conventions_are_not_defined_for_gemma3_except_6nd():
    from vlm_perf.errors import ConventionNotDefined

    spec = load_model("gemma3-4b")
    stats = BatchStats.from_batch(seq_lens=[1000], image_grids=[(1, 64, 64)], spec=spec)
    for name in ("megatron-lm", "megatron-bridge", "mbridge-pr2575", "torchtitan", "verl"):
        with pytest.raises(ConventionNotDefined, match="not defined for gemma3"):
            compute_flops(spec, stats, name)
    six = compute_flops(spec, stats, "6nd", mode="training")
    assert six.vision == 0 and six.total > 0
