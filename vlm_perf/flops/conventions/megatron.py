"""Megatron-family conventions: ``megatron-lm``, ``megatron-bridge``, ``mbridge-pr2575``.

All share Megatron's LM formula; the functions here return FORWARD FLOPs, and the frameworks bill x3
(the conventions' ``training_rule``):
  2*S*[sum_layers (attention projections) + MLP + experts + shared + h*V_pad*(1 + n_mtp)]
  + 2*q*L*S2 (causal half; MLA: H*(d_qk + d_v)*S2 per layer) + MTP eh-projection
with no router GEMM and the vocabulary padded to a multiple of 128 (x TP; TP=1 assumed).
They differ in the token statistics and the vision term.
"""

from __future__ import annotations

from typing import Any

from ...arch.blocks import MoEMLP
from ...arch.spec import LMSpec, ModelSpec, VisionSpec
from ...stats.batch import BatchStats
from ..breakdown import Options
from ..language import attn_core_per_token_sq, linear_per_token, mtp_mlp_per_token
from .base import QWEN_AND_DECODER_FAMILIES, Convention, Pin, register_convention

HYBRID_GDN_FAMILIES = ("qwen3_5", "qwen3_5_moe")  # Megatron-LM's gated_delta_net branch

VOCAB_MULTIPLE = 128  # Megatron's make_vocab_size_divisible_by default (x tensor-parallel size)


