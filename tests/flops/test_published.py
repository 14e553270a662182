"""FLOPs against published figures and hand arithmetic written out here."""

import pytest

from vlm_perf.arch import load_model
from vlm_perf.flops import compute_flops
from vlm_perf.stats import BatchStats


def test_qwen3_30b_a3b_megatron_per_token_matches_published():
    # Megatron-Bridge docs/performance-summary.md: 1029 TFLOP/s/GPU / 44,544 tokens/s/GPU = 23.10 GF/token
    published = 1029e12 / 44544
    h, L, q, kv, fe, k, V, s = 2048, 48, 4096, 512, 768, 8, 151936, 4096
    experts = 6 * h * (3 * fe * k) * L
    attention = 6 * L * (h * (q + 2 * kv) + q * h + q * s)  # causal half: 12*q*s/2
    logits = 6 * h * V
    hand = experts + attention + logits
    assert hand == 23_006_281_728
    spec = load_model("qwen3-30b-a3b")
    got = compute_flops(spec, BatchStats.from_batch(seq_len=s, samples=1), "megatron-lm").total / s
    assert got == hand
    assert abs(got / published - 1) < 0.01


def test_qwen3_30b_a3b_at_1280_tokens():
    spec = load_model("qwen3-30b-a3b")
    got = compute_flops(spec, BatchStats.from_batch(seq_len=1280), "megatron-lm").total / 1280
    assert round(got / 1e9, 3) == 19.684  # reference: attention term 6,945,767,424 at s = 1280


VERL_VISION = [(1, 16, 32), (1, 32, 32), (1, 32, 64)]  # frames of 512, 1024, 2048 patches


def test_verl_published_test_values_qwen3_vl_8b():
    # verl tests/utils/test_flops_counter.py (TFLOPs for dt = 1 s), images_seqlens = batch_seqlens
    spec = load_model("qwen3-vl-8b")
    b = compute_flops(spec, BatchStats.from_batch(seq_lens=[512, 1024, 2048], image_grids=VERL_VISION, spec=spec),
                      "verl")
    assert b.total / 1e12 == pytest.approx(195.379819708416, rel=1e-12)
    assert b.vision / 1e12 == pytest.approx(14.382, abs=5e-4)
    b = compute_flops(spec, BatchStats.from_batch(seq_lens=[4096] * 3, image_grids=[(1, 64, 64)] * 3, spec=spec),
                      "verl")
    assert b.total / 1e12 == pytest.approx(709.446422495232, rel=1e-12)


def test_bridge_vit_term_by_hand_qwen3_vl_8b():
    # reference: 11.76 TF for the verl [512,1024,2048] case under the Bridge convention
    hv, iv, Lv, m2, dout, nds = 1152, 4304, 27, 4, 4096, 3
    P, P2 = 3584, 512**2 + 1024**2 + 2048**2
    M = P // m2
    hand = 3 * (Lv * ((8 * hv * hv + 4 * hv * iv) * P + 4 * hv * P2)
                + (1 + nds) * M * (2 * (m2 * hv) ** 2 + 2 * m2 * hv * dout))
    spec = load_model("qwen3-vl-8b")
    b = compute_flops(spec, BatchStats.from_batch(seq_lens=[512, 1024, 2048], image_grids=VERL_VISION, spec=spec),
                      "megatron-bridge")
    assert b.vision == hand
    assert round(b.vision / 1e12, 2) == 11.76


def test_pr2575_per_visual_token_qwen3_vl_30b_a3b():
    # reference §3: per merged token at 1024 patches/frame, Bridge-style ViT = 12.13 GF; patch embed adds 0.042
    spec = load_model("qwen3-vl-30b-a3b")
    frame = BatchStats.from_batch(seq_len=256, image_grids=[(1, 32, 32)], spec=spec)  # 1024 patches, 256 tokens
    bridge = compute_flops(spec, frame, "megatron-bridge").vision / 256
    pr = compute_flops(spec, frame, "mbridge-pr2575").vision / 256
    assert round(bridge / 1e9, 2) == 12.13
    assert round((pr - bridge) / 1e9, 3) == 0.042


def test_exact_qwen3_vl_vision_by_hand():
    # one 1x4x4 image: P=16, P2=256, M=4 -- every matmul written out
    spec = load_model("qwen3-vl-30b-a3b")
    hv, iv, Lv, dout = 1152, 4304, 27, 2048
    P, P2, M = 16, 256, 4
    fwd = {
        "vision.patch_embed": 2 * P * (3 * 2 * 16 * 16) * hv,
        "vision.attn_proj": Lv * 2 * P * (3 * hv * hv + hv * hv),
        "vision.attn_core": Lv * 4 * hv * P2,
        "vision.mlp": Lv * 2 * P * 2 * hv * iv,
        "vision.merger": 2 * M * (4608 * 4608 + 4608 * dout),
        "vision.deepstack_merger": 3 * 2 * M * (4608 * 4608 + 4608 * dout),
    }
    b = compute_flops(spec, BatchStats.from_batch(seq_len=64, image_grids=[(1, 4, 4)], spec=spec), mode="forward")
    for name, value in fwd.items():
        assert b.components[name] == value, name


def test_qwen25_vl_gated_mlp_and_windows_by_hand():
    spec = load_model("qwen2.5-vl-7b")
    hv, iv = 1280, 3420
    stats = BatchStats.from_batch(seq_len=100, image_grids=[(1, 10, 14)], spec=spec)
    b = compute_flops(spec, stats, mode="forward")
    assert b.components["vision.mlp"] == 32 * 2 * 140 * 3 * hv * iv
    # 4 full layers on the 140-patch frame, 28 window layers on the 6800 window statistic
    assert b.components["vision.attn_core"] == 4 * hv * (4 * 140**2 + 28 * 6800)
    assert b.components["vision.deepstack_merger"] == 0


def test_qwen25_vl_generic_vs_correct_table():
    # reference §5: Qwen2.5-VL-7B ViT forward FLOPs per patch (blocks only), "correct" column
    spec = load_model("qwen2.5-vl-7b")
    expected = {256: 1274e6, 1024: 1290e6, 4096: 1353e6, 16384: 1605e6}
    for patches, per_patch in expected.items():
        side = int(patches**0.5)
        b = compute_flops(spec, BatchStats.from_batch(seq_len=patches, image_grids=[(1, side, side)], spec=spec),
                          mode="forward")
        blocks = sum(b.components[k] for k in ("vision.attn_proj", "vision.attn_core", "vision.mlp"))
        assert blocks / patches == pytest.approx(per_patch, rel=2e-3)


def test_deepseek_v3_megatron_per_token_near_published():
    # Megatron-Bridge performance summary: DeepSeek-V3 GB300 1635 TFLOP/s/GPU / 6,288 tokens/s/GPU = 260 GF/token
    spec = load_model("deepseek-v3")
    got = compute_flops(spec, BatchStats.from_batch(seq_len=4096), "megatron-lm").total / 4096
    assert got == pytest.approx(1635e12 / 6288, rel=0.02)
