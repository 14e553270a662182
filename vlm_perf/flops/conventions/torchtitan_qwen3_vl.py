"""``torchtitan@qwen3-vl`` and ``torchtitan@qwen3-vl-pre3225``: torchtitan's Qwen3-VL model (2026-04 to 2026-06).

torchtitan main carried ``torchtitan/models/qwen3_vl`` from PR #2409 (12979c663698, 2026-04-11) until PR #3371
turned it into ``qwen3_5`` (fd712e814, 2026-06-10); before that it lived on a feature branch under
``torchtitan/experiments/qwen3_vl`` (2026-02/03). Its ``Qwen3VLModel.Config.get_nparams_and_flops`` (model.py)
calls ``get_moe_model_nparams_and_flops`` (``torchtitan/models/utils.py``) with the WHOLE model and
``head_dims = 2 * head_dim``; the trainer (``torchtitan/trainer.py``) passes ``training.seq_len`` and counts
``labels.numel()`` tokens. What that bills, restated:

* per LM token, 6 x every parameter of ``model.named_parameters()`` whose name does not contain ``"embedding"``:
  the LM's attention, norms, MLPs and head AND the whole vision encoder (its Linear patch embed, the
  ``pos_embed`` table, every ViT layer, the merger and the deepstack mergers) — the vision tower is billed per LM
  token, not per patch;
* routed experts (``moe.experts``) at ``total * top_k // num_experts``; router and shared experts in full;
* plus 6 * L * H * (2 * head_dim) * seq_len per token (no causal half, the configured length);
* the token embedding: excluded. With tied embeddings (Qwen3-VL-2B's ``enable_weight_tying``) the shared tensor
  is named ``tok_embeddings.weight`` (registered first), so before PR #3225 (4ed3c5363, 2026-05-08, "Fix weight
  tying parameter accounting") the LM head was billed 0 (``-pre3225``); from it on, a tied table is billed once
  as the head (``torchtitan@qwen3-vl``, pinned at adf340d3f9fa, the last main commit with the model).

Forward FLOPs here are those terms over 3 (``training_rule`` x3, frozen parts ignored as torchtitan does).
"""

from __future__ import annotations

from typing import Any

from ...arch.blocks import (DecoderAttention, DenseMLP, LMHead, MlpProjector, MoEMLP, PatchEmbed, PositionTable,
                            TokenEmbedding, VisionLayers, linear_params)
from ...arch.parts import LANGUAGE_MODEL
from ...arch.spec import ModelSpec

from ...stats.batch import BatchStats
from ..breakdown import Options
from .base import Convention, ConventionRegistryError, Pin, register_convention

QWEN3_VL_FAMILIES = ("qwen3_vl", "qwen3_vl_moe")

_VISION_PART = {"merger": "vision.merger", "deepstack_merger": "vision.deepstack_merger"}


def _billed_params(spec: ModelSpec, tied_head_billed: bool) -> tuple[dict[str, int], int]:
    """Parameters billed at 6 per LM token, by component, and the attention block's (heads, head_dim)."""
    n = dict.fromkeys(("vision.patch_embed", "vision.attn_proj", "vision.mlp", "vision.merger",
                       "vision.deepstack_merger", "lm.attn_proj", "lm.dense_mlp", "lm.shared_experts", "lm.router",
                       "lm.logits"), 0)
    routed, top_k, experts = 0, 1, 1
    for b in spec.blocks:
        p = b.count * b.params()
        if b.part != LANGUAGE_MODEL:
            if isinstance(b, (PatchEmbed, PositionTable)):
                n["vision.patch_embed"] += p
            elif isinstance(b, VisionLayers):
                q = b.attn_width
                attn = b.count * (linear_params(b.width, 3 * q, b.qkv_bias) + linear_params(q, b.width, b.proj_bias))
                n["vision.attn_proj"] += attn
                n["vision.mlp"] += p - attn  # MLP + the layer norms
            elif isinstance(b, MlpProjector) and b.part in _VISION_PART:
                n[_VISION_PART[b.part]] += p
            else:
                raise ConventionRegistryError(f"torchtitan@qwen3-vl: unexpected {b.part} block {type(b).__name__}")
            continue
        if isinstance(b, TokenEmbedding):
            if spec.lm.tie_word_embeddings and tied_head_billed:
                n["lm.logits"] += p
        elif isinstance(b, LMHead):
            n["lm.logits"] += p  # 0 when tied (the table is the embedding's)
        elif isinstance(b, MoEMLP):
            r = b.count * b.num_experts * 3 * b.hidden * b.expert_width
            router = b.count * (b.num_experts * b.hidden + (b.num_experts if b.router_bias else 0))
            routed, top_k, experts = routed + r, b.top_k, b.num_experts
            n["lm.router"] += router
            n["lm.shared_experts"] += p - r - router
        elif isinstance(b, DenseMLP):
            n["lm.dense_mlp"] += p
        else:  # attention, the per-layer and final norms
            n["lm.attn_proj"] += p
    n["lm.routed_experts"] = routed * top_k // experts  # floor of the total, as torchtitan divides
    return n, routed


