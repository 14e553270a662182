"""Qwen3.5 (``qwen3_5``) and Qwen3.5-MoE (``qwen3_5_moe``): Qwen3-VL-style tower without deepstack + a hybrid
gated-delta-net / full-attention LM.

Read from transformers ``models/qwen3_5/modeling_qwen3_5.py`` and ``models/qwen3_5_moe/modeling_qwen3_5_moe.py``:

* **Tower** (``Qwen3_5VisionModel``): Conv3d patch embed (C x T_p x P^2 -> h_v, bias), learned position table
  (``num_position_embeddings`` x h_v, bilinear-interpolated: not a matmul), ``depth`` blocks of LayerNorm, fused
  qkv (bias), proj (bias), LayerNorm, MLP fc1 -> GELU-tanh -> fc2 (bias); full attention per image / temporal
  slice; **no deepstack** mergers.
* **Projector** (``Qwen3_5VisionPatchMerger``): LayerNorm(h_v) -> 2x2 fold -> Linear(4h_v -> 4h_v) -> GELU ->
  Linear(4h_v -> out_hidden_size), on merged tokens.
* **LM**: ``layer_types`` (else ``full_attention_interval``, class default 4: every 4th layer full) mixes
  ``linear_attention`` layers (:class:`~vlm_perf.arch.blocks.GatedDeltaNet`) and ``full_attention`` layers
  (:class:`~vlm_perf.arch.blocks.GatedDecoderAttention`: q_proj also emits the output gate, q/k RMSNorm,
  GQA, ``attention_bias`` on q/k/v/o). MLP: dense SwiGLU (``qwen3_5``) or, in every layer, MoE with top-k
  routed experts + one shared expert scaled by ``sigmoid(shared_expert_gate(x))`` (``qwen3_5_moe``).
  Two RMSNorms per layer, final RMSNorm, lm_head (top-level ``tie_word_embeddings``, class default False).

The transformers classes have no MTP module (released checkpoints may ship MTP weights, which transformers
drops on load): not counted, as for the model the FLOPs are verified against.
"""

from __future__ import annotations

from typing import Any, Mapping, TypedDict

from ...errors import ConfigError, UnsupportedModelError
from ..blocks import (DenseMLP, FinalNorm, GatedDecoderAttention, GatedDeltaNet, LMHead, LMLayerNorms,
                      SharedGateMoEMLP, TokenEmbedding)
from ..fields import Fields, text_section
from ..parts import LANGUAGE_MODEL
from ..spec import LMSpec, ModelSpec, MoESpec, VisionSpec
from . import Family, register_family
from .media import QwenMedia, pixel_bounds
from .qwen_vl import vision_blocks

CHUNK = 64  # chunk of the chunked gated-delta rule (transformers' torch fallback and FLA's kernels)
LAYER_TYPES = ("linear_attention", "full_attention")


def read_vision(f: Fields) -> VisionSpec:
    """Qwen3.5 tower summary (the Qwen3-VL tower without deepstack)."""
    width, heads = f.int("hidden_size"), f.int("num_heads")
    if f.opt("deepstack_visual_indexes"):
        raise UnsupportedModelError(f"{f.source}: {f.name_of('deepstack_visual_indexes')} is set, but the "
                                    "Qwen3.5 vision model has no deepstack mergers")
    return VisionSpec(family="qwen3_vl", depth=f.int("depth"), hidden_size=width, num_heads=heads,
                      head_dim=width // heads, intermediate_size=f.int("intermediate_size"), mlp_gated=False,
                      patch_size=f.int("patch_size"), temporal_patch_size=f.int("temporal_patch_size"),
                      in_channels=f.int("in_channels"), spatial_merge_size=f.int("spatial_merge_size"),
                      out_hidden_size=f.int("out_hidden_size"),
                      num_position_embeddings=f.int("num_position_embeddings"), patch_embed_bias=True,
                      norm="layernorm")


