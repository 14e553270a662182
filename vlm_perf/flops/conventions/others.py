"""Conventions of torchtitan, veRL and the 6*N*D rule of thumb."""

from __future__ import annotations

from typing import Any

from ...arch.parts import LANGUAGE_MODEL
from ...arch.spec import ModelSpec
from ...stats.batch import BatchStats
from ..breakdown import Options
from ...arch.blocks import MoEMLP
from ..language import attn_core_per_token_sq, linear_per_token
from .base import QWEN_AND_DECODER_FAMILIES, Convention, Pin, register_convention


VERL_HYBRID = ("qwen3_5", "qwen3_5_moe")  # the hybrid gated-delta-net families (veRL / torchtitan formulas)


def _torchtitan_hybrid(spec: ModelSpec, tokens: Any, seq_cfg: Any) -> dict[str, Any]:
    """torchtitan ``Qwen35Model.get_nparams_and_flops`` -> ``get_moe_model_nparams_and_flops`` (forward):
    2 x every decoder parameter (norms, conv taps, A_log / dt_bias included; embedding excluded unless tied;
    routed experts x top_k // num_experts; vision encoder excluded) per token, plus 2*H*(2*head_dim)*s_cfg per
    token per full-attention layer; the gated-delta recurrence has no term."""
    from ...arch.blocks import DecoderAttention, DenseMLP, LMHead, TokenEmbedding

    out = dict.fromkeys(("lm.attn_proj", "lm.dense_mlp", "lm.routed_experts", "lm.shared_experts", "lm.router",
                         "lm.logits", "lm.attn_core"), 0)
    routed_total, top_k, num_experts = 0, 1, 1
    for b in spec.blocks:
        if b.part != LANGUAGE_MODEL:
            continue
        n = b.count * b.params()
        if isinstance(b, TokenEmbedding):
            if spec.lm.tie_word_embeddings:
                out["lm.logits"] += n
        elif isinstance(b, MoEMLP):
            h = b.hidden
            routed = b.count * b.num_experts * 3 * h * b.expert_width
            router = b.count * (b.num_experts * h + (b.num_experts if b.router_bias else 0))
            routed_total, top_k, num_experts = routed_total + routed, b.top_k, b.num_experts
            out["lm.router"] += router
            out["lm.shared_experts"] += n - routed - router
        elif isinstance(b, DenseMLP):
            out["lm.dense_mlp"] += n
        elif isinstance(b, LMHead):
            out["lm.logits"] += n
        else:
            out["lm.attn_proj"] += n
        if isinstance(b, DecoderAttention):
            out["lm.attn_core"] += b.count * 2 * b.num_heads * 2 * b.head_dim * seq_cfg
    out["lm.routed_experts"] = routed_total * top_k // num_experts
    return {k: (v if k == "lm.attn_core" else 2 * v) * tokens for k, v in out.items()}


def _torchtitan(spec: ModelSpec, s: BatchStats, _: Options) -> dict:
    tokens = s.lm_padded_tokens  # labels.numel(): padding included
    seq_cfg = s.lm_padded_tokens / s.lm_samples
    if spec.family in VERL_HYBRID:
        return _torchtitan_hybrid(spec, tokens, seq_cfg)
    out = {k: v * tokens for k, v in linear_per_token(spec.lm).items()}
    out["lm.attn_core"] = spec.lm.num_layers * attn_core_per_token_sq(spec.lm) * seq_cfg * tokens
    return out


# --- veRL (verl/utils/flops_counter.py): forward = the function's 6*N*S terms / 3 -------------------------

# veRL's ESTIMATE_FUNC routes glm4v (GLM-4.1V) to _estimate_qwen2_flops, which reads the text fields at the top
# level of the config (config.hidden_size, ...); GLM-4.1V's config.json and transformers' Glm4vConfig keep them under
# text_config, so veRL raises AttributeError there (checked: FlopsCounter of main 1dda039b9c63 / v0.9.0 and of
# v0.7.1 bec9ef74768d on transformers 5.24's Glm4vConfig of the GLM-4.1V-9B-Thinking config)
_VERL_GLM41V = ("veRL routes glm4v to _estimate_qwen2_flops (verl/utils/flops_counter.py), which reads "
                "config.hidden_size at the top level; a GLM-4.1V config keeps its text fields under text_config, so "
                "veRL raises AttributeError ('Glm4vConfig' object has no attribute 'hidden_size') at its first MFU "
                "and prints no number")


