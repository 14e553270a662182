"""Exact parameter counts from a :class:`~vlm_perf.arch.spec.ModelSpec` (pure functions, no I/O).

Conventions (they match how the released Hugging Face checkpoints store tensors):

* Every tensor is counted: weights, biases and norm scales. ``LayerNorm`` = weight + bias (2 x width),
  ``RMSNorm`` = weight only (1 x width). Rotary embeddings have no parameters.
* **Vision tower** (:func:`vision_tower_params`): Conv3d patch embed (+ its bias for Qwen3-VL), the learned
  absolute position table (Qwen3-VL, ``num_position_embeddings x h_v``) and the ``depth`` blocks
  (2 norms, qkv + proj with bias, MLP with bias: gated gate/up/down for Qwen2.5-VL, fc1/fc2 otherwise).
* **Merger** (:func:`merger_params`): the main patch merger (``ln_q`` over ``h_v`` -- LayerNorm for
  Qwen2/3-VL, RMSNorm for Qwen2.5-VL -- then Linear(m^2 h_v -> m^2 h_v) and Linear(m^2 h_v -> d_out), both
  with bias) plus the Qwen3-VL deepstack mergers, which use a *post-shuffle* LayerNorm over m^2 h_v.
* **Language model** (:func:`lm_params`): input embedding, decoder layers (attention incl. q/k-norm,
  MLA's q_a/kv_a layernorms, dense or MoE MLP incl. router, DeepSeek's ``e_score_correction_bias`` and
  shared experts, 2 RMSNorms), final RMSNorm, and the ``lm_head`` only when it is **not** tied
  (a tied head is the embedding matrix, stored once).
* **MTP** (DeepSeek-V3 ``num_nextn_predict_layers``): each module is ``enorm`` + ``hnorm`` (RMSNorm h),
  ``eh_proj`` (Linear 2h -> h, no bias), one decoder layer (MoE when layer index ``num_layers + k`` would
  be an MoE layer) and ``shared_head.norm`` (RMSNorm h). The released checkpoint additionally stores
  **its own copies** of ``embed_tokens`` and ``shared_head.head`` (V x h each) under
  ``model.layers.{61+k}``; :func:`mtp_params` returns the unique part and :func:`mtp_checkpoint_params`
  adds those two copies. :func:`lm_params` / :func:`total_params` exclude MTP unless ``include_mtp=True``
  (``"checkpoint"`` also adds the copies, reproducing the 685B DeepSeek-V3 checkpoint total).
* **Active parameters** (:func:`lm_active_params`): what one token touches in the forward pass:
  attention, norms, dense MLPs, top-k routed + shared experts, router (weight and correction bias), final
  norm and the lm_head (tied or not: the head is a matmul). The input embedding is a lookup and is
  excluded unless ``include_embedding=True`` (model cards' "activated" figures include it).

Bias rules the spec does not carry as fields are applied per family here (see ``_attn_biases``):
Qwen2/2.5 LMs have q/k/v bias and no o bias; Llama's ``attention_bias`` (``LMSpec.qkv_bias``) puts a
bias on q, k, v **and** o; no supported LM has MLP biases (Llama ``mlp_bias`` is false in every preset).
"""

from __future__ import annotations

from dataclasses import dataclass

from .spec import LMSpec, ModelSpec, VisionSpec

__all__ = [
    "ParamCount",
    "count_params",
    "lm_active_params",
    "lm_attention_params",
    "lm_layer_params",
    "lm_params",
    "merger_params",
    "mtp_checkpoint_params",
    "mtp_params",
    "total_params",
    "vision_block_params",
    "vision_tower_params",
]


# --------------------------------------------------------------------------- primitives


def _linear(n_in: int, n_out: int, bias: bool) -> int:
    return n_in * n_out + (n_out if bias else 0)


