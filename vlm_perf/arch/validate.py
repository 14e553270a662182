"""Config sanity: one place that refuses impossible or non-finite architectures before any formula runs.

Three layers, each raising a one-line :class:`~vlm_perf.errors.ConfigError` (or
:class:`~vlm_perf.errors.InputError` for a file that cannot be read) naming the field and how to fix it:

1. **The JSON text** (`read_json_file`): a size limit (`MAX_CONFIG_BYTES`), ``NaN`` / ``Infinity``
   literals (Python's ``json`` accepts them; JSON does not; only `NONFINITE_FIELDS` such as Mamba-2's
   ``time_step_limit`` may hold them) and a nesting limit (`MAX_DEPTH`; a
   200,000-deep file would otherwise end in ``RecursionError``).
2. **The parsed config** (`check_config`): every value walked once (non-finite floats, depth), then
   every structural field a family reads, checked against the kind declared for its name in
   `TEXT_FIELDS` / `VISION_FIELDS` / `TOP_FIELDS` (positive or non-negative integer, bounded), and the
   cross-field rules of `check_text` / `check_vision` (heads dividing the hidden size where the
   family derives ``head_dim`` from it, kv heads dividing heads, top-k <= experts, ``layer_types``
   length, first dense layers <= layers). Field names mean the same in every Hugging Face config of
   the registered families, so each rule is declared once per field name; a family with a top-level
   field of its own lists it in `TOP_FIELDS`.
3. **The built spec** (`check_spec`): the typed `ModelSpec` every formula reads must have positive
   sizes and consistent heads / experts whatever the family's defaults were -- a backstop for fields
   a family fills from class defaults or reads under another name.

No I/O except `read_json_file`; no formula here.
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping

from ..remote import as_path
from ..errors import ConfigError, InputError

__all__ = ["AUDIO_FIELDS", "MAX_CONFIG_BYTES", "MAX_DEPTH", "MAX_SIZE", "TEXT_FIELDS", "TOP_FIELDS", "VISION_FIELDS", "INDEX_FIELDS", "bounded",
           "check_config", "check_spec", "check_tree", "loads_json", "read_json_file"]

#: Largest config / manifest JSON file read (the largest released config.json is a few tens of KB).
MAX_CONFIG_BYTES = 16 << 20
#: Deepest nesting of objects/arrays accepted (real configs nest 3-4 levels).
MAX_DEPTH = 64
#: Largest accepted structural size (width, heads, layers, experts, vocabulary, ...): 2^24. No released
#: model comes within two orders of magnitude of it; beyond it a value is a typo, not an architecture.
MAX_SIZE = 1 << 24
#: Longest repr a message prints of a bad value (the rest is elided).
MAX_REPR = 80


def bounded(value: Any, limit: int = MAX_REPR) -> str:
    """``repr(value)`` cut to ``limit`` characters (messages never print an unbounded value)."""
    try:
        text = repr(value)
    except RecursionError:  # pragma: no cover - a self-referencing value
        text = f"<{type(value).__name__}>"
    return text if len(text) <= limit else f"{text[:limit - 15]}... ({len(text)} chars)"


# ------------------------------------------------------------------------------ 1. the JSON text
_NONFINITE = re.compile(r"(?<![\w\"])(-?Infinity|NaN)(?![\w\"])")


def read_json_file(path: str | Path, what: str = "JSON file", error: type[InputError] = InputError) -> Any:
    """Parse a JSON file with the limits above (`loads_json`); errors name ``path`` (and the line when known).
    The one JSON reader of every small JSON input: config.json, run.yaml's JSON form, adapter_config.json,
    trainability.json, rl/settings.json, Dask scheduler files."""
    p = as_path(path)
    try:
        size = p.stat().st_size
    except OSError as exc:
        raise error(f"cannot read ({exc.strerror or exc})", str(p)) from None
    if size > MAX_CONFIG_BYTES:
        raise error(f"{size} bytes, larger than the {MAX_CONFIG_BYTES} bytes a {what} may have; is it the "
                    "right file?", str(p))
    if p.is_dir():
        raise error(f"a folder, not a {what}", str(p))
    try:
        text = p.read_text(encoding="utf-8-sig")  # a UTF-8 byte-order mark is not part of the JSON
    except UnicodeDecodeError:
        raise error("not UTF-8 text", str(p)) from None
    except OSError as exc:
        raise error(f"cannot read ({exc.strerror or exc})", str(p)) from None
    return loads_json(text, str(p), what, error=error)


_LONG_INT = re.compile(r"-?\d{4300,}")


def loads_json(text: str, source: str, what: str = "JSON file", *, error: type[InputError] = InputError,
               line: int | None = None) -> Any:
    """Parse JSON ``text`` from ``source`` with the limits of the module docstring: nesting (`MAX_DEPTH`; never a
    ``RecursionError``), ``NaN`` / ``Infinity`` only in `NONFINITE_FIELDS`, no duplicate keys, no integer too long
    for Python to read. ``line``: ``text`` is that line of ``source`` (a JSON-lines record): messages name
    ``source:line``; else the line within ``text``. Errors are ``error`` (an `InputError`), one line."""
    def at(offset_line: int | None) -> str:
        if line is not None:
            return f"{source}:{line}"
        return f"{source}:{offset_line}" if offset_line else source

    def constant(name: str) -> Any:  # Python's json writes inf as Infinity; allowed only where NONFINITE_FIELDS says
        return float(name)

    def unique(pairs: list) -> dict:  # json keeps the last of two equal keys silently: refuse them
        out: dict = {}
        for key, value in pairs:
            if key in out:
                spot = text.find(json.dumps(key))
                spot = text.find(json.dumps(key), spot + 1) if spot >= 0 else -1
                raise error(f"duplicate key {bounded(key)}; state each key once",
                            at(text.count("\n", 0, spot) + 1 if spot >= 0 else None))
            out[key] = value
        return out

    try:
        data = json.loads(text, parse_constant=constant, object_pairs_hook=unique)
    except InputError:  # a duplicate key (`unique`)
        raise
    except json.JSONDecodeError as exc:
        raise error(f"not valid JSON ({exc.msg})", at(exc.lineno)) from None
    except RecursionError:
        raise error(f"nested deeper than {MAX_DEPTH} levels; a {what} is a shallow object", at(None)) from None
    except ValueError as exc:  # an integer longer than Python's int-string limit (4,300 digits)
        long = _LONG_INT.search(text)
        spot = text.count("\n", 0, long.start()) + 1 if long else None
        digits = len(long.group(0).lstrip("-")) if long else None
        raise error(f"a number of {digits or 'too many'} digits is not a value a {what} can hold ({exc})"
                    if digits else f"not valid JSON ({exc})", at(spot)) from None
    bad = _first_nonfinite(data)
    if bad is not None:  # name the line: the first non-finite literal after the field's key
        field, value = bad
        key = field.rsplit(".", 1)[-1].split("[", 1)[0]
        spot = text.find(json.dumps(key)) if key else -1
        match = _NONFINITE.search(text, max(spot, 0))
        literal = match.group(1) if match else repr(value)
        raise error(f"{literal} is not a JSON number (field {field}); write a finite number",
                    at(text.count("\n", 0, match.start()) + 1 if match else None))
    try:
        check_tree(data, at(None))
    except ConfigError as exc:
        raise error(str(exc)) from None
    return data


# ------------------------------------------------------------------------------ 2. the parsed config
# Fields whose values may be non-finite: they bound something no FLOP count reads. Mamba-2's `time_step_limit`
# clamps dt and its upper bound is +inf by default (transformers' NemotronH / Mamba2 configs write
# ``[0.0, Infinity]``, and published hub config.json files carry that).
NONFINITE_FIELDS = frozenset({"time_step_limit"})


def _nonfinite_allowed(where: str) -> bool:
    return any(part.split("[", 1)[0] in NONFINITE_FIELDS for part in where.split("."))


def _first_nonfinite(data: Any) -> tuple[str, float] | None:
    """The first non-finite float outside `NONFINITE_FIELDS` (its dotted field path), or None (iterative)."""
    stack: list[tuple[Any, str, int]] = [(data, "", 0)]
    while stack:
        value, where, depth = stack.pop()
        if isinstance(value, float) and not math.isfinite(value) and not _nonfinite_allowed(where):
            return where or "(top level)", value
        if isinstance(value, (dict, list, tuple)) and depth < MAX_DEPTH:
            items = value.items() if isinstance(value, dict) else enumerate(value)
            for key, item in items:
                name = f"{where}[{key}]" if not isinstance(value, dict) else (f"{where}.{key}" if where else str(key))
                stack.append((item, name, depth + 1))
    return None


def check_tree(data: Any, source: str) -> None:
    """Every value of a parsed JSON/YAML tree: no non-finite float (except in `NONFINITE_FIELDS`), no nesting
    deeper than `MAX_DEPTH` (iterative: a deep tree cannot exhaust the stack)."""
    stack: list[tuple[Any, str, int]] = [(data, "", 0)]
    while stack:
        value, where, depth = stack.pop()
        if isinstance(value, float) and not math.isfinite(value) and not _nonfinite_allowed(where):
            raise ConfigError(f"{source}: field {where or '(top level)'} is {value!r}; write a finite number")
        if isinstance(value, (dict, list, tuple)):
            if depth >= MAX_DEPTH:
                raise ConfigError(f"{source}: nested deeper than {MAX_DEPTH} levels at {where or '(top level)'}")
            items = value.items() if isinstance(value, dict) else enumerate(value)
            for key, item in items:
                name = f"{where}[{key}]" if not isinstance(value, dict) else (f"{where}.{key}" if where else str(key))
                stack.append((item, name, depth + 1))


@dataclass(frozen=True)
class Kind:
    """What a structural field must be: an integer >= ``low`` and <= ``high`` (``number``: any finite
    real > 0, e.g. ``mlp_ratio``); ``None`` (absent) is always allowed here -- a family that needs the
    field says so itself."""

    low: int = 1
    high: int = MAX_SIZE
    number: bool = False
    per_layer: bool = False  # also a list with one such value per layer (Gemma 3n's intermediate_size)

    def problem(self, value: Any) -> str | None:
        if self.per_layer and isinstance(value, (list, tuple)):
            bad = [p for p in (Kind(self.low, self.high, self.number).problem(v) for v in value) if p]
            return f"{bad[0]} (or a list of them, one per layer)" if bad or not value else None
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            return "a number" if self.number else "an integer"
        if self.number:
            return None if 0 < value <= self.high else f"a positive number <= {self.high}"
        if value != int(value):
            return "an integer"
        if not self.low <= value <= self.high:
            return f"an integer from {self.low} to {self.high}"
        return None


POS = Kind()
NONNEG = Kind(low=0)
WINDOW = Kind(low=0, high=1 << 40)  # sliding windows: 0 / null = none; large "infinite" windows exist
RATIO = Kind(number=True, high=1 << 10)

#: LM fields (read flat at the top level or under ``text_config``), by name, for every family.
TEXT_FIELDS: dict[str, Kind] = {
    **dict.fromkeys(("hidden_size", "num_attention_heads", "num_hidden_layers", "vocab_size", "num_key_value_heads",
                     "head_dim", "moe_intermediate_size", "num_experts", "num_local_experts", "n_routed_experts",
                     "num_experts_per_tok", "decoder_sparse_step", "moe_layer_freq", "kv_lora_rank",
                     "qk_nope_head_dim", "qk_rope_head_dim", "v_head_dim", "q_lora_rank", "linear_conv_kernel_dim",
                     "linear_key_head_dim", "linear_value_head_dim", "linear_num_key_heads",
                     "linear_num_value_heads", "full_attention_interval", "sliding_window_pattern",
                     "shared_expert_intermediate_size", "intermediate_size_mlp", "interleave_moe_layer_step",
                     "no_rope_layer_interval", "attention_chunk_size",
                     # Nemotron 3's MoE layers (shared expert width)
                     "moe_shared_expert_intermediate_size",
                     # Nemotron-H's Mamba-2 layers (and their legacy spellings)
                     "mamba_num_heads", "mamba_head_dim", "ssm_state_size", "n_groups", "mamba_n_groups",
                     "conv_kernel", "mamba_d_conv", "chunk_size", "mamba_chunk_size",
                     # Gemma 3n's per-layer inputs, LAuReL and AltUp streams
                     "vocab_size_per_layer_input", "hidden_size_per_layer_input", "laurel_rank",
                     "altup_num_inputs",
                     # OPT (BLIP-2's LM): its MLP width
                     "ffn_dim",
                     # BART (Florence-2's encoder-decoder LM): decoder depth, encoder / decoder MLP widths
                     "decoder_layers", "encoder_ffn_dim", "decoder_ffn_dim",
                     # ERNIE-4.5-VL-MoE: experts per modality pool
                     "moe_num_experts"), POS),
    # OPT's learned position table (BLIP-2) has max_position_embeddings + 2 rows; other families do not read it,
    # and released configs state up to ~10^7 (Llama 4), so the bound is wide
    "max_position_embeddings": Kind(high=1 << 40),
    # 0 allowed: an MoE model whose every layer is MoE may state no dense width
    **dict.fromkeys(("intermediate_size", "n_shared_experts", "first_k_dense_replace", "num_nextn_predict_layers",
                     "max_window_layers", "num_kv_shared_layers", "moe_num_shared_experts"), NONNEG),
    "sliding_window": WINDOW,
}
#: Vision tower fields (under ``vision_config``), by name, for every family.
VISION_FIELDS: dict[str, Kind] = {
    **dict.fromkeys(("depth", "num_hidden_layers", "hidden_size", "embed_dim", "num_heads", "num_attention_heads",
                     "intermediate_size", "spatial_patch_size", "temporal_patch_size", "in_channels", "in_chans",
                     "num_channels", "spatial_merge_size", "out_hidden_size", "window_size",
                     "num_position_embeddings", "num_global_layers", "attention_heads", "vision_output_dim",
                     "max_num_tiles", "projector_input_dim", "projector_output_dim",
                     "init_pos_emb_height", "init_pos_emb_width",
                     # Kimi K2.5's position tables, SAM / ViTDet towers (GOT-OCR2, DeepSeek-VL-hybrid), RADIO
                     "pos_emb_height", "pos_emb_width", "pos_emb_time", "mlp_dim", "output_channels",
                     "max_img_size", "video_temporal_patch_size", "projection_dim", "crop_size",
                     # Ovis2's visual vocabulary and fold
                     "vocab_size", "hidden_stride"), POS),
    # Florence-2's learned position table rows (DaViT tower output side at most)
    "max_position_embeddings": Kind(high=1 << 40),
    # RADIO's class-token prefix (Nemotron omni): 0 is a tower without class tokens
    **dict.fromkeys(("num_cls_tokens", "num_registers",
                     "num_visual_indicator_tokens"), NONNEG),  # Ovis2: 0 is a visual vocabulary without indicators
    "mlp_ratio": RATIO,
    "pixel_shuffle_ratio": RATIO,
}
#: Audio encoder fields (under an Omni thinker's ``audio_config``), by name.
AUDIO_FIELDS: dict[str, Kind] = dict.fromkeys(
    ("d_model", "encoder_attention_heads", "encoder_ffn_dim", "encoder_layers", "n_window", "n_window_infer",
     "num_mel_bins", "output_dim", "downsample_hidden_size", "max_source_positions",
     # Phi-4-multimodal's conformer
     "hidden_size", "intermediate_size", "num_blocks", "num_attention_heads", "ext_pw_out_channel",
     "depthwise_separable_out_channel", "depthwise_multiplier", "kernel_size", "input_size", "time_reduction",
     "bias_max_distance", "nemo_conv_channels", "downsample_rate",
     # Nemotron omni's Parakeet encoder
     "subsampling_conv_channels", "conv_kernel_size", "projection_hidden_size", "num_hidden_layers"), POS)
#: Square sizes (``n`` or ``[n, n]``) under ``vision_config``.
VISION_SQUARE = ("patch_size", "image_size", "merge_kernel_size")
#: Layer indexes (any integer, negative counting from the end, or a list of them): range-checked by the family
#: against its tower depth (``families.decoder.feature_layer_depth``), not by a kind.
INDEX_FIELDS = ("vision_feature_layer",
                "insert_layer_id",  # MiniCPM-V's window-attention merger position (0..depth-1, checked by the family)
                "feature_layer")  # Phi-4-multimodal's vision_config
#: Top-level fields of the families that read them (mistral3's patch merger, idefics3/smolvlm's pixel
#: shuffle, internvl's downsample ratio, gemma3's pooled tokens, llava's image tokens, aya_vision /
#: cohere2_vision's pixel shuffle and SwiGLU projector width).
TOP_FIELDS: dict[str, Kind] = {
    **dict.fromkeys(("spatial_merge_size", "scale_factor", "mm_tokens_per_image", "image_seq_length",
                     "downsample_factor", "alignment_intermediate_size",
                     "projector_hidden_size", "vision_hidden_size", "video_temporal_patch_size",
                     "projection_hidden_size",
                     "num_query_tokens"), POS),  # projector_hidden_size: Nemotron omni's projector MLP;
    # num_query_tokens: BLIP-2's Q-Former queries
    "downsample_ratio": RATIO,
}


def _check_fields(section: Mapping[str, Any], kinds: Mapping[str, Kind], prefix: str, source: str) -> None:
    for key, kind in kinds.items():
        value = section.get(key)
        if value is None:
            continue
        problem = kind.problem(value)
        if problem:
            raise ConfigError(f"{source}: field {prefix}{key} must be {problem}, got {bounded(value)}")


def _int(section: Mapping[str, Any], *keys: str) -> tuple[str, int] | tuple[None, None]:
    """(name, value) of the first key present (values already checked by `_check_fields`)."""
    for key in keys:
        if section.get(key) is not None:
            return key, int(section[key])
    return None, None


#: model types whose ``intermediate_size`` may also be a list with one width per layer
PER_LAYER_WIDTH_TYPES = ("gemma3n_text",)
#: model types whose ``moe_intermediate_size`` is a list (ERNIE-4.5-VL: [text experts' width, vision experts' width])
MOE_WIDTH_LIST_TYPES = ("ernie4_5_vl_moe_text",)


def check_text(text: Mapping[str, Any], prefix: str, source: str) -> None:
    """Cross-field rules of an LM section (fields already of their declared kind)."""
    kinds = TEXT_FIELDS
    if text.get("model_type") in PER_LAYER_WIDTH_TYPES:
        kinds = {**TEXT_FIELDS, "intermediate_size": Kind(low=0, per_layer=True)}
    if text.get("model_type") in MOE_WIDTH_LIST_TYPES:
        kinds = {**kinds, "moe_intermediate_size": Kind(low=1, per_layer=True)}
    _check_fields(text, kinds, prefix, source)
    hk, heads = _int(text, "num_attention_heads")
    wk, hidden = _int(text, "hidden_size")
    mla = text.get("kv_lora_rank") is not None
    if heads and hidden and text.get("head_dim") is None and not mla and hidden % heads:
        raise ConfigError(f"{source}: {prefix}hidden_size {hidden} is not divisible by {prefix}num_attention_heads "
                          f"{heads} (head_dim is derived from them); fix one or state head_dim")
    kk, kv = _int(text, "num_key_value_heads")
    if heads and kv and heads % kv:
        raise ConfigError(f"{source}: {prefix}num_attention_heads {heads} is not a multiple of "
                          f"{prefix}num_key_value_heads {kv} (each KV head serves a whole group of query heads)")
    ek, experts = _int(text, "num_experts", "num_local_experts", "n_routed_experts")
    tk, top_k = _int(text, "num_experts_per_tok")
    if experts and top_k and top_k > experts:
        raise ConfigError(f"{source}: {prefix}num_experts_per_tok {top_k} is larger than {prefix}{ek} {experts} "
                          "(a token cannot be routed to more experts than exist)")
    lk, layers = _int(text, "num_hidden_layers")
    fk, first = _int(text, "first_k_dense_replace")
    if layers and first is not None and first > layers:
        raise ConfigError(f"{source}: {prefix}first_k_dense_replace {first} is larger than {prefix}num_hidden_layers "
                          f"{layers}")
    types = text.get("layer_types")
    if types is not None:
        if not isinstance(types, (list, tuple)) or not all(isinstance(t, str) for t in types):
            raise ConfigError(f"{source}: field {prefix}layer_types must be a list of layer type names, got "
                              f"{bounded(types)}")
        if layers and len(types) != layers:
            raise ConfigError(f"{source}: {prefix}layer_types lists {len(types)} layers but {prefix}num_hidden_layers "
                              f"is {layers}; give one entry per layer")
    for key in ("mlp_only_layers",):
        value = text.get(key)
        if value is not None and (not isinstance(value, (list, tuple))
                                  or any(isinstance(v, bool) or not isinstance(v, int) for v in value)):
            raise ConfigError(f"{source}: field {prefix}{key} must be a list of layer indexes, got {bounded(value)}")


#: model types whose tower is hierarchical: ``vision_config`` widths, heads and patch sizes are lists, one per stage
PER_STAGE_VISION_TYPES = ("florence2",)


def check_vision(vision: Mapping[str, Any], source: str, prefix: str = "vision_config.", per_stage: bool = False) -> None:
    """Kinds and cross-field rules of a ``vision_config`` section (``per_stage``: a hierarchical tower whose fields
    may be lists with one value per stage; the family checks those lists itself)."""
    if per_stage:
        kinds = {k: Kind(v.low, v.high, v.number, per_layer=True) for k, v in VISION_FIELDS.items()}
        _check_fields(vision, kinds, prefix, source)
        return
    _check_fields(vision, VISION_FIELDS, prefix, source)
    for key in VISION_SQUARE:
        value = vision.get(key)
        if value is None:
            continue
        sides = value if isinstance(value, (list, tuple)) and value else [value]
        for side in sides:
            problem = POS.problem(side)
            if problem:
                raise ConfigError(f"{source}: field {prefix}{key} must be {problem} (or a pair [n, n]), got "
                                  f"{bounded(value)}")
    wk, width = _int(vision, "embed_dim", "hidden_size")
    hk, heads = _int(vision, "num_heads", "num_attention_heads")
    if width and heads and vision.get("head_dim") is None and width % heads:
        raise ConfigError(f"{source}: {prefix}{wk} {width} is not divisible by {prefix}{hk} {heads} (the tower's "
                          "head_dim is derived from them)")


def check_config(config: Mapping[str, Any], source: str) -> None:
    """Layer 2 on a parsed config dict (see the module docstring)."""
    check_tree(config, source)
    from .fields import text_section

    _check_fields(config, TOP_FIELDS, "", source)
    outer = ""
    if isinstance(config.get("thinker_config"), dict):  # Omni models: the thinker holds text / vision / audio
        config, outer = config["thinker_config"], "thinker_config."
    text, section = text_section(config)
    check_text(text, f"{outer}{section}." if section else outer, source)
    vision = config.get("vision_config")
    if vision is not None:
        if not isinstance(vision, dict):
            raise ConfigError(f"{source}: field {outer}vision_config must be an object, got {bounded(vision)}")
        check_vision(vision, source, f"{outer}vision_config.", per_stage=config.get("model_type") in PER_STAGE_VISION_TYPES)
    audio = config.get("audio_config")
    if audio is not None:
        if not isinstance(audio, dict):
            raise ConfigError(f"{source}: field {outer}audio_config must be an object, got {bounded(audio)}")
        _check_fields(audio, AUDIO_FIELDS, f"{outer}audio_config.", source)
        wk, width = _int(audio, "d_model")
        hk, heads = _int(audio, "encoder_attention_heads")
        if width and heads and width % heads:
            raise ConfigError(f"{source}: {outer}audio_config.d_model {width} is not divisible by "
                              f"{outer}audio_config.encoder_attention_heads {heads} (the encoder's head_dim is "
                              "derived from them)")


# ------------------------------------------------------------------------------ 3. the built spec
def _positive(source: str, where: str, **values: Any) -> None:
    for name, value in values.items():
        if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
            raise ConfigError(f"{source}: the {where}'s {name} is {bounded(value)}; the config must give a positive "
                              "integer")


def check_spec(spec: Any, source: str) -> None:
    """Layer 3: the built `ModelSpec` has positive sizes and consistent heads and experts."""
    lm = spec.lm
    _positive(source, "language model", num_hidden_layers=lm.num_layers, hidden_size=lm.hidden_size,
              num_attention_heads=lm.num_heads, num_key_value_heads=lm.num_kv_heads, head_dim=lm.head_dim,
              vocab_size=lm.vocab_size)
    if lm.num_heads % lm.num_kv_heads:
        raise ConfigError(f"{source}: the language model's num_attention_heads {lm.num_heads} is not a multiple of "
                          f"num_key_value_heads {lm.num_kv_heads}")
    if lm.num_dense_layers and lm.intermediate_size <= 0:
        raise ConfigError(f"{source}: the language model has {lm.num_dense_layers} dense layers but intermediate_size "
                          f"{lm.intermediate_size}; give the dense MLP width")
    if lm.moe is not None and lm.moe_layers:
        moe = lm.moe
        _positive(source, "language model", num_experts=moe.num_experts, num_experts_per_tok=moe.top_k,
                  moe_intermediate_size=moe.expert_intermediate_size)
        if moe.top_k > moe.num_experts:
            raise ConfigError(f"{source}: the language model routes each token to {moe.top_k} experts but has only "
                              f"{moe.num_experts}")
    v = spec.vision
    if v is not None:
        _positive(source, "vision tower", depth=v.depth, hidden_size=v.hidden_size, num_heads=v.num_heads,
                  head_dim=v.head_dim, intermediate_size=v.intermediate_size, patch_size=v.patch_size,
                  temporal_patch_size=v.temporal_patch_size, in_channels=v.in_channels,
                  spatial_merge_size=v.spatial_merge_size, out_hidden_size=v.out_hidden_size)
