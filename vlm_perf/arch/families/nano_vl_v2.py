"""Remote-code Nemotron-Nano-VL configs (``model_type`` ``NemotronH_Nano_VL_V2``, e.g. NVIDIA's
Nemotron-Nano-12B-v2-VL) read into the transformers ``nemotron_h_omni`` layout, so the one family in
:mod:`.nemotron_h_omni` builds both.

The remote layout (field names from the config classes public serving code ships for it: vLLM
``vllm/model_executor/models/nano_nemotron_vl.py`` ``get_vit_model_from_radio_config``, SGLang
``srt/configs/nano_nemotron_vl.py`` ``NemotronH_Nano_VL_V2_Config``, adapted from the hub's
``configuration.py``):

* top level: ``llm_config`` (a Nemotron-H LM config; ``text_config`` in some copies), ``vision_config``,
  ``downsample_ratio`` (class default 0.5), ``projector_hidden_size`` (class default 4096), ``vit_hidden_size``
  (class default 1280), ``force_image_size`` (the tile side), ``video_pruning_rate``.
* ``vision_config``: ``patch_size`` (vLLM reads it with default 16), ``video_temporal_patch_size`` (default 1:
  no separate video projection) and ``args``: the RADIO training arguments — ``model`` (a timm model NAME, no
  dimension fields), ``teachers``, ``cls_token_per_teacher``, ``register_multiple``, ``cpe_max_size``, and the
  RadioConfig overrides ``qkv_bias`` / ``qk_normalization`` / ``norm_type`` / ``hidden_act``.

The tower the serving code builds from those (vLLM ``vllm/model_executor/models/radio.py``,
``vllm/transformers_utils/configs/radio.py``): width / depth / heads / MLP from the name table below; the
position table (cpe_max_size/P)² (RadioConfig default cpe_max_size 2048); ``len(unique teacher names)`` class
tokens when ``cls_token_per_teacher`` else 1; ``register_multiple − (cls % register_multiple)`` registers when
``register_multiple`` is set, else 0 (``ClsToken``); pre-norm layers with LayerNorm, qkv bias, GELU MLP with
bias and the per-channel scales ``ls1``/``ls2`` (``InternVisionEncoderLayer``), no final norm. The projector is
RMSNorm(4d) -> Linear -> relu² -> Linear without biases (vLLM ``NemotronH_Nano_VL_V2.mlp1``). Those are the
transformers ``radio`` / ``nemotron_h_omni`` classes' shapes, so :func:`to_omni_layout` only renames.
"""

from __future__ import annotations

from typing import Any, Mapping

from ...errors import ConfigError, UnsupportedModelError

REMOTE_MODEL_TYPE = "NemotronH_Nano_VL_V2"

# timm model name -> (width, depth, heads, MLP width, patch). ONE table. Every entry: vLLM
# vllm/transformers_utils/configs/radio.py VIT_TIMM_DIM_BY_NAME (width, depth, heads, MLP), patch 16 from the
# name (timm's "patch16"); the same four names and values in vLLM's own port. Cross-check for the one a released
# checkpoint uses: Megatron-Bridge src/megatron/bridge/models/nemotron_vl/nemotron_vl_provider.py builds the
# Nemotron-Nano-12B-v2-VL tower as 32 layers, 1280 wide, 16 heads (kv_channels 80), MLP 5120, GELU, biases.
RADIO_TIMM_DIMS: dict[str, tuple[int, int, int, int, int]] = {
    "vit_small_patch16_224": (384, 12, 6, 1536, 16),   # vLLM configs/radio.py VIT_TIMM_DIM_BY_NAME
    "vit_base_patch16_224": (768, 12, 12, 3072, 16),   # vLLM configs/radio.py VIT_TIMM_DIM_BY_NAME
    "vit_large_patch16_224": (1024, 24, 16, 4096, 16),  # vLLM configs/radio.py VIT_TIMM_DIM_BY_NAME
    "vit_huge_patch16_224": (1280, 32, 16, 5120, 16),  # vLLM VIT_TIMM_DIM_BY_NAME; Megatron-Bridge provider
}

# RadioConfig class defaults (vLLM vllm/transformers_utils/configs/radio.py)
RADIO_DEFAULTS = {"cpe_max_size": 2048, "qkv_bias": True, "qk_normalization": False, "norm_type": "layer_norm",
                  "hidden_act": "gelu", "cls_token_per_teacher": False}


def radio_dims(name: Any, source: str) -> tuple[int, int, int, int, int]:
    """(width, depth, heads, MLP, patch) of a RADIO timm model name; UnsupportedModelError listing the known
    names otherwise."""
    if not isinstance(name, str) or name not in RADIO_TIMM_DIMS:
        raise UnsupportedModelError(f"{source}: vision_config.args.model {name!r} is not a known RADIO model name; "
                                    f"known: {', '.join(RADIO_TIMM_DIMS)}")
    return RADIO_TIMM_DIMS[name]


