"""Sanity of the Mistral 3 (Pixtral tower) measurement harness, from first principles written here by hand.

Tiny config (``mistral3.tiny_config``): patch 4, merge 2 (8 px per LM token), longest edge 64, vision hidden
32, gated MLP 48, 2 layers; projector merger 128 -> 32, then 32 -> 64 -> 64; LM hidden 64.
"""

from __future__ import annotations

import math

import pytest

pytestmark = pytest.mark.measured
torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from . import measure_family  # noqa: E402
from .mistral3 import build_model, tiny_config  # noqa: E402


def resize_by_hand(h: int, w: int, longest: int = 64, step: int = 8) -> tuple[int, int]:
    """Pixtral: scale down (never up) to fit ``longest``, floor; then each side up to a multiple of ``step``."""
    ratio = max(h / longest, w / longest)
    if ratio > 1:
        h, w = int(math.floor(h / ratio)), int(math.floor(w / ratio))
    return math.ceil(h / step) * step, math.ceil(w / step) * step


def tower_by_hand(sizes) -> int:
    ph, pw = max(h for h, _ in sizes) // 4, max(w for _, w in sizes) // 4
    conv = 2 * len(sizes) * ph * pw * 48 * 32  # the patch conv runs on the zero-padded batch
    n = sum((h // 4) * (w // 4) for h, w in sizes)  # then one joined sequence of every image's own patches
    layer = 2 * n * 4 * 32 * 32 + 2 * 2 * n * n * 32 + 2 * n * 3 * 32 * 48
    return conv + 2 * layer


@pytest.fixture(scope="module")
def model():
    return build_model(tiny_config(), 0)


@pytest.mark.parametrize("sizes", [[(30, 50)], [(30, 50), (70, 20)], [(200, 100)], [(5, 9), (64, 64)]])
def test_resize_tokens_and_parts(model, sizes):
    m = measure_family("mistral3", model=model, image_sizes=sizes, text_len=8)
    resized = [resize_by_hand(*s) for s in sizes]
    assert m.media["resized"] == resized
    tokens = sum((h // 8) * (w // 8) for h, w in resized)
    assert m.media["visual_tokens"] == tokens
    assert m.media["seq_len"] == 8 + sum((h // 8) * (w // 8 + 1) + 2 for h, w in resized)  # + [IMG_BREAK]/[IMG_END]
    assert m.forward["vision_tower"] == tower_by_hand(resized)
    assert m.forward["projector"] == 2 * tokens * (128 * 32 + 32 * 64 + 64 * 64)


def test_training_frozen_tower(model):
    m = measure_family("mistral3", model=model, image_sizes=[(30, 50)], mode="training", frozen=("vision_tower",))
    assert "vision_tower" not in m.backward
    assert m.backward["projector"] == 2 * m.forward["projector"]  # RMSNorm first: every GEMM's input grad


def test_one_token_image_is_a_transformers_bug(model):
    """Found by the fuzz: an image of one LM token (both sides <= patch*merge px) fails inside transformers
    5.24 (``image_features.squeeze(0)`` turns (1, d) into (d,) before the split). Recorded so a fixed
    transformers shows up here."""
    with pytest.raises(RuntimeError, match="split_with_sizes"):
        measure_family("mistral3", model=model, image_sizes=[(4, 4)])
