"""Decoder-only LM families (qwen2, qwen3, qwen3_moe, llama, mistral, deepseek_v3) and the LM inventory
every VLM family reuses for its language model.

Config traps handled here: ``head_dim`` read when present (Qwen3-VL-32B: 128, not hidden/heads);
``num_key_value_heads`` defaults to the head count; Qwen2/2.5 LMs have q/k/v bias and no o bias, Llama's
``attention_bias`` puts a bias on q, k, v and o; Qwen3 has q/k RMSNorm; Qwen3-MoE ``decoder_sparse_step``
and ``mlp_only_layers``; DeepSeek-V3 ``first_k_dense_replace`` / ``moe_layer_freq``, MLA and MTP.
Sliding windows follow the transformers configs: Mistral's ``sliding_window`` applies to every layer;
Qwen2/Qwen3 use it only with ``use_sliding_window`` and only on layers ``>= max_window_layers`` (or as
``layer_types`` says); Llama has none.
"""

from __future__ import annotations

from dataclasses import replace
from functools import lru_cache
from typing import Any, Mapping

from ...errors import ConfigError, UnsupportedModelError
from ..blocks import (BiasedMoEMLP, DecoderAttention, DenseMLP, FinalNorm, ForwardOnly, LMHead, LMLayerNorms,
                      MLAttention, MoEMLP, MTPModules, SinkDecoderAttention, TokenEmbedding, VisionLayers)
from ..fields import Fields, text_section
from ..parts import LANGUAGE_MODEL
from ..spec import LMSpec, MLASpec, ModelSpec, MoESpec
from . import Family, register_family

# transformers' class default for tie_word_embeddings when a config omits it (False for every family here)
TIE_DEFAULT = False


def vision_and_text_sections(config: Mapping[str, Any], source: str, model_type: str, default_text_type: str,
                             lm_families: tuple[str, ...]) -> tuple[dict, dict, str]:
    """The ``vision_config`` and ``text_config`` sections of a two-tower checkpoint config and the
    text model's type (``default_text_type`` when absent); an error names the missing section or
    the unsupported language model."""
    vc, tc = config.get("vision_config"), config.get("text_config")
    if not isinstance(vc, dict) or not isinstance(tc, dict):
        missing = "vision_config" if not isinstance(vc, dict) else "text_config"
        raise ConfigError(f"{source}: config lacks required field {missing} for model_type {model_type}")
    text_type = tc.get("model_type", default_text_type)
    if text_type not in lm_families:
        raise UnsupportedModelError(f"{source}: {model_type} with text_config.model_type {text_type!r} is not "
                                    f"modelled; supported LMs: {', '.join(lm_families)}")
    return vc, tc, text_type


def feature_layer_depth(value: Any, depth: int, source: str) -> tuple[int, int]:
    """``vision_feature_layer`` (an int or a list) of a tower of ``depth`` layers -> (how many hidden states
    the projector concatenates, how many tower layers the deepest one passes through). Indexes address
    ``hidden_states`` (depth + 1 entries: the embeddings, then each layer's output), so index i reaches
    i mod (depth + 1) layers; the layers after it still run but feed no loss (`forward_only_after`)."""
    layers = list(value) if isinstance(value, (list, tuple)) else [value]
    if not layers:
        raise ConfigError(f"{source}: vision_feature_layer is an empty list")
    for layer in layers:
        if isinstance(layer, bool) or not isinstance(layer, int) or not -(depth + 1) <= layer <= depth:
            raise ConfigError(f"{source}: vision_feature_layer {value!r}: each entry must be an integer index into "
                              f"the tower's {depth + 1} hidden states")
    return len(layers), max(layer % (depth + 1) for layer in layers)


def forward_only_after(layers: VisionLayers, used: int) -> tuple:
    """``layers`` (all ``layers.count`` tower layers, each run in the forward) split at ``used``: the first
    ``used`` as they are, the rest as one `ForwardOnly` (their output reaches no loss, so training never
    back-propagates through them: forward FLOPs only)."""
    kept = (replace(layers, count=used),) if used else ()
    rest = layers.count - used
    return kept + ((ForwardOnly(part=layers.part, count=1, module=replace(layers, count=rest)),) if rest > 0 else ())