def prefix_tokens(args: Mapping[str, Any], source: str) -> tuple[int, int]:
    """(class tokens, registers) of RADIO's ``ClsToken`` as vLLM's ``RadioInternVisionModel`` sets it up."""
    teachers = args.get("teachers") or []
    if not isinstance(teachers, list) or not all(isinstance(t, Mapping) and "name" in t for t in teachers):
        raise ConfigError(f"{source}: field vision_config.args.teachers must be a list of mappings with a name")
    per_teacher = args.get("cls_token_per_teacher", RADIO_DEFAULTS["cls_token_per_teacher"])
    cls = len({t["name"] for t in teachers}) if per_teacher else 1
    if cls < 1:
        raise ConfigError(f"{source}: vision_config.args.cls_token_per_teacher with no teachers gives no class token")
    multiple = args.get("register_multiple")
    if multiple is not None and (isinstance(multiple, bool) or not isinstance(multiple, int) or multiple < 0):
        raise ConfigError(f"{source}: field vision_config.args.register_multiple must be an integer >= 0, "
                          f"got {multiple!r}")
    registers = multiple - cls % multiple if multiple else 0
    return cls, registers


def to_omni_layout(config: Mapping[str, Any], source: str) -> dict:
    """The transformers ``nemotron_h_omni`` config equivalent to a remote ``NemotronH_Nano_VL_V2`` one."""
    vision = config.get("vision_config")
    if not isinstance(vision, Mapping):
        raise ConfigError(f"{source}: field vision_config (a mapping) is required")
    args = vision.get("args")
    if not isinstance(args, Mapping):
        where = "a `version` name without `args`" if "version" in vision else "no `args`"
        raise UnsupportedModelError(f"{source}: vision_config has {where}; only the RADIO layout that names its "
                                    "timm model in vision_config.args.model (NemotronH_Nano_VL_V2) is read")
    width, depth, heads, mlp, name_patch = radio_dims(args.get("model"), source)
    for key in ("qk_normalization", "norm_type", "hidden_act"):
        if args.get(key, RADIO_DEFAULTS[key]) != RADIO_DEFAULTS[key]:
            raise UnsupportedModelError(f"{source}: vision_config.args.{key} {args.get(key)!r}: only the RadioConfig "
                                        f"default {RADIO_DEFAULTS[key]!r} is modelled")
    patch = vision.get("patch_size", 16)
    if patch != name_patch and patch != [name_patch, name_patch]:
        raise ConfigError(f"{source}: vision_config.patch_size {patch!r} differs from the {name_patch} of "
                          f"{args.get('model')!r}")
    cpe = args.get("cpe_max_size", RADIO_DEFAULTS["cpe_max_size"])
    if isinstance(cpe, bool) or not isinstance(cpe, int) or cpe < name_patch:
        raise ConfigError(f"{source}: field vision_config.args.cpe_max_size must be an integer >= {name_patch}, "
                          f"got {cpe!r}")
    cls, registers = prefix_tokens(args, source)
    tp = vision.get("video_temporal_patch_size", 1)
    if isinstance(tp, bool) or not isinstance(tp, int) or tp < 1:
        raise ConfigError(f"{source}: field vision_config.video_temporal_patch_size must be an integer >= 1, "
                          f"got {tp!r}")
    if tp > 1 and not vision.get("separate_video_embedder", True):
        raise UnsupportedModelError(f"{source}: vision_config.separate_video_embedder false with temporal patches "
                                    "(the serving code refuses it too)")
    llm = config.get("llm_config", config.get("text_config"))
    if not isinstance(llm, Mapping):
        raise ConfigError(f"{source}: field llm_config (a mapping) is required")
    out = {k: v for k, v in config.items() if k not in ("vision_config", "llm_config", "text_config", "model_type")}
    out.update(
        model_type="nemotron_h_omni", text_config=dict(llm),
        vision_hidden_size=config.get("vit_hidden_size", 1280),
        downsample_ratio=config.get("downsample_ratio", 0.5),
        projector_hidden_size=config.get("projector_hidden_size", 4096),
        vision_config={"model_type": "radio", "hidden_size": width, "num_hidden_layers": depth,
                       "num_attention_heads": heads, "mlp_ratio": mlp / width, "patch_size": name_patch,
                       "max_img_size": round(cpe / name_patch) * name_patch, "num_cls_tokens": cls,
                       "num_registers": registers, "qkv_bias": bool(args.get("qkv_bias", True)),
                       "use_swiglu_ffn": False})
    out.pop("vit_hidden_size", None)
    # temporal patches 1: video frames go through the image projection (no video_patch_projection stored)
    out["video_temporal_patch_size"] = tp
    return out


def tile_side(config: Mapping[str, Any], source: str) -> int | None:
    """``force_image_size`` (the static-tiling tile side) when the config sets it."""
    side = config.get("force_image_size")
    if side is None:
        return None
    if isinstance(side, bool) or not isinstance(side, int) or side < 1:
        raise ConfigError(f"{source}: field force_image_size must be a positive integer, got {side!r}")
    return side


__all__ = ["RADIO_TIMM_DIMS", "REMOTE_MODEL_TYPE", "prefix_tokens", "radio_dims", "tile_side", "to_omni_layout"]