def _verl_vit(spec: ModelSpec, s: BatchStats) -> dict[str, Any]:
    """``_estimate_qwen3_vit_flop`` (forward): every term on the P image patches, merger included."""
    v = spec.vision
    assert v is not None
    img = s.images_only()  # veRL builds ViT lengths from image_grid_thw only
    merger = (v.out_hidden_size + v.merger_width) * v.merger_width * img.vision_patches  # P rows, not M
    return {
        "vision.patch_embed": 2 * img.vision_patches * v.hidden_size * v.patch_volume,
        "vision.attn_proj": 2 * img.vision_patches * v.depth * 4 * v.hidden_size**2,
        "vision.mlp": 2 * img.vision_patches * v.depth * 2 * v.hidden_size * v.intermediate_size,
        "vision.attn_core": 4 * v.hidden_size * v.depth * img.vision_patches_sq_frame,
        "vision.merger": 2 * merger,
        "vision.deepstack_merger": 2 * v.num_deepstack * merger,
    }


def _verl_deepseek_v3(lm, tokens: Any, tokens_sq: Any) -> dict[str, Any]:
    """``_estimate_deepseek_v3_flops`` (forward): MLA projections (the kv up-projection as one GEMM), router,
    routed + shared experts of moe_intermediate_size, embedding + head, core S2*L*H*(d_qk + d_v); no MTP."""
    h, mla, moe = lm.hidden_size, lm.mla, lm.moe
    H, dqk = lm.num_heads, mla.qk_head_dim
    attn = (h * H * dqk if mla.q_lora_rank is None else h * mla.q_lora_rank + H * dqk * mla.q_lora_rank)
    attn += h * (mla.kv_lora_rank + mla.qk_rope_head_dim)
    attn += H * (dqk - mla.qk_rope_head_dim + mla.v_head_dim) * mla.kv_lora_rank + H * mla.v_head_dim * h
    n_moe = len(lm.moe_layers)
    n_dense = lm.num_layers - n_moe
    return {
        "lm.attn_proj": 2 * lm.num_layers * attn * tokens,
        "lm.dense_mlp": 2 * n_dense * 3 * h * lm.intermediate_size * tokens,
        "lm.routed_experts": 2 * n_moe * 3 * h * moe.expert_intermediate_size * moe.top_k * tokens,
        "lm.shared_experts": 2 * n_moe * 3 * h * moe.expert_intermediate_size * moe.num_shared_experts * tokens,
        "lm.router": 2 * n_moe * h * moe.num_experts * tokens,
        "lm.logits": 2 * 2 * lm.vocab_size * h * tokens,  # embedding + head
        "lm.attn_core": tokens_sq * lm.num_layers * (dqk + mla.v_head_dim) * H,
        "lm.mtp": 0,
    }


def _verl_hybrid(spec: ModelSpec, tokens: Any, tokens_sq: Any) -> dict[str, Any]:
    """``_estimate_qwen3_5_flops`` (forward): projections + conv taps of every layer (the gated q_proj on full
    layers), MoE router + routed + shared + shared gate, embedding + head, core 2*S2*d*H per full layer, and
    5*dk*dv*Hv per token per gated-delta layer (the function's 15 / 3)."""
    from ...arch.blocks import DecoderAttention, GatedDeltaNet

    blocks = tuple(b for b in spec.blocks if b.part == LANGUAGE_MODEL)
    out = {k: v * tokens for k, v in linear_per_token(spec.lm, blocks).items()}
    lm = spec.lm
    out["lm.logits"] = 2 * 2 * lm.vocab_size * lm.hidden_size * tokens
    core = 0
    for b in blocks:
        if isinstance(b, GatedDeltaNet):
            core = core + b.count * 5 * b.key_head_dim * b.value_head_dim * b.value_heads * tokens
        elif isinstance(b, DecoderAttention):
            core = core + b.count * 2 * tokens_sq * b.head_dim * b.num_heads
    out["lm.attn_core"] = core
    return out


def _verl_lm(spec: ModelSpec, s: BatchStats, derived_head_dim: bool) -> dict[str, Any]:
    """``_estimate_qwen2_flops`` / ``_qwen2_moe_flops`` / ``_qwen3_vl(_moe)_flops`` LM part (forward):
    2*N_dense*S with N_dense = L*(3hF | hE + 3hF_e*k) + L*h*(q + 2kv + q) + 2Vh, core 2*S2*d*H*L."""
    lm, h = spec.lm, spec.lm.hidden_size
    tokens = s.lm_tokens
    if lm.mla is not None:
        return _verl_deepseek_v3(lm, tokens, s.lm_tokens_sq)
    if spec.family in VERL_HYBRID:
        return _verl_hybrid(spec, tokens, s.lm_tokens_sq)
    out = {k: v * tokens for k, v in linear_per_token(lm).items()}
    d = h // lm.num_heads if derived_head_dim else lm.head_dim
    out["lm.attn_proj"] = lm.num_layers * 2 * h * (2 * lm.num_heads * d + 2 * lm.num_kv_heads * d) * tokens
    out["lm.logits"] = 2 * (2 * h * lm.vocab_size) * tokens  # input embedding billed as a GEMM too
    out["lm.attn_core"] = 2 * s.lm_tokens_sq * d * lm.num_heads * lm.num_layers
    return out


