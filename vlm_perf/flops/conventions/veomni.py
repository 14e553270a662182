"""``veomni``: VeOmni's ``VeomniFlopsCounter`` (``veomni/utils/count_flops.py``, release 0.1.12).

Forward FLOPs here are the function's terms divided by its training factor (6 on weights, 12 on attention
cores = 3 x forward). What it counts, restated from the cited file:

* LM (``_compute_qwen_dense_text_flops`` / ``_compute_qwen3_moe_text_flops`` / ``_estimate_llama_flops``):
  6 * S * [L * (h*(2q + 2kv) + 3hF | h*E + 3h*F_e*k) + V*h] (lm_head only, the embedding is a lookup) and an
  attention core 12 * S2 * d * H * L: **no causal half**. ``head_dim`` from the config, else hidden // heads
  (Llama: always hidden // heads).
* Qwen2/2.5-VL ViT (``_estimate_qwen_vit_flop``): 6P * [L_v * (4h_v^2 + f*h_v*i_v) + (d_out + m^2h_v)*m^2h_v]
  (f = 2 Qwen2-VL, 3 Qwen2.5-VL gated; merger on P rows; **no patch embed**), attention 12 * h_v * L_full * P2
  and, for Qwen2.5-VL's window layers, 12 * h_v * P * w^2 per layer with w = (window_size // m // P_s) * m
  (an upper bound: edge windows are smaller).
* Qwen3-VL ViT (``_estimate_qwen3_vit_flop``): the patch-embed conv, a plain MLP, 1 + len(deepstack) mergers
  on P rows, 12 * h_v * L_v * P2.
* Per-frame ViT lengths from image **and video** grids (VeOmni's trainer builds them from both).
* ``freeze_vit``: the whole ViT (tower, patch embed and mergers) forward-only (x1 here; its 2 / 4 factors).
"""

from __future__ import annotations

from typing import Any

from ...arch.parts import frozen_stages
from ...arch.spec import ModelSpec
from ...stats.batch import BatchStats
from ..breakdown import VISION_COMPONENTS, Options
from ..language import linear_per_token
from .base import Convention, Pin, register_convention

VEOMNI_FAMILIES = ("qwen2_vl", "qwen2_5_vl", "qwen3_vl", "qwen3_vl_moe", "qwen2", "qwen3", "qwen3_moe", "llama")


def _lm(spec: ModelSpec, s: BatchStats) -> dict[str, Any]:
    lm, h = spec.lm, spec.lm.hidden_size
    d = h // lm.num_heads if spec.lm.family == "llama" else lm.head_dim
    out = {k: v * s.lm_tokens for k, v in linear_per_token(lm).items()}
    out["lm.attn_proj"] = lm.num_layers * 2 * h * (2 * lm.num_heads * d + 2 * lm.num_kv_heads * d) * s.lm_tokens
    out["lm.logits"] = 2 * h * lm.vocab_size * s.lm_tokens
    out["lm.attn_core"] = 4 * s.lm_tokens_sq * d * lm.num_heads * lm.num_layers
    out["lm.mtp"] = 0
    return out


def _vit(spec: ModelSpec, s: BatchStats) -> dict[str, Any]:
    v = spec.vision
    assert v is not None
    family = spec.family or spec.model_type
    hv, mv, P = v.hidden_size, v.merge_unit * v.hidden_size, s.vision_patches
    merger = 2 * (v.out_hidden_size + mv) * mv * P
    if family in ("qwen2_vl", "qwen2_5_vl"):
        full = v.depth if family == "qwen2_vl" else len(v.fullatt_block_indexes)
        core = 4 * hv * full * s.vision_patches_sq_frame
        if family == "qwen2_5_vl" and v.depth > full and v.window_size:
            w = (v.window_size // v.spatial_merge_size // v.patch_size) * v.spatial_merge_size
            core = core + 4 * hv * (v.depth - full) * P * w * w
        return {"vision.patch_embed": 0,
                "vision.attn_proj": 2 * v.depth * 4 * hv * hv * P,
                "vision.mlp": 2 * v.depth * (3 if family == "qwen2_5_vl" else 2) * hv * v.intermediate_size * P,
                "vision.attn_core": core, "vision.merger": merger, "vision.deepstack_merger": 0}
    return {"vision.patch_embed": 2 * hv * v.patch_volume * P,
            "vision.attn_proj": 2 * v.depth * 4 * hv * hv * P,
            "vision.mlp": 2 * v.depth * 2 * hv * v.intermediate_size * P,
            "vision.attn_core": 4 * hv * v.depth * s.vision_patches_sq_frame,
            "vision.merger": merger,
            "vision.deepstack_merger": len(v.deepstack_visual_indexes) * merger}


def _forward(spec: ModelSpec, s: BatchStats, _: Options) -> dict[str, Any]:
    out = _lm(spec, s)
    if spec.vision is not None:
        out.update(_vit(spec, s))
    return out


def _freeze_vit_rule(spec: ModelSpec, options: Options) -> dict[str, Any]:
    """A frozen vision tower is VeOmni's ``freeze_vit``: the whole ViT (mergers included) forward-only."""
    if "vision_tower" in frozen_stages(options.frozen):
        return {c: 1 for c in VISION_COMPONENTS}
    return {}


VEOMNI = register_convention(Convention(
    name="veomni",
    pin=Pin("VeOmni", "ByteDance-Seed/VeOmni", "veomni/utils/count_flops.py",
            "VeomniFlopsCounter.estimate_flops (no LoRA)", "release 0.1.12 (PyPI)",
            verified="tests/flops/test_framework_conventions.py: VeOmni's own VeomniFlopsCounter (installed "
                     "veomni 0.1.12, loaded with stubbed imports) on dense, MoE and VLM cases, freeze_vit too"),
    formula=("6*S*[L*(h(2q+2kv) + 3hF | hE + 3hF_e*k) + Vh] + 12*S2*d*H*L; ViT 6P*[L_v(4h_v^2 + f*h_v*i_v) "
             "+ (1+n_ds)(d_out + m^2h_v)m^2h_v (+ h_v*C*T_p*P_s^2 for Qwen3-VL)] + 12h_v*(L_full*P2 "
             "+ L_window*P*w^2), image and video grids; freeze_vit: ViT forward only"),
    deviations=("LM attention core: no causal half (2x exact's causal core)",
                "mergers applied to P patches instead of M = P/m^2 merged tokens (4x)",
                "Qwen2/2.5-VL: patch embed not counted; Qwen2.5-VL windows as full w x w squares (upper bound)",
                "Qwen3-VL ViT MLP plain (correct); router counted; lm_head counted once (embedding not)",
                "frozen tower (freeze_vit): the mergers are billed forward-only too",
                "LoRA branches and deepseek_v3 / qwen3_5 / qwen3_next / gpt_oss formulas not reproduced here "
                "(not defined)"),
    forward=_forward,
    families=VEOMNI_FAMILIES,
    frozen_rule=_freeze_vit_rule,
))
