"""Llama 4 (transformers ``llama4``: ``Llama4ForConditionalGeneration``): Scout / Maverick.

Read from transformers ``models/llama4/modeling_llama4.py``, ``configuration_llama4.py``, ``processing_llama4.py``
and ``image_processing_llama4.py``:

* **Tower** (``Llama4VisionModel``), per tile of ``image_size`` px: ``Llama4UnfoldConvolution`` = unfold + Linear(C·p²
  -> h_v, no bias) on P = (image_size / patch)^2 patches; a CLS token **appended last** (P + 1 positions),
  ``positional_embedding_vlm`` (an ``nn.Parameter``), LayerNorm pre/post; ``num_hidden_layers`` layers with q/k/v/o
  and fc1/fc2 all biased (2D RoPE: elementwise), full attention per tile.
* **Projector**: ``vision_adapter`` drops the CLS, pixel-shuffles by ``pixel_shuffle_ratio`` (0.5: 2x2 patches ->
  one token of 4·h_v = ``intermediate_size``), then fc1 Linear(4·h_v -> ``projector_input_dim``) -> GELU -> fc2
  Linear(``projector_output_dim`` -> same) -> GELU, no biases; ``multi_modal_projector.linear_1`` Linear
  (``vision_output_dim`` -> h, no bias). No norm in front: fc1's input gradient is due only when the tower trains.
* **LM** (``Llama4TextModel``): per layer GQA attention (``attention_bias``; q/k L2 norm without weights); the RoPE
  layers (``no_rope_layers`` 1) attend causally within chunks of ``attention_chunk_size`` tokens
  (:class:`~vlm_perf.arch.blocks.ChunkedDecoderAttention`), the NoPE layers over the whole sequence; MoE layers
  (``moe_layers``, else every ``interleave_moe_layer_step``-th) = router Linear(h -> E, no bias), top-k routed
  experts (gate/up h -> 2F, down F -> h) and one shared expert of the same width F = ``intermediate_size``; dense
  layers a gated MLP of ``intermediate_size_mlp``. Exact counts the **top-k routed** experts: transformers'
  ``Llama4TextMoe`` runs every token through every expert (scores 0 for the others), i.e. E/k times the routed
  FLOPs, a reference implementation and not what a training kernel computes (measured and stated in the tests).
* **Media**: an image is fitted to the best canvas of at most ``max_patches`` tiles (:func:`best_fit`); with more than
  one tile a global tile (the whole image resized) is added: ``rows·cols (+1)`` tiles through tower and projector,
  grid ``(tiles, side, side)``; each tile gives (side / 2)^2 LM tokens.
"""

from __future__ import annotations

from fractions import Fraction
from typing import Any, Mapping

from ...errors import ConfigError, UnsupportedModelError
from ..blocks import (ChunkedDecoderAttention, ClsToken, DecoderAttention, DenseMLP, ExtraParams, FinalNorm, LinearProjector,
                      LMHead, LMLayerNorms, MoEMLP, PatchEmbed, TokenEmbedding, VisionLayers)
from ..fields import Fields
from ..parts import LANGUAGE_MODEL, MERGER, VISION_TOWER
from ..spec import LMSpec, ModelSpec, MoESpec, VisionSpec
from . import Family, register_family
from .media import DerivedMedia, MediaRule, no_video, positive

# Llama4VisionConfig / Llama4TextConfig class defaults (transformers 5.x configuration_llama4.py)
VISION_DEFAULTS: dict[str, Any] = {
    "hidden_size": 768, "num_hidden_layers": 34, "num_attention_heads": 16, "num_channels": 3,
    "intermediate_size": 5632, "vision_output_dim": 7680, "image_size": 448, "patch_size": 14,
    "pixel_shuffle_ratio": 0.5, "projector_input_dim": 4096, "projector_output_dim": 4096}
TEXT_DEFAULTS: dict[str, Any] = {
    "vocab_size": 202048, "hidden_size": 5120, "intermediate_size": 8192, "intermediate_size_mlp": 16384,
    "num_hidden_layers": 48, "num_attention_heads": 40, "num_key_value_heads": 8, "head_dim": 128,
    "num_experts_per_tok": 1, "num_local_experts": 16, "interleave_moe_layer_step": 1, "no_rope_layer_interval": 4,
    "attention_chunk_size": 8192}
MAX_PATCHES = 16  # Llama4ImageProcessor.max_patches (class default and the released preprocessor_config.json)


def _pos(f: Fields, key: str, defaults: Mapping[str, Any]) -> int:
    value = f.opt(key, defaults[key])
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        raise ConfigError(f"{f.source}: field {f.name_of(key)} must be a positive integer, got {value!r}")
    return value


