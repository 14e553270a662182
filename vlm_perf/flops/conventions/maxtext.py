"""``maxtext``: MaxText's ``calculate_tflops_training_per_device`` (``src/maxtext/utils/maxtext_utils.py``, commit
e591f30cbbf2), the number behind ``TFLOP/s/device`` in its step line.

Everything is configured, not measured: B = rows (``per_device_batch_size`` x devices), s = the padded row length
(``max_target_length``); no packing or ragged awareness. Forward FLOPs here (the function bills x3):

* LM, per layer: QKV 2Bs*h*(H + 2G)*d, output 2Bs*h*H*d, FFN 2Bs*F*h*(n_act + 1) (n_act = 2 gated), MoE gate
  2Bs*h*E + top-k routed FFNs; unembedding 2Bs*h*V (the vocabulary of MaxText's model YAML: Gemma 3 262,144);
  causal core 2Bs^2*H*d per layer; Gemma 3 (pattern 6): L // 6 global layers at 2Bs^2*H*d and the others
  4B(s*W - W^2/2)*H*d with W = min(sliding_window, s).
* Gemma 3 vision (``calculate_gemma3_vision_layers_tflops_per_device``), hard-coded tower (patch 14, 1152 wide,
  MLP 4304, 27 layers, pool 4) and **one 896-px image per sample** whatever the batch holds: N = 4096 patches,
  patch embed 2BN*C*14^2*1152, per layer 8BN*1152^2 + 4BN*1152*4304 + attention 4BN^2*1152, projector
  2B(N/16)*1152*h. ``freeze_vision_encoder_params`` (MaxText's default: true) bills the encoder forward only and
  the projector x3: pass the tower as frozen to reproduce it.
"""

from __future__ import annotations

from typing import Any

from ...arch.parts import frozen_stages
from ...arch.spec import ModelSpec
from ...stats.batch import BatchStats
from ..breakdown import Options
from .base import Convention, Pin, register_convention

MAXTEXT_VOCAB = {"gemma3": 262_144, "gemma3_text": 262_144}  # MaxText's model YAMLs (HF configs: 262,208)
GEMMA3_VIT = dict(patch=14, width=1152, mlp=4304, layers=27, pool=4, image=896, channels=3)


def _forward(spec: ModelSpec, s: BatchStats, _: Options) -> dict[str, Any]:
    lm, h = spec.lm, spec.lm.hidden_size
    family = spec.family or spec.model_type
    rows = s.lm_samples
    seq = s.lm_padded_tokens / rows
    tokens = s.lm_padded_tokens
    H, G, d, L = lm.num_heads, lm.num_kv_heads, lm.head_dim, lm.num_layers
    out: dict[str, Any] = {
        "lm.attn_proj": L * (2 * h * (H + 2 * G) * d + 2 * h * H * d) * tokens,
        "lm.logits": 2 * h * MAXTEXT_VOCAB.get(family, lm.vocab_size) * tokens,
        "lm.dense_mlp": 0, "lm.routed_experts": 0, "lm.shared_experts": 0, "lm.router": 0, "lm.mtp": 0,
    }
    if lm.moe is not None:
        out["lm.router"] = L * 2 * h * lm.moe.num_experts * tokens
        out["lm.routed_experts"] = L * 2 * 3 * h * lm.moe.expert_intermediate_size * lm.moe.top_k * tokens
    else:
        out["lm.dense_mlp"] = L * 2 * 3 * h * lm.intermediate_size * tokens
    if family in ("gemma3", "gemma3_text"):
        n_global = L // 6
        w = lm.sliding_window or 0
        if isinstance(seq, (int, float)):
            window: Any = min(w, seq)
        else:  # polars expressions (per-window statistics)
            import polars as pl

            window = pl.min_horizontal(pl.lit(float(w)), seq)
        local = 4 * rows * (seq * window - 0.5 * window * window) * H * d
        out["lm.attn_core"] = n_global * 2 * rows * seq * seq * H * d + (L - n_global) * local
    else:
        out["lm.attn_core"] = L * 2 * rows * seq * seq * H * d
    if family == "gemma3":
        v = GEMMA3_VIT
        n = (v["image"] // v["patch"]) ** 2
        hv = v["width"]
        out.update({
            "vision.patch_embed": 2 * rows * n * v["channels"] * v["patch"] ** 2 * hv,
            "vision.attn_proj": v["layers"] * 8 * rows * n * hv * hv,
            "vision.mlp": v["layers"] * 4 * rows * n * hv * v["mlp"],
            "vision.attn_core": v["layers"] * 4 * rows * n * n * hv,
            "vision.merger": 2 * rows * (n // v["pool"] ** 2) * hv * h,
            "vision.deepstack_merger": 0,
        })
    return out


def _frozen_rule(spec: ModelSpec, options: Options) -> dict[str, Any]:
    """``freeze_vision_encoder_params``: encoder (patch embed, layers, attention) x1, projector x3."""
    if "vision_tower" in frozen_stages(options.frozen):
        return {c: 1 for c in ("vision.patch_embed", "vision.attn_proj", "vision.mlp", "vision.attn_core")}
    return {}


MAXTEXT = register_convention(Convention(
    name="maxtext",
    pin=Pin("MaxText", "AI-Hypercomputer/maxtext", "src/maxtext/utils/maxtext_utils.py",
            "calculate_tflops_training_per_device (+ calculate_mixed_attention_model_tflops_training_per_device, "
            "calculate_gemma3_vision_layers_tflops_per_device)", "main e591f30cbbf2 (2026-08-22)",
            verified="tests/flops/test_framework_conventions.py: hand arithmetic from the cited lines "
                     "(MaxText needs JAX; it does not import on this CPU test environment)"),
    formula=("3 x [per layer 2Bs*h*((H+2G)d + Hd) + FFN 2Bs*3hF (MoE: gate 2Bs*hE + k routed) + causal core "
             "(Gemma 3: L//6 global 2Bs^2Hd, others 4B(sW - W^2/2)Hd) + 2Bs*hV]; Gemma 3 adds a hard-coded "
             "SigLIP tower on one 896-px image per sample"),
    deviations=("configured shapes: every row billed at the padded length, packed documents priced as one sequence",
                "Gemma 3 vision: one 896-px image per sample whatever the batch holds (text-only rows included), "
                "pan-and-scan crops ignored, tower sizes hard-coded",
                "Gemma 3 vocabulary 262,144 (MaxText's YAML) instead of the checkpoint's 262,208",
                "Gemma 3 image-block bidirectional attention not counted; sliding edge as s*W - W^2/2",
                "frozen tower (freeze_vision_encoder_params, MaxText's default): encoder x1, projector x3",
                "other VLMs: vision counted as 0 by MaxText (not defined here)"),
    forward=_forward,
    families=("gemma3", "gemma3_text", "llama", "qwen3", "qwen3_moe"),
    frozen_rule=_frozen_rule,
))
