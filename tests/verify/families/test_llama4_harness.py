"""Sanity of the Llama 4 measurement harness, from first principles written here by hand.

Tiny config (``llama4.tiny_config``): 32-px tiles, patch 4 (64 patches + CLS), vision hidden 32, MLP 128,
2 layers; pixel shuffle 0.5 -> 16 tokens of 128; adapter 128 -> 48 -> 48; projector 48 -> 64. LM hidden 64,
layer 0 dense (MLP 96), layer 1 MoE (4 experts of 32, top-1, shared expert 32).
"""

from __future__ import annotations

import pytest

pytestmark = pytest.mark.measured
torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from . import measure_family  # noqa: E402
from .llama4 import build_model, tiny_config  # noqa: E402

PER_TILE_TOWER = 2 * 64 * 48 * 32 + 2 * (2 * 65 * 4 * 32 * 32 + 2 * 2 * 65 * 65 * 32 + 2 * 65 * 2 * 32 * 128)
PER_TILE_PROJECTOR = 2 * 16 * (128 * 48 + 48 * 48 + 48 * 64)


@pytest.fixture(scope="module")
def model():
    return build_model(tiny_config(), 0)


def test_forward_parts_by_hand(model):
    m = measure_family("llama4", model=model, tiles=[5, 1], text_len=8)
    assert m.media["visual_tokens"] == 6 * 16
    assert m.forward["vision_tower"] == 6 * PER_TILE_TOWER  # CLS appended last: 65 tokens per tile
    assert m.forward["projector"] == 6 * PER_TILE_PROJECTOR
    s = m.media["seq_len"]
    assert s == 8 + (1 + 5 * 17 + 1 + 2) + (1 + 17 + 1 + 2)
    attn = 2 * s * (64 * 64 + 2 * 64 * 32 + 64 * 64) + 2 * 2 * s * s * 64  # chunked / NoPE: full square (eager)
    dense = 2 * s * 3 * 64 * 96
    # Llama4TextMoe runs EVERY token through all 4 experts (dense bmm): 4x the routed top-1 cost
    moe = 2 * s * 64 * 4 + 4 * 2 * s * 3 * 64 * 32 + 2 * s * 3 * 64 * 32
    assert m.forward["language_model"] == 2 * attn + dense + moe + 2 * s * 64 * 1000


def test_frozen_tower_includes_cls_and_positions(model):
    m = measure_family("llama4", model=model, tiles=[1], mode="training", frozen=("vision_tower",))
    assert "vision_tower" not in m.backward  # class_embedding / positional_embedding_vlm frozen with the tower
    # pixel shuffle has no trainable op before fc1: its input gradient is skipped
    assert m.backward["projector"] == 2 * PER_TILE_PROJECTOR - 2 * 16 * 128 * 48