def read_lm(f: Fields, family: str, tie_default: bool = TIE_DEFAULT) -> LMSpec:
    """An :class:`LMSpec` of LM family ``family`` (qwen2 | qwen3 | qwen3_moe | llama | mistral | deepseek_v3)."""
    hidden = f.int("hidden_size")
    heads = f.int("num_attention_heads")
    layers = f.int("num_hidden_layers")
    head_dim = f.opt("head_dim") or hidden // heads
    kv_heads = int(f.opt("num_key_value_heads") or heads)
    tie = bool(f.opt("tie_word_embeddings", tie_default))
    moe: MoESpec | None = None
    moe_layers: tuple[int, ...] = ()
    mla: MLASpec | None = None
    mtp = 0
    if family == "qwen3_moe":
        experts = f.int("num_experts", "num_local_experts")
        moe = MoESpec(num_experts=experts, top_k=f.int("num_experts_per_tok"),
                      expert_intermediate_size=f.int("moe_intermediate_size"))
        step = int(f.opt("decoder_sparse_step", 1))
        dense_only = set(f.opt("mlp_only_layers", ()))
        moe_layers = tuple(i for i in range(layers) if i not in dense_only and experts > 0 and (i + 1) % step == 0)
    elif family == "deepseek_v3":
        shared = f.int("n_shared_experts")
        moe = MoESpec(num_experts=f.int("n_routed_experts"), top_k=f.int("num_experts_per_tok"),
                      expert_intermediate_size=f.int("moe_intermediate_size"), num_shared_experts=shared,
                      shared_intermediate_size=f.int("moe_intermediate_size") if shared else 0,
                      router_bias=f.opt("topk_method", "noaux_tc") == "noaux_tc")
        first_dense = f.int("first_k_dense_replace")
        freq = int(f.opt("moe_layer_freq", 1))
        moe_layers = tuple(i for i in range(layers) if i >= first_dense and i % freq == 0)
        q_lora = f.opt("q_lora_rank")
        mla = MLASpec(q_lora_rank=int(q_lora) if q_lora else None, kv_lora_rank=f.int("kv_lora_rank"),
                      qk_nope_head_dim=f.int("qk_nope_head_dim"), qk_rope_head_dim=f.int("qk_rope_head_dim"),
                      v_head_dim=f.int("v_head_dim"))
        head_dim = mla.v_head_dim
        mtp = f.int("num_nextn_predict_layers")
    window, sliding = _sliding_layers(f, family, layers)
    needs_dense = len(moe_layers) < layers
    return LMSpec(
        family=family, num_layers=layers, hidden_size=hidden, num_heads=heads, num_kv_heads=kv_heads,
        head_dim=int(head_dim),
        intermediate_size=f.int("intermediate_size") if needs_dense or mtp else int(f.opt("intermediate_size", 0)),
        vocab_size=f.int("vocab_size"), tie_word_embeddings=tie, moe=moe, moe_layers=moe_layers, mla=mla,
        num_mtp_layers=mtp, qkv_bias=family == "qwen2" or bool(f.opt("attention_bias", False)),
        qk_norm=family in ("qwen3", "qwen3_moe"), sliding_window=window, sliding_layers=sliding,
    )


def _sliding_layers(f: Fields, family: str, layers: int) -> tuple[int | None, tuple[int, ...]]:
    """(window, sliding layer indexes) as the transformers config classes derive them."""
    window = f.opt("sliding_window")
    if family == "mistral":
        return (int(window), tuple(range(layers))) if window else (None, ())
    if family in ("qwen2", "qwen3", "qwen3_moe"):
        if not f.opt("use_sliding_window", False) or not window:
            return None, ()
        types = f.opt("layer_types")
        if types:
            sliding = tuple(i for i, t in enumerate(types) if t == "sliding_attention")
        else:
            first = int(f.opt("max_window_layers", 28))
            sliding = tuple(i for i in range(layers) if i >= first)
        return (int(window), sliding) if sliding else (None, ())
    return None, ()  # llama, deepseek_v3: no sliding-window layers


def _attention(lm: LMSpec, count: int, window: int | None = None) -> DecoderAttention | MLAttention:
    if lm.mla is not None:
        m = lm.mla
        return MLAttention(part=LANGUAGE_MODEL, count=count, hidden=lm.hidden_size, num_heads=lm.num_heads,
                           q_lora_rank=m.q_lora_rank, kv_lora_rank=m.kv_lora_rank,
                           qk_nope_head_dim=m.qk_nope_head_dim, qk_rope_head_dim=m.qk_rope_head_dim,
                           v_head_dim=m.v_head_dim)
    o_bias = lm.qkv_bias if lm.family != "qwen2" else False
    kind = SinkDecoderAttention if lm.family == "gpt_oss" else DecoderAttention  # gpt-oss: attention sinks
    return kind(part=LANGUAGE_MODEL, count=count, hidden=lm.hidden_size, num_heads=lm.num_heads,
                            num_kv_heads=lm.num_kv_heads, head_dim=lm.head_dim, qkv_bias=lm.qkv_bias,
                            o_bias=o_bias, qk_norm=lm.qk_norm, window=window)


