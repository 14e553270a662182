"""Sanity of the Idefics3 / SmolVLM measurement harnesses, from first principles written here by hand.

Tiny config (``idefics3.tiny_config``): 32-px tiles, patch 4 (64 patches, no CLS), vision hidden 32, MLP 48,
2 layers; pixel shuffle 2 (Idefics3: 16 tokens/tile, Linear 128 -> 64) or 4 (SmolVLM: 4 tokens, 512 -> 64).
"""

from __future__ import annotations

import math

import pytest

pytestmark = pytest.mark.measured
torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from . import measure_family  # noqa: E402
from .idefics3 import build_model, tiny_config  # noqa: E402

PER_TILE_TOWER = 2 * 64 * 48 * 32 + 2 * (2 * 64 * 4 * 32 * 32 + 2 * 2 * 64 * 64 * 32 + 2 * 64 * 2 * 32 * 48)


def grid_by_hand(h: int, w: int, longest: int = 128, tile: int = 32) -> tuple[int, int]:
    """Longest side to 128 px (up or down), the other by the aspect (int, made even); sides up to x32."""
    if w >= h:
        w, h = longest, int(longest / (w / h))
        h += h % 2
    else:
        h, w = longest, int(longest * (w / h))
        w += w % 2
    return math.ceil(h / tile), math.ceil(w / tile)


@pytest.fixture(scope="module")
def models():
    return {fam: build_model(tiny_config(smolvlm=fam == "smolvlm"), 0) for fam in ("idefics3", "smolvlm")}


@pytest.mark.parametrize("fam,per_tile,shuffled", [("idefics3", 16, 128), ("smolvlm", 4, 512)])
@pytest.mark.parametrize("size", [(30, 50), (10, 10), (10, 100), (300, 90)])
def test_tiles_tokens_and_parts(models, fam, per_tile, shuffled, size):
    m = measure_family(fam, model=models[fam], image_sizes=[size])
    rows, cols = grid_by_hand(*size)
    assert m.media["grids"] == [(rows, cols)]
    images = rows * cols + 1  # tiles + the global image (even a 10x10 image is upscaled and split)
    assert m.media["images_in_tower"] == images
    assert m.media["visual_tokens"] == images * per_tile
    assert m.forward["vision_tower"] == images * PER_TILE_TOWER
    assert m.forward["projector"] == images * 2 * per_tile * shuffled * 64
    s = m.media["seq_len"]
    assert s == 8 + rows * cols * (2 + per_tile) + rows + (3 + per_tile + 1) + 2


def test_no_splitting_and_frozen_tower(models):
    m = measure_family("idefics3", model=models["idefics3"], image_sizes=[(30, 50)], mode="training",
                       frozen=("vision_tower",), do_image_splitting=False)
    assert m.media["grids"] == [(0, 0)] and m.media["images_in_tower"] == 1
    assert "vision_tower" not in m.backward
    assert m.backward["projector"] == m.forward["projector"]  # one Linear, first op: weight gradient only
