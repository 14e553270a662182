"""Sanity of the GLM-4.1V / GLM-4.5V measurement harnesses, from first principles written here by hand.

Tiny config (``glm4v.tiny_config``): patch 2, temporal patch 2, merge 2 (factor 4), vision hidden 32,
2 blocks, tower MLP width = out_hidden_size 64, merger MLP width 80; LM hidden 64.
"""

from __future__ import annotations

import math

import pytest

pytestmark = pytest.mark.measured
torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from . import measure_family  # noqa: E402
from .glm4v import PIXELS, build_model, tiny_config  # noqa: E402


def glm_grid_by_hand(h: int, w: int, frames: int = 2, f: int = 4, p: int = 2,
                     pixels: dict = PIXELS) -> tuple[int, int]:
    """GLM smart resize: round each side to the factor f; bounds checked on t*h*w with t = 2 for an image."""
    if h < f or w < f:
        s = max(f / h, f / w)
        h, w = int(h * s), int(w * s)
    hb, wb = round(h / f) * f, round(w / f) * f
    tb = round(frames / 2) * 2
    if tb * hb * wb > pixels["max_pixels"]:
        beta = math.sqrt(frames * h * w / pixels["max_pixels"])
        hb, wb = max(f, math.floor(h / beta / f) * f), max(f, math.floor(w / beta / f) * f)
    elif tb * hb * wb < pixels["min_pixels"]:
        beta = math.sqrt(pixels["min_pixels"] / (frames * h * w))
        hb, wb = math.ceil(h * beta / f) * f, math.ceil(w * beta / f) * f
    return hb // p, wb // p


@pytest.fixture(scope="module")
def models():
    return {fam: build_model(tiny_config(moe=fam != "glm4v", glm46v=fam == "glm46v"), 0)
            for fam in ("glm4v", "glm4v_moe", "glm46v")}


@pytest.mark.parametrize("size", [(30, 50), (8, 8), (3, 40), (200, 120)])
def test_image_grid_follows_smart_resize(models, size):
    m = measure_family("glm4v", model=models["glm4v"], image_sizes=[size])
    gh, gw = glm_grid_by_hand(*size)
    assert m.media["image_grids"] == [(1, gh, gw)]
    assert m.media["visual_tokens"] == gh * gw // 4


def _vision_by_hand(grids):
    patches = sum(t * h * w for t, h, w in grids)
    merged = patches // 4
    conv3d = 2 * patches * (3 * 2 * 2 * 2) * 32
    attn_core = sum(t * 2 * 2 * (h * w) ** 2 * 32 for t, h, w in grids)  # per image / per temporal patch
    block = 2 * patches * (32 * 96 + 32 * 32 + 3 * 32 * 64) + attn_core  # fused qkv, proj, gated MLP 32->64
    tower = conv3d + 2 * block
    downsample = 2 * merged * (32 * 2 * 2) * 64  # Conv2d 32->64, kernel = stride = 2
    merger = 2 * merged * (64 * 64 + 2 * 64 * 80 + 80 * 64)  # proj, gate/up 64->80, down 80->64
    return tower, downsample, merger


@pytest.mark.parametrize("fam", ["glm4v", "glm4v_moe", "glm46v"])
def test_forward_parts_by_hand(models, fam):
    m = measure_family(fam, model=models[fam], image_sizes=[(30, 50), (8, 8)], text_len=8)
    grids = [(1, 16, 24), (1, 4, 4)]
    assert m.media["image_grids"] == grids
    tower, downsample, merger = _vision_by_hand(grids)
    assert m.forward["vision_tower"] == tower
    assert m.forward["projector"] == downsample + merger
    s = m.media["seq_len"]
    assert s == 8 + (1 + 96 + 1 + 3) + (1 + 4 + 1 + 3)
    head = 2 * s * 64 * 1000
    dense_mlp = 2 * s * 3 * 64 * 96  # fused gate_up 64->192 + down 96->64
    if fam == "glm4v":  # 4 heads x 16: q/o 64x64, k/v 64x32
        attn = 2 * s * (64 * 64 + 2 * 64 * 32 + 64 * 64) + 2 * 2 * s * s * 64
        assert m.forward["language_model"] == 2 * (attn + dense_mlp) + head
    else:  # 6 heads x 16 = 96 wide queries; layer 0 dense, layer 1: router 64->8, top-2 of width 24 + shared
        attn = 2 * s * (64 * 96 + 2 * 64 * 32 + 96 * 64) + 2 * 2 * s * s * 96
        moe = 2 * s * 64 * 8 + 2 * s * 2 * 3 * 64 * 24 + 2 * s * 3 * 64 * 24
        assert m.forward["language_model"] == 2 * attn + dense_mlp + moe + head


def test_video_attention_per_temporal_patch_and_frozen_tower(models):
    m = measure_family("glm4v", model=models["glm4v"], video_sizes=[(3, 20, 20)], mode="training",
                       frozen=("vision_tower",))
    # 3 frames -> padded to 4 -> t = 2 temporal patches; 20 px -> 10 patches a side
    assert m.media["video_grids"] == [(2, 10, 10)]
    assert m.media["visual_tokens"] == 2 * 25
    tower, downsample, merger = _vision_by_hand([(2, 10, 10)])
    assert m.forward["vision_tower"] == tower
    assert "vision_tower" not in m.backward
    # frozen tower: the downsample conv (first projector op) needs no input gradient, everything else 2x
    assert m.backward["projector"] == downsample + 2 * merger
