"""BLIP-2 (transformers ``blip-2``: ``Blip2ForConditionalGeneration``) with an OPT language model.

Read from transformers ``models/blip_2/modeling_blip_2.py``, ``configuration_blip_2.py``, ``processing_blip_2.py``
and ``models/opt/modeling_opt.py``:

* **Tower** (``Blip2VisionModel``): Conv2d(3 -> h_v, kernel = stride = patch, bias), a learned CLS token
  prepended to each image, a position table of (image_size/patch)^2 + 1 entries (no interpolation unless
  ``interpolate_pos_encoding``, which the processor's fixed resize never needs); ``num_hidden_layers`` pre-norm
  layers: LayerNorm, ``qkv`` Linear(h_v -> 3 h_v) whose stored bias is the concatenation (q_bias, zeros, v_bias)
  (3 h_v parameters when ``qkv_bias``), ``projection`` (bias), LayerNorm, fc1 -> GELU -> fc2 (bias); attention
  over the image's n + 1 positions; ``post_layernorm`` (elementwise) on every row. Every layer reaches the loss
  (``last_hidden_state`` feeds the Q-Former, CLS row included).
* **Q-Former** (``query_tokens`` + ``Blip2QFormerModel`` + ``language_projection``):
  :class:`~vlm_perf.arch.blocks.QueryTransformer`, ``num_query_tokens`` learned queries per image, cross-attention
  in layers 0, f, 2f, ... (``qformer_config.cross_attention_frequency``) to the image's n + 1 tower rows
  (``encoder_hidden_size`` is set to the tower width by ``Blip2Config.__post_init__``), one Linear(w -> h_text,
  bias) to the LM: ``num_query_tokens`` LM tokens per image. Reported as the ``projector`` part.
* **LM** (``text_config`` ``opt``, ``OPTForCausalLM``): token embedding (vocab x ``word_embed_proj_dim``),
  learned positions (``max_position_embeddings`` + 2 entries: OPT's offset), per layer q/k/v/out_proj and fc1 -> ReLU
  -> fc2 (bias ``enable_bias``), two LayerNorms (``layer_norm_elementwise_affine``), a final LayerNorm when
  ``do_layer_norm_before`` and not ``_remove_final_layer_norm``, lm_head (tied by default).

* **LM** (``text_config`` ``t5``, BLIP-2 FLAN-T5: ``T5ForConditionalGeneration``, ``models/t5/modeling_t5.py``): an
  encoder over the query tokens + prompt (the ``lm_*`` statistics) and a decoder over the labels (``decoder_lens``):
  :class:`~vlm_perf.arch.blocks.EncoderDecoderLayers` with bias-free q / k / v / o of ``num_heads`` x ``d_kv``, the
  FFN ``wi`` -> act -> ``wo`` or gated ``wi_0`` / ``wi_1`` (``feed_forward_proj`` ``gated-*``), RMSNorms (T5LayerNorm:
  weight only) -- 2 per encoder and 3 per decoder layer, one final norm per stack --, relative position buckets in the
  first self-attention of each stack (``relative_attention_num_buckets`` x heads, looked up and added to the scores:
  no matmul), a shared embedding; the head runs on the decoder positions. transformers 5.24's ``T5Config`` always ties
  the head to the embedding (``__post_init__`` sets ``tie_word_embeddings`` True; a false value only turns off the
  output rescaling, an elementwise multiply), so the head stores no parameters here.

Refused: another ``text_config.model_type``, OPT's ``project_in`` / ``project_out`` (``word_embed_proj_dim``
different from ``hidden_size``, OPT-350m only; no BLIP-2 checkpoint uses it), and ``use_qformer_text_input`` is
billed as stored-only text FFNs (``Blip2ForConditionalGeneration`` never feeds the Q-Former text).

Defaults: each section takes its own config class's defaults (``Blip2VisionConfig``, ``Blip2QFormerConfig``,
``OPTConfig``) and ``Blip2Config.num_query_tokens`` 32.
"""

