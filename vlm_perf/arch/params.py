"""Exact parameter counts, derived from a model's block inventory (pure functions, no I/O).

Every whole-model count sums ``count x params()`` over ``ModelSpec.blocks`` (:mod:`vlm_perf.arch.blocks`),
the same inventory the exact FLOPs are computed from. The per-module helpers below (``vision_block_params``,
``lm_layer_params``, ...) read the same blocks: a :class:`ModelSpec`'s own inventory, or the inventory its family
builds from a part's spec (a :class:`VisionSpec` is rebuilt only for the Qwen-VL towers it describes completely;
any other tower's parameters come from its ModelSpec). The ``MTP`` counts read the inventory's ``MTPModules``.

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

from ..errors import UnsupportedModelError
from .blocks import (DecoderAttention, DenseMLP, LMHead, LMLayerNorms, MLAttention, MlpProjector, MoEMLP, PlainMoEMLP,
                     MTPModules, PatchEmbed, PositionTable, TokenEmbedding, VisionLayers, inventory_params)
from .parts import AUDIO, DEEPSTACK_MERGER, LANGUAGE_MODEL, MERGER, VISION_TOWER
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


# the towers a VisionSpec describes completely (the Qwen-VL family builds their inventory from it); any other
# family's VisionSpec is a summary (statistics, conventions) and its inventory is the ModelSpec's
_QWEN_TOWERS = ("qwen2_vl", "qwen2_5_vl", "qwen3_vl")


def _vision_blocks(v: VisionSpec) -> tuple:
    if v.family not in _QWEN_TOWERS:
        raise UnsupportedModelError(f"a {v.family!r} tower: its VisionSpec does not describe the tower's modules "
                                    "(only Qwen-VL towers are rebuilt from one); pass the ModelSpec, whose block "
                                    "inventory does")
    from .families.qwen_vl import vision_blocks

    return vision_blocks(v)


def _lm_blocks(lm: LMSpec) -> tuple:
    from .families.decoder import lm_blocks

    return lm_blocks(lm)


def _blocks(spec) -> tuple:
    if isinstance(spec, ModelSpec):
        return spec.blocks
    if isinstance(spec, VisionSpec):
        return _vision_blocks(spec)
    if isinstance(spec, LMSpec):
        return _lm_blocks(spec)
    raise TypeError(f"expected a ModelSpec, VisionSpec or LMSpec, got {type(spec).__name__}")


def _first(blocks, kind, **match):
    for b in blocks:
        if isinstance(b, kind) and all(getattr(b, k) == v for k, v in match.items()):
            return b
    return None


def _one(spec, kind, **match):
    """The first block of ``kind`` in ``spec``'s inventory; a model without one is refused (never a silent 0)."""
    block = _first(_blocks(spec), kind, **match)
    if block is None:
        name = getattr(spec, "name", "") or getattr(spec, "family", "")
        raise UnsupportedModelError(f"{name}: no {kind.__name__} block in its inventory")
    return block


# --------------------------------------------------------------------------- vision


def vision_patch_embed_params(spec: ModelSpec | VisionSpec) -> int:
    """The patch embed, e.g. Qwen's Conv3d(C, h_v, kernel=(T_p, P, P)) (+ bias for Qwen3-VL)."""
    return _one(spec, PatchEmbed).params()


def vision_pos_embed_params(spec: ModelSpec | VisionSpec) -> int:
    """Learned absolute position table (Qwen3-VL: 2304 x h_v); 0 for RoPE-only towers."""
    table = _first(_blocks(spec), PositionTable, part=VISION_TOWER)
    return table.params() if table else 0


def vision_block_params(spec: ModelSpec | VisionSpec) -> int:
    """One ViT block: norm1, norm2, qkv (+b), proj (+b), MLP (+b)."""
    return _one(spec, VisionLayers).params()


def vision_tower_params(spec: ModelSpec | VisionSpec) -> int:
    """Everything in the tower stage: patch embed, position table, CLS token, layers (0 without a tower)."""
    if isinstance(spec, ModelSpec) and spec.vision is None and not any(b.part == VISION_TOWER for b in spec.blocks):
        return 0
    return inventory_params(_blocks(spec), VISION_TOWER)


def main_merger_params(spec: ModelSpec | VisionSpec) -> int:
    """An MLP projector (Qwen: ``ln_q`` over h_v, pre-shuffle, + the two merger Linears)."""
    return _one(spec, MlpProjector, part=MERGER).params()


def deepstack_merger_params(spec: ModelSpec | VisionSpec) -> int:
    """ONE deepstack merger: post-shuffle LayerNorm over m^2 h_v + the two Linears (of a Qwen-VL tower's
    VisionSpec, also when its config stores none)."""
    if isinstance(spec, VisionSpec):
        spec = VisionSpec(**{**spec.__dict__, "deepstack_visual_indexes": (0,)})
    return _one(spec, MlpProjector, part=DEEPSTACK_MERGER).params()


def merger_params(spec: ModelSpec | VisionSpec) -> int:
    """The projector part: main merger / projector + every stored deepstack merger (0 for a text-only model)."""
    blocks = _blocks(spec)
    return inventory_params(blocks, MERGER) + inventory_params(blocks, DEEPSTACK_MERGER)


# --------------------------------------------------------------------------- language model


def lm_attention_params(spec: ModelSpec | LMSpec) -> int:
    """Self-attention of one decoder layer (GQA or MLA), incl. q/k-norm and MLA's latent layernorms."""
    for b in _blocks(spec):
        if b.part == LANGUAGE_MODEL and isinstance(b, (DecoderAttention, MLAttention)):
            return b.params()
    raise UnsupportedModelError(f"{_lm_of(spec).family}: no attention block")


