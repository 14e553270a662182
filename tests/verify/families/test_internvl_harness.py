"""Sanity of the InternVL measurement harness, from first principles written here by hand.

Tiny config (``internvl.tiny_config``): tile 32 px, patch 4, vision hidden 32, 2 heads, MLP 48, 2 layers;
pixel shuffle 0.5; LM hidden 64.
"""

from __future__ import annotations

import pytest

pytestmark = pytest.mark.measured
torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from . import measure_family  # noqa: E402
from .internvl import build_model, tiny_config  # noqa: E402


def tiles_by_hand(h: int, w: int, lo: int = 1, hi: int = 6, tile: int = 32) -> int:
    """InternVL dynamic tiling (GotOcr2 ``get_optimal_tiled_canvas``): grids cols x rows with lo <= n <= hi,
    sorted by tile count; closest cols/rows to w/h wins; on a tie the later one only if the image area
    exceeds half the canvas area; one thumbnail added when there is more than one tile."""
    grids = sorted({(c, r) for n in range(lo, hi + 1) for c in range(1, n + 1) for r in range(1, n + 1)
                    if lo <= c * r <= hi}, key=lambda g: g[0] * g[1])
    best, best_diff = (1, 1), float("inf")
    for c, r in grids:
        diff = abs(w / h - c / r)
        if diff < best_diff:
            best, best_diff = (c, r), diff
        elif diff == best_diff and h * w > 0.5 * tile * tile * c * r:
            best = (c, r)
    n = best[0] * best[1]
    return n + 1 if n > 1 else n


@pytest.fixture(scope="module")
def model():
    return build_model(tiny_config(), 0)


@pytest.mark.parametrize("size", [(48, 80), (32, 32), (100, 30), (64, 64)])
def test_tiles_follow_the_tiling_rule(model, size):
    m = measure_family("internvl", model=model, image_sizes=[size])
    assert m.media["tiles"] == [tiles_by_hand(*size)]
    assert m.media["visual_tokens"] == 16 * tiles_by_hand(*size)


def test_forward_parts_by_hand(model):
    m = measure_family("internvl", model=model, image_sizes=[(48, 80), (32, 32)], text_len=8)
    tiles = 7 + 1
    # tower per tile: conv 64 patches x (3*4*4 -> 32); per layer on 65 tokens: q,k,v,o 32x32, scores+values
    # 2 * 2 * 65^2 * 32, fc1/fc2 32x48
    conv = 2 * 64 * 48 * 32
    layer = 2 * 65 * 4 * 32 * 32 + 2 * 2 * 65 * 65 * 32 + 2 * 65 * 2 * 32 * 48
    assert m.forward["vision_tower"] == tiles * (conv + 2 * layer)
    # projector per tile: 16 shuffled tokens, Linear(4*32 -> 64) + Linear(64 -> 64)
    assert m.forward["projector"] == tiles * 2 * 16 * (128 * 64 + 64 * 64)
    # LM: S tokens, 2 layers of q 64x64, k/v 64x32, o 64x64, eager square 2*2*S^2*64, SwiGLU 3 x 64x96;
    # lm_head 64 x 1000
    s = m.media["seq_len"]
    assert s == 8 + (1 + 16 * 7 + 1 + 3) + (1 + 16 * 1 + 1 + 3)  # text, then <img> ctx* </img> + 3 text each
    lm_layer = 2 * s * (64 * 64 * 2 + 64 * 32 * 2) + 2 * 2 * s * s * 64 + 2 * s * 3 * 64 * 96
    assert m.forward["language_model"] == 2 * lm_layer + 2 * s * 64 * 1000


def test_training_frozen_tower(model):
    full = measure_family("internvl", model=model, image_sizes=[(48, 80)], mode="training")
    frozen = measure_family("internvl", model=model, image_sizes=[(48, 80)], mode="training",
                            frozen=("vision_tower",))
    fw = full.forward
    assert full.backward["vision_tower"] > fw["vision_tower"]  # grads of the whole tower
    assert "vision_tower" not in frozen.backward
    # LayerNorm first in the projector: both projector GEMMs need their input gradient -> 2x forward
    assert frozen.backward["projector"] == 2 * fw["projector"]
    assert frozen.backward["language_model"] == full.backward["language_model"] == 2 * fw["language_model"]


def test_internvl3_5_moe_language_model_by_hand():
    """InternVL3.5-30B-A3B style LM (qwen3_moe): 4 experts of 24, top-2 in both layers, router 64 -> 4."""
    m = measure_family("internvl", config=tiny_config(text_model_type="qwen3_moe"), image_sizes=[(48, 80)])
    s = m.media["seq_len"]
    assert s == 8 + 1 + 16 * 7 + 1 + 3
    attn = 2 * s * (64 * 64 + 2 * 64 * 32 + 64 * 64) + 2 * 2 * s * s * 64
    moe = 2 * s * 64 * 4 + 2 * s * 2 * 3 * 64 * 24
    assert m.forward["language_model"] == 2 * (attn + moe) + 2 * s * 64 * 1000


def test_training_frozen_language_model(model):
    """LM frozen, vision trainable: the LM backward still runs (to reach the image positions) but computes only
    input gradients: 1x forward for every Linear, 2x for the attention core (both operands of both bmms)."""
    m = measure_family("internvl", model=model, image_sizes=[(48, 80)], mode="training", frozen=("language_model",))
    s = m.media["seq_len"]
    linear = 2 * s * (64 * 64 + 2 * 64 * 32 + 64 * 64 + 3 * 64 * 96)
    core = 2 * 2 * s * s * 64
    assert m.backward["language_model"] == 2 * (linear + 2 * core) + 2 * s * 64 * 1000
    assert m.backward["vision_tower"] > 0 and m.backward["projector"] == 2 * m.forward["projector"]
