"""Sanity of the LLaVA measurement harnesses, from first principles written here by hand.

CLIP tiny config (``llava.tiny_config``): 32 px images, patch 8 -> 16 patches + 1 CLS = 17 positions, width 32,
MLP 48, 2 layers, ``vision_feature_layer`` -2; projector 32 -> 64 -> 64. Pixtral tiny config
(``llava.tiny_pixtral_config``): patch 4, longest edge 64, width 32, gated MLP 48, 2 layers; projector 32 -> 64 -> 64.
"""

from __future__ import annotations

import math

import pytest

pytestmark = pytest.mark.measured
torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from . import measure_family  # noqa: E402
from .llava import build_model, tiny_config, tiny_pixtral_config  # noqa: E402


def clip_tower_by_hand(images: int, layers_run: int = 2) -> int:
    patches, seq = 16, 17  # (32 / 8)^2 patches, + the CLS position in every layer
    conv = 2 * patches * (3 * 8 * 8) * 32  # no bias, no CLS (a learned vector)
    layer = 2 * seq * 4 * 32 * 32 + 2 * 2 * seq * seq * 32 + 2 * seq * 2 * 32 * 48
    return images * (conv + layers_run * layer)


@pytest.fixture(scope="module")
def clip_model():
    return build_model(tiny_config(), 0)


@pytest.fixture(scope="module")
def pixtral_model():
    return build_model(tiny_pixtral_config(), 0)


@pytest.mark.parametrize("sizes", [[(30, 50)], [(70, 20), (32, 32)], [(300, 9)]])
def test_clip_every_layer_runs_and_cls_is_dropped(clip_model, sizes):
    """vision_feature_layer -2 selects the hidden state after layer 1, yet layer 2 runs too (2 layers counted);
    the projector sees 16 rows per image ("default" drops the CLS), the LM 16 image tokens per image."""
    m = measure_family("llava", model=clip_model, image_sizes=sizes, text_len=8)
    assert m.media["resized"] == [(32, 32)] * len(sizes)  # shortest edge 32, center crop 32 x 32
    assert m.media["visual_tokens"] == 16 * len(sizes)
    assert m.media["seq_len"] == 8 + len(sizes) * (16 + 2)
    assert m.forward["vision_tower"] == clip_tower_by_hand(len(sizes))
    assert m.forward["projector"] == 2 * 16 * len(sizes) * (32 * 64 + 64 * 64)


def test_clip_last_layer_choice_does_not_change_tower_flops():
    """Measured: -1 and -2 give the same tower FLOPs (CLIPEncoder always loops over every layer)."""
    a = measure_family("llava", config=tiny_config(vision_feature_layer=-1), image_sizes=[(30, 50)])
    b = measure_family("llava", config=tiny_config(vision_feature_layer=-2), image_sizes=[(30, 50)])
    assert a.forward["vision_tower"] == b.forward["vision_tower"] == clip_tower_by_hand(1)


def test_clip_multi_layer_features_widen_the_projector():
    m = measure_family("llava", config=tiny_config(vision_feature_layer=[-2, -1]), image_sizes=[(30, 50)])
    assert m.forward["projector"] == 2 * 16 * (2 * 32 * 64 + 64 * 64)


def test_clip_training_frozen_tower(clip_model):
    m = measure_family("llava", model=clip_model, image_sizes=[(30, 50)], mode="training", frozen=("vision_tower",))
    assert "vision_tower" not in m.backward
    # Linear first, tower frozen: linear_1 needs only its weight gradient, linear_2 both
    fc1, fc2 = 2 * 16 * 32 * 64, 2 * 16 * 64 * 64
    assert m.backward["projector"] == fc1 + 2 * fc2


def pixtral_resize_by_hand(h: int, w: int, longest: int = 64, step: int = 4) -> tuple[int, int]:
    ratio = max(h / longest, w / longest)
    if ratio > 1:
        h, w = int(math.floor(h / ratio)), int(math.floor(w / ratio))
    return math.ceil(h / step) * step, math.ceil(w / step) * step


@pytest.mark.parametrize("size", [(30, 50), (200, 100), (5, 9)])
def test_pixtral_tokens_and_parts(pixtral_model, size):
    m = measure_family("llava_pixtral", model=pixtral_model, image_sizes=[size], text_len=8)
    h, w = pixtral_resize_by_hand(*size)
    assert m.media["resized"] == [(h, w)]
    n = (h // 4) * (w // 4)
    assert m.media["visual_tokens"] == n
    assert m.media["seq_len"] == 8 + (h // 4) * (w // 4 + 1) + 2  # one [IMG_BREAK]/[IMG_END] per row
    conv = 2 * n * 48 * 32
    layer = 2 * n * 4 * 32 * 32 + 2 * 2 * n * n * 32 + 2 * n * 3 * 32 * 48
    assert m.forward["vision_tower"] == conv + 2 * layer
    assert m.forward["projector"] == 2 * n * (32 * 64 + 64 * 64)


from hypothesis import given, settings, strategies as st  # noqa: E402


@settings(derandomize=True, deadline=None, max_examples=15)
@given(h=st.integers(5, 150), w=st.integers(5, 150))
def test_pixtral_fuzz_processor_and_tower(pixtral_model, h, w):
    """transformers' Pixtral processor vs the resize written above, and the measured tower vs its closed form."""
    m = measure_family("llava_pixtral", model=pixtral_model, image_sizes=[(h, w)], text_len=2)
    rh, rw = pixtral_resize_by_hand(h, w)
    assert m.media["resized"] == [(rh, rw)]
    n = (rh // 4) * (rw // 4)
    layer = 2 * n * 4 * 32 * 32 + 2 * 2 * n * n * 32 + 2 * n * 3 * 32 * 48
    assert m.forward["vision_tower"] == 2 * n * 48 * 32 + 2 * layer


@settings(derandomize=True, deadline=None, max_examples=15)
@given(h=st.integers(1, 300), w=st.integers(1, 300))
def test_clip_fuzz_processor_and_tower(clip_model, h, w):
    m = measure_family("llava", model=clip_model, image_sizes=[(h, w)], text_len=2)
    assert m.media["resized"] == [(32, 32)] and m.media["visual_tokens"] == 16
    assert m.forward["vision_tower"] == clip_tower_by_hand(1)
