"""gpt-oss (transformers ``gpt_oss``, ``GptOssForCausalLM``) as a language model.

What the config says and transformers builds (``modeling_gpt_oss.py``, transformers 5.24):

* every layer is MoE: ``GptOssTopKRouter`` (Linear h -> E **with bias**, top-k of the logits, softmax over the
  k chosen) and ``GptOssExperts`` (per expert a fused gate/up projection h -> 2·F and a down projection F -> h,
  **both with biases**; the clamped SwiGLU ``(up + 1) · gate · sigmoid(1.702 · gate)`` is elementwise). No
  shared expert, no dense MLP layer; ``intermediate_size`` is the expert width F;
* attention: q/k/v/o Linears with bias (``attention_bias``, class default True), GQA, ``head_dim`` (class
  default 64, not hidden / heads), and one learned **sink** logit per head that joins each row's softmax
  (:class:`~vlm_perf.arch.blocks.SinkDecoderAttention`: parameters, no matmul);
* ``layer_types`` alternates ``sliding_attention`` / ``full_attention`` (when absent the config class makes
  even layers sliding); sliding layers attend to the last ``sliding_window`` tokens (class default 128, the
  query included, as Mistral's); an explicit ``sliding_window`` of null / 0 leaves every layer full;
* untied embeddings (class default), RMSNorms without bias.

Fields the released configs always state are required (``hidden_size``, ``num_attention_heads``,
``num_hidden_layers``, ``vocab_size``, ``intermediate_size``, ``num_local_experts``,
``num_experts_per_tok``); the others fall back to ``GptOssConfig``'s class defaults, named here.
Routed-expert FLOPs are top-k per token: transformers' eager experts (``GptOssExperts.forward``) gather each
expert's tokens and run only those (tests/verify/test_gpt_oss_flops.py measures it), as grouped-GEMM training
kernels do.
"""

from __future__ import annotations

from typing import Any, Mapping

from ...errors import ConfigError
from ..fields import Fields, text_section
from ..spec import LMSpec, ModelSpec, MoESpec
from . import Family, register_family
from .decoder import lm_blocks

# GptOssConfig class defaults (transformers 5.24 configuration_gpt_oss.py) for fields a config may omit
HEAD_DIM_DEFAULT = 64
KV_HEADS_DEFAULT = 8
WINDOW_DEFAULT = 128
ATTENTION_BIAS_DEFAULT = True
LAYER_TYPES = ("sliding_attention", "full_attention")


def read_gpt_oss_lm(f: Fields) -> LMSpec:
    """The :class:`LMSpec` of a gpt-oss text config (every layer MoE, sliding layers from ``layer_types``)."""
    hidden = f.int("hidden_size")
    heads = f.int("num_attention_heads")
    layers = f.int("num_hidden_layers")
    data = f.data
    kv_heads = (int(f.opt("num_key_value_heads") or heads) if "num_key_value_heads" in data
                else KV_HEADS_DEFAULT)  # absent: the class default; null: one KV head per query head
    head_dim = f.int("head_dim") if data.get("head_dim") is not None else (
        HEAD_DIM_DEFAULT if "head_dim" not in data else hidden // heads)
    window = f.int("sliding_window") if data.get("sliding_window") is not None else (
        0 if "sliding_window" in data else WINDOW_DEFAULT)
    types = data.get("layer_types")
    if types is None:
        sliding = tuple(i for i in range(layers) if (i + 1) % 2)
    else:
        if not isinstance(types, (list, tuple)) or len(types) != layers:
            raise ConfigError(f"{f.source}: field {f.name_of('layer_types')} must list one of {', '.join(LAYER_TYPES)} "
                              f"per layer ({layers} layers)")
        unknown = sorted({str(t) for t in types} - set(LAYER_TYPES))
        if unknown:
            raise ConfigError(f"{f.source}: field {f.name_of('layer_types')} has {', '.join(map(repr, unknown))}; gpt_oss "
                              f"layers are {' or '.join(LAYER_TYPES)}")
        sliding = tuple(i for i, t in enumerate(types) if t == "sliding_attention")
    experts, top_k = f.int("num_local_experts", "num_experts"), f.int("num_experts_per_tok")
    if not 0 < top_k <= experts:
        raise ConfigError(f"{f.source}: field {f.name_of('num_experts_per_tok')} {top_k} must be from 1 to "
                          f"num_local_experts {experts}")
    return LMSpec(family="gpt_oss", num_layers=layers, hidden_size=hidden, num_heads=heads, num_kv_heads=kv_heads,
                  head_dim=head_dim, intermediate_size=0, vocab_size=f.int("vocab_size"),
                  tie_word_embeddings=bool(f.opt("tie_word_embeddings", False)),
                  moe=MoESpec(num_experts=experts, top_k=top_k, expert_intermediate_size=f.int("intermediate_size"),
                              router_bias=True),
                  moe_layers=tuple(range(layers)), qkv_bias=bool(f.opt("attention_bias", ATTENTION_BIAS_DEFAULT)),
                  sliding_window=window if window and sliding else None,
                  sliding_layers=sliding if window else ())


def build(config: Mapping[str, Any], source: str, name: str = "") -> ModelSpec:
    text, section = text_section(config)
    lm = read_gpt_oss_lm(Fields(text, section, source))
    return ModelSpec(name=name or str(config.get("_name_or_path") or config.get("model_type")),
                     model_type=str(config.get("model_type")), lm=lm, source=source, family="gpt_oss",
                     blocks=lm_blocks(lm))  # attention sinks, biased experts: decoder._attention/_moe


register_family(Family(name="gpt_oss", model_types=("gpt_oss",), build=build, hf_class="GptOssForCausalLM",
                       is_vlm=False))
