"""Mllama: Llama 3.2 Vision (transformers ``mllama``: ``MllamaForConditionalGeneration``).

Read from transformers ``models/mllama/modeling_mllama.py``, ``configuration_mllama.py``, ``processing_mllama.py`` and
``image_processing_pil_mllama.py``:

* **Tower** (``MllamaVisionModel``): every image is ``max_num_tiles`` (T) tiles of ``image_size`` px whatever its
  aspect ratio (the processor pads the tile dimension; padding tiles are zeros but run). Conv2d patch embed (no bias)
  -> P = (image_size / patch)^2 patches per tile; a CLS token per tile (P + 1), then **each tile is padded to a
  multiple of 8 positions** (L8 = ceil((P + 1) / 8) x 8: 1608 for the released 560 px / patch 14); gated aspect-ratio
  and position embeddings are lookups. ``num_hidden_layers`` local layers, then ``num_global_layers`` gated global
  layers, both attending over **all T x L8 positions of an image jointly** (the aspect-ratio mask only blocks padding
  pairs; eager and SDPA compute the whole square); LayerNorm pre/post; q/k/v/o without bias, MLP fc1/fc2 with bias
  (GELU). The padding mask is built as an outer product, a (T·L8, 1) x (1, T·L8) matmul per image
  (:class:`~vlm_perf.arch.blocks.TileMaskProduct`). Output: the final state concatenated with the local layers listed
  in ``intermediate_layers_indices`` (``vision_output_dim`` = h_v x (1 + len)), padding sliced off: T x (P + 1) tokens.
* **Grid**: one image is ONE attention sequence, so its grid is ``(1, T·side, side)`` (T tiles stacked), with
  ``VisionSpec.cls_per_frame`` = T·(L8 − P) extra positions (the T CLS tokens and the padding to 8): tower rows and
  the squared sum are then exactly T·L8 and (T·L8)^2 per image.
* **Projector**: one Linear(``vision_output_dim`` -> h, bias) on the T x (P + 1) output tokens of every image
  (:class:`~vlm_perf.arch.blocks.TowerTokenLinear`; its input gradient is due only when the tower trains).
* **LM**: ``text_config.num_hidden_layers`` layers, of which those in ``cross_attention_layers`` are **cross-attention
  layers** (:class:`~vlm_perf.arch.blocks.CrossAttention`: q/o on the text, k/v on the sample's vision tokens, q/k
  RMSNorm, two tanh gates, then the usual gated MLP); the others are Llama self-attention layers (head_dim = h / H).
  ``embed_tokens`` has ``vocab_size + 8`` rows; ``lm_head`` h -> ``vocab_size``. One ``<|image|>`` token per image.
  The layers before the first cross-attention layer see text only (:class:`~vlm_perf.arch.blocks.TextOnly`): with the
  LM frozen and a vision part trainable, autograd runs nothing there.

Limits (stated in ``docs/families.md``): HF pads each sample's images to the microbatch's largest image count and runs
the padding images through tower and cross-attention (the statistics count real images: exact when every sample of a
microbatch has as many images, e.g. one sample per microbatch). A microbatch without any image skips the
cross-attention decoder layers entirely (``MllamaTextModel``: norms, cross-attention and MLP): their q/o and MLP
(:class:`~vlm_perf.arch.blocks.CrossLayerMLP`) count ``lm_tokens - lm_tokens_no_vision`` rows (exact per microbatch;
statistics summed without the per-microbatch split leave it 0: counted as run, an upper bound).
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any, Mapping

from ...errors import ConfigError, UnsupportedModelError
from ..blocks import (ClsToken, CrossAttention, CrossLayerMLP, DecoderAttention, DenseMLP, ExtraParams, FinalNorm, LMHead,
                      LMLayerNorms, PatchEmbed, PositionTable, TextOnly, TileMaskProduct, TokenEmbedding,
                      TowerTokenLinear, VisionLayers)
from ..fields import Fields
from ..parts import LANGUAGE_MODEL, MERGER, VISION_TOWER
from ..spec import LMSpec, ModelSpec, VisionSpec
from . import Family, register_family
from .media import DerivedMedia, MediaRule, no_video, positive

# MllamaVisionConfig / MllamaTextConfig class defaults (transformers 5.x configuration_mllama.py)
VISION_DEFAULTS: dict[str, Any] = {
    "hidden_size": 1280, "num_hidden_layers": 32, "num_global_layers": 8, "attention_heads": 16, "num_channels": 3,
    "intermediate_size": 5120, "vision_output_dim": 7680, "image_size": 448, "patch_size": 14, "max_num_tiles": 4,
    "intermediate_layers_indices": [3, 7, 15, 23, 30],
    "supported_aspect_ratios": [[1, 1], [1, 2], [1, 3], [1, 4], [2, 1], [2, 2], [3, 1], [4, 1]]}
TEXT_DEFAULTS: dict[str, Any] = {
    "vocab_size": 128256, "hidden_size": 4096, "num_hidden_layers": 40, "num_attention_heads": 32,
    "num_key_value_heads": 8, "intermediate_size": 14336, "tie_word_embeddings": False,
    "cross_attention_layers": [3, 8, 13, 18, 23, 28, 33, 38]}
EXTRA_EMBEDDING_ROWS = 8  # MllamaTextModel.embed_tokens: nn.Embedding(vocab_size + 8, hidden)
PAD_TO = 8  # MllamaVisionModel pads every tile's sequence to a multiple of 8 positions


def _pos(f: Fields, key: str, defaults: Mapping[str, Any]) -> int:
    value = f.opt(key, defaults[key])
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        raise ConfigError(f"{f.source}: field {f.name_of(key)} must be a positive integer, got {value!r}")
    return value


def _int_list(f: Fields, key: str, defaults: Mapping[str, Any]) -> tuple[int, ...]:
    value = f.opt(key, defaults[key])
    if not isinstance(value, (list, tuple)) or any(isinstance(v, bool) or not isinstance(v, int) for v in value):
        raise ConfigError(f"{f.source}: field {f.name_of(key)} must be a list of integers, got {value!r}")
    return tuple(value)


def tile_geometry(patches_per_tile: int) -> tuple[int, int]:
    """(positions per tile with the CLS token, the same padded to a multiple of 8)."""
    with_cls = patches_per_tile + 1
    return with_cls, -(-with_cls // PAD_TO) * PAD_TO


def build(config: Mapping[str, Any], source: str, name: str = "") -> ModelSpec:
    vc, tc = config.get("vision_config"), config.get("text_config")
    if not isinstance(vc, dict) or not isinstance(tc, dict):
        missing = "vision_config" if not isinstance(vc, dict) else "text_config"
        raise ConfigError(f"{source}: config lacks required field {missing} for model_type mllama")
    v, t = Fields(vc, "vision_config", source), Fields(tc, "text_config", source)
    width, layers, global_layers = (_pos(v, k, VISION_DEFAULTS) for k in ("hidden_size", "num_hidden_layers",
                                                                          "num_global_layers"))
    heads_key = "num_attention_heads" if vc.get("attention_heads") is None and "num_attention_heads" in vc \
        else "attention_heads"  # MllamaVisionConfig.attribute_map: num_attention_heads -> attention_heads
    heads = _pos(v, heads_key, {heads_key: VISION_DEFAULTS["attention_heads"]})
    if width % heads:
        raise ConfigError(f"{source}: vision_config.hidden_size {width} must be a multiple of attention_heads {heads}")
    mlp, channels, out_dim, tiles = (_pos(v, k, VISION_DEFAULTS) for k in ("intermediate_size", "num_channels",
                                                                          "vision_output_dim", "max_num_tiles"))
    image_size, patch = v.square("image_size", VISION_DEFAULTS["image_size"]), v.square("patch_size", VISION_DEFAULTS["patch_size"])
    if image_size % patch:
        raise UnsupportedModelError(f"{source}: vision_config.image_size {image_size} is not a multiple of patch_size "
                                    f"{patch}: the conv drops the remainder (not modelled)")
    taps = _int_list(v, "intermediate_layers_indices", VISION_DEFAULTS)
    if any(not 0 <= i < layers for i in taps):
        raise ConfigError(f"{source}: vision_config.intermediate_layers_indices {list(taps)} must index the "
                          f"{layers} local layers")
    if out_dim != width * (1 + len(taps)):
        raise ConfigError(f"{source}: vision_config.vision_output_dim {out_dim} must equal hidden_size x (1 + "
                          f"len(intermediate_layers_indices)) = {width * (1 + len(taps))} (the concatenated states)")
    ratios = v.opt("supported_aspect_ratios", VISION_DEFAULTS["supported_aspect_ratios"])
    if not isinstance(ratios, (list, tuple)) or not ratios:
        raise ConfigError(f"{source}: vision_config.supported_aspect_ratios must be a non-empty list, got {ratios!r}")
    side = image_size // patch
    patches = side * side
    with_cls, padded = tile_geometry(patches)

    hidden, n_layers = _pos(t, "hidden_size", TEXT_DEFAULTS), _pos(t, "num_hidden_layers", TEXT_DEFAULTS)
    n_heads, kv_heads = _pos(t, "num_attention_heads", TEXT_DEFAULTS), _pos(t, "num_key_value_heads", TEXT_DEFAULTS)
    if hidden % n_heads or n_heads % kv_heads:
        raise ConfigError(f"{source}: text_config.hidden_size {hidden}, num_attention_heads {n_heads} and "
                          f"num_key_value_heads {kv_heads} must divide (head_dim = hidden / heads)")
    ffn, vocab = _pos(t, "intermediate_size", TEXT_DEFAULTS), _pos(t, "vocab_size", TEXT_DEFAULTS)
    cross = sorted(set(_int_list(t, "cross_attention_layers", TEXT_DEFAULTS)))
    if any(not 0 <= i < n_layers for i in cross):
        raise ConfigError(f"{source}: text_config.cross_attention_layers {cross} must index the {n_layers} layers")
    tie = bool(config.get("tie_word_embeddings", tc.get("tie_word_embeddings", TEXT_DEFAULTS["tie_word_embeddings"])))
    head_dim = hidden // n_heads
    lm = LMSpec(family="llama", num_layers=n_layers, hidden_size=hidden, num_heads=n_heads, num_kv_heads=kv_heads,
                head_dim=head_dim, intermediate_size=ffn, vocab_size=vocab, tie_word_embeddings=tie)
    vision = VisionSpec(family="mllama", depth=layers + global_layers, hidden_size=width, num_heads=heads,
                        head_dim=width // heads, intermediate_size=mlp, mlp_gated=False, patch_size=patch,
                        temporal_patch_size=1, in_channels=channels, spatial_merge_size=1, out_hidden_size=hidden,
                        num_position_embeddings=with_cls, patch_embed_bias=False, norm="layernorm",
                        cls_per_frame=tiles * (padded - patches))

    n_ratios = len(ratios)
    local = VisionLayers(part=VISION_TOWER, count=layers, width=width, num_heads=heads, head_dim=width // heads,
                         mlp_width=mlp, mlp_gated=False, cls=True, qkv_bias=False, proj_bias=False, mlp_bias=True,
                         norm="layernorm")
    tower = (
        PatchEmbed(part=VISION_TOWER, count=1, in_volume=channels * patch * patch, width=width, bias=False),
        ClsToken(part=VISION_TOWER, count=1, width=width),
        # the gated position embedding is an nn.Parameter (the tile tables are nn.Embedding lookups)
        ExtraParams(part=VISION_TOWER, count=1, label="gated position embedding (P + 1) x h_v", numel=with_cls * width),
        PositionTable(part=VISION_TOWER, count=1, entries=(n_ratios + 1) * tiles * with_cls, width=width),  # tile pos.
        PositionTable(part=VISION_TOWER, count=2, entries=(n_ratios + 1) * tiles, width=width),  # pre/post tile emb.
        ExtraParams(part=VISION_TOWER, count=1, label="gates of the position and tile embeddings (3), LayerNorm "
                    "pre/post (4·h_v)", numel=3 + 4 * width),
        local,
        replace(local, count=global_layers),
        ExtraParams(part=VISION_TOWER, count=global_layers, label="global layer tanh gates (attention, MLP)", numel=2),
        TileMaskProduct(part=VISION_TOWER, count=1),
    )
    projector = (TowerTokenLinear(part=MERGER, count=1, in_width=out_dim, out_width=hidden, bias=True,
                                  tokens_per_frame=tiles),)
    first = cross[0] if cross else n_layers
    before, self_layers = first, n_layers - len(cross)
    attn = DecoderAttention(part=LANGUAGE_MODEL, count=before, hidden=hidden, num_heads=n_heads, num_kv_heads=kv_heads,
                            head_dim=head_dim, qkv_bias=False, o_bias=False, qk_norm=False)
    xattn = CrossAttention(part=LANGUAGE_MODEL, count=1, hidden=hidden, num_heads=n_heads, num_kv_heads=kv_heads,
                           head_dim=head_dim, kv_tokens_per_frame=tiles, query_from_vision=False)
    text: list = [TokenEmbedding(part=LANGUAGE_MODEL, count=1, vocab=vocab + EXTRA_EMBEDDING_ROWS, width=hidden)]
    if before:
        text += [TextOnly(part=LANGUAGE_MODEL, count=1, module=attn),
                 TextOnly(part=LANGUAGE_MODEL, count=1, module=DenseMLP(part=LANGUAGE_MODEL, count=before, hidden=hidden,
                                                                       width=ffn))]
    if cross:
        text.append(xattn)
        if len(cross) > 1:
            text.append(replace(xattn, count=len(cross) - 1, query_from_vision=True))
    if self_layers - before:
        text.append(replace(attn, count=self_layers - before))
    if self_layers - before:
        text.append(DenseMLP(part=LANGUAGE_MODEL, count=self_layers - before, hidden=hidden, width=ffn))
    if cross:
        text.append(CrossLayerMLP(part=LANGUAGE_MODEL, count=len(cross), hidden=hidden, width=ffn))
    text += [LMLayerNorms(part=LANGUAGE_MODEL, count=n_layers, hidden=hidden),
             ExtraParams(part=LANGUAGE_MODEL, count=len(cross), label="cross-attention tanh gates (attention, MLP)",
                         numel=2),
             FinalNorm(part=LANGUAGE_MODEL, count=1, hidden=hidden),
             LMHead(part=LANGUAGE_MODEL, count=1, hidden=hidden, vocab=vocab, tied=tie)]
    spec = ModelSpec(name=name or str(config.get("_name_or_path") or "mllama"), model_type="mllama", lm=lm,
                     vision=vision, source=source, family="mllama", blocks=tower + projector + tuple(text))
    spec.extra.update(image_size=image_size, max_num_tiles=tiles, tile_side=side, tile_positions=with_cls,
                      padded_tile_positions=padded, cross_attention_layers=tuple(cross),
                      # every image runs max_num_tiles fixed tiles (tile position embeddings, no interpolation):
                      # its grid is always (1, tiles x side, side); the shared fixed-tile rule refuses any other
                      fixed_grid_side=side, fixed_grid_height=tiles * side)
    return spec


def aspect_ratios(max_tiles: int) -> tuple[tuple[int, int], ...]:
    """Tile arrangements (rows, columns) with rows x columns <= ``max_tiles``, in the processor's order (the first
    entry of each pair loops slowest)."""
    return tuple((a, b) for a in range(1, max_tiles + 1) for b in range(1, max_tiles + 1) if a * b <= max_tiles)


def best_canvas(height: int, width: int, max_tiles: int, tile: int) -> tuple[int, int]:
    """(rows, columns) of tiles ``MllamaImageProcessor`` fits an image into.

    Each arrangement's scale is min(rows·tile / H, cols·tile / W). If some scale is >= 1 (the image fits without
    shrinking) the smallest such scale wins, else the largest; among arrangements with the winning scale the smallest
    canvas area, then the first in order. Scales compared as exact fractions (equal to the processor's float64
    comparisons for integer sizes).
    """
    from fractions import Fraction

    options = [(min(Fraction(a * tile, height), Fraction(b * tile, width)), a, b) for a, b in aspect_ratios(max_tiles)]
    up = [s for s, _, _ in options if s >= 1]
    chosen = min(up) if up else max(s for s, _, _ in options)
    best = min(((a * b, i) for i, (s, a, b) in enumerate(options) if s == chosen))
    return options[best[1]][1], options[best[1]][2]


class MllamaMedia(MediaRule):
    """Mllama (``MllamaImageProcessor`` + ``MllamaProcessor``): an image is fitted into the best tile arrangement of
    at most ``max_image_tiles`` tiles of ``size`` px (:func:`best_canvas`), but the tower always runs
    ``max_num_tiles`` tiles per image (padding tiles included), so every image costs the same: grid
    ``(1, T·side, side)``; ``tiles`` = the arrangement's real tiles. One ``<|image|>`` token per image. Settings:
    ``preprocessor_config.json`` (``size``, ``max_image_tiles``), else the tower's ``image_size`` and ``max_num_tiles``
    (the released checkpoints: 560 px, 4 tiles). Several images per sample are accepted. No video input."""

    family = "mllama"

    def settings(self, spec) -> dict:
        pre = spec.processor.get("preprocessor_config.json", {})
        size = pre.get("size", {})
        tile = size.get("height", spec.extra["image_size"]) if isinstance(size, dict) else size
        if isinstance(size, dict) and size.get("width", tile) != tile:
            raise ConfigError(f"{spec.name}: preprocessor size {size} must be square (MllamaImageProcessor)")
        tiles = pre.get("max_image_tiles", spec.extra["max_num_tiles"])
        if tile != spec.extra["image_size"] or tiles != spec.extra["max_num_tiles"]:
            raise ConfigError(f"{spec.name}: preprocessor size {tile} / max_image_tiles {tiles} differ from the tower's "
                              f"image_size {spec.extra['image_size']} / max_num_tiles {spec.extra['max_num_tiles']}: "
                              "the tower's tile embeddings would not fit the processor's tiles")
        return {"size": tile, "max_image_tiles": tiles,
                "source": "processor files" if pre else "tower image_size / max_num_tiles (reference default)"}

    def image(self, spec, height: int, width: int) -> DerivedMedia:
        height, width = positive((height, width), "--image-size")
        s = self.settings(spec)
        rows, cols = best_canvas(height, width, s["max_image_tiles"], s["size"])
        side, tiles = spec.extra["tile_side"], spec.extra["max_num_tiles"]
        return DerivedMedia("image", (height, width), (s["size"], s["size"]), (1, tiles * side, side), 1,
                            tiles=rows * cols, detail={"tile_rows": rows, "tile_cols": cols, "tiles_run": tiles})

    def video(self, spec, frames: int, height: int, width: int) -> DerivedMedia:
        raise no_video(f"{spec.name} (mllama)", "MllamaProcessor", "MllamaForConditionalGeneration")


register_family(Family(
    name="mllama", model_types=("mllama",), build=build, hf_class="MllamaForConditionalGeneration", is_vlm=True,
    media=MllamaMedia(),
    notes=("every image runs max_num_tiles tiles (padding tiles included), each padded to a multiple of 8 positions; "
           "local and global layers attend over all tiles of an image jointly",
           "cross-attention core 4·H·d·Σ_samples S·V over the whole text x vision rectangle (the mask is additive; "
           "--causal does not apply); exact per sample with images_per_sample (metadata) or one sample per "
           "microbatch, else the longest sample x the microbatch's vision tokens (an upper bound)",
           "HF pads a microbatch's samples to its largest image count (padding images run tower and cross-attention: "
           "not counted); a microbatch without images skips the cross-attention decoder layers (lm_tokens_no_vision: "
           "not counted there)",
           "gates (tanh), embeddings, the padding slice and the state concatenation are elementwise / lookups "
           "(0 FLOPs)")))