from __future__ import annotations

from typing import Any, Mapping

from ...errors import ConfigError, UnsupportedModelError
from ..blocks import (ClsToken, DecoderAttention, DecoderLMHead, EncoderDecoderLayers, ExtraParams, LMHead,
                      PatchEmbed, PlainMLP, PositionTable, TokenEmbedding, VisionLayers)
from ..blocks.query_transformer import QueryTransformer
from ..fields import Fields
from ..parts import LANGUAGE_MODEL, MERGER, VISION_TOWER
from ..spec import LMSpec, ModelSpec, VisionSpec
from . import Family, register_family
from .media import DerivedMedia, MediaRule, no_video, positive

# class defaults, transformers 5.x configuration_blip_2.py (Blip2VisionConfig, Blip2QFormerConfig, Blip2Config)
VISION_DEFAULTS = {"hidden_size": 1408, "intermediate_size": 6144, "num_hidden_layers": 39,
                   "num_attention_heads": 16, "image_size": 224, "patch_size": 14, "qkv_bias": True}
QFORMER_DEFAULTS = {"hidden_size": 768, "num_hidden_layers": 12, "num_attention_heads": 12,
                    "intermediate_size": 3072, "cross_attention_frequency": 2, "use_qformer_text_input": False}
NUM_QUERY_TOKENS = 32
# OPTConfig class defaults (transformers 5.x configuration_opt.py)
OPT_DEFAULTS = {"vocab_size": 50272, "hidden_size": 768, "num_hidden_layers": 12, "ffn_dim": 3072,
                "num_attention_heads": 12, "max_position_embeddings": 2048, "do_layer_norm_before": True,
                "_remove_final_layer_norm": False, "enable_bias": True, "layer_norm_elementwise_affine": True,
                "tie_word_embeddings": True}
OPT_POSITION_OFFSET = 2  # OPTLearnedPositionalEmbedding stores max_position_embeddings + 2 rows


def _pos(f: Fields, key: str, default: int) -> int:
    value = f.opt(key, default)
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        raise ConfigError(f"{f.source}: field {f.name_of(key)} must be a positive integer, got {value!r}")
    return value


def _section(config: Mapping[str, Any], key: str, source: str) -> dict:
    value = config.get(key, {})
    if value is None:
        value = {}
    if not isinstance(value, dict):
        raise ConfigError(f"{source}: field {key} must be an object, got {type(value).__name__}")
    return value


def _divisible(source: str, section: str, width: int, heads: int) -> None:
    if width % heads:
        raise ConfigError(f"{source}: {section}.hidden_size {width} is not divisible by "
                          f"{section}.num_attention_heads {heads}")