def layer_types(f: Fields, layers: int) -> tuple[str, ...]:
    """``layer_types`` as given, else transformers' rule from ``full_attention_interval`` (class default 4):
    layer i is full attention when (i + 1) % interval == 0."""
    types = f.opt("layer_types")
    if types is None:
        interval = int(f.opt("full_attention_interval", 4))
        if interval <= 0:
            raise ConfigError(f"{f.source}: field {f.name_of('full_attention_interval')} must be positive")
        return tuple("linear_attention" if (i + 1) % interval else "full_attention" for i in range(layers))
    if not isinstance(types, (list, tuple)) or len(types) != layers or any(t not in LAYER_TYPES for t in types):
        raise ConfigError(f"{f.source}: field {f.name_of('layer_types')} must list {layers} entries of "
                          f"{' / '.join(LAYER_TYPES)}, got {types!r}")
    return tuple(types)


class LinearAttentionShape(TypedDict):
    """The gated-delta-net (``linear_attention`` layer) widths read from the config, and every layer's type."""

    key_heads: int
    key_head_dim: int
    value_heads: int
    value_head_dim: int
    conv_kernel: int
    types: tuple[str, ...]  # per layer: "linear_attention" | "full_attention"


def read_lm(f: Fields, moe: bool) -> tuple[LMSpec, LinearAttentionShape]:
    """The LM summary (full-attention widths) and the gated-delta-net widths."""
    hidden, heads, layers = f.int("hidden_size"), f.int("num_attention_heads"), f.int("num_hidden_layers")
    types = layer_types(f, layers)
    moe_spec = None
    if moe:
        if f.opt("decoder_sparse_step", 1) != 1 or f.opt("mlp_only_layers"):
            raise UnsupportedModelError(f"{f.source}: Qwen3.5-MoE runs MoE in every layer; "
                                        "decoder_sparse_step / mlp_only_layers are not part of it")
        moe_spec = MoESpec(num_experts=f.int("num_experts"), top_k=f.int("num_experts_per_tok"),
                           expert_intermediate_size=f.int("moe_intermediate_size"), num_shared_experts=1,
                           shared_intermediate_size=f.int("shared_expert_intermediate_size"))
    lm = LMSpec(family="qwen3_5_moe" if moe else "qwen3_5", num_layers=layers, hidden_size=hidden,
                num_heads=heads, num_kv_heads=int(f.opt("num_key_value_heads") or heads),
                head_dim=int(f.opt("head_dim") or hidden // heads),
                intermediate_size=0 if moe else f.int("intermediate_size"), vocab_size=f.int("vocab_size"),
                tie_word_embeddings=bool(f.opt("tie_word_embeddings", False)), moe=moe_spec,
                moe_layers=tuple(range(layers)) if moe else (), qkv_bias=bool(f.opt("attention_bias", False)),
                qk_norm=True)
    linear = LinearAttentionShape(
        key_heads=f.int("linear_num_key_heads"), key_head_dim=f.int("linear_key_head_dim"),
        value_heads=f.int("linear_num_value_heads"), value_head_dim=f.int("linear_value_head_dim"),
        conv_kernel=f.int("linear_conv_kernel_dim"), types=types)
    if linear["value_heads"] % max(linear["key_heads"], 1):
        raise ConfigError(f"{f.source}: linear_num_value_heads {linear['value_heads']} is not a multiple of "
                          f"linear_num_key_heads {linear['key_heads']}")
    return lm, linear


def lm_blocks(lm: LMSpec, linear: LinearAttentionShape) -> tuple:
    h = lm.hidden_size
    n_linear = sum(t == "linear_attention" for t in linear["types"])
    blocks: list = [TokenEmbedding(part=LANGUAGE_MODEL, count=1, vocab=lm.vocab_size, width=h)]
    if n_linear:
        blocks.append(GatedDeltaNet(part=LANGUAGE_MODEL, count=n_linear, hidden=h, key_heads=linear["key_heads"],
                                    key_head_dim=linear["key_head_dim"], value_heads=linear["value_heads"],
                                    value_head_dim=linear["value_head_dim"], conv_kernel=linear["conv_kernel"],
                                    chunk=CHUNK))
    if lm.num_layers - n_linear:
        blocks.append(GatedDecoderAttention(part=LANGUAGE_MODEL, count=lm.num_layers - n_linear, hidden=h,
                                            num_heads=lm.num_heads, num_kv_heads=lm.num_kv_heads,
                                            head_dim=lm.head_dim, qkv_bias=lm.qkv_bias, o_bias=lm.qkv_bias,
                                            qk_norm=True))
    blocks.append(LMLayerNorms(part=LANGUAGE_MODEL, count=lm.num_layers, hidden=h))
    if lm.moe is not None:
        m = lm.moe
        blocks.append(SharedGateMoEMLP(part=LANGUAGE_MODEL, count=lm.num_layers, hidden=h,
                                       num_experts=m.num_experts, top_k=m.top_k,
                                       expert_width=m.expert_intermediate_size, num_shared=1,
                                       shared_width=m.shared_intermediate_size))
    else:
        blocks.append(DenseMLP(part=LANGUAGE_MODEL, count=lm.num_layers, hidden=h, width=lm.intermediate_size))
    blocks += [FinalNorm(part=LANGUAGE_MODEL, count=1, hidden=h),
               LMHead(part=LANGUAGE_MODEL, count=1, hidden=h, vocab=lm.vocab_size, tied=lm.tie_word_embeddings)]
    return tuple(blocks)


def build_qwen3_5(family: str):
    moe = family == "qwen3_5_moe"

    def build(config: Mapping[str, Any], source: str, name: str = "") -> ModelSpec:
        vc = config.get("vision_config")
        if not isinstance(vc, dict):
            raise ConfigError(f"{source}: config lacks required field vision_config for model_type {family}")
        text, section = text_section(config)
        lm, linear = read_lm(Fields(text, section, source), moe)
        vision = read_vision(Fields(vc, "vision_config", source))
        spec = ModelSpec(name=name or str(config.get("_name_or_path") or family), model_type=family, lm=lm,
                         vision=vision, source=source, family=family,
                         blocks=vision_blocks(vision) + lm_blocks(lm, linear))
        spec.extra["layer_types"] = linear["types"]
        return spec
    return build


# Reference bounds: the Qwen3-VL checkpoints' preprocessor_config.json (size.shortest_edge 256^2, longest_edge
# 4096^2); a Qwen3.5 checkpoint's own preprocessor_config.json beats them (not verified against the hub).
QWEN3_5_IMAGE_BOUNDS = (256 * 256, 4096 * 4096)


class Qwen3_5Media(QwenMedia):
    """``Qwen2VLImageProcessor`` (what transformers maps ``qwen3_5`` / ``qwen3_5_moe`` to) smart resize:
    factor = patch x merge, pixel bounds on h x w (``min_pixels`` / ``max_pixels`` beat ``size``), grid
    (1, h/p, w/p), LM tokens grid/merge^2; ``Qwen3VLProcessor`` sets no image kwargs. Video: transformers maps
    both model types to ``Qwen3VLVideoProcessor``, so videos follow the Qwen3-VL rule (clip-wide t_bar x h x w
    bounds, video_preprocessor_config.json else the Qwen3-VL checkpoints' defaults)."""

    def settings(self, spec) -> dict:
        pre = spec.processor.get("preprocessor_config.json", {})
        lo, hi, origin = pixel_bounds(pre, QWEN3_5_IMAGE_BOUNDS, "reference default (Qwen3-VL checkpoints' bounds)")
        video = QwenMedia("qwen3_vl").settings(spec)["video"]  # Qwen3VLVideoProcessor: the Qwen3-VL rule
        return {"min_pixels": lo, "max_pixels": hi, "source": origin, "video": video}


_NOTES = ("gated-delta layers: chunked delta rule (chunk 64) matmuls counted; triangular solves, decay, exp, "
          "cumsum, l2norm and gating are not matmuls (0); --causal does not change them",
          "full-attention layers: output gate doubles q_proj; core as any causal GQA layer",
          "no MTP module in transformers' class: not counted")
for _name, _cls in (("qwen3_5", "Qwen3_5ForConditionalGeneration"),
                    ("qwen3_5_moe", "Qwen3_5MoeForConditionalGeneration")):
    register_family(Family(name=_name, model_types=(_name,), build=build_qwen3_5(_name), hf_class=_cls,
                           is_vlm=True, media=Qwen3_5Media(_name), notes=_NOTES))