def _layers(t: Fields, n: int) -> tuple[tuple[int, ...], tuple[int, ...], int | None]:
    """(MoE layers, chunked-attention layers, chunk) as ``Llama4TextConfig.__post_init__`` derives them."""
    step = _pos(t, "interleave_moe_layer_step", TEXT_DEFAULTS)
    moe = t.opt("moe_layers")
    moe_layers = tuple(range(step - 1, n, step)) if moe is None else tuple(moe)
    interval = _pos(t, "no_rope_layer_interval", TEXT_DEFAULTS)
    rope = t.opt("no_rope_layers") or [int((i + 1) % interval != 0) for i in range(n)]
    # an explicit null disables chunking (Fields.opt would take it for "absent")
    chunk = t.data["attention_chunk_size"] if "attention_chunk_size" in t.data else TEXT_DEFAULTS["attention_chunk_size"]
    types = t.opt("layer_types") or ["chunked_attention" if r and chunk is not None else "full_attention" for r in rope]
    if len(rope) != n or len(types) != n or any(x not in ("chunked_attention", "full_attention") for x in types):
        raise ConfigError(f"{t.source}: text_config.no_rope_layers / layer_types must describe each of the {n} layers")
    if any(isinstance(i, bool) or not isinstance(i, int) or not 0 <= i < n for i in moe_layers):
        raise ConfigError(f"{t.source}: text_config.moe_layers {list(moe_layers)} must index the {n} layers")
    chunked = tuple(i for i, x in enumerate(types) if x == "chunked_attention")
    if chunked and (isinstance(chunk, bool) or not isinstance(chunk, int) or chunk <= 0):
        raise ConfigError(f"{t.source}: text_config.attention_chunk_size must be a positive integer, got {chunk!r}")
    return tuple(sorted(set(moe_layers))), chunked, chunk if chunked else None


