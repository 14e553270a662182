"""Florence-2 (transformers ``florence2``: ``Florence2ForConditionalGeneration``): a DaViT tower, a pooled-token
projector and a BART encoder-decoder LM.

Read from transformers 5.24 ``models/florence2/modeling_florence2.py``, ``configuration_florence2.py``,
``processing_florence2.py`` and ``models/bart/modeling_bart.py``:

* **Tower** (``Florence2VisionBackbone``): per stage i a Conv2d(``embed_dim[i-1]`` (3 for stage 0) -> ``embed_dim[i]``,
  ``patch_size[i]``, ``patch_stride[i]``, ``patch_padding[i]``, bias) with a LayerNorm before (``patch_prenorm``) or
  after it, then ``depths[i]`` blocks of a spatial block (depthwise conv 3x3, window attention of ``num_heads[i]``
  heads in ``window_size`` windows, depthwise conv, MLP ``embed_dim * mlp_ratio``) and a channel block (the same
  around a channel attention of ``num_groups[i]`` groups): :class:`~vlm_perf.arch.blocks.DaViTStage`, one per stage.
  The processor resizes every image to one square (768 x 768 in every published Florence-2 processor:
  ``preprocessor_config.json`` ``size``), so each stage's grid is fixed: 768 -> 192 -> 96 -> 48 -> 24 positions per
  side for the published stride / padding. The spec is built for 768 unless the processor files given with the
  config say another square size (``Family.with_processor``).
* **Projector** (``multi_modal_projector``): learned row / column positions (``max_position_embeddings`` entries
  each) added to the last stage's s x s output, the spatial mean as one extra token, Linear(``embed_dim[-1]`` ->
  ``projection_dim``, no bias) + LayerNorm on the s² + 1 rows: :class:`~vlm_perf.arch.blocks.PooledTokenProjector`.
  The processor writes ``image_seq_length`` (577 = 24² + 1) ``<image>`` tokens per image, which must equal s² + 1.
* **LM** (``text_config``, ``bart``: ``BartModel`` + the top-level ``lm_head``): a shared token embedding (tied to
  the head by ``tie_word_embeddings``), encoder and decoder learned positions (``max_position_embeddings`` + 2 rows
  each: BART's offset) with a LayerNorm each (``layernorm_embedding``), ``encoder_layers`` / ``decoder_layers``
  post-norm layers with biased q / k / v / out and fc1 -> GELU -> fc2:
  :class:`~vlm_perf.arch.blocks.EncoderDecoderLayers`; the head runs on the decoder's positions only
  (:class:`~vlm_perf.arch.blocks.DecoderLMHead`).

The encoder reads ``<image>`` x (s² + 1) + ``<s>`` + prompt + ``</s>`` per sample (the ``lm_*`` statistics, from
``--seq-len`` / ``seq_lens``); the decoder reads the labels (``decoder_lens``; without them each sample's decoder
length is taken equal to its encoder length: see docs/metadata-schema.md).

Defaults: ``Florence2VisionConfig`` and ``BartConfig`` class defaults for absent fields; ``projection_dim`` must
equal the LM width (``masked_scatter`` of the image features into the token embeddings). Refused: another
``text_config.model_type`` than ``bart``, a processor size that is not square, and a processor ``image_seq_length``
other than s² + 1 (transformers itself raises on that mismatch). Generation (KV-cache decode of an encoder-decoder)
is not modelled.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any, Mapping

from ...errors import ConfigError, UnsupportedModelError
from ..blocks import (DaViTStage, DecoderLMHead, EncoderDecoderLayers, ExtraParams, PooledTokenProjector, PositionTable,
                      TokenEmbedding)
from ..fields import Fields
from ..parts import LANGUAGE_MODEL, MERGER, VISION_TOWER
from ..spec import LMSpec, ModelSpec, VisionSpec
from . import Family, register_family
from .media import DerivedMedia, MediaRule, no_video, positive

# transformers 5.24 configuration_florence2.py (Florence2VisionConfig class defaults)
VISION_DEFAULTS: dict[str, Any] = {
    "in_channels": 3, "depths": [1, 1, 9, 1], "patch_size": [7, 3, 3, 3], "patch_stride": [4, 2, 2, 2],
    "patch_padding": [3, 1, 1, 1], "patch_prenorm": [False, True, True, True], "embed_dim": [128, 256, 512, 1024],
    "num_heads": [4, 8, 16, 32], "num_groups": [4, 8, 16, 32], "window_size": 12, "mlp_ratio": 4.0, "qkv_bias": True,
    "projection_dim": 1024, "max_position_embeddings": 50}
# transformers 5.24 configuration_bart.py (BartConfig class defaults)
BART_DEFAULTS: dict[str, Any] = {
    "vocab_size": 50265, "max_position_embeddings": 1024, "encoder_layers": 12, "encoder_ffn_dim": 4096,
    "encoder_attention_heads": 16, "decoder_layers": 12, "decoder_ffn_dim": 4096, "decoder_attention_heads": 16,
    "d_model": 1024}
BART_POSITION_OFFSET = 2  # BartLearnedPositionalEmbedding stores max_position_embeddings + 2 rows
IMAGE_SIZE = 768  # every published Florence-2 preprocessor_config.json: size 768 x 768


def _section(config: Mapping[str, Any], key: str, source: str) -> dict:
    value = config.get(key) or {}
    if not isinstance(value, dict):
        raise ConfigError(f"{source}: field {key} must be an object, got {type(value).__name__}")
    return value


def _pos(f: Fields, key: str, default: int) -> int:
    value = f.opt(key, default)
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        raise ConfigError(f"{f.source}: field {f.name_of(key)} must be a positive integer, got {value!r}")
    return value


# BartConfig.attribute_map: a config may name these fields by their generic aliases (transformers maps them)
BART_ALIASES = {"d_model": "hidden_size", "encoder_attention_heads": "num_attention_heads",
                "encoder_layers": "num_hidden_layers"}


def _aliased(f: Fields, key: str, aliases: Mapping[str, str], default: int) -> int:
    """``key`` or its attribute-map alias (transformers sets one through the other); both given must agree."""
    alias = aliases.get(key)
    if alias is None or f.opt(alias) is None:
        return _pos(f, key, default)
    value = _pos(f, alias, default)
    if f.opt(key) is not None and _pos(f, key, default) != value:
        raise ConfigError(f"{f.source}: fields {f.name_of(key)} {f.opt(key)!r} and {f.name_of(alias)} {value!r} "
                          "name the same setting (the config's attribute map) but differ")
    return value


def _stage_lists(f: Fields) -> dict[str, list]:
    """The per-stage lists, all of one length (``Florence2VisionBackbone`` indexes them by stage)."""
    out: dict[str, list] = {}
    for key in ("depths", "patch_size", "patch_stride", "patch_padding", "patch_prenorm", "embed_dim", "num_heads",
                "num_groups"):
        value = f.opt(key, VISION_DEFAULTS[key])
        if not isinstance(value, (list, tuple)) or not value:
            raise ConfigError(f"{f.source}: field {f.name_of(key)} must be a non-empty list, got {value!r}")
        want_bool = key == "patch_prenorm"
        for v in value:
            bad = not isinstance(v, bool) if want_bool else (isinstance(v, bool) or not isinstance(v, int) or v < 0)
            if bad or (not want_bool and key != "patch_padding" and key != "depths" and v == 0):
                raise ConfigError(f"{f.source}: field {f.name_of(key)} holds {v!r}; expected "
                                  f"{'booleans' if want_bool else 'positive integers'}")
        out[key] = list(value)
    stages = len(out["depths"])
    for key, v in out.items():
        if len(v) != stages:
            raise ConfigError(f"{f.source}: field {f.name_of(key)} has {len(v)} entries but {f.name_of('depths')} "
                              f"has {stages}: one per stage")
    return out


def _tower(vf: Fields, image_size: int) -> tuple[tuple, VisionSpec, int]:
    st = _stage_lists(vf)
    window = _pos(vf, "window_size", VISION_DEFAULTS["window_size"])
    ratio = vf.opt("mlp_ratio", VISION_DEFAULTS["mlp_ratio"])
    if isinstance(ratio, bool) or not isinstance(ratio, (int, float)) or ratio <= 0:
        raise ConfigError(f"{vf.source}: field {vf.name_of('mlp_ratio')} must be a positive number, got {ratio!r}")
    qkv_bias = bool(vf.opt("qkv_bias", VISION_DEFAULTS["qkv_bias"]))
    in_width = _pos(vf, "in_channels", VISION_DEFAULTS["in_channels"])
    side = image_size
    stages = []
    for i, width in enumerate(st["embed_dim"]):
        if width % st["num_heads"][i] or width % st["num_groups"][i]:
            raise ConfigError(f"{vf.source}: vision_config.embed_dim[{i}] {width} is not divisible by num_heads[{i}] "
                              f"{st['num_heads'][i]} and num_groups[{i}] {st['num_groups'][i]}")
        try:
            stage = DaViTStage(part=VISION_TOWER, count=1, in_width=in_width, width=width, kernel=st["patch_size"][i],
                               stride=st["patch_stride"][i], padding=st["patch_padding"][i],
                               pre_norm=st["patch_prenorm"][i], depth=st["depths"][i], num_heads=st["num_heads"][i],
                               num_groups=st["num_groups"][i], window=window, mlp_width=int(width * ratio),
                               qkv_bias=qkv_bias, in_side=side, reads_pixels=i == 0)
        except ValueError as e:
            raise ConfigError(f"{vf.source}: vision_config stage {i} on a {image_size}-pixel image: {e}") from None
        stages.append(stage)
        in_width, side = width, stage.side
    last = stages[-1]
    vision = VisionSpec(family="florence2", depth=sum(st["depths"]), hidden_size=last.width,
                        num_heads=last.num_heads, head_dim=last.width // last.num_heads, intermediate_size=last.mlp_width,
                        mlp_gated=False, patch_size=max(image_size // side, 1), temporal_patch_size=1,
                        in_channels=_pos(vf, "in_channels", 3), spatial_merge_size=1, out_hidden_size=0,
                        patch_embed_bias=True, norm="layernorm")
    return tuple(stages), vision, side


def read_bart(tc: Mapping[str, Any], source: str) -> tuple[LMSpec, tuple]:
    """(LMSpec, LM blocks) of a BART ``text_config`` as ``BartModel`` + a top-level head (Florence-2)."""
    f = Fields(dict(tc), "text_config", source)
    d = BART_DEFAULTS
    hidden = _aliased(f, "d_model", BART_ALIASES, d["d_model"])
    enc_heads = _aliased(f, "encoder_attention_heads", BART_ALIASES, d["encoder_attention_heads"])
    dec_heads = _pos(f, "decoder_attention_heads", d["decoder_attention_heads"])
    for key, heads in (("encoder_attention_heads", enc_heads), ("decoder_attention_heads", dec_heads)):
        if hidden % heads:
            raise ConfigError(f"{source}: text_config.d_model (hidden_size) {hidden} is not divisible by "
                              f"text_config.{key} {heads}")
    vocab, positions = _pos(f, "vocab_size", d["vocab_size"]), _pos(f, "max_position_embeddings",
                                                                    d["max_position_embeddings"])
    enc_layers = _aliased(f, "encoder_layers", BART_ALIASES, d["encoder_layers"])
    dec_layers = _pos(f, "decoder_layers", d["decoder_layers"])
    enc_ffn, dec_ffn = _pos(f, "encoder_ffn_dim", d["encoder_ffn_dim"]), _pos(f, "decoder_ffn_dim",
                                                                              d["decoder_ffn_dim"])
    lm = LMSpec(family="bart", num_layers=enc_layers + dec_layers, hidden_size=hidden, num_heads=enc_heads,
                num_kv_heads=enc_heads, head_dim=hidden // enc_heads, intermediate_size=enc_ffn, vocab_size=vocab,
                tie_word_embeddings=True, qkv_bias=True)
    blocks: tuple = (
        TokenEmbedding(part=LANGUAGE_MODEL, count=1, vocab=vocab, width=hidden),
        PositionTable(part=LANGUAGE_MODEL, count=2, entries=positions + BART_POSITION_OFFSET, width=hidden),
        ExtraParams(part=LANGUAGE_MODEL, count=2, label="layernorm_embedding LayerNorm (encoder, decoder)",
                    numel=2 * hidden),
        EncoderDecoderLayers(part=LANGUAGE_MODEL, count=1, hidden=hidden, num_heads=enc_heads,
                             head_dim=hidden // enc_heads, encoder_layers=enc_layers, decoder_layers=dec_layers,
                             encoder_ffn=enc_ffn, decoder_ffn=dec_ffn, bias=True, gated=False, norm="layernorm"))
    return lm, blocks


def build(config: Mapping[str, Any], source: str, name: str = "", image_size: int = IMAGE_SIZE) -> ModelSpec:
    vc, tc = _section(config, "vision_config", source), _section(config, "text_config", source)
    text_type = tc.get("model_type", "bart")
    if text_type != "bart":
        raise UnsupportedModelError(f"{source}: florence2 with text_config.model_type {text_type!r} is not modelled; "
                                    "only bart (the LM of every Florence-2 checkpoint)")
    if "dim_embed" in vc or "image_pos_embed" in vc:
        raise UnsupportedModelError(f"{source}: vision_config holds dim_embed / image_pos_embed, the original remote-code "
                                    "layout (microsoft/Florence-2-*, trust_remote_code); transformers 5.24's "
                                    "Florence2VisionConfig reads embed_dim and max_position_embeddings instead and would "
                                    "take its defaults: use the transformers-native config.json (florence-community/"
                                    "Florence-2-*) or the presets florence-2-base / florence-2-large")
    lm, lm_blocks = read_bart(tc, source)
    tie = config.get("tie_word_embeddings", True)
    if not isinstance(tie, bool):
        raise ConfigError(f"{source}: field tie_word_embeddings must be true or false, got {tie!r}")
    vf = Fields(vc, "vision_config", source)
    stages, vision, side = _tower(vf, image_size)
    projection = _pos(vf, "projection_dim", VISION_DEFAULTS["projection_dim"])
    if projection != lm.hidden_size:
        raise ConfigError(f"{source}: vision_config.projection_dim {projection} differs from text_config.d_model "
                          f"{lm.hidden_size}: Florence2Model scatters the projected image features into the token "
                          "embeddings, which needs equal widths")
    positions = _pos(vf, "max_position_embeddings", VISION_DEFAULTS["max_position_embeddings"])
    lm = replace(lm, tie_word_embeddings=tie)
    vision = replace(vision, out_hidden_size=lm.hidden_size)
    projector = PooledTokenProjector(part=MERGER, count=1, in_width=stages[-1].width, out_width=projection,
                                     position_entries=positions)
    head = DecoderLMHead(part=LANGUAGE_MODEL, count=1, hidden=lm.hidden_size, vocab=lm.vocab_size, tied=tie)
    spec = ModelSpec(name=name or str(config.get("_name_or_path") or "florence2"), model_type="florence2", lm=lm,
                     vision=vision, source=source, family="florence2",
                     blocks=stages + (projector,) + lm_blocks + (head,))
    spec.extra.update(image_size=image_size, fixed_grid_side=side, lm_tokens_per_frame=side * side + 1,
                      encoder_decoder=True, florence2_config=dict(config),
                      position_entries=positions)
    return spec


def _processor_size(spec: ModelSpec) -> int | None:
    pre = spec.processor.get("preprocessor_config.json", {})
    size = pre.get("size") if isinstance(pre, dict) else None
    if not isinstance(size, dict) or not size:
        return None
    h, w = size.get("height"), size.get("width")
    if not isinstance(h, int) or isinstance(h, bool) or h <= 0 or h != w:
        raise UnsupportedModelError(f"{spec.name}: preprocessor_config.json size {size} is not one positive square "
                                    "(height = width): Florence-2's tower is counted on the processor's fixed square")
    return h


def with_processor(spec: ModelSpec) -> ModelSpec:
    """The spec rebuilt on the processor files' square size when it is not the default 768."""
    size = _processor_size(spec)
    if size is None or size == spec.extra["image_size"]:
        return spec
    rebuilt = build(spec.extra["florence2_config"], spec.source, spec.name, image_size=size)
    rebuilt.extra.update({k: v for k, v in spec.extra.items() if k not in rebuilt.extra})
    return replace(rebuilt, processor=spec.processor)