def _moe(lm: LMSpec, count: int) -> MoEMLP:
    moe = lm.moe
    assert moe is not None
    kind = BiasedMoEMLP if lm.family == "gpt_oss" else MoEMLP  # gpt-oss: biased experts
    return kind(part=LANGUAGE_MODEL, count=count, hidden=lm.hidden_size, num_experts=moe.num_experts,
                  top_k=moe.top_k, expert_width=moe.expert_intermediate_size, num_shared=moe.num_shared_experts,
                  shared_width=moe.shared_intermediate_size, router_bias=moe.router_bias)


def _mtp_layer_is_moe(lm: LMSpec, k: int) -> bool:
    """Whether MTP module k's decoder layer (HF index ``num_layers + k``) is an MoE layer (stored params).

    HF DeepSeek-V3 rule ``idx >= first_k_dense_replace and idx % moe_layer_freq == 0``; the frequency is
    inferred from the spacing of ``moe_layers`` (1 when contiguous).
    """
    if lm.moe is None or not lm.moe_layers:
        return False
    gaps = {b - a for a, b in zip(lm.moe_layers, lm.moe_layers[1:])}
    freq = gaps.pop() if len(gaps) == 1 else 1
    return (lm.num_layers + k) % freq == 0


@lru_cache(maxsize=256)
def lm_blocks(lm: LMSpec) -> tuple:
    """The LM inventory (cached per LMSpec: specs and blocks are immutable): embedding, attention sublayers (full / sliding groups), per-layer norms, dense
    and MoE MLP groups, final norm, lm_head, and MTP modules (DeepSeek-V3; outside the stored total)."""
    h = lm.hidden_size
    sliding = len(lm.sliding_layers) if lm.sliding_window else 0
    blocks: list = [TokenEmbedding(part=LANGUAGE_MODEL, count=1, vocab=lm.vocab_size, width=h)]
    if lm.num_layers - sliding:
        blocks.append(_attention(lm, lm.num_layers - sliding))
    if sliding:
        blocks.append(_attention(lm, sliding, window=lm.sliding_window))
    blocks.append(LMLayerNorms(part=LANGUAGE_MODEL, count=lm.num_layers, hidden=h))
    if lm.num_dense_layers:
        blocks.append(DenseMLP(part=LANGUAGE_MODEL, count=lm.num_dense_layers, hidden=h, width=lm.intermediate_size))
    if lm.num_moe_layers:
        blocks.append(_moe(lm, lm.num_moe_layers))
    blocks += [FinalNorm(part=LANGUAGE_MODEL, count=1, hidden=h),
               LMHead(part=LANGUAGE_MODEL, count=1, hidden=h, vocab=lm.vocab_size, tied=lm.tie_word_embeddings)]
    if lm.num_mtp_layers:
        # FLOPs: the MLP of the last main layer's type (what the MTP decoder layer runs); stored params use
        # the HF index rule, which agrees for every released config (DeepSeek-V3: both MoE)
        last_is_moe = bool(lm.moe_layers) and lm.moe_layers[-1] == lm.num_layers - 1
        if last_is_moe != _mtp_layer_is_moe(lm, 0):
            raise UnsupportedModelError(f"{lm.family}: MTP layer type is ambiguous for this config (last layer "
                             f"{'MoE' if last_is_moe else 'dense'}, HF index rule disagrees)")
        mlp = _moe(lm, 1) if last_is_moe else DenseMLP(part=LANGUAGE_MODEL, count=1, hidden=h,
                                                       width=lm.intermediate_size)
        blocks.append(MTPModules(part=LANGUAGE_MODEL, count=lm.num_mtp_layers, hidden=h, vocab=lm.vocab_size,
                                 attention=_attention(lm, 1), mlp=mlp))
    return tuple(blocks)


def build_lm_only(family: str):
    def build(config: Mapping[str, Any], source: str, name: str = "") -> ModelSpec:
        text, section = text_section(config)
        lm = read_lm(Fields(text, section, source), family)
        return ModelSpec(name=name or str(config.get("_name_or_path") or config.get("model_type")),
                         model_type=str(config.get("model_type")), lm=lm, source=source, family=family,
                         blocks=lm_blocks(lm))
    return build


_HF_CLASS = {"qwen2": "Qwen2ForCausalLM", "qwen3": "Qwen3ForCausalLM", "qwen3_moe": "Qwen3MoeForCausalLM",
             "llama": "LlamaForCausalLM", "mistral": "MistralForCausalLM", "deepseek_v3": "DeepseekV3ForCausalLM"}

for _name, _cls in _HF_CLASS.items():
    register_family(Family(name=_name, model_types=(_name,), build=build_lm_only(_name), hf_class=_cls,
                           is_vlm=False))