def _norm(width: int, kind: str) -> int:
    """LayerNorm: weight + bias; RMSNorm: weight."""
    if kind == "layernorm":
        return 2 * width
    if kind == "rmsnorm":
        return width
    raise ValueError(f"unknown norm kind {kind!r}")


# --------------------------------------------------------------------------- vision


def vision_patch_embed_params(v: VisionSpec) -> int:
    """Conv3d(C, h_v, kernel=(T_p, P, P)) (+ bias for Qwen3-VL)."""
    return v.patch_volume * v.hidden_size + (v.hidden_size if v.patch_embed_bias else 0)


def vision_pos_embed_params(v: VisionSpec) -> int:
    """Learned absolute position table (Qwen3-VL: 2304 x h_v); 0 for RoPE-only towers."""
    return v.num_position_embeddings * v.hidden_size


def vision_block_params(v: VisionSpec) -> int:
    """One ViT block: norm1, norm2, qkv (+b), proj (+b), MLP (+b)."""
    h, q, i = v.hidden_size, v.attn_width, v.intermediate_size
    attn = _linear(h, 3 * q, True) + _linear(q, h, True)
    if v.mlp_gated:
        mlp = 2 * _linear(h, i, True) + _linear(i, h, True)
    else:
        mlp = _linear(h, i, True) + _linear(i, h, True)
    return 2 * _norm(h, v.norm) + attn + mlp


def vision_tower_params(spec: ModelSpec | VisionSpec) -> int:
    """Patch embed + position table + ``depth`` blocks (mergers excluded: see :func:`merger_params`)."""
    v = spec.vision if isinstance(spec, ModelSpec) else spec
    if v is None:
        return 0
    return vision_patch_embed_params(v) + vision_pos_embed_params(v) + v.depth * vision_block_params(v)


def _merger_mlp(v: VisionSpec) -> int:
    w = v.merger_width
    return _linear(w, w, True) + _linear(w, v.out_hidden_size, True)


def main_merger_params(v: VisionSpec) -> int:
    """``ln_q`` over h_v (pre-shuffle) + the two merger Linears."""
    return _norm(v.hidden_size, v.norm) + _merger_mlp(v)


def deepstack_merger_params(v: VisionSpec) -> int:
    """ONE deepstack merger: post-shuffle LayerNorm over m^2 h_v + the two Linears."""
    return _norm(v.merger_width, "layernorm") + _merger_mlp(v)


def merger_params(spec: ModelSpec | VisionSpec) -> int:
    """Main merger + all deepstack mergers (0 for a text-only model)."""
    v = spec.vision if isinstance(spec, ModelSpec) else spec
    if v is None:
        return 0
    return main_merger_params(v) + v.num_deepstack * deepstack_merger_params(v)


# --------------------------------------------------------------------------- language model


def _attn_biases(lm: LMSpec) -> tuple[bool, bool]:
    """(q/k/v bias, o bias) by family: Qwen2 q/k/v only; Llama/Qwen3 ``attention_bias`` covers all four."""
    if lm.family == "qwen2":
        return lm.qkv_bias, False
    return lm.qkv_bias, lm.qkv_bias


def lm_attention_params(lm: LMSpec) -> int:
    """Self-attention of one decoder layer (GQA or MLA), incl. q/k-norm and MLA's latent layernorms."""
    h, H = lm.hidden_size, lm.num_heads
    if lm.mla is not None:
        m = lm.mla
        if m.q_lora_rank:
            q = _linear(h, m.q_lora_rank, False) + m.q_lora_rank + _linear(m.q_lora_rank, H * m.qk_head_dim, False)
        else:
            q = _linear(h, H * m.qk_head_dim, False)
        kv = (_linear(h, m.kv_lora_rank + m.qk_rope_head_dim, False) + m.kv_lora_rank
              + _linear(m.kv_lora_rank, H * (m.qk_nope_head_dim + m.v_head_dim), False))
        return q + kv + _linear(H * m.v_head_dim, h, False)
    qkv_b, o_b = _attn_biases(lm)
    p = _linear(h, lm.q_width, qkv_b) + 2 * _linear(h, lm.kv_width, qkv_b) + _linear(lm.q_width, h, o_b)
    if lm.qk_norm:
        p += 2 * lm.head_dim  # RMSNorm over head_dim, shared across heads
    return p