class Florence2Media(MediaRule):
    """Florence-2: every image resized to the processor's square (``size``, 768 x 768 in the published processors;
    aspect ratio not kept, no crop): one (1, s, s) grid of the tower's last stage, and s² + 1 ``<image>`` tokens
    (``Florence2Processor`` writes ``image_seq_length`` of them, then ``<s>`` prompt ``</s>``; one image per text).
    Settings from ``preprocessor_config.json`` (``size``, ``image_seq_length``), else the model's 768. No video."""

    family = "florence2"

    def settings(self, spec) -> dict:
        size = _processor_size(spec)
        if size is not None and size != spec.extra["image_size"]:
            raise UnsupportedModelError(f"{spec.name}: preprocessor_config.json size {size} differs from the "
                                        f"{spec.extra['image_size']} the spec was built for; build it with these "
                                        "processor files")
        side, entries = spec.extra["fixed_grid_side"], spec.extra["position_entries"]
        if side > entries:
            raise UnsupportedModelError(f"{spec.name}: a {spec.extra['image_size']}-pixel image gives a {side} x {side} "
                                        f"tower output, more than vision_config.max_position_embeddings {entries} "
                                        "learned rows / columns (transformers' embedding lookup fails)")
        tokens = spec.extra["lm_tokens_per_frame"]
        pre = spec.processor.get("preprocessor_config.json", {})
        seq = pre.get("image_seq_length") if isinstance(pre, dict) else None
        if seq is not None and seq != tokens:
            raise UnsupportedModelError(f"{spec.name}: preprocessor_config.json image_seq_length {seq!r} differs from "
                                        f"the tower's {tokens} image features (s² + 1 for an s x s output): "
                                        "Florence2Model refuses that mismatch")
        return {"size": spec.extra["image_size"], "image_tokens": tokens,
                "source": "processor files" if pre else "model default (768 x 768)"}

    def image(self, spec, height: int, width: int) -> DerivedMedia:
        height, width = positive((height, width), "image size (H, W pixels)")
        s = self.settings(spec)
        side = spec.extra["fixed_grid_side"]
        return DerivedMedia("image", (height, width), (s["size"], s["size"]), (1, side, side), s["image_tokens"])

    def video(self, spec, frames: int, height: int, width: int) -> DerivedMedia:
        raise no_video(f"{spec.name} (florence2)", "Florence2Processor", "Florence2ForConditionalGeneration")


register_family(Family(
    name="florence2", model_types=("florence2",), build=build, hf_class="Florence2ForConditionalGeneration",
    is_vlm=True, media=Florence2Media(), with_processor=with_processor,
    notes=("DaViT tower on the processor's fixed square (768 x 768): per stage a strided conv, window attention and "
           "channel attention with depthwise-conv position encodings; window Linears run on the grid padded to whole "
           "windows",
           "LM tokens per image: s² + 1 (the last stage's positions and their mean); the BART encoder reads them "
           "with the prompt, the decoder the labels (decoder_lens; the encoder length when not given)",
           "head on the decoder positions only; generation (encoder-decoder KV-cache decode) not modelled",
           "norms, GELU, means, position lookups are not matmuls (0 FLOPs)")))
