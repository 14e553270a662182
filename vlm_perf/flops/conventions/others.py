"""Conventions of torchtitan, veRL and the 6*N*D rule of thumb."""

from __future__ import annotations


from ...arch.parts import LANGUAGE_MODEL
from ...arch.spec import ModelSpec
from ...stats.batch import BatchStats
from ..breakdown import Options
from ..language import attn_core_per_token_sq, linear_per_token
from .base import QWEN_AND_DECODER_FAMILIES, Convention


def _torchtitan(spec: ModelSpec, s: BatchStats, _: Options) -> dict:
    tokens = s.lm_padded_tokens  # labels.numel(): padding included
    seq_cfg = s.lm_padded_tokens / s.lm_samples
    out = {k: 3 * v * tokens for k, v in linear_per_token(spec.lm).items()}
    out["lm.attn_core"] = 3 * spec.lm.num_layers * attn_core_per_token_sq(spec.lm) * seq_cfg * tokens
    return out


# families veRL's ESTIMATE_FUNC routes to its text-only _estimate_qwen2_flops (vision not counted)
VERL_TEXT_ONLY = ("glm4v",)


def _verl(spec: ModelSpec, s: BatchStats, _: Options) -> dict:
    lm, h = spec.lm, spec.lm.hidden_size
    tokens = s.lm_tokens
    out = {k: 3 * v * tokens for k, v in linear_per_token(spec.lm).items()}
    out["lm.logits"] = 3 * 2 * (2 * h * lm.vocab_size) * tokens  # input embedding billed as a GEMM too
    out["lm.attn_core"] = 6 * s.lm_tokens_sq * lm.head_dim * lm.num_heads * lm.num_layers
    v = spec.vision if spec.family not in VERL_TEXT_ONLY else None
    if v is not None:
        img = s.images_only()  # veRL builds ViT lengths from image_grid_thw only
        merger = (v.out_hidden_size + v.merger_width) * v.merger_width * img.vision_patches  # P rows, not M
        out.update({
            "vision.patch_embed": 6 * img.vision_patches * v.hidden_size * v.patch_volume,
            "vision.attn_proj": 6 * img.vision_patches * v.depth * 4 * v.hidden_size**2,
            "vision.mlp": 6 * img.vision_patches * v.depth * 2 * v.hidden_size * v.intermediate_size,
            "vision.attn_core": 12 * v.hidden_size * v.depth * img.vision_patches_sq_frame,
            "vision.merger": 6 * merger,
            "vision.deepstack_merger": 6 * v.num_deepstack * merger,
        })
    return out


def _six_nd(spec: ModelSpec, s: BatchStats, _: Options) -> dict:
    lm_blocks = tuple(b for b in spec.blocks if b.part == LANGUAGE_MODEL) if spec.blocks else None
    return {k: 3 * v * s.lm_tokens for k, v in linear_per_token(spec.lm, lm_blocks).items()}


TORCHTITAN = Convention(
    name="torchtitan",
    source="pytorch/torchtitan torchtitan/models/utils.py (*_nparams_and_flops) + components/metrics.py (main)",
    formula=("per token 6*N_active + 6*L*H*(d_qk + d_v)*s_cfg, times padded tokens (labels.numel()); "
             "s_cfg = the configured sequence length (here: padded tokens per sample); no vision term"),
    deviations=("vision tower and mergers not counted",
                "attention core: no causal half and configured length instead of sum(s^2)",
                "linear terms on padded tokens",
                "router counted (as in exact); norm parameters in N omitted (<0.01%)",
                "always x3 per GEMM"),
    training=_torchtitan,
    counts_vision=False,
)

VERL = Convention(
    name="verl",
    source="verl-project/verl verl/utils/flops_counter.py (FlopsCounter, causal half since PR #4959)",
    formula=("6*N_dense*S + 6*S2*d*H*L with N_dense including 2*V*h (embedding + head) and router h*E; "
             "ViT 6P*[h_v*C*T_p*P_s^2 + L_v(4h_v^2 + 2h_v*i_v) + (1+n_ds)(d_out + m^2h_v)*m^2h_v] "
             "+ 12*h_v*L_v*P2_frame over IMAGE grids only"),
    deviations=("input embedding billed as a GEMM: +6*V*h per token",
                "merger and deepstack mergers applied to P patches instead of M = P/m^2 merged tokens (4x)",
                "video grids not counted",
                "ViT MLP always 2 matrices; no window attention (Qwen2/2.5-VL routed to the Qwen3-VL formula)",
                "glm4v (GLM-4.1V): routed to veRL's text-only qwen2 formula, vision tower and projector not counted; "
                "glm4v_moe / glm46v are not in veRL's ESTIMATE_FUNC (it logs MFU 0)",
                "always x3 per GEMM"),
    training=_verl,
    unsupported=("deepseek_v3",),
    families=QWEN_AND_DECODER_FAMILIES + VERL_TEXT_ONLY,
    text_only_families=VERL_TEXT_ONLY,
)

SIX_ND = Convention(
    name="6nd",
    source="Kaplan et al. 2020 rule of thumb: 6 x active parameters x tokens",
    formula="6 * N_active * S, N_active = active LM matmul parameters (lm_head included, embedding lookup excluded)",
    deviations=("no attention core", "vision tower and mergers not counted", "router counted",
                "MTP not counted", "always x3"),
    training=_six_nd,
    counts_vision=False,
    families=None,  # a rule of thumb over the LM's active parameters: defined for every family
)