def lm_layer_params(spec: ModelSpec | LMSpec, moe_layer: bool) -> int:
    """One decoder layer: attention + MLP + input/post-attention RMSNorms."""
    blocks, lm = _blocks(spec), _lm_of(spec)
    mlp = _first(blocks, MoEMLP) if moe_layer else _first(blocks, DenseMLP)
    if mlp is None:  # a layer kind this LM does not have: build it from the spec's widths
        mlp = DenseMLP(part=LANGUAGE_MODEL, count=1, hidden=lm.hidden_size, width=lm.intermediate_size)
    return lm_attention_params(spec) + mlp.params() + _one(spec, LMLayerNorms).params()


def lm_embedding_params(spec: ModelSpec | LMSpec) -> int:
    return _one(spec, TokenEmbedding, part=LANGUAGE_MODEL).params()


def lm_head_params(spec: ModelSpec | LMSpec) -> int:
    """Stored lm_head parameters: 0 when tied to the embedding."""
    return _one(spec, LMHead).params()


def _lm_of(spec: ModelSpec | LMSpec) -> LMSpec:
    return spec.lm if isinstance(spec, ModelSpec) else spec


def mtp_params(spec: ModelSpec | LMSpec) -> int:
    """Unique MTP parameters (enorm, hnorm, eh_proj, decoder layer, shared_head.norm) over all modules.

    Excludes the embedding and output head, which the MTP modules share with the main model.
    """
    mtp = _first(_blocks(spec), MTPModules)
    return mtp.count * mtp.params() if mtp else 0


def mtp_checkpoint_params(spec: ModelSpec | LMSpec) -> int:
    """MTP parameters as stored in the checkpoint: :func:`mtp_params` + a copy of embed_tokens and of
    shared_head.head (V x h each) per module."""
    mtp = _first(_blocks(spec), MTPModules)
    return mtp_params(spec) + (mtp.count * 2 * mtp.vocab * mtp.hidden if mtp else 0)


def _mtp_term(spec: ModelSpec | LMSpec, include_mtp: bool | str) -> int:
    if include_mtp == "checkpoint":
        return mtp_checkpoint_params(spec)
    if include_mtp is True:
        return mtp_params(spec)
    if include_mtp is False:
        return 0
    raise ValueError(f"include_mtp must be False, True or 'checkpoint', got {include_mtp!r}")


def lm_params(spec: ModelSpec | LMSpec, include_mtp: bool | str = False) -> int:
    """Total LM parameters: embedding + layers + final norm + untied lm_head (+ MTP if asked)."""
    return inventory_params(_blocks(spec), LANGUAGE_MODEL) + _mtp_term(spec, include_mtp)


def _active(block) -> int:
    """Parameters one token touches in a block's forward pass (0 for lookups)."""
    if isinstance(block, TokenEmbedding):
        return 0
    if isinstance(block, (MoEMLP, PlainMoEMLP)):
        return block.active_params()
    if isinstance(block, LMHead):
        return block.hidden * block.vocab  # a matmul, tied or not
    return block.params()


def lm_active_params(spec: ModelSpec | LMSpec, include_embedding: bool = False) -> int:
    """Parameters one token touches in the main model's forward pass (MTP excluded).

    Per layer: attention, 2 norms, and either the dense MLP or top-k routed experts + shared experts +
    router. Plus the final norm and the lm_head (counted even when tied: it is a matmul). The input
    embedding is a table lookup, added only with ``include_embedding=True``.
    """
    blocks = [b for b in _blocks(spec) if b.part == LANGUAGE_MODEL and not isinstance(b, MTPModules)]
    total = sum(b.count * _active(b) for b in blocks)
    if include_embedding:
        total += sum(b.params() for b in blocks if isinstance(b, TokenEmbedding))
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
    audio: int = 0  # an audio encoder (Omni thinkers), 0 without one

    @property
    def vision(self) -> int:
        """Vision tower incl. mergers."""
        return self.vision_tower + self.merger

    @property
    def lm(self) -> int:
        return self.lm_embedding + self.lm_layers + self.lm_final_norm + self.lm_head

    @property
    def total(self) -> int:
        """Vision + audio + LM, without MTP modules."""
        return self.vision + self.audio + self.lm

    @property
    def total_with_mtp_checkpoint(self) -> int:
        """Everything the released checkpoint stores (DeepSeek-V3: 685B)."""
        return self.total + self.mtp_checkpoint


def count_params(spec: ModelSpec) -> ParamCount:
    """Full :class:`ParamCount` breakdown of ``spec``, from its inventory."""
    from .blocks import FinalNorm

    lm = [b for b in spec.blocks if b.part == LANGUAGE_MODEL and not isinstance(b, MTPModules)]
    embedding = sum(b.count * b.params() for b in lm if isinstance(b, TokenEmbedding))
    final = sum(b.count * b.params() for b in lm if isinstance(b, FinalNorm))
    head = sum(b.count * b.params() for b in lm if isinstance(b, LMHead))
    return ParamCount(
        vision_tower=vision_tower_params(spec),
        merger=merger_params(spec),
        lm_embedding=embedding,
        lm_layers=inventory_params(lm) - embedding - final - head,
        lm_final_norm=final,
        lm_head=head,
        lm_active=lm_active_params(spec),
        mtp=mtp_params(spec),
        mtp_checkpoint=mtp_checkpoint_params(spec),
        audio=inventory_params(spec.blocks, AUDIO),
    )


def total_params(spec: ModelSpec, include_mtp: bool | str = False) -> int:
    """Vision tower + projector + LM (+ MTP: ``True`` unique part, ``"checkpoint"`` as stored)."""
    return inventory_params(spec.blocks) + _mtp_term(spec, include_mtp)
