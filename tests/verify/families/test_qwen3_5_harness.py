"""Sanity of the Qwen3.5 / Qwen3.5-MoE measurement harnesses, from first principles written here by hand.

Tiny config (``qwen3_5.tiny_config``): patch 2, merge 2 (factor 4), vision hidden 32, MLP 64, 2 blocks,
merger 128 -> 128 -> 64; LM hidden 64, layers [linear x3, full], full attention 4 heads x 16 with the
output gate, gated delta net Hk = 2, dk = 8, Hv = 4, dv = 8, conv kernel 4.
"""

from __future__ import annotations

import math

import pytest

pytestmark = pytest.mark.measured
torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from . import measure_family  # noqa: E402
from .qwen3_5 import PIXELS, build_model, tiny_config  # noqa: E402


def qwen_grid_by_hand(h: int, w: int, f: int = 4, p: int = 2, pixels: dict = PIXELS) -> tuple[int, int]:
    """Qwen2-VL smart resize: sides rounded to f; pixel bounds checked on h*w (no temporal factor)."""
    hb, wb = max(f, round(h / f) * f), max(f, round(w / f) * f)
    if hb * wb > pixels["max_pixels"]:
        beta = math.sqrt(h * w / pixels["max_pixels"])
        hb, wb = max(f, math.floor(h / beta / f) * f), max(f, math.floor(w / beta / f) * f)
    elif hb * wb < pixels["min_pixels"]:
        beta = math.sqrt(pixels["min_pixels"] / (h * w))
        hb, wb = math.ceil(h * beta / f) * f, math.ceil(w * beta / f) * f
    return hb // p, wb // p


def lm_by_hand(s: int, moe: bool) -> int:
    hk, dk, hv, dv, chunk = 2, 8, 4, 8, 64
    n_chunks = -(-s // chunk)  # the torch fallback pads the sequence to a multiple of 64
    mlp = (2 * s * 64 * 8 + 2 * s * 2 * 3 * 64 * 24 + 2 * s * 3 * 64 * 32 + 2 * s * 64 * 1) if moe \
        else 2 * s * 3 * 64 * 96  # MoE: router, 2 routed experts, shared expert, shared-expert gate
    in_proj = 2 * s * 64 * (2 * hk * dk + hv * dv + hv * dv + hv + hv)  # qkv, z, b, a
    out_proj = 2 * s * hv * dv * 64
    conv1d = 2 * (2 * hk * dk + hv * dv) * 4 * (s + 3)  # depthwise, padded k-1 on both sides
    delta = (2 * 2 * hv * n_chunks * chunk**2 * dk  # k_beta k^T and q k^T inside each chunk
             + n_chunks * (2 * 2 * hv * chunk * dk * dv + 2 * hv * chunk**2 * dv + 2 * hv * dk * chunk * dv))
    linear_layer = in_proj + out_proj + conv1d + delta + mlp
    full_layer = 2 * s * (64 * 128 + 2 * 64 * 32 + 64 * 64) + 2 * 2 * s * s * 64 + mlp  # q_proj 2x wide (gate)
    return 3 * linear_layer + full_layer + 2 * s * 64 * 1000


@pytest.fixture(scope="module")
def models():
    return {fam: build_model(tiny_config(moe=fam == "qwen3_5_moe"), 0) for fam in ("qwen3_5", "qwen3_5_moe")}


@pytest.mark.parametrize("size", [(30, 50), (8, 8), (200, 120), (3, 40)])
def test_image_grid_follows_smart_resize(models, size):
    m = measure_family("qwen3_5", model=models["qwen3_5"], image_sizes=[size])
    gh, gw = qwen_grid_by_hand(*size)
    assert m.media["image_grids"] == [(1, gh, gw)]


@pytest.mark.parametrize("fam", ["qwen3_5", "qwen3_5_moe"])
def test_forward_parts_by_hand(models, fam):
    m = measure_family(fam, model=models[fam], image_sizes=[(30, 50), (8, 8)], text_len=8)
    grids = [(1, 16, 24), (1, 4, 4)]
    assert m.media["image_grids"] == grids
    patches = 16 * 24 + 4 * 4
    block = 2 * patches * (32 * 96 + 32 * 32 + 2 * 32 * 64) + 2 * 2 * (384**2 + 16**2) * 32
    assert m.forward["vision_tower"] == 2 * patches * 24 * 32 + 2 * block
    assert m.forward["projector"] == 2 * (patches // 4) * (128 * 128 + 128 * 64)
    s = m.media["seq_len"]
    assert s == 8 + (1 + 96 + 1 + 3) + (1 + 4 + 1 + 3)
    assert m.forward["language_model"] == lm_by_hand(s, moe=fam == "qwen3_5_moe")


def test_depthwise_conv_backward_correction(models):
    m = measure_family("qwen3_5", model=models["qwen3_5"], video_grids=[(2, 4, 6)], mode="training",
                       frozen=("vision_tower",))
    s = m.media["seq_len"]
    assert s == 8 + 2 * (2 + 1 + 6 + 1)
    # torch's grad-weight term for the depthwise conv: 2 * C * C * L_out * k, the real one 2 * C * L_out * k
    c, k, l_out = 64, 4, s + 3
    assert m.grouped_conv_overcount() == {"language_model": 3 * (2 * c * c * l_out * k - 2 * c * l_out * k)}
    raw = m.training(corrected=False)["language_model"]
    assert m.parts("training")["language_model"] == raw - m.grouped_conv_overcount()["language_model"]
    assert "vision_tower" not in m.backward
    assert m.backward["projector"] == 2 * m.forward["projector"]  # LayerNorm first: full 2x in backward
