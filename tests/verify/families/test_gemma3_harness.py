"""Sanity of the Gemma 3 measurement harness, from first principles written here by hand.

Tiny config (``gemma3.tiny_config``): 32 px, patch 4 (64 patches), vision hidden 32, MLP 48, 2 layers;
16 tokens per image; LM hidden 64, head_dim 16, 3 layers (2 sliding of window 8, 1 full), tied head.
"""

from __future__ import annotations

import math

import pytest

pytestmark = pytest.mark.measured
torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from . import measure_family  # noqa: E402
from .gemma3 import build_model, tiny_config  # noqa: E402

PER_IMAGE_TOWER = 2 * 64 * 48 * 32 + 2 * (2 * 64 * 4 * 32 * 32 + 2 * 2 * 64 * 64 * 32 + 2 * 64 * 2 * 32 * 48)


def crops_by_hand(h: int, w: int, min_crop: int, max_crops: int = 4, ratio: float = 1.2) -> int:
    """Gemma 3 pan-and-scan: crops along the long side ~ aspect ratio, 2..max, each side >= min_crop."""
    long, short = max(h, w), min(h, w)
    if long / short < ratio:
        return 0
    n = min(math.floor(long / short + 0.5), math.floor(long / min_crop))
    n = min(max_crops, max(2, n))
    return n if min(math.ceil(long / n), short) >= min_crop else 0


@pytest.fixture(scope="module")
def model():
    return build_model(tiny_config(), 0)


def test_fixed_size_whatever_the_pixels(model):
    """Every image is resized to 32x32 (pan-and-scan off by Gemma3Processor's default): fixed cost each."""
    m = measure_family("gemma3", model=model, image_sizes=[(30, 50), (64, 64), (7, 300)], text_len=8)
    assert m.media["crops"] == [0, 0, 0]
    assert m.media["visual_tokens"] == 3 * 16
    assert m.forward["vision_tower"] == 3 * PER_IMAGE_TOWER
    assert m.forward["projector"] == 3 * 2 * 16 * 32 * 64  # pool is free; one 32x64 matmul per pooled token
    s = m.media["seq_len"]
    assert s == 8 + 3 * (2 + 16 + 2 + 2)
    layer = 2 * s * (64 * 64 + 2 * 64 * 32 + 64 * 64) + 2 * 2 * s * s * 64 + 2 * s * 3 * 64 * 96
    assert m.forward["language_model"] == 3 * layer + 2 * s * 64 * 1000  # sliding layers: full square (eager)


@pytest.mark.parametrize("size", [(30, 90), (100, 30), (30, 33), (40, 200)])
def test_pan_and_scan_when_asked(model, size):
    m = measure_family("gemma3", model=model, image_sizes=[size], pan_and_scan=True, pan_and_scan_min_crop_size=8)
    crops = crops_by_hand(*size, min_crop=8)
    assert m.media["crops"] == [crops]
    assert m.forward["vision_tower"] == (1 + crops) * PER_IMAGE_TOWER


def test_training_frozen_tower(model):
    m = measure_family("gemma3", model=model, image_sizes=[(30, 50)], mode="training", frozen=("vision_tower",))
    assert "vision_tower" not in m.backward
    # RMSNorm before the projection matmul: its input gradient is needed too -> 2x forward
    assert m.backward["projector"] == 2 * m.forward["projector"]
    assert m.backward["language_model"] == 2 * m.forward["language_model"]
