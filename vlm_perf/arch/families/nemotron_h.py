"""Nemotron-H hybrid LM (transformers ``nemotron_h``: ``NemotronHForCausalLM``), the language model of
Nemotron-Nano-12B-v2 and of Nemotron-Nano-12B-v2-VL.

Read from transformers 5.24 ``models/nemotron_h/configuration_nemotron_h.py`` and ``modeling_nemotron_h.py``:

* layers from ``layers_block_type`` (or the legacy ``hybrid_override_pattern`` string, ``M`` Mamba-2, ``*``
  attention, ``-`` MLP, ``E`` MoE, as ``NemotronHConfig._pattern_to_list`` converts it); every layer
  (``NemotronHBlock``) is ONE RMSNorm + ONE mixer + residual;
* ``linear_attention`` (``M``): ``NemotronHMamba2Mixer`` -> :class:`~vlm_perf.arch.blocks.Mamba2Mixer`
  (``in_proj``/``out_proj`` bias ``use_bias``, conv bias ``use_conv_bias``);
* ``full_attention`` (``*``): ``NemotronHAttention``: q/k/v/o without bias, GQA, **no rotary embedding**;
* ``mlp`` (``-``): ``NemotronHMLP`` up/down (bias ``mlp_bias``), relu² (2 matrices, not gated);
* embeddings, ``norm_f`` RMSNorm, ``lm_head`` (never tied: ``_tied_weights_keys = {}``, whatever
  ``tie_word_embeddings`` says).

* ``moe`` (``E``, Nemotron 3): ``NemotronHMoE`` -> :class:`~vlm_perf.arch.blocks.PlainMoEMLP`: sigmoid router
  h -> E (group-limited top-k, a correction-bias buffer), optional latent projections (``moe_latent_size``), E
  non-gated relu² experts (``moe_intermediate_size``) of which ``num_experts_per_tok`` run per token, and ONE
  shared non-gated MLP (``moe_shared_expert_intermediate_size``; transformers builds one whatever
  ``n_shared_experts`` says).

Multi-token-prediction layers are refused (transformers does not build them: ``_keys_to_ignore_on_load_unexpected``
drops ``mtp.*``).
"""

from __future__ import annotations

from typing import Any, Mapping

from ...errors import ConfigError, UnsupportedModelError
from ..blocks import (DecoderAttention, ExtraNorms, FinalNorm, LMHead, Mamba2Mixer, PlainMLP, PlainMoEMLP,
                      TokenEmbedding)
from ..fields import Fields, text_section
from ..parts import LANGUAGE_MODEL
from ..spec import LMSpec, ModelSpec
from . import Family, register_family

PATTERN = {"M": "linear_attention", "E": "moe", "*": "full_attention", "-": "mlp"}


def layer_types(f: Fields) -> list[str]:
    """``layers_block_type`` (alias ``layer_types``), else ``hybrid_override_pattern`` converted char by char."""
    types = f.opt("layers_block_type") or f.opt("layer_types")
    if types is None:
        pattern = f.req("hybrid_override_pattern")
        if not isinstance(pattern, str) or not pattern or set(pattern) - set(PATTERN):
            raise ConfigError(f"{f.source}: field {f.name_of('hybrid_override_pattern')} {pattern!r} must be a non-empty string of "
                              f"{', '.join(PATTERN)}")
        return [PATTERN[c] for c in pattern]
    if not isinstance(types, list) or not types or not all(t in PATTERN.values() for t in types):
        raise ConfigError(f"{f.source}: field {f.name_of('layers_block_type')} {types!r} must be a non-empty list of "
                          f"{', '.join(PATTERN.values())}")
    return list(types)