def _verl(spec: ModelSpec, s: BatchStats, _: Options) -> dict:
    """veRL main: qwen2_vl / qwen2_5_vl / qwen3_vl / qwen3_vl_moe / qwen3_5(_moe) through the Qwen3-VL ViT formula;
    qwen3_vl's LM derives head_dim = hidden // heads (qwen3_vl_moe and the rest read the config's head_dim)."""
    family = spec.family or spec.model_type
    out = _verl_lm(spec, s, derived_head_dim=family in ("qwen3_vl", "qwen2_vl", "qwen2_5_vl"))
    if spec.vision is not None:
        out.update(_verl_vit(spec, s))
    return out


def _verl_v071(spec: ModelSpec, s: BatchStats, _: Options) -> dict:
    """veRL v0.7.1: qwen2_vl / qwen2_5_vl through the text-only _estimate_qwen2_flops (vision 0)."""
    family = spec.family or spec.model_type
    out = _verl_lm(spec, s, derived_head_dim=family == "qwen3_vl")
    if spec.vision is not None and family in ("qwen3_vl", "qwen3_vl_moe"):
        out.update(_verl_vit(spec, s))
    return out


def _six_nd(spec: ModelSpec, s: BatchStats, _: Options) -> dict:
    lm_blocks = tuple(b for b in spec.blocks if b.part == LANGUAGE_MODEL) if spec.blocks else None
    return {k: v * s.lm_tokens for k, v in linear_per_token(spec.lm, lm_blocks).items()}


# torchtitan main b5bcd76c66d0 torchtitan/models/ holds llama3, qwen3 (dense + MoE), qwen3_5, deepseek_v3, gpt_oss,
# kimi_k2_7, flux, muse_glimmer: no model class (so no get_nparams_and_flops) for these families
_NO_TITAN_MODEL = ("torchtitan main b5bcd76c66d0 has no model for it (torchtitan/models/: llama3, qwen3, qwen3_5, "
                   "deepseek_v3, gpt_oss, ...), so it cannot train it and prints no number")
TORCHTITAN_REFUSES = {f: _NO_TITAN_MODEL for f in ("qwen2_vl", "qwen2_5_vl", "qwen3_vl", "qwen3_vl_moe", "qwen2",
                                                    "mistral")}

TORCHTITAN = register_convention(Convention(
    name="torchtitan",
    pin=Pin("torchtitan", "pytorch/torchtitan", "torchtitan/models/utils.py + torchtitan/components/metrics.py",
            "get_dense_model_nparams_and_flops / get_moe_model_nparams_and_flops (qwen3_5: Qwen35Model."
            "get_nparams_and_flops)", "main b5bcd76c66d0 (2026-08-21; before PR #4300)",
            verified="tests/flops/test_framework_record.py: the framework's own function at the pinned commit on 21 cases; "
                     "tests/flops/test_framework_conventions.py: qwen3_5_moe presets against the cited rule applied "
                     "to transformers' own parameters (meta device)"),
    formula=("per token 6*N_active + 6*L*H*(d_qk + d_v)*s_cfg, times padded tokens (labels.numel()); "
             "s_cfg = the configured sequence length (here: padded tokens per sample); no vision term"),
    deviations=("vision tower and mergers not counted",
                "attention core: no causal half and configured length instead of sum(s^2)",
                "linear terms on padded tokens",
                "router counted (as in exact); norm parameters in N omitted (<0.01%)",
                "qwen3_5 / qwen3_5_moe (Qwen35Model): N = every decoder parameter incl. norms, conv taps, A_log "
                "and dt_bias; no gated-delta recurrence term; attention term on full-attention layers only",
                "always x3 per GEMM"),
    forward=_torchtitan,
    counts_vision=False,
    families=QWEN_AND_DECODER_FAMILIES + ("qwen3_5", "qwen3_5_moe"),
    refuses=TORCHTITAN_REFUSES,
))

_VERL_FILE = "verl/utils/flops_counter.py"
_VERL_FUNCS = "FlopsCounter.estimate_flops -> ESTIMATE_FUNC[model_type]"

