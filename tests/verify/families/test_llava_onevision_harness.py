"""Sanity of the LLaVA-OneVision measurement harness, from first principles written here by hand.

Tiny config (``llava_onevision.tiny_config``): tile 24 px, patch 4 (6x6 = 36 patches, no CLS), vision
hidden 32, MLP 48, 2 layers; projector 32 -> 64 -> 64; pinpoints 24*{1,2,3} squared; anyres_max_4.
"""

from __future__ import annotations

import math

import pytest

pytestmark = pytest.mark.measured
torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from . import measure_family  # noqa: E402
from .llava_onevision import build_model, tiny_config  # noqa: E402

TILE, SIDE = 24, 6
PER_TILE_TOWER = 2 * 36 * 48 * 32 + 2 * (2 * 36 * 4 * 32 * 32 + 2 * 2 * 36 * 36 * 32 + 2 * 36 * 2 * 32 * 48)
PER_TOKEN_PROJECTOR = 2 * (32 * 64 + 64 * 64)


def anyres_by_hand(h: int, w: int, max_tiles: int = 4, tile: int = TILE, side: int = SIDE,
                   grid: tuple = (1, 2, 3)) -> tuple[int, int]:
    """(tiles incl. base, LM tokens) for a one-image sample: best pinpoint = largest effective resolution,
    then least waste; grid features unpadded back to the aspect; shrunk if > 1.1 x sqrt(max*36); newline/row."""
    best, best_key = None, None
    for rows in grid:
        for cols in grid:
            H, W = rows * tile, cols * tile
            scale = min(W / w, H / h)
            eff = min(int(w * scale) * int(h * scale), w * h)
            key = (eff, -(H * W - eff))
            if best_key is None or key > best_key:
                best, best_key = (rows, cols), key
    rows, cols = best
    fh, fw = rows * side, cols * side
    if w / h > fw / fh:
        fh -= 2 * ((fh - int(round(h * fw / w, 7))) // 2)
    else:
        fw -= 2 * ((fw - int(round(w * fh / h, 7))) // 2)
    ratio = math.sqrt(fh * fw / (max_tiles * side**2))
    if ratio > 1.1:
        fh, fw = int(fh // ratio), int(fw // ratio)
    return 1 + rows * cols, side * side + fh * fw + fh


@pytest.fixture(scope="module")
def model():
    return build_model(tiny_config(), 0)


@pytest.mark.parametrize("size", [(30, 50), (70, 20), (24, 24), (10, 70), (72, 72)])
def test_anyres_tiles_and_tokens(model, size):
    m = measure_family("llava_onevision", model=model, image_sizes=[size])
    tiles, tokens = anyres_by_hand(*size)
    assert m.media["tiles"] == [tiles]
    assert m.media["visual_tokens"] == tokens
    # every tile (base + grid) goes through tower and projector, even the features the LM never sees
    assert m.forward["vision_tower"] == tiles * PER_TILE_TOWER
    assert m.forward["projector"] == tiles * 36 * PER_TOKEN_PROJECTOR


def test_multi_image_sample_is_one_tile_each(model):
    m = measure_family("llava_onevision", model=model, image_sizes=[(30, 50), (70, 20)], multi_image=True)
    assert m.media["tiles"] == [1, 1] and m.media["visual_tokens"] == 2 * (36 + 1)
    s = m.media["seq_len"]
    assert s == 8 + 2 * (37 + 2)
    layer = 2 * s * (64 * 64 + 2 * 64 * 32 + 64 * 64) + 2 * 2 * s * s * 64 + 2 * s * 3 * 64 * 96
    assert m.forward["language_model"] == 2 * layer + 2 * s * 64 * 1000


def test_video_and_frozen_tower(model):
    m = measure_family("llava_onevision", model=model, video_sizes=[(3, 24, 24)], mode="training",
                       frozen=("vision_tower",))
    assert m.media["visual_tokens"] == 3 * 9 + 1  # 6x6 pooled to 3x3 per frame, one newline per video
    assert m.forward["vision_tower"] == 3 * PER_TILE_TOWER
    assert m.forward["projector"] == 3 * 36 * PER_TOKEN_PROJECTOR
    # Linear first in the projector: its input gradient is skipped (frozen tower), the rest costs 2x
    tokens = 3 * 36
    weight_grads = 2 * tokens * (32 * 64 + 64 * 64)
    input_grad_second_linear = 2 * tokens * 64 * 64
    assert m.backward["projector"] == weight_grads + input_grad_second_linear
