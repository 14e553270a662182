"""The Hugging Face module names of each family (transformers 5), as the layout hooks of its block kinds read them.

A row of :class:`~vlm_perf.arch.blocks.laid.ModuleNames` per model type: the names of the tower's patch embed,
position table, layers and norms, of the projector's modules, and of the LM's prefix and fused modules. Families
without a row get generic ``<stage>.…`` names: selectors still work, adapter configs (which name modules) are
refused. The names were verified on the releases in :data:`VERIFIED_TRANSFORMERS` (the measured tests wrap
transformers' own classes with PEFT). A new family adds its row here (and nothing to the walker).
"""

from __future__ import annotations

import re
from dataclasses import replace

from .blocks import ClsToken
from .blocks.laid import ModuleNames
from .parts import VISION_TOWER
from .spec import ModelSpec

__all__ = ["VERIFIED_TRANSFORMERS", "module_names_known", "named_model_types", "names_for", "names_verified_on",
           "transformers_version"]

_QWEN2_VL = ModuleNames(patch="model.visual.patch_embed.proj", pos="model.visual.pos_embed", cls="",
                   tower_layer="model.visual.blocks.{i}", tower_norms=("norm1", "norm2"), tower_qkv=("attn.qkv",),
                   tower_out="attn.proj", tower_mlp_in=("mlp.fc1",), tower_mlp_out="mlp.fc2",
                   merger_norm="model.visual.merger.ln_q",
                   merger_linears=("model.visual.merger.mlp.0", "model.visual.merger.mlp.2"),
                   deepstack="", deepstack_norm="", deepstack_linears=(), lm_prefix="model.language_model")
_NAMES = {
    "qwen2_vl": _QWEN2_VL,
    "qwen2_5_vl": replace(_QWEN2_VL, tower_mlp_in=("mlp.gate_proj", "mlp.up_proj"), tower_mlp_out="mlp.down_proj"),
    "qwen3_vl": replace(_QWEN2_VL, tower_mlp_in=("mlp.linear_fc1",), tower_mlp_out="mlp.linear_fc2",
                        merger_norm="model.visual.merger.norm",
                        merger_linears=("model.visual.merger.linear_fc1", "model.visual.merger.linear_fc2"),
                        deepstack="model.visual.deepstack_merger_list.{k}", deepstack_norm="norm",
                        deepstack_linears=("linear_fc1", "linear_fc2")),
}
_NAMES["qwen3_vl_moe"] = _NAMES["qwen3_vl"]
_NAMES["qwen3_5"] = _NAMES["qwen3_5_moe"] = _NAMES["qwen3_vl"]  # no deepstack mergers; LM: gated delta nets
_NAMES["internvl"] = ModuleNames(
    patch="model.vision_tower.embeddings.patch_embeddings.projection",
    pos="model.vision_tower.embeddings.position_embeddings", cls="model.vision_tower.embeddings.cls_token",
    tower_layer="model.vision_tower.encoder.layer.{i}", tower_norms=("layernorm_before", "layernorm_after"),
    tower_qkv=("attention.q_proj", "attention.k_proj", "attention.v_proj"), tower_out="attention.projection_layer",
    tower_mlp_in=("mlp.fc1",), tower_mlp_out="mlp.fc2", merger_norm="model.multi_modal_projector.layer_norm",
    merger_linears=("model.multi_modal_projector.linear_1", "model.multi_modal_projector.linear_2"),
    deepstack="", deepstack_norm="", deepstack_linears=(), lm_prefix="model.language_model",
    tower_qk_norms=("attention.q_norm", "attention.k_norm"), tower_tail_norm="model.vision_tower.layernorm")
_NAMES["gemma3"] = ModuleNames(
    patch="model.vision_tower.embeddings.patch_embedding", pos="model.vision_tower.embeddings.position_embedding",
    cls="", tower_layer="model.vision_tower.encoder.layers.{i}", tower_norms=("layer_norm1", "layer_norm2"),
    tower_qkv=("self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj"), tower_out="self_attn.out_proj",
    tower_mlp_in=("mlp.fc1",), tower_mlp_out="mlp.fc2", merger_norm="model.multi_modal_projector.mm_soft_emb_norm",
    merger_linears=("model.multi_modal_projector.mm_input_projection_weight",),
    deepstack="", deepstack_norm="", deepstack_linears=(), lm_prefix="model.language_model",
    tower_tail_norm="model.vision_tower.post_layernorm", merger_adaptable=False)
_SIGLIP = replace(_NAMES["gemma3"], merger_norm="", merger_linears=(), merger_adaptable=True)
_NAMES["paligemma"] = replace(_SIGLIP, merger_linears=("model.multi_modal_projector.linear",))
_NAMES["idefics3"] = replace(
    _SIGLIP, patch="model.vision_model.embeddings.patch_embedding",
    pos="model.vision_model.embeddings.position_embedding", tower_layer="model.vision_model.encoder.layers.{i}",
    tower_tail_norm="model.vision_model.post_layernorm", merger_linears=("model.connector.modality_projection.proj",),
    lm_prefix="model.text_model")