VERL = register_convention(Convention(
    name="verl",
    pin=Pin("veRL", "verl-project/verl", _VERL_FILE, _VERL_FUNCS, "main 1dda039b9c63 (2026-08-22; same as v0.9.0)",
            verified="tests/flops/test_framework_record.py: the framework's own function at the pinned commit on 21 cases; "
                     "tests/flops/test_published.py: veRL's own tests/utils/test_flops_counter.py values "
                     "(Qwen3-VL-8B 195.379819708416 / 709.446422495232 TFLOPs) to 12 digits; "
                     "tests/flops/test_framework_conventions.py: head_dim, deepseek_v3, qwen3_5 by hand"),
    formula=("6*N_dense*S + 6*S2*d*H*L with N_dense including 2*V*h (embedding + head) and router h*E; "
             "ViT 6P*[h_v*C*T_p*P_s^2 + L_v(4h_v^2 + 2h_v*i_v) + (1+n_ds)(d_out + m^2h_v)*m^2h_v] "
             "+ 12*h_v*L_v*P2_frame over IMAGE grids only; qwen3_vl: d = hidden // heads"),
    deviations=("input embedding billed as a GEMM: +6*V*h per token",
                "merger and deepstack mergers applied to P patches instead of M = P/m^2 merged tokens (4x)",
                "video grids not counted",
                "ViT MLP always 2 matrices; no window attention (Qwen2/2.5-VL routed to the Qwen3-VL formula)",
                "qwen3_vl: head_dim derived as hidden // heads, not the config's head_dim (Qwen3-VL-4B: 80 vs 128)",
                "qwen2_vl: refused (veRL main raises AttributeError on the Qwen2-VL vision config)",
                "deepseek_v3: kv up-projection as one GEMM, shared experts of moe_intermediate_size, no MTP",
                "qwen3_5 / qwen3_5_moe: gated-delta rule as 15*dk*dv*Hv per token per layer (x3 included), "
                "shared-expert gate counted",
                "glm4v (GLM-4.1V): refused, as veRL raises AttributeError on its nested config (its ESTIMATE_FUNC "
                "entry is the flat-config qwen2 formula); glm4v_moe / glm46v are not in veRL's ESTIMATE_FUNC (it "
                "logs MFU 0)",
                "always x3 per GEMM"),
    forward=_verl,
    families=QWEN_AND_DECODER_FAMILIES + VERL_HYBRID,
    refuses={"qwen2_vl": "veRL main routes qwen2_vl to _estimate_qwen3_vl_flops, whose ViT term reads "
                         "vision_config.intermediate_size and out_hidden_size, which a Qwen2-VL config lacks "
                         "(AttributeError at the first step with images); 'verl@v0.7.1' counts it text-only",
             "glm4v": _VERL_GLM41V},
))

VERL_V071 = register_convention(Convention(
    name="verl@v0.7.1",
    variant_of="verl",
    pin=Pin("veRL", "verl-project/verl", _VERL_FILE, _VERL_FUNCS, "release v0.7.1 (2026-03-16)",
            verified="tests/flops/test_framework_record.py: the framework's own function at the pinned commit on 21 cases; "
                     "tests/flops/test_framework_conventions.py: text-only Qwen2.5-VL and head_dim by hand"),
    formula=("as 'verl' (causal half since PR #4959), but qwen2_vl / qwen2_5_vl are routed to the text-only "
             "_estimate_qwen2_flops (no ViT term), and there is no qwen3_5 formula (MFU 0)"),
    deviations=("qwen2_vl / qwen2_5_vl: vision not counted at all",
                "input embedding billed as a GEMM: +6*V*h per token",
                "merger and deepstack mergers applied to P patches (Qwen3-VL)",
                "video grids not counted", "always x3 per GEMM"),
    forward=_verl_v071,
    families=QWEN_AND_DECODER_FAMILIES,
    text_only_families=("qwen2_vl", "qwen2_5_vl"),
    refuses={"glm4v": _VERL_GLM41V},
))

SIX_ND = register_convention(Convention(
    name="6nd",
    source="Kaplan et al. 2020 rule of thumb: 6 x active parameters x tokens",
    formula="6 * N_active * S, N_active = active LM matmul parameters (lm_head included, embedding lookup excluded)",
    deviations=("no attention core", "vision tower and mergers not counted", "router counted",
                "MTP not counted", "always x3"),
    forward=_six_nd,
    counts_vision=False,
    families=None,  # a rule of thumb over the LM's active parameters: defined for every family
))