def _dense_mlp(h: int, i: int) -> int:
    return 3 * h * i  # gate, up, down; no bias


def _router_params(lm: LMSpec) -> int:
    moe = lm.moe
    assert moe is not None
    return moe.num_experts * lm.hidden_size + (moe.num_experts if moe.router_bias else 0)


def _shared_expert_params(lm: LMSpec) -> int:
    moe = lm.moe
    assert moe is not None
    return moe.num_shared_experts * _dense_mlp(lm.hidden_size, moe.shared_intermediate_size)


def lm_mlp_params(lm: LMSpec, moe_layer: bool) -> int:
    """MLP of one layer: dense SwiGLU, or routed experts + shared experts + router."""
    if not moe_layer:
        return _dense_mlp(lm.hidden_size, lm.intermediate_size)
    moe = lm.moe
    assert moe is not None
    routed = moe.num_experts * _dense_mlp(lm.hidden_size, moe.expert_intermediate_size)
    return routed + _shared_expert_params(lm) + _router_params(lm)


def lm_layer_params(lm: LMSpec, moe_layer: bool) -> int:
    """One decoder layer: attention + MLP + input/post-attention RMSNorms."""
    return lm_attention_params(lm) + lm_mlp_params(lm, moe_layer) + 2 * lm.hidden_size


def lm_embedding_params(lm: LMSpec) -> int:
    return lm.vocab_size * lm.hidden_size


def lm_head_params(lm: LMSpec) -> int:
    """Stored lm_head parameters: 0 when tied to the embedding."""
    return 0 if lm.tie_word_embeddings else lm.vocab_size * lm.hidden_size


def _mtp_layer_is_moe(lm: LMSpec, k: int) -> bool:
    """Whether MTP module k's decoder layer (HF index ``num_layers + k``) is an MoE layer.

    HF DeepSeek-V3 rule: ``idx >= first_k_dense_replace and idx % moe_layer_freq == 0``. The spec keeps
    only the resulting ``moe_layers``, so the frequency is inferred from their spacing (1 when contiguous).
    """
    if lm.moe is None or not lm.moe_layers:
        return False
    idx = lm.num_layers + k
    gaps = {b - a for a, b in zip(lm.moe_layers, lm.moe_layers[1:])}
    freq = gaps.pop() if len(gaps) == 1 else 1
    return idx % freq == 0


def mtp_params(lm: LMSpec) -> int:
    """Unique MTP parameters (enorm, hnorm, eh_proj, decoder layer, shared_head.norm) over all modules.

    Excludes the embedding and output head, which the MTP modules share with the main model.
    """
    h = lm.hidden_size
    total = 0
    for k in range(lm.num_mtp_layers):
        total += 2 * h + _linear(2 * h, h, False) + lm_layer_params(lm, _mtp_layer_is_moe(lm, k)) + h
    return total


def mtp_checkpoint_params(lm: LMSpec) -> int:
    """MTP parameters as stored in the checkpoint: :func:`mtp_params` + a copy of embed_tokens and of
    shared_head.head (V x h each) per module."""
    return mtp_params(lm) + lm.num_mtp_layers * 2 * lm.vocab_size * lm.hidden_size


def _mtp_term(lm: LMSpec, include_mtp: bool | str) -> int:
    if include_mtp == "checkpoint":
        return mtp_checkpoint_params(lm)
    if include_mtp is True:
        return mtp_params(lm)
    if include_mtp is False:
        return 0
    raise ValueError(f"include_mtp must be False, True or 'checkpoint', got {include_mtp!r}")