def build(config: Mapping[str, Any], source: str, name: str = "") -> ModelSpec:
    vc, tc = config.get("vision_config"), config.get("text_config")
    if not isinstance(vc, dict) or not isinstance(tc, dict):
        missing = "vision_config" if not isinstance(vc, dict) else "text_config"
        raise ConfigError(f"{source}: config lacks required field {missing} for model_type llama4")
    v, t = Fields(vc, "vision_config", source), Fields(tc, "text_config", source)
    width, depth, heads, channels, mlp, out_dim = (_pos(v, k, VISION_DEFAULTS) for k in (
        "hidden_size", "num_hidden_layers", "num_attention_heads", "num_channels", "intermediate_size",
        "vision_output_dim"))
    proj_in, proj_out = _pos(v, "projector_input_dim", VISION_DEFAULTS), _pos(v, "projector_output_dim", VISION_DEFAULTS)
    image_size, patch = v.square("image_size", VISION_DEFAULTS["image_size"]), v.square("patch_size", VISION_DEFAULTS["patch_size"])
    ratio = v.opt("pixel_shuffle_ratio", VISION_DEFAULTS["pixel_shuffle_ratio"])
    if isinstance(ratio, bool) or not isinstance(ratio, (int, float)) or not 0 < ratio <= 1:
        raise ConfigError(f"{source}: field vision_config.pixel_shuffle_ratio must be a number in (0, 1], got {ratio!r}")
    if width % heads:
        raise ConfigError(f"{source}: vision_config.hidden_size {width} must be a multiple of num_attention_heads {heads}")
    fold = Fraction(ratio).limit_denominator(64)
    if fold.numerator != 1 or float(fold) != ratio:
        raise UnsupportedModelError(f"{source}: vision_config.pixel_shuffle_ratio {ratio!r}: only 1/m shuffles are "
                                    "modelled")
    merge = fold.denominator
    side = image_size // patch
    if image_size % patch or side % merge:
        raise UnsupportedModelError(f"{source}: image_size {image_size} / patch_size {patch} must give a patch side "
                                    f"divisible by the pixel-shuffle fold {merge}")
    if width * merge * merge != mlp:
        raise ConfigError(f"{source}: vision_config.intermediate_size {mlp} must equal hidden_size x (1 / "
                          f"pixel_shuffle_ratio)^2 = {width * merge * merge} (Llama4VisionMLP2.fc1 reads the shuffled "
                          "tokens)")
    if not proj_in == proj_out == out_dim:
        raise ConfigError(f"{source}: vision_config projector_input_dim {proj_in}, projector_output_dim {proj_out} and "
                          f"vision_output_dim {out_dim} must be equal (fc2 reads fc1's output; linear_1 reads fc2's)")

    hidden, n = _pos(t, "hidden_size", TEXT_DEFAULTS), _pos(t, "num_hidden_layers", TEXT_DEFAULTS)
    n_heads, kv = _pos(t, "num_attention_heads", TEXT_DEFAULTS), _pos(t, "num_key_value_heads", TEXT_DEFAULTS)
    head_dim = _pos(t, "head_dim", {"head_dim": hidden // n_heads})
    experts, top_k = _pos(t, "num_local_experts", TEXT_DEFAULTS), _pos(t, "num_experts_per_tok", TEXT_DEFAULTS)
    expert_width, dense_width = _pos(t, "intermediate_size", TEXT_DEFAULTS), _pos(t, "intermediate_size_mlp", TEXT_DEFAULTS)
    vocab = _pos(t, "vocab_size", TEXT_DEFAULTS)
    moe_layers, chunked, chunk = _layers(t, n)
    bias = bool(t.opt("attention_bias", False))
    tie = bool(config.get("tie_word_embeddings", tc.get("tie_word_embeddings", False)))
    lm = LMSpec(family="llama4", num_layers=n, hidden_size=hidden, num_heads=n_heads, num_kv_heads=kv,
                head_dim=head_dim, intermediate_size=dense_width, vocab_size=vocab, tie_word_embeddings=tie,
                moe=MoESpec(num_experts=experts, top_k=top_k, expert_intermediate_size=expert_width,
                            num_shared_experts=1, shared_intermediate_size=expert_width),
                moe_layers=moe_layers, qkv_bias=bias, attention_chunk=chunk)
    vision = VisionSpec(family="llama4", depth=depth, hidden_size=width, num_heads=heads, head_dim=width // heads,
                        intermediate_size=mlp, mlp_gated=False, patch_size=patch, temporal_patch_size=1,
                        in_channels=channels, spatial_merge_size=merge, out_hidden_size=hidden,
                        num_position_embeddings=side * side + 1, patch_embed_bias=False, norm="layernorm",
                        cls_per_frame=1)
    tower = (
        PatchEmbed(part=VISION_TOWER, count=1, in_volume=channels * patch * patch, width=width, bias=False),
        ClsToken(part=VISION_TOWER, count=1, width=width),
        ExtraParams(part=VISION_TOWER, count=1, label="positional_embedding_vlm (P + 1) x h_v (nn.Parameter), "
                    "LayerNorm pre/post", numel=(side * side + 1) * width + 4 * width),
        VisionLayers(part=VISION_TOWER, count=depth, width=width, num_heads=heads, head_dim=width // heads,
                     mlp_width=mlp, mlp_gated=False, cls=True, qkv_bias=True, proj_bias=True, mlp_bias=True,
                     norm="layernorm"),
    )
    projector = (LinearProjector(part=MERGER, count=1, widths=(mlp, proj_in, proj_out, hidden),
                                 biases=(False, False, False), label="vision adapter (pixel shuffle) + projector"),)
    attn = DecoderAttention(part=LANGUAGE_MODEL, count=n - len(chunked), hidden=hidden, num_heads=n_heads,
                            num_kv_heads=kv, head_dim=head_dim, qkv_bias=bias, o_bias=bias, qk_norm=False)
    text: list = [TokenEmbedding(part=LANGUAGE_MODEL, count=1, vocab=vocab, width=hidden)]
    if attn.count:
        text.append(attn)
    if chunked:
        text.append(ChunkedDecoderAttention(part=LANGUAGE_MODEL, count=len(chunked), hidden=hidden, num_heads=n_heads,
                                            num_kv_heads=kv, head_dim=head_dim, qkv_bias=bias, o_bias=bias,
                                            qk_norm=False, chunk=int(chunk or 0)))
    text.append(LMLayerNorms(part=LANGUAGE_MODEL, count=n, hidden=hidden))
    if n - len(moe_layers):
        text.append(DenseMLP(part=LANGUAGE_MODEL, count=n - len(moe_layers), hidden=hidden, width=dense_width))
    if moe_layers:
        text.append(MoEMLP(part=LANGUAGE_MODEL, count=len(moe_layers), hidden=hidden, num_experts=experts, top_k=top_k,
                           expert_width=expert_width, num_shared=1, shared_width=expert_width))
    text += [FinalNorm(part=LANGUAGE_MODEL, count=1, hidden=hidden),
             LMHead(part=LANGUAGE_MODEL, count=1, hidden=hidden, vocab=vocab, tied=tie)]
    spec = ModelSpec(name=name or str(config.get("_name_or_path") or "llama4"), model_type="llama4", lm=lm,
                     vision=vision, source=source, family="llama4", blocks=tower + projector + tuple(text))
    # the tower's positional_embedding_vlm has one entry per patch of a tile (no interpolation): fixed tiles
    spec.extra.update(image_size=image_size, tile_side=side, tokens_per_tile=(side // merge) ** 2,
                      fixed_grid_side=side)
    return spec


def supported_canvases(max_tiles: int, tile: int) -> list[tuple[int, int]]:
    """(height, width) canvases of r x c tiles (r·c <= ``max_tiles``), in the image processor's order: tile counts
    from the largest down, each count's factor pairs by increasing rows, grouped by aspect ratio in order of first
    appearance."""
    groups: dict[Fraction, list[tuple[int, int]]] = {}
    for count in range(max_tiles, 0, -1):
        for rows in sorted(r for r in range(1, count + 1) if count % r == 0):
            groups.setdefault(Fraction(rows, count // rows), []).append((rows, count // rows))
    return [(r * tile, c * tile) for pairs in groups.values() for r, c in pairs]


def best_fit(height: int, width: int, max_tiles: int, tile: int) -> tuple[int, int]:
    """(rows, cols) of the canvas ``Llama4ImageProcessor`` picks: per canvas the limiting scale min(H_c / H, W_c / W);
    the smallest scale >= 1 if any (no ``resize_to_max_canvas``), else the largest; ties: the smallest area, then the
    first in :func:`supported_canvases` order."""
    canvases = supported_canvases(max_tiles, tile)
    scales = [min(Fraction(h, height), Fraction(w, width)) for h, w in canvases]
    up = [s for s in scales if s >= 1]
    chosen = min(up) if up else max(scales)
    best = min((h * w, i) for i, ((h, w), s) in enumerate(zip(canvases, scales)) if s == chosen)
    h, w = canvases[best[1]]
    return h // tile, w // tile


class Llama4Media(MediaRule):
    """Llama 4 (``Llama4ImageProcessor`` + ``Llama4Processor``): the image is fitted to the best canvas of at most
    ``max_patches`` tiles of ``size`` px (:func:`best_fit`); with more than one tile a global tile is added. LM tokens:
    ``<|image_start|>``, per tile (side/2)^2 ``<|patch|>`` with x-separators between a row's tiles and a y-separator
    after each row, then ``<|image|>`` + the global tile's tokens + ``<|image_end|>`` (one tile: start, image, its
    tokens, end). Settings: ``preprocessor_config.json`` (``size``, ``max_patches``), else the tower's ``image_size`` and
    16 tiles (the released checkpoints: 336 px, 16). No video input."""

    family = "llama4"

    def settings(self, spec) -> dict:
        pre = spec.processor.get("preprocessor_config.json", {})
        size = pre.get("size", {})
        tile = size.get("height", spec.extra["image_size"]) if isinstance(size, dict) else size
        if tile != spec.extra["image_size"] or (isinstance(size, dict) and size.get("width", tile) != tile):
            raise ConfigError(f"{spec.name}: preprocessor size {size} must be the tower's square image_size "
                              f"{spec.extra['image_size']}")
        return {"size": tile, "max_patches": pre.get("max_patches", MAX_PATCHES),
                "source": "processor files" if pre else "tower image_size, max_patches 16 (reference default)"}

    def image(self, spec, height: int, width: int) -> DerivedMedia:
        height, width = positive((height, width), "--image-size")
        s = self.settings(spec)
        rows, cols = best_fit(height, width, s["max_patches"], s["size"])
        grid_tiles = rows * cols
        tiles = grid_tiles + 1 if grid_tiles > 1 else 1
        per_tile = spec.extra["tokens_per_tile"]
        tokens = 3 + per_tile + (grid_tiles * per_tile + rows * cols if grid_tiles > 1 else 0)
        side = spec.extra["tile_side"]
        return DerivedMedia("image", (height, width), (s["size"], s["size"]), (tiles, side, side), tokens, tiles=tiles,
                            detail={"tile_rows": rows, "tile_cols": cols})

    def video(self, spec, frames: int, height: int, width: int) -> DerivedMedia:
        raise no_video(f"{spec.name} (llama4)", "Llama4Processor", "Llama4ForConditionalGeneration")


register_family(Family(
    name="llama4", model_types=("llama4",), build=build, hf_class="Llama4ForConditionalGeneration", is_vlm=True,
    media=Llama4Media(),
    notes=("MoE layers: top-k routed experts + the shared expert + router (transformers' Llama4TextMoe computes every "
           "expert for every token: E/k times the routed FLOPs)",
           "chunked (RoPE) layers: causal within attention_chunk_size chunks under --causal half "
           "(lm_tokens_sq_beyond_chunks, per document: chunks start at each document's first token, from metadata "
           "too; pre-aggregated LM rows: counted as full causal, an upper bound); eager: the square",
           "CLS appended last per tile and dropped before the pixel shuffle; RoPE, L2 q/k norm and temperature tuning "
           "are elementwise (0 FLOPs)")))