def padded_vocab(vocab: int, multiple: int = VOCAB_MULTIPLE) -> int:
    return -(-vocab // multiple) * multiple


def megatron_lm_terms(lm: LMSpec, tokens: Any, tokens_sq: Any) -> dict[str, Any]:
    """Megatron's LM formula, forward FLOPs by component (causal half).

    Starts from the exact per-token GEMMs and applies Megatron's differences: no router, the padded
    vocabulary, and MLA's q/kv LoRA norms billed as one multiply-add per rank.
    """
    h = lm.hidden_size
    per_token = linear_per_token(lm)
    per_token["lm.router"] = 0
    per_token["lm.logits"] = 2 * h * padded_vocab(lm.vocab_size)
    if lm.mla is not None:
        per_token["lm.attn_proj"] += lm.num_layers * 2 * ((lm.mla.q_lora_rank or 0) + lm.mla.kv_lora_rank)
    core_per_layer = attn_core_per_token_sq(lm) * tokens_sq / 2
    out = {name: value * tokens for name, value in per_token.items()}
    out["lm.attn_core"] = lm.num_layers * core_per_layer
    out["lm.mtp"] = 0
    if lm.num_mtp_layers:
        proj = per_token["lm.attn_proj"] // lm.num_layers
        layer = proj + mtp_mlp_per_token(lm, router=False) + 2 * (3 * h + 2 * h * h)  # + eh norms, eh_proj
        out["lm.mtp"] = lm.num_mtp_layers * ((layer + per_token["lm.logits"]) * tokens + core_per_layer)
    return out


def bridge_vit_terms(v: VisionSpec, s: BatchStats, patch_embed: bool) -> dict[str, Any]:
    """Megatron-Bridge's ViT term (forward): q_v = h_v, plain 2-matrix MLP, full per-frame attention."""
    h = v.hidden_size
    merger = s.vision_merged_tokens * (2 * v.merger_width**2 + 2 * v.merger_width * v.out_hidden_size)
    return {
        "vision.patch_embed": 2 * s.vision_patches * h * v.patch_volume if patch_embed else 0,
        "vision.attn_proj": v.depth * 8 * h * h * s.vision_patches,
        "vision.attn_core": v.depth * 4 * h * s.vision_patches_sq_frame,
        "vision.mlp": v.depth * 4 * h * v.intermediate_size * s.vision_patches,
        "vision.merger": merger,
        "vision.deepstack_merger": v.num_deepstack * merger,
    }


def _configured_sq(s: BatchStats) -> Any:
    """S * s_cfg with s_cfg = padded tokens per sample (the configured sequence length)."""
    return s.lm_padded_tokens * s.lm_padded_tokens / s.lm_samples


def _megatron_lm(spec: ModelSpec, s: BatchStats, _: Options) -> dict:
    if spec.family in HYBRID_GDN_FAMILIES:
        return megatron_lm_hybrid_terms(spec, s.lm_tokens, s.lm_tokens_sq)
    return megatron_lm_terms(spec.lm, s.lm_tokens, s.lm_tokens_sq)


def _megatron_bridge(spec: ModelSpec, s: BatchStats, _: Options) -> dict:
    if spec.family in HYBRID_GDN_FAMILIES:  # flop_utils' gated_delta_net branch (Qwen3.5 providers set it)
        out = megatron_lm_hybrid_terms(spec, s.lm_padded_tokens, s.lm_tokens_sq)
    else:
        out = megatron_lm_terms(spec.lm, s.lm_padded_tokens, s.lm_tokens_sq)
    if spec.vision is not None:
        out = {**bridge_vit_terms(spec.vision, s, patch_embed=False), **out}
    return out


_NO_NUM_POSITION_EMBEDDINGS_FIELD = ("glm4v_moe",)


def _pr2575(spec: ModelSpec, s: BatchStats, _: Options) -> dict:
    if spec.vision is None:  # the PR moved only VLMs to runtime lengths: text-only keeps B x seq_length
        return megatron_lm_terms(spec.lm, s.lm_padded_tokens, _configured_sq(s))
    tokens_sq = _configured_sq(s) if spec.lm.mla is not None else s.lm_tokens_sq
    out = megatron_lm_terms(spec.lm, s.lm_tokens, tokens_sq)
    vit = bridge_vit_terms(spec.vision, s, patch_embed=True)
    # the PR's vision function returns 0 without a vision_config.num_position_embeddings field: Qwen2.5-VL's config,
    # and GLM-4.5V's Glm4vVisionConfig (its tower has position embeddings, but under no field of that name)
    if not spec.vision.num_position_embeddings or spec.family in _NO_NUM_POSITION_EMBEDDINGS_FIELD:
        vit = {k: 0 for k in vit}
    return {**vit, **out}


def _megatron_lm_qwen35_vl_v2(spec: ModelSpec, s: BatchStats, o: Options) -> dict:
    """Megatron-LM dev + PR #6173: the LM formula plus the ``qwen35_vl_v2`` vision term (Qwen3.5-VL only)."""
    out = _megatron_lm(spec, s, o)
    v = spec.vision
    if spec.family not in HYBRID_GDN_FAMILIES or v is None:
        return out
    img = s.images_only()  # the example forward_step feeds image_grid_thw only
    h, q, mv = v.hidden_size, v.attn_width, v.merge_unit * v.hidden_size
    vision = {
        "vision.patch_embed": 2 * img.vision_patches * v.patch_volume * h,
        "vision.attn_proj": v.depth * 2 * img.vision_patches * (3 * h * q + q * h),
        "vision.attn_core": v.depth * 4 * q * img.vision_patches_sq_frame,  # bidirectional: no causal half
        "vision.mlp": v.depth * 2 * img.vision_patches * 2 * h * v.intermediate_size,
        "vision.merger": 2 * img.vision_merged_tokens * (mv * mv + mv * v.out_hidden_size),
        "vision.deepstack_merger": 0,
    }
    return {**vision, **out}


_LM_DEVIATIONS = (
    "no router GEMM (exact: 2*h*E per token per MoE layer)",
    "logits on the vocabulary padded to a multiple of 128 (equal for all shipped presets)",
    "always x3 per GEMM: frozen parts are billed as trainable; patch embed (if counted) x3, exact x2",
    "causal half is fixed",
)

_MLM_FILE = "megatron/training/training.py"
_MBRIDGE_FILE = "src/megatron/bridge/training/utils/flop_utils.py"
_NO_QWEN2_VL = ("Megatron-Bridge ships no Qwen2-VL model provider (only Qwen2.5-VL, Qwen3-VL, Qwen3.5), so it "
                "cannot train this model and prints no number for it")
_NO_GLM41V = ("Megatron-Bridge registers a bridge for Glm4vMoeForConditionalGeneration (GLM-4.5V) only, none for "
              "GLM-4.1V's Glm4vForConditionalGeneration (src/megatron/bridge/models/glm_vl/), so it cannot train this "
              "model and prints no number for it")

MEGATRON_LM = register_convention(Convention(
    name="megatron-lm",
    pin=Pin("Megatron-LM", "NVIDIA/Megatron-LM", _MLM_FILE, "num_floating_point_operations",
            "main d98e8a64ddf3 (2026-08)",
            verified="tests/flops/test_framework_record.py: the framework's own function at the pinned commit on 21 cases; "
                     "tests/flops/test_published.py: Qwen3-30B-A3B 23,006,281,728 FLOPs/token by hand from the "
                     "cited formula, within 1% of Megatron-Bridge's published 1029 TFLOP/s / 44,544 tok/s"),
    formula="Megatron LM formula on real tokens S = sum(s), S2 = sum(s^2); no vision term",
    deviations=("vision tower and mergers not counted at all",) + _LM_DEVIATIONS + (
        "qwen3_5 / qwen3_5_moe: gated-delta rule billed as 4 recurrent-state matmuls per token (8*Hv*dv^2), "
        "not the chunked algorithm; no shared-expert gate",),
    forward=_megatron_lm,
    counts_vision=False,
    families=QWEN_AND_DECODER_FAMILIES + ("qwen3_5", "qwen3_5_moe"),  # GDN branch: megatron_lm_hybrid_terms
))

MEGATRON_LM_QWEN35_VL_V2 = register_convention(Convention(
    name="megatron-lm@dev-qwen35_vl_v2",
    variant_of="megatron-lm",
    pin=Pin("Megatron-LM", "NVIDIA/Megatron-LM", _MLM_FILE,
            "num_floating_point_operations + vision_flops_variant 'qwen35_vl_v2' (PR #6173 into dev)",
            "dev d48bd6be0a85 + PR #6173 head 14a558e4e0ad (2026-08)",
            verified="tests/flops/test_framework_record.py: the framework's own function at the pinned commit on 21 cases; "
                     "tests/flops/test_framework_conventions.py: vision term by hand from the PR's formula"),
    formula=("megatron-lm's LM formula, plus for Qwen3.5-VL (qwen3_5 / qwen3_5_moe) 6P*C*T_p*P_s^2*h_v "
             "+ L_v*[6P*(3h_v*q_v + q_v*h_v + 2h_v*i_v) + 12q_v*P2_frame] + 6M*((m^2h_v)^2 + m^2h_v*d_out) "
             "over IMAGE grids"),
    deviations=("vision counted for Qwen3.5-VL only (the factory sets the variant; other VLMs: LM only)",
                "video grids not counted (the example forward_step passes image_grid_thw only)",
                "ViT attention full (no causal half), one merger, patch embed x3") + _LM_DEVIATIONS,
    forward=_megatron_lm_qwen35_vl_v2,
    families=QWEN_AND_DECODER_FAMILIES + ("qwen3_5", "qwen3_5_moe"),
    text_only_families=("qwen2_vl", "qwen2_5_vl", "qwen3_vl", "qwen3_vl_moe"),
))

MEGATRON_BRIDGE = register_convention(Convention(
    name="megatron-bridge",
    pin=Pin("Megatron-Bridge", "NVIDIA-NeMo/Megatron-Bridge", _MBRIDGE_FILE,
            "num_floating_point_operations + vit_flops", "main 067f987df03b (2026-08-22)",
            verified="tests/flops/test_framework_record.py: the framework's own function at the pinned commit on 21 cases; "
                     "tests/flops/test_published.py: ViT term equals its closed form written in the test"),
    formula=("Megatron LM formula on padded tokens (mbs x padded length) with S2 from cu_seqlens, plus "
             "3*[L_v*((8h_v^2 + 4h_v*i_v)*P + 4h_v*P2_frame) + (1+n_ds)*M*(2(m^2h_v)^2 + 2m^2h_v*d_out)]"),
    deviations=("linear LM terms on padded tokens (exact: real tokens)",
                "ViT MLP always 2 matrices: Qwen2.5-VL's gated MLP under-counted by 1/3",
                "Qwen2.5-VL window attention counted as full per-frame attention in every layer",
                "patch-embed convolution not counted",
                "GLM-4.5V (glm4v_moe; Bridge's GLM-4.5V provider + generic vlm_step): ViT MLP billed as 2 matrices "
                "of vision_config.intermediate_size (the merger width 10944) instead of the gated 3 x out_hidden_size "
                "(4096) MLP (x1.78); downsample conv + merger billed as Qwen's merger (m^2h_v)^2 + m^2h_v*d_out") \
        + _LM_DEVIATIONS + (
        "qwen3_5 / qwen3_5_moe: flop_utils' gated_delta_net branch (as megatron-lm) on padded tokens; its "
        "vit_flops on the Qwen3.5 tower (plain MLP and no deepstack: only the patch embed is missing)",),
    forward=_megatron_bridge,
    families=QWEN_AND_DECODER_FAMILIES + ("glm4v_moe",) + HYBRID_GDN_FAMILIES,
    refuses={"qwen2_vl": _NO_QWEN2_VL, "glm4v": _NO_GLM41V},
))

MBRIDGE_PR2575 = register_convention(Convention(
    name="mbridge-pr2575",
    pin=Pin("Megatron-Bridge", "NVIDIA-NeMo/Megatron-Bridge", _MBRIDGE_FILE,
            "num_floating_point_operations + its vision function (PR #2575 'Add vision flops calculation for vlm')",
            "PR #2575 head (closed, not merged; 2026-02)",
            verified="tests/flops/test_framework_record.py: the framework's own function at the pinned commit on 21 cases; "
                     "tests/flops/test_published.py (per-visual-token figures) and "
                     "tests/flops/test_framework_conventions.py (text-only, Qwen2.5-VL and GLM-4.5V branches by "
                     "hand; GLM-4.5V also the PR head's own function's value)"),
    formula=("VLMs: Megatron LM formula on runtime S = sum(s), S2 = sum(s^2) (MLA: configured length), plus "
             "3*[2P*h_v*C*T_p*P_s^2 + L_v*(8P*h_v^2 + 4h_v*P2_frame + 4P*h_v*i_v) "
             "+ (1+n_ds)*(2M*(m^2h_v)^2 + 2M*m^2h_v*d_out)] (per-sample averages x B = batch totals); "
             "text-only models: configured length (S = B*s_cfg, S2 = B*s_cfg^2)"),
    deviations=("ViT MLP always 2 matrices (Qwen2.5-VL gated MLP under-counted)",
                "Qwen2.5-VL window attention counted as full per-frame attention",
                "vision term 0 for towers whose config has no num_position_embeddings (Qwen2.5-VL)",
                "text-only models: configured sequence length, padding included (packed documents not seen)",
                "the PR stored the averages of the last microbatch only; vlm-perf uses the intended totals",
                "qwen3_5 / qwen3_5_moe (the PR head's Qwen3.5-VL bridge): its flop_utils has no gated-delta-net "
                "branch, so every layer is billed as plain GQA attention (no output gate) on runtime lengths; "
                "vision counted (the config has num_position_embeddings), no deepstack",
                "glm4v_moe (GLM-4.5V: GLM45VBridge + vlm_step): LM formula on runtime lengths, shared expert of "
                "moe_intermediate_size (the bridge's mapping), no MTP (the bridge sets mtp_num_layers=0); vision 0 "
                "(Glm4vVisionConfig has no num_position_embeddings)",
                ) + _LM_DEVIATIONS,
    forward=_pr2575,
    families=QWEN_AND_DECODER_FAMILIES + HYBRID_GDN_FAMILIES + ("glm4v_moe",),
    refuses={"qwen2_vl": _NO_QWEN2_VL, "glm4v": _NO_GLM41V},
))


# --- qwen3_5 ---
# Megatron-LM's num_floating_point_operations (megatron/training/training.py, main) has a branch for
# experimental_attention_variant "gated_delta_net" (what Megatron-Bridge's Qwen3.5 providers set): per token,
# 6*[h*(2*qk + 2*v + 2*Hv) + k*(2*qk + v) + 4*Hv*dv^2 + h*v] per GDN layer, the standard GQA term (with the
# output-gate projection) on the other layers, routed + shared experts (no router, no shared-expert gate),
# logits on the padded vocabulary.

def megatron_lm_hybrid_terms(spec: ModelSpec, tokens: Any, tokens_sq: Any) -> dict[str, Any]:
    """Megatron-LM's formula for a hybrid gated-delta-net LM (forward FLOPs by component, causal half)."""
    from ...arch.blocks import DecoderAttention, GatedDeltaNet, LMHead
    from ...arch.parts import LANGUAGE_MODEL

    blocks = tuple(b for b in spec.blocks if b.part == LANGUAGE_MODEL)
    per_token = linear_per_token(spec.lm, blocks)  # GEMMs of the inventory (GDN: projections + conv taps)
    per_token["lm.router"] = 0
    head = next(b for b in blocks if isinstance(b, LMHead))
    per_token["lm.logits"] = 2 * head.hidden * padded_vocab(head.vocab)
    core = 0
    for b in blocks:
        if isinstance(b, MoEMLP) and b.num_shared:  # Megatron bills no shared-expert gate
            per_token["lm.shared_experts"] = per_token["lm.shared_experts"] - b.count * (
                b.per_token()["shared"] - 2 * 3 * b.hidden * b.shared_width * b.num_shared)
        if isinstance(b, GatedDeltaNet):
            core = core + b.count * 2 * 4 * b.value_heads * b.value_head_dim**2 * tokens  # KK^T, VK^T, S(..), SQ
        elif isinstance(b, DecoderAttention):
            core = core + b.count * b.core_per_token_sq() * tokens_sq / 2
    out = {name: value * tokens for name, value in per_token.items()}
    out["lm.attn_core"] = core
    out["lm.mtp"] = 0
    return out