def read_nemotron_h(f: Fields) -> tuple[LMSpec, tuple]:
    """The LMSpec summary and the LM inventory of a Nemotron-H config section."""
    types = layer_types(f)
    stated = f.opt("num_hidden_layers")
    if stated is not None and stated != len(types):
        raise ConfigError(f"{f.source}: num_hidden_layers {stated!r} disagrees with the {len(types)} entries of "
                          "layers_block_type / layer_types / hybrid_override_pattern")
    if int(f.opt("num_nextn_predict_layers", 0) or 0):
        raise UnsupportedModelError(f"{f.source}: nemotron_h multi-token-prediction layers are not modelled")
    if f.opt("sliding_window"):
        raise UnsupportedModelError(f"{f.source}: nemotron_h with sliding_window is not modelled")
    hidden, vocab = f.int("hidden_size"), int(f.opt("vocab_size", 131072))
    heads = int(f.opt("num_attention_heads", 32))
    kv = int(f.opt("num_key_value_heads") or heads)
    head_dim = int(f.opt("head_dim", 128))
    width = int(f.opt("intermediate_size", 21504))
    tie = False  # NemotronHForCausalLM._tied_weights_keys = {}: transformers never ties, whatever the config says
    counts = {t: types.count(t) for t in ("linear_attention", "full_attention", "mlp", "moe")}
    for key in ("n_routed_experts", "num_local_experts", "num_experts_per_tok", "moe_intermediate_size",
                "moe_shared_expert_intermediate_size", "moe_latent_size", "mamba_num_heads", "mamba_head_dim", "ssm_state_size", "n_groups", "conv_kernel", "chunk_size"):
        value = f.opt(key)
        if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value <= 0):
            raise ConfigError(f"{f.source}: field {f.name_of(key)} must be a positive integer, got {value!r}")
    mamba = Mamba2Mixer(
        part=LANGUAGE_MODEL, count=counts["linear_attention"], hidden=hidden,
        num_heads=int(f.opt("mamba_num_heads", 128)), head_dim=int(f.opt("mamba_head_dim", 64)),
        state_size=int(f.opt("ssm_state_size", 128)), n_groups=int(f.opt("n_groups", f.opt("mamba_n_groups", 8))),
        conv_kernel=int(f.opt("conv_kernel", f.opt("mamba_d_conv", 4))),
        chunk=int(f.opt("chunk_size", f.opt("mamba_chunk_size", 128))),
        conv_bias=bool(f.opt("use_conv_bias", f.opt("mamba_conv_bias", True))), proj_bias=bool(f.opt("use_bias", False)))
    if mamba.inner % mamba.n_groups or mamba.num_heads % mamba.n_groups:
        raise ConfigError(f"{f.source}: mamba_num_heads {mamba.num_heads} is not divisible by n_groups {mamba.n_groups}")
    if bool(f.opt("attention_bias", False)):
        raise UnsupportedModelError(f"{f.source}: nemotron_h attention_bias true: transformers' NemotronHAttention "
                                    "builds its projections without bias")
    if counts["moe"]:
        experts, k = int(f.opt("n_routed_experts", f.opt("num_local_experts", 8))), int(f.opt("num_experts_per_tok", 2))
        groups = f.opt("n_group", 1)
        if k > experts or not isinstance(groups, int) or groups < 1 or experts % groups:
            raise ConfigError(f"{f.source}: num_experts_per_tok {k} / n_group {groups!r} do not fit "
                              f"n_routed_experts {experts}")
    lm = LMSpec(family="nemotron_h", num_layers=len(types), hidden_size=hidden, num_heads=heads, num_kv_heads=kv,
                head_dim=head_dim, intermediate_size=width, vocab_size=vocab, tie_word_embeddings=tie)
    blocks = (
        TokenEmbedding(part=LANGUAGE_MODEL, count=1, vocab=vocab, width=hidden),
        mamba,
        DecoderAttention(part=LANGUAGE_MODEL, count=counts["full_attention"], hidden=hidden, num_heads=heads,
                         num_kv_heads=kv, head_dim=head_dim, qkv_bias=False, o_bias=False, qk_norm=False),
        PlainMLP(part=LANGUAGE_MODEL, count=counts["mlp"], hidden=hidden, width=width,
                 bias=bool(f.opt("mlp_bias", False))),
        PlainMoEMLP(part=LANGUAGE_MODEL, count=counts["moe"], hidden=hidden,
                    num_experts=int(f.opt("n_routed_experts", f.opt("num_local_experts", 8))),
                    top_k=int(f.opt("num_experts_per_tok", 2)), expert_width=int(f.opt("moe_intermediate_size", 7688)),
                    shared_width=int(f.opt("moe_shared_expert_intermediate_size", 7688)),
                    latent=int(f.opt("moe_latent_size", 0) or 0), bias=bool(f.opt("mlp_bias", False))),
        ExtraNorms(part=LANGUAGE_MODEL, count=len(types), width=hidden, norm="rmsnorm", what="per-layer norm"),
        FinalNorm(part=LANGUAGE_MODEL, count=1, hidden=hidden),
        LMHead(part=LANGUAGE_MODEL, count=1, hidden=hidden, vocab=vocab, tied=tie),
    )
    return lm, blocks


def build(config: Mapping[str, Any], source: str, name: str = "") -> ModelSpec:
    text, section = text_section(config)
    lm, blocks = read_nemotron_h(Fields(text, section, source))
    return ModelSpec(name=name or str(config.get("_name_or_path") or "nemotron_h"), model_type="nemotron_h", lm=lm,
                     source=source, family="nemotron_h", blocks=blocks)


register_family(Family(
    name="nemotron_h", model_types=("nemotron_h",), build=build, hf_class="NemotronHForCausalLM", is_vlm=False,
    notes=("MoE layers (Nemotron 3): sigmoid router, top-k of E non-gated relu² experts (optional latent "
           "projections), one shared MLP; counted top-k as transformers' eager experts run them (measured)",
           "Mamba-2 layers: in_proj/out_proj, the depthwise causal conv (S outputs per channel) and the SSD "
           "chunked scan's matmuls (C·Bᵀ per group, (L∘C·Bᵀ)·X, chunk states Bᵀ·X, C·S per head); decays, the "
           "inter-chunk recurrence, D skip and the gated norm are elementwise (0 FLOPs)",
           "scan exact for sequence lengths that are multiples of chunk_size; a partial last chunk of r tokens "
           "is billed Q·r rows (between a masked kernel's r² and a padding kernel's Q²)",
           "verified by FlopCounterMode on an independent re-implementation of one Mamba-2 layer and hand "
           "arithmetic; parameters against transformers' NemotronHForCausalLM on the meta device")))