def _forward(tied_head_billed: bool):
    def forward(spec: ModelSpec, s: BatchStats, _: Options) -> dict[str, Any]:
        n, _routed = _billed_params(spec, tied_head_billed)
        tokens = s.lm_padded_tokens  # labels.numel()
        seq_cfg = s.lm_padded_tokens / s.lm_samples  # training.seq_len
        attn = next(b for b in spec.blocks if isinstance(b, DecoderAttention) and b.part == LANGUAGE_MODEL)
        out: dict[str, Any] = {k: 2 * v * tokens for k, v in n.items()}
        out["lm.attn_core"] = spec.lm.num_layers * 2 * attn.num_heads * 2 * attn.head_dim * seq_cfg * tokens
        out["vision.attn_core"] = 0
        out["lm.mtp"] = 0
        return out

    return forward


_FILES = "torchtitan/models/qwen3_vl/model.py + torchtitan/models/utils.py (+ trainer.py)"
_FUNCS = ("Qwen3VLModel.Config.get_nparams_and_flops -> get_moe_model_nparams_and_flops(model, n_heads, "
          "2 * head_dim, training.seq_len)")
_VERIFIED = ("tests/flops/test_framework_conventions.py: the cited rule over transformers' own Qwen3-VL parameters "
             "(meta device) for 2B (tied), 8B and 30B-A3B, and torchtitan's own function's values at the pin "
             "(scripts/record_issue33_framework_values.py on a mirror; values recorded in the test)")
_FORMULA = ("per LM token 6 x every parameter of the model except the token embedding (vision encoder, pos_embed, "
            "mergers and deepstack mergers included; routed experts x top_k // E) + 6*L*H*2d*s_cfg, times padded "
            "tokens (labels.numel())")
_DEVIATIONS = ("the vision encoder billed as 6 x its parameters per LM token: no per-patch term, no ViT attention "
               "core (images and video never change the number)",
               "LM attention core: no causal half, the configured length",
               "norms, biases, pos_embed and the router billed as 6 x params; linear terms on padded tokens",
               "always x3 (frozen parts ignored)")

TORCHTITAN_QWEN3_VL = register_convention(Convention(
    name="torchtitan@qwen3-vl",
    variant_of="torchtitan",
    pin=Pin("torchtitan", "pytorch/torchtitan", _FILES, _FUNCS,
            "adf340d3f9fa (2026-06-09; main with models/qwen3_vl, PR #2409 .. before PR #3371)",
            verified=_VERIFIED),
    formula=_FORMULA,
    deviations=_DEVIATIONS + ("tied embeddings (2B): the shared table billed once as the head (PR #3225 on)",),
    forward=_forward(tied_head_billed=True),
    families=QWEN3_VL_FAMILIES,
))

TORCHTITAN_QWEN3_VL_PRE3225 = register_convention(Convention(
    name="torchtitan@qwen3-vl-pre3225",
    variant_of="torchtitan",
    pin=Pin("torchtitan", "pytorch/torchtitan", _FILES, _FUNCS,
            "12979c663698 (2026-04-11, PR #2409; the rule until PR #3225, 2026-05-08)",
            verified=_VERIFIED),
    formula=_FORMULA,
    deviations=_DEVIATIONS + ("tied embeddings (2B): the LM head billed 0 (the shared table is named "
                              "tok_embeddings and excluded as an embedding)",),
    forward=_forward(tied_head_billed=False),
    families=QWEN3_VL_FAMILIES,
))