def read_opt(tc: Mapping[str, Any], source: str) -> tuple[LMSpec, tuple]:
    """(LMSpec, LM blocks) of an OPT ``text_config``."""
    f = Fields(dict(tc), "text_config", source)
    d = OPT_DEFAULTS
    hidden, heads = _pos(f, "hidden_size", d["hidden_size"]), _pos(f, "num_attention_heads", d["num_attention_heads"])
    _divisible(source, "text_config", hidden, heads)
    layers, ffn = _pos(f, "num_hidden_layers", d["num_hidden_layers"]), _pos(f, "ffn_dim", d["ffn_dim"])
    vocab, positions = _pos(f, "vocab_size", d["vocab_size"]), _pos(f, "max_position_embeddings",
                                                                    d["max_position_embeddings"])
    proj = _pos(f, "word_embed_proj_dim", hidden)
    if proj != hidden:
        raise UnsupportedModelError(f"{source}: text_config.word_embed_proj_dim {proj} != text_config.hidden_size "
                                    f"{hidden}: OPT's project_in / project_out Linears are not modelled")
    bias = bool(f.opt("enable_bias", d["enable_bias"]))
    affine = bool(f.opt("layer_norm_elementwise_affine", d["layer_norm_elementwise_affine"]))
    final = bool(f.opt("do_layer_norm_before", True)) and not bool(f.opt("_remove_final_layer_norm", False))
    tie = bool(f.opt("tie_word_embeddings", d["tie_word_embeddings"]))
    lm = LMSpec(family="opt", num_layers=layers, hidden_size=hidden, num_heads=heads, num_kv_heads=heads,
                head_dim=hidden // heads, intermediate_size=ffn, vocab_size=vocab, tie_word_embeddings=tie,
                qkv_bias=bias)
    norm = 2 * hidden if affine else 0
    blocks: tuple = (
        TokenEmbedding(part=LANGUAGE_MODEL, count=1, vocab=vocab, width=hidden),
        PositionTable(part=LANGUAGE_MODEL, count=1, entries=positions + OPT_POSITION_OFFSET, width=hidden),
        DecoderAttention(part=LANGUAGE_MODEL, count=layers, hidden=hidden, num_heads=heads, num_kv_heads=heads,
                         head_dim=hidden // heads, qkv_bias=bias, o_bias=bias, qk_norm=False),
        ExtraParams(part=LANGUAGE_MODEL, count=layers, label="2 LayerNorm per layer", numel=2 * norm),
        PlainMLP(part=LANGUAGE_MODEL, count=layers, hidden=hidden, width=ffn, bias=bias),
        ExtraParams(part=LANGUAGE_MODEL, count=1 if final else 0, label="final LayerNorm", numel=norm),
        LMHead(part=LANGUAGE_MODEL, count=1, hidden=hidden, vocab=vocab, tied=tie))
    return lm, blocks


# T5Config class defaults (transformers 5.24 configuration_t5.py)
T5_DEFAULTS: dict[str, Any] = {"vocab_size": 32128, "d_model": 512, "d_kv": 64, "d_ff": 2048, "num_layers": 6, "num_heads": 8,
               "relative_attention_num_buckets": 32, "feed_forward_proj": "relu"}


def read_t5(tc: Mapping[str, Any], source: str) -> tuple[LMSpec, tuple]:
    """(LMSpec, LM blocks) of a T5 ``text_config`` as ``T5ForConditionalGeneration`` builds it (head tied)."""
    f = Fields(dict(tc), "text_config", source)
    d = T5_DEFAULTS
    hidden, heads, d_kv = _pos(f, "d_model", d["d_model"]), _pos(f, "num_heads", d["num_heads"]), _pos(f, "d_kv",
                                                                                                       d["d_kv"])
    enc = _pos(f, "num_layers", d["num_layers"])
    dec = _pos(f, "num_decoder_layers", enc)
    ffn, vocab = _pos(f, "d_ff", d["d_ff"]), _pos(f, "vocab_size", d["vocab_size"])
    buckets = _pos(f, "relative_attention_num_buckets", d["relative_attention_num_buckets"])
    proj = f.opt("feed_forward_proj", d["feed_forward_proj"])
    parts = proj.split("-") if isinstance(proj, str) else []
    if not parts or len(parts) > 2 or (len(parts) == 2 and parts[0] != "gated"):
        raise ConfigError(f"{source}: field text_config.feed_forward_proj must be 'ACT' or 'gated-ACT', got {proj!r}")
    gated = len(parts) == 2
    lm = LMSpec(family="t5", num_layers=enc + dec, hidden_size=hidden, num_heads=heads, num_kv_heads=heads,
                head_dim=d_kv, intermediate_size=ffn, vocab_size=vocab, tie_word_embeddings=True)
    blocks: tuple = (
        TokenEmbedding(part=LANGUAGE_MODEL, count=1, vocab=vocab, width=hidden),
        ExtraParams(part=LANGUAGE_MODEL, count=2, label="relative position buckets (first self-attention of each "
                    "stack)", numel=buckets * heads),
        ExtraParams(part=LANGUAGE_MODEL, count=2, label="final RMSNorm (encoder, decoder)", numel=hidden),
        EncoderDecoderLayers(part=LANGUAGE_MODEL, count=1, hidden=hidden, num_heads=heads, head_dim=d_kv,
                             encoder_layers=enc, decoder_layers=dec, encoder_ffn=ffn, decoder_ffn=ffn, bias=False,
                             gated=gated, norm="rmsnorm"),
        DecoderLMHead(part=LANGUAGE_MODEL, count=1, hidden=hidden, vocab=vocab, tied=True))
    return lm, blocks


def build(config: Mapping[str, Any], source: str, name: str = "") -> ModelSpec:
    vc, qc, tc = (_section(config, k, source) for k in ("vision_config", "qformer_config", "text_config"))
    text_type = tc.get("model_type", "opt")
    if text_type not in ("opt", "t5"):
        raise UnsupportedModelError(f"{source}: blip-2 with text_config.model_type {text_type!r} is not modelled; "
                                    "only opt (decoder-only) and t5 (encoder-decoder, BLIP-2 FLAN-T5)")
    lm, lm_blocks = read_t5(tc, source) if text_type == "t5" else read_opt(tc, source)
    f = Fields(vc, "vision_config", source)
    d = VISION_DEFAULTS
    width, heads = _pos(f, "hidden_size", d["hidden_size"]), _pos(f, "num_attention_heads", d["num_attention_heads"])
    _divisible(source, "vision_config", width, heads)
    depth, mlp = _pos(f, "num_hidden_layers", d["num_hidden_layers"]), _pos(f, "intermediate_size",
                                                                            d["intermediate_size"])
    patch, image_size = f.square("patch_size", d["patch_size"]), f.square("image_size", d["image_size"])
    side = image_size // patch
    if side == 0:
        raise ConfigError(f"{source}: vision_config.image_size {image_size} is smaller than patch_size {patch}")
    qkv_bias = bool(f.opt("qkv_bias", d["qkv_bias"]))
    q = Fields(qc, "qformer_config", source)
    dq = QFORMER_DEFAULTS
    qwidth, qheads = _pos(q, "hidden_size", dq["hidden_size"]), _pos(q, "num_attention_heads",
                                                                     dq["num_attention_heads"])
    _divisible(source, "qformer_config", qwidth, qheads)
    queries = _pos(Fields(config, "", source), "num_query_tokens", NUM_QUERY_TOKENS)
    vision = VisionSpec(family="blip-2", depth=depth, hidden_size=width, num_heads=heads, head_dim=width // heads,
                        intermediate_size=mlp, mlp_gated=False, patch_size=patch, temporal_patch_size=1,
                        in_channels=3, spatial_merge_size=1, out_hidden_size=lm.hidden_size,
                        num_position_embeddings=side * side + 1, patch_embed_bias=True, norm="layernorm",
                        cls_per_frame=1)
    tower: tuple = (
        PatchEmbed(part=VISION_TOWER, count=1, in_volume=vision.patch_volume, width=width, bias=True),
        ClsToken(part=VISION_TOWER, count=1, width=width),
        PositionTable(part=VISION_TOWER, count=1, entries=side * side + 1, width=width),
        VisionLayers(part=VISION_TOWER, count=depth, width=width, num_heads=heads, head_dim=width // heads,
                     mlp_width=mlp, mlp_gated=False, attention="frame", cls=True, qkv_bias=qkv_bias, proj_bias=True,
                     mlp_bias=True, norm="layernorm"),
        ExtraParams(part=VISION_TOWER, count=1, label="post_layernorm LayerNorm", numel=2 * width))
    qformer = QueryTransformer(
        part=MERGER, count=1, queries=queries, width=qwidth, num_heads=qheads,
        mlp_width=_pos(q, "intermediate_size", dq["intermediate_size"]),
        layers=_pos(q, "num_hidden_layers", dq["num_hidden_layers"]),
        cross_every=_pos(q, "cross_attention_frequency", dq["cross_attention_frequency"]), kv_width=width,
        out_width=lm.hidden_size, text_ffn=bool(q.opt("use_qformer_text_input", dq["use_qformer_text_input"])))
    spec = ModelSpec(name=name or str(config.get("_name_or_path") or "blip-2"), model_type="blip-2", lm=lm,
                     vision=vision, source=source, family="blip-2", blocks=tower + (qformer,) + lm_blocks)
    spec.extra.update(image_size=image_size, num_query_tokens=queries, fixed_grid_side=side, lm_tokens_per_frame=queries)
    if text_type == "t5":
        spec.extra["encoder_decoder"] = True
    return spec


class Blip2Media(MediaRule):
    """BLIP-2: every image resized to the tower's ``image_size`` (``BlipImageProcessor``: ``size`` height x width, no
    crop, aspect ratio not kept): one (1, s, s) grid plus its CLS row in the tower, and ``num_query_tokens`` LM
    placeholders (``Blip2Processor`` prepends ``num_query_tokens`` image tokens to each text; one image per text).
    Settings from ``preprocessor_config.json`` (``size``, which must equal the tower's ``image_size``: the position
    table is fixed) and ``processor_config.json`` (``num_query_tokens``, which must equal the model's), else the
    model config. No video input."""

    family = "blip-2"

    def settings(self, spec) -> dict:
        pre = spec.processor.get("preprocessor_config.json", {})
        proc = spec.processor.get("processor_config.json", {})
        tile = int(spec.extra["image_size"])
        size = pre.get("size") if isinstance(pre.get("size"), dict) else {}
        if size and (size.get("height"), size.get("width")) != (tile, tile):
            raise UnsupportedModelError(f"{spec.name}: preprocessor_config.json size {size} differs from "
                                        f"vision_config.image_size {tile} (the tower's position table is fixed)")
        queries = spec.extra["num_query_tokens"]
        if proc and proc.get("num_query_tokens") != queries:
            raise UnsupportedModelError(f"{spec.name}: processor_config.json num_query_tokens "
                                        f"{proc.get('num_query_tokens')!r} differs from the model's {queries} "
                                        "(Blip2Processor would insert another number of image tokens)")
        return {"size": tile, "num_query_tokens": queries,
                "source": "processor files" if (pre or proc) else "model config"}

    def image(self, spec, height: int, width: int) -> DerivedMedia:
        height, width = positive((height, width), "image size (H, W pixels)")
        s = self.settings(spec)
        side = s["size"] // spec.vision.patch_size
        return DerivedMedia("image", (height, width), (s["size"], s["size"]), (1, side, side), s["num_query_tokens"],
                            detail={"cls_tokens": 1})

    def video(self, spec, frames: int, height: int, width: int) -> DerivedMedia:
        raise no_video(f"{spec.name} (blip-2)", "Blip2Processor", "Blip2ForConditionalGeneration")


register_family(Family(
    name="blip-2", model_types=("blip-2",), build=build, hf_class="Blip2ForConditionalGeneration", is_vlm=True,
    media=Blip2Media(),
    notes=("Q-Former per image: num_query_tokens learned queries, self-attention over them, cross-attention to the "
           "image's n + 1 tower rows (CLS included) every cross_attention_frequency layers; billed in the projector part",
           "LM tokens per image: num_query_tokens (the processor prepends them to the text)",
           "text_config t5 (BLIP-2 FLAN-T5): an encoder-decoder LM, the encoder over the query tokens + prompt, the "
           "decoder over the labels (decoder_lens; the encoder length when not given)",
           "norms, GELU / ReLU, position lookups are not matmuls (0 FLOPs)")))
