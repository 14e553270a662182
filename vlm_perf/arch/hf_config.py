"""Hugging Face ``config.json`` -> :class:`ModelSpec`.

Accepts the hub layout and the layout ``save_pretrained`` writes: LM fields either flat at the
top level (released Qwen2/2.5-VL configs) or nested under ``text_config``; vision fields under
``vision_config``. Known traps handled here (see docs/conventions.md):

* Qwen2-VL: ``vision_config.hidden_size`` is the merger OUTPUT width; the ViT width is
  ``embed_dim`` and its MLP width is ``embed_dim * mlp_ratio``.
* ``in_chans`` (Qwen2/2.5-VL) vs ``in_channels`` (Qwen3-VL).
* Qwen3-VL-MoE: the top-level ``tie_word_embeddings`` wins over ``text_config``'s class default.
* ``head_dim`` is read when present (Qwen3-VL-32B: 128, not hidden/heads).

A field the formulas need and the config lacks raises ``ValueError`` naming it; no silent default
changes a result (the only defaults are the transformers class defaults for optional switches).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Mapping

from .spec import LMSpec, MLASpec, ModelSpec, MoESpec, VisionSpec

VLM_TYPES = ("qwen2_vl", "qwen2_5_vl", "qwen3_vl", "qwen3_vl_moe")
LM_TYPES = ("qwen2", "qwen3", "qwen3_moe", "llama", "mistral", "deepseek_v3")
SUPPORTED_MODEL_TYPES = VLM_TYPES + LM_TYPES

# transformers' class default for tie_word_embeddings when a config omits it.
_TIE_DEFAULT = {
    "qwen2": False, "qwen3": False, "qwen3_moe": False, "llama": False, "mistral": False,
    "deepseek_v3": False, "qwen2_vl": False, "qwen2_5_vl": False, "qwen3_vl": False,
    "qwen3_vl_moe": False,
}


class _Fields:
    """Field reader that names the missing key (with its config section) in the error."""

    def __init__(self, data: Mapping[str, Any], section: str, source: str):
        self.data, self.section, self.source = data, section, source

    def req(self, *keys: str) -> Any:
        for key in keys:
            value = self.data.get(key)
            if value is not None:
                return value
        where = f"{self.section}." if self.section else ""
        names = " or ".join(f"{where}{k}" for k in keys)
        raise ValueError(f"{self.source}: config lacks required field {names}")

    def opt(self, key: str, default: Any = None) -> Any:
        value = self.data.get(key)
        return default if value is None else value

    def int(self, *keys: str) -> int:
        value = self.req(*keys)
        if isinstance(value, bool) or not isinstance(value, (int, float)) or int(value) != value or value < 0:
            raise ValueError(f"{self.source}: field {self.section + '.' if self.section else ''}{keys[0]} "
                             f"must be a non-negative integer, got {value!r}")
        return int(value)


def load_config_file(path: str | Path) -> dict:
    """Read ``config.json`` from a file or a directory holding one."""
    p = Path(path)
    if p.is_dir():
        p = p / "config.json"
    if not p.is_file():
        raise ValueError(f"{path}: no such config file (expected a config.json or a directory holding one)")
    try:
        data = json.loads(p.read_text(encoding="utf-8"))
    except json.JSONDecodeError as exc:
        raise ValueError(f"{p}:{exc.lineno}: not valid JSON ({exc.msg})") from None
    if not isinstance(data, dict):
        raise ValueError(f"{p}: top-level JSON value must be an object")
    return data


def spec_from_config(config: Mapping[str, Any], name: str = "", source: str = "config") -> ModelSpec:
    """Build a :class:`ModelSpec` from a parsed config dict (hub or save_pretrained layout)."""
    model_type = config.get("model_type")
    if model_type is None and isinstance(config.get("text_config"), dict):
        model_type = config["text_config"].get("model_type")
    if model_type not in SUPPORTED_MODEL_TYPES:
        raise ValueError(
            f"{source}: unsupported model_type {model_type!r}; supported: {', '.join(SUPPORTED_MODEL_TYPES)}"
        )
    text = dict(config)
    text.pop("vision_config", None)
    if isinstance(config.get("text_config"), dict):
        # nested layout: text_config holds the LM; top-level keys fill gaps only
        text = {**{k: v for k, v in config.items() if k not in ("text_config", "vision_config")},
                **config["text_config"]}
    # Trap 4: the top-level tie flag is authoritative when present.
    if "tie_word_embeddings" in config:
        text["tie_word_embeddings"] = config["tie_word_embeddings"]
    lm = _lm_spec(_Fields(text, "text_config" if "text_config" in config else "", source), model_type)
    vision = None
    if model_type in VLM_TYPES:
        vc = config.get("vision_config")
        if not isinstance(vc, dict):
            raise ValueError(f"{source}: config lacks required field vision_config for model_type {model_type}")
        vision = _vision_spec(_Fields(vc, "vision_config", source), model_type, lm)
    return ModelSpec(name=name or str(config.get("_name_or_path") or model_type), model_type=model_type,
                     lm=lm, vision=vision, source=source)


def _vision_spec(f: _Fields, model_type: str, lm: LMSpec) -> VisionSpec:
    family = "qwen3_vl" if model_type.startswith("qwen3_vl") else model_type
    if family == "qwen2_vl":
        width = f.int("embed_dim")
        mlp = int(width * f.req("mlp_ratio"))
        out = f.int("hidden_size")  # Trap 1: merger output width in Qwen2-VL
        gated = False
    else:
        width = f.int("hidden_size")
        mlp = f.int("intermediate_size")
        out = f.int("out_hidden_size")
        gated = family == "qwen2_5_vl"
    heads = f.int("num_heads")
    # Switches whose absence would silently change the count are required, not defaulted.
    window = f.int("window_size") if family == "qwen2_5_vl" else None
    fullatt = tuple(f.opt("fullatt_block_indexes", ())) if window else ()
    if window and not fullatt:
        f.req("fullatt_block_indexes")
    return VisionSpec(
        family=family,
        depth=f.int("depth"),
        hidden_size=width,
        num_heads=heads,
        head_dim=width // heads,
        intermediate_size=mlp,
        mlp_gated=gated,
        patch_size=f.int("patch_size", "spatial_patch_size"),
        temporal_patch_size=f.int("temporal_patch_size"),
        in_channels=f.int("in_channels", "in_chans"),  # Trap 2
        spatial_merge_size=f.int("spatial_merge_size"),
        out_hidden_size=out,
        window_size=int(window) if window else None,
        fullatt_block_indexes=fullatt,
        deepstack_visual_indexes=tuple(f.req("deepstack_visual_indexes")) if family == "qwen3_vl" else (),
        num_position_embeddings=f.int("num_position_embeddings") if family == "qwen3_vl" else 0,
        patch_embed_bias=family == "qwen3_vl",
        norm="rmsnorm" if family == "qwen2_5_vl" else "layernorm",
    )


def _lm_spec(f: _Fields, model_type: str) -> LMSpec:
    hidden = f.int("hidden_size")
    heads = f.int("num_attention_heads")
    layers = f.int("num_hidden_layers")
    head_dim = f.opt("head_dim") or hidden // heads
    kv_heads = int(f.opt("num_key_value_heads") or heads)
    tie = bool(f.opt("tie_word_embeddings", _TIE_DEFAULT[model_type]))
    moe, mla, mtp = None, None, 0
    moe_layers: tuple[int, ...] = ()
    family = {"qwen2_vl": "qwen2", "qwen2_5_vl": "qwen2", "qwen3_vl": "qwen3", "qwen3_vl_moe": "qwen3_moe"}.get(
        model_type, model_type)
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
    needs_dense = len(moe_layers) < layers
    return LMSpec(
        family=family,
        num_layers=layers,
        hidden_size=hidden,
        num_heads=heads,
        num_kv_heads=kv_heads,
        head_dim=int(head_dim),
        intermediate_size=f.int("intermediate_size") if needs_dense or mtp else int(f.opt("intermediate_size", 0)),
        vocab_size=f.int("vocab_size"),
        tie_word_embeddings=tie,
        moe=moe,
        moe_layers=moe_layers,
        mla=mla,
        num_mtp_layers=mtp,
        qkv_bias=family == "qwen2" or bool(f.opt("attention_bias", False)),
        qk_norm=family in ("qwen3", "qwen3_moe"),
    )