def lm_params(spec: ModelSpec | LMSpec, include_mtp: bool | str = False) -> int:
    """Total LM parameters: embedding + layers + final norm + untied lm_head (+ MTP if asked)."""
    lm = spec.lm if isinstance(spec, ModelSpec) else spec
    moe = set(lm.moe_layers)
    layers = sum(lm_layer_params(lm, i in moe) for i in range(lm.num_layers))
    return lm_embedding_params(lm) + layers + lm.hidden_size + lm_head_params(lm) + _mtp_term(lm, include_mtp)


def lm_active_params(spec: ModelSpec | LMSpec, include_embedding: bool = False) -> int:
    """Parameters one token touches in the main model's forward pass (MTP excluded).

    Per layer: attention, 2 norms, and either the dense MLP or top-k routed experts + shared experts +
    router. Plus the final norm and the lm_head (counted even when tied: it is a matmul). The input
    embedding is a table lookup, added only with ``include_embedding=True``.
    """
    lm = spec.lm if isinstance(spec, ModelSpec) else spec
    h = lm.hidden_size
    moe = set(lm.moe_layers)
    total = 0
    for i in range(lm.num_layers):
        total += lm_attention_params(lm) + 2 * h
        if i in moe:
            assert lm.moe is not None
            total += (lm.moe.top_k * _dense_mlp(h, lm.moe.expert_intermediate_size)
                      + _shared_expert_params(lm) + _router_params(lm))
        else:
            total += _dense_mlp(h, lm.intermediate_size)
    total += h + lm.vocab_size * h
    if include_embedding:
        total += lm_embedding_params(lm)
    return total


# --------------------------------------------------------------------------- whole model


@dataclass(frozen=True)
class ParamCount:
    """Breakdown of a model's stored parameters (MTP reported separately, not in ``total``)."""

    vision_tower: int  # patch embed + position table + blocks
    merger: int  # main merger + deepstack mergers
    lm_embedding: int
    lm_layers: int  # decoder layers (attention, MLP/MoE incl. routers, per-layer norms)
    lm_final_norm: int
    lm_head: int  # 0 when tied
    lm_active: int  # per-token active LM params, input embedding excluded
    mtp: int = 0  # unique MTP params (not in total)
    mtp_checkpoint: int = 0  # MTP params as stored, incl. embedding/head copies (not in total)

    @property
    def vision(self) -> int:
        """Vision tower incl. mergers."""
        return self.vision_tower + self.merger

    @property
    def lm(self) -> int:
        return self.lm_embedding + self.lm_layers + self.lm_final_norm + self.lm_head

    @property
    def total(self) -> int:
        """Vision + LM, without MTP modules."""
        return self.vision + self.lm

    @property
    def total_with_mtp_checkpoint(self) -> int:
        """Everything the released checkpoint stores (DeepSeek-V3: 685B)."""
        return self.total + self.mtp_checkpoint


def count_params(spec: ModelSpec) -> ParamCount:
    """Full :class:`ParamCount` breakdown of ``spec``."""
    lm = spec.lm
    moe = set(lm.moe_layers)
    return ParamCount(
        vision_tower=vision_tower_params(spec),
        merger=merger_params(spec),
        lm_embedding=lm_embedding_params(lm),
        lm_layers=sum(lm_layer_params(lm, i in moe) for i in range(lm.num_layers)),
        lm_final_norm=lm.hidden_size,
        lm_head=lm_head_params(lm),
        lm_active=lm_active_params(lm),
        mtp=mtp_params(lm),
        mtp_checkpoint=mtp_checkpoint_params(lm),
    )


def total_params(spec: ModelSpec, include_mtp: bool | str = False) -> int:
    """Vision tower + mergers + LM (+ MTP: ``True`` unique part, ``"checkpoint"`` as stored)."""
    return vision_tower_params(spec) + merger_params(spec) + lm_params(spec, include_mtp=include_mtp)