_NAMES["smolvlm"] = _NAMES["idefics3"]
_LLAVA_PROJ = ("model.multi_modal_projector.linear_1", "model.multi_modal_projector.linear_2")
_NAMES["llava_onevision"] = replace(_SIGLIP, merger_linears=_LLAVA_PROJ, newline="model.image_newline")
_CLIP = replace(_SIGLIP, cls="model.vision_tower.embeddings.class_embedding", merger_linears=_LLAVA_PROJ,
                tower_head_norms=("model.vision_tower.pre_layrnorm",), tower_tail_norm="",
                tower_dead_norm="model.vision_tower.post_layernorm")
_NAMES["llava"] = _CLIP  # or _PIXTRAL, by its tower (names_for)
_NAMES["llava_next"] = replace(_CLIP, newline="model.image_newline")
_NAMES["llava_next_video"] = _NAMES["llava_next"]
_PIXTRAL = replace(
    _SIGLIP, patch="model.vision_tower.patch_conv", pos="", tower_layer="model.vision_tower.transformer.layers.{i}",
    tower_norms=("attention_norm", "ffn_norm"), tower_qkv=("attention.q_proj", "attention.k_proj", "attention.v_proj"),
    tower_out="attention.o_proj", tower_mlp_in=("feed_forward.gate_proj", "feed_forward.up_proj"),
    tower_mlp_out="feed_forward.down_proj", tower_head_norms=("model.vision_tower.ln_pre",), tower_tail_norm="",
    merger_linears=_LLAVA_PROJ)
_NAMES["mistral3"] = replace(_PIXTRAL, merger_norm="model.multi_modal_projector.norm",
                             merger_linears=("model.multi_modal_projector.patch_merger.merging_layer",) + _LLAVA_PROJ)
_NAMES["glm4v"] = replace(
    _QWEN2_VL, pos="model.visual.embeddings.position_embedding",
    tower_mlp_in=("mlp.gate_proj", "mlp.up_proj"), tower_mlp_out="mlp.down_proj",
    tower_head_norms=("model.visual.post_conv_layernorm",), tower_tail_norm="model.visual.post_layernorm",
    merger_norm="", merger_linears=("model.visual.merger.proj",), downsample="model.visual.downsample",
    merger_mlp=("model.visual.merger.post_projection_norm", "model.visual.merger.gate_proj",
                "model.visual.merger.up_proj", "model.visual.merger.down_proj"),
    lm_gate_up="mlp.gate_up_proj",
    lm_sandwich=("post_self_attn_layernorm", "post_attention_layernorm", "post_mlp_layernorm"))
_NAMES["glm4v_moe"] = replace(_NAMES["glm4v"], lm_gate_up="")
_NAMES["glm46v"] = _NAMES["glm4v_moe"]
# The transformers releases (major.minor, inclusive) whose module names the tables above were verified against by the
# measured tests (tests/verify: PEFT wraps transformers' own classes, the library must adapt the same modules). An
# adapter config names modules; outside this range a name the layout does not know may be a module it lacks.
VERIFIED_TRANSFORMERS = ("5.24", "5.25")


def transformers_version(spec: ModelSpec) -> tuple[str, str]:
    """(version, where it came from) of the transformers release whose module names apply to ``spec``: the
    config's ``transformers_version`` (the release that wrote it), else the installed one (read from the package
    metadata, transformers is not imported), else ("", "")."""
    recorded = spec.extra.get("transformers_version")
    if isinstance(recorded, str) and recorded:
        return recorded, "the config's transformers_version"
    from importlib import metadata

    try:
        return metadata.version("transformers"), "the installed transformers"
    except metadata.PackageNotFoundError:
        return "", ""


def names_verified_on(version: str) -> bool:
    """Whether ``version`` (e.g. ``5.25.0``, ``5.26.0.dev0``) lies in :data:`VERIFIED_TRANSFORMERS`."""
    def minor(v: str) -> tuple[int, ...]:
        return tuple(int(x) for x in re.findall(r"\d+", v)[:2])

    lo, hi = (minor(v) for v in VERIFIED_TRANSFORMERS)
    return len(minor(version)) == 2 and lo <= minor(version) <= hi


def names_for(spec: ModelSpec) -> ModuleNames | None:
    """The name table of ``spec`` (LLaVA: by its tower, CLIP or Pixtral; GLM-4.6V: by its LM, dense or MoE)."""
    if spec.model_type == "llava":
        return _PIXTRAL if _has_pixtral_tower(spec) else _CLIP
    if spec.model_type == "glm46v" and not spec.lm.moe_layers:
        return _NAMES["glm4v"]
    return _NAMES.get(spec.model_type)


def _has_pixtral_tower(spec: ModelSpec) -> bool:
    return not any(isinstance(b, ClsToken) for b in spec.blocks if b.part == VISION_TOWER)


_LM_ONLY_FAMILIES = ("qwen2", "qwen3", "qwen3_moe", "llama", "mistral", "gpt_oss", "deepseek_v3")


def module_names_known(spec: ModelSpec) -> bool:
    """Whether :func:`vlm_perf.arch.layout.layout` gives this model its real Hugging Face module names."""
    return names_for(spec) is not None or (not spec.is_vlm and spec.family in _LM_ONLY_FAMILIES)


def named_model_types() -> tuple[str, ...]:
    """The model types whose module names are laid out (VLMs, then LM-only families): adapters resolve on them."""
    return tuple(sorted(_NAMES)) + _LM_ONLY_FAMILIES
