"""Aya Vision and Command A Vision (transformers ``aya_vision`` / ``cohere2_vision``) and their LM ``cohere2``.

Read from transformers ``models/aya_vision/modeling_aya_vision.py``, ``processing_aya_vision.py``,
``models/cohere2_vision/modeling_cohere2_vision.py``, ``image_processing_cohere2_vision.py``,
``processing_cohere2_vision.py`` and ``models/cohere2/modeling_cohere2.py``:

* **Tower**: SigLIP (:mod:`.siglip`) on every tile (Aya: 364 px / patch 14 -> 26 x 26 patches; Command A
  Vision: 512 px / patch 16 -> 32 x 32), full attention per tile, no CLS. Aya reads
  ``hidden_states[vision_feature_layer]`` (default -1: every layer reaches the loss; an earlier index makes
  the layers after it forward-only, as LLaVA); Command A Vision reads ``last_hidden_state``.
* **Projector**: pixel shuffle by ``downsample_factor`` (2: (p x p, d) -> (p/2 x p/2, 4d), no FLOPs) ->
  [Aya only: LayerNorm(4d)] -> Linear(4d -> ``alignment_intermediate_size`` A, bias) -> SwiGLU over the two
  halves (elementwise) -> Linear(A/2 -> h_text, bias). Aya's A defaults to the text hidden size when the
  config omits it (``getattr`` in ``AyaVisionMultiModalProjector``).
* **LM** (``Cohere2Model``): one weight-only LayerNorm per layer feeding attention and MLP **in parallel**
  (``residual + attn(x) + mlp(x)``), GQA with ``attention_bias`` on q/k/v/o, SwiGLU MLP (no bias), final
  LayerNorm, tied lm_head by default, ``logit_scale`` elementwise. ``layer_types`` (or
  ``sliding_window_pattern``, default 4: three sliding layers then one full) picks the sliding-window layers
  (``sliding_window`` tokens); RoPE only on the sliding layers (not a matmul).

Tiles are the attention units: an image of n tiles is the grid ``(n, side, side)``; LM placeholders =
(side / downsample_factor)^2 per tile (the ``TILE_i`` / ``TILE_GLOBAL`` / start / end markers are text).
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any, Mapping

from ...errors import ConfigError, UnsupportedModelError
from ..blocks import LMLayerNorms, SwiGLUProjector
from ..fields import Fields, text_section
from ..parts import MERGER
from ..spec import LMSpec, ModelSpec, VisionSpec
from . import Family, register_family
from .decoder import feature_layer_depth, forward_only_after, lm_blocks, read_lm
from .internvl import InternVLMedia, tiled_canvas
from .media import DerivedMedia, no_video
from .siglip import fixed_tile, read_siglip, siglip_blocks

# Cohere2Config class defaults (transformers 5.x configuration_cohere2.py) used when a config omits them
COHERE2_DEFAULTS = {"sliding_window": 4096, "sliding_window_pattern": 4}
# AyaVisionConfig's SigLIP defaults (sub_configs_defaults) when vision_config omits a field
AYA_SIGLIP = {"hidden_size": 1152, "intermediate_size": 4304, "patch_size": 14, "image_size": 384,
              "num_hidden_layers": 26, "num_attention_heads": 14, "vision_use_head": False}
COHERE2_VISION_ALIGNMENT = 36864  # Cohere2VisionConfig.alignment_intermediate_size


def read_cohere2_lm(f: Fields, tie_default: bool = True) -> LMSpec:
    """An :class:`LMSpec` of a Cohere2 decoder (family ``cohere2``): sliding layers from ``layer_types`` or
    ``sliding_window_pattern`` as ``Cohere2Config.__post_init__`` derives them."""
    lm = read_lm(f, "cohere2", tie_default=tie_default)
    types = f.opt("layer_types")
    if types is None:
        pattern = int(f.opt("sliding_window_pattern", COHERE2_DEFAULTS["sliding_window_pattern"]))
        if pattern <= 0:
            raise ConfigError(f"{f.source}: {f.name_of('sliding_window_pattern')} must be positive, got {pattern}")
        types = ["sliding_attention" if (i + 1) % pattern else "full_attention" for i in range(lm.num_layers)]
    if (not isinstance(types, (list, tuple)) or len(types) != lm.num_layers
            or any(t not in ("sliding_attention", "full_attention") for t in types)):
        raise ConfigError(f"{f.source}: {f.name_of('layer_types')} must list 'sliding_attention' / "
                          f"'full_attention' for each of the {lm.num_layers} layers, got {types!r}")
    sliding = tuple(i for i, t in enumerate(types) if t == "sliding_attention")
    window = f.opt("sliding_window", COHERE2_DEFAULTS["sliding_window"])
    if sliding and not window:
        # Cohere2Attention: sliding_window None makes a "sliding" layer a full causal one
        sliding = ()
    return replace(lm, sliding_window=int(window) if sliding else None, sliding_layers=sliding)


def cohere2_lm_blocks(lm: LMSpec) -> tuple:
    """The decoder inventory with Cohere2's single (weight-only) LayerNorm per layer."""
    return tuple(replace(b, norms_per_layer=1) if isinstance(b, LMLayerNorms) else b for b in lm_blocks(lm))


def _text(config: Mapping[str, Any], source: str, model_type: str) -> tuple[LMSpec, Fields]:
    tc = config.get("text_config")
    if not isinstance(tc, dict):
        raise ConfigError(f"{source}: {model_type} config lacks required field text_config")
    text_type = tc.get("model_type", "cohere2")
    if text_type != "cohere2":
        raise UnsupportedModelError(f"{source}: {model_type} with text_config.model_type {text_type!r} is not "
                                    "modelled; supported LM: cohere2")
    text = dict(tc)
    if "tie_word_embeddings" in config:  # the composite config's value is the one transformers ties by
        text["tie_word_embeddings"] = config["tie_word_embeddings"]
    f = Fields(text, "text_config", source)
    return read_cohere2_lm(f, tie_default=True), f


def build(config: Mapping[str, Any], source: str, name: str = "") -> ModelSpec:
    model_type = str(config.get("model_type", "aya_vision"))
    aya = model_type == "aya_vision"
    top = Fields(config, "", source)
    lm, _ = _text(config, source, model_type)
    vc = config.get("vision_config")
    if not isinstance(vc, dict):
        raise ConfigError(f"{source}: {model_type} config lacks required field vision_config")
    tower = read_siglip(vc, source, defaults=AYA_SIGLIP)
    merge = top.opt("downsample_factor", 2)
    if isinstance(merge, bool) or not isinstance(merge, int) or merge <= 0:
        raise ConfigError(f"{source}: downsample_factor must be a positive integer, got {merge!r}")
    if tower.side % merge:
        raise ConfigError(f"{source}: {tower.side} patches per tile side is not divisible by downsample_factor "
                          f"{merge} (the pixel shuffle cannot fold it)")
    used = tower.depth
    if aya:
        if top.opt("vision_feature_select_strategy", "full") != "full":
            raise UnsupportedModelError(f"{source}: vision_feature_select_strategy 'default' drops the first patch "
                                        "(SigLIP has no CLS): the pixel shuffle cannot fold the rest")
        layer = top.opt("vision_feature_layer", -1)
        if isinstance(layer, (list, tuple)) and len(layer) != 1:
            raise UnsupportedModelError(f"{source}: vision_feature_layer {layer!r}: several concatenated hidden "
                                        "states widen the projector input beyond LayerNorm(4d); not modelled")
        _, used = feature_layer_depth(layer, tower.depth, source)
        alignment = top.opt("alignment_intermediate_size", lm.hidden_size)
    else:
        alignment = top.opt("alignment_intermediate_size", COHERE2_VISION_ALIGNMENT)
    if isinstance(alignment, bool) or not isinstance(alignment, int) or alignment <= 0 or alignment % 2:
        raise ConfigError(f"{source}: alignment_intermediate_size must be a positive even integer (SwiGLU splits it "
                          f"in halves), got {alignment!r}")
    vision = VisionSpec(family=model_type, depth=tower.depth, hidden_size=tower.width, num_heads=tower.num_heads,
                        head_dim=tower.head_dim, intermediate_size=tower.mlp_width, mlp_gated=False,
                        patch_size=tower.patch_size, temporal_patch_size=1, in_channels=tower.channels,
                        spatial_merge_size=merge, out_hidden_size=lm.hidden_size,
                        num_position_embeddings=tower.patches, patch_embed_bias=True, norm="layernorm")
    patch, pos, layers, post, *head = siglip_blocks(tower)
    blocks = (patch, pos) + forward_only_after(layers, used) + (post, *head) + (
        SwiGLUProjector(part=MERGER, count=1, in_width=merge * merge * tower.width, hidden_width=alignment,
                        out_width=lm.hidden_size, norm="layernorm" if aya else "none"),
    ) + cohere2_lm_blocks(lm)
    spec = ModelSpec(name=name or str(config.get("_name_or_path") or model_type), model_type=model_type, lm=lm,
                     vision=vision, source=source, family=model_type, blocks=blocks)
    spec.extra.update(image_size=tower.image_size, tile_size=tower.image_size,
                      fixed_grid_side=tower.side)  # SigLIP tiles: one position table, no interpolation
    return spec


def build_text(config: Mapping[str, Any], source: str, name: str = "") -> ModelSpec:
    text, section = text_section(config)
    lm = read_cohere2_lm(Fields(text, section, source))
    return ModelSpec(name=name or str(config.get("_name_or_path") or "cohere2"), model_type="cohere2", lm=lm,
                     source=source, family="cohere2", blocks=cohere2_lm_blocks(lm))


def _placeholders_agree(spec, tile: int, written: int, origin: str) -> None:
    """Refuse a processor that writes another placeholder count per tile than the projector emits (the model
    then fails on the mismatch)."""
    side = tile // spec.vision.patch_size // spec.vision.spatial_merge_size
    if written != side * side:
        raise UnsupportedModelError(f"{spec.name}: {origin} give {written} placeholders per tile but a {tile}-px "
                                    f"tile yields {side * side} tokens after the pixel shuffle")


class AyaVisionMedia(InternVLMedia):
    """Aya Vision tiling: GotOcr2's ``crop_to_patches`` (the canvas of :func:`.internvl.tiled_canvas`, c x r
    tiles plus a global thumbnail when c*r > 1), forced on every call by ``AyaVisionProcessor.images_kwargs``.

    Tile = preprocessor_config.json ``size`` (must equal the tower's ``image_size``: SigLIP's position table
    has one entry per patch of that tile; 364 in the released checkpoints), ``min_patches`` / ``max_patches``
    from the file, else 1 / 12 (GotOcr2ImageProcessor's class defaults). LM placeholders per tile:
    (side / downsample_factor)^2 (169 for 364 px / patch 14). No video input.
    """

    family = "aya_vision"

    def settings(self, spec) -> dict:
        pre = spec.processor.get("preprocessor_config.json", {})
        tile, _ = fixed_tile(spec, pre)
        proc = spec.processor.get("processor_config.json", {})
        if "img_size" in proc or "patch_size" in proc:  # AyaVisionProcessor writes (img_size // patch)^2 per tile
            step = int(proc.get("patch_size", 28)) * int(proc.get("downsample_factor", 1))
            _placeholders_agree(spec, tile, (int(proc.get("img_size", 364)) // step) ** 2, "processor_config.json "
                                "img_size / patch_size")
        return {"tile": tile, "min_patches": int(pre.get("min_patches", 1)),
                "max_patches": int(pre.get("max_patches", 12)), "crop_to_patches": True,
                "source": "processor files" if pre else "GotOcr2ImageProcessor class defaults",
                "forced": "crop_to_patches=True (AyaVisionProcessor.images_kwargs)"}

    def video(self, spec, frames: int, height: int, width: int) -> DerivedMedia:
        raise no_video(f"{spec.name} (aya_vision)", "AyaVisionProcessor", "AyaVisionForConditionalGeneration")


def cohere2_vision_canvas(height: int, width: int, tile: int, max_tiles: int) -> tuple[int, int]:
    """(columns, rows) ``Cohere2VisionImageProcessor``'s ``get_optimal_tiled_canvas`` picks: over every
    (c, r) with c*r <= max_tiles (sorted by tile count, stable), the scale each needs to cover the image is
    min(c*tile/W, r*tile/H); if every grid would shrink the image (all scales < 1) the largest scale wins,
    else the smallest scale >= 1 (first on ties). ``min_patches`` is not consulted."""
    grids = sorted(((c, r) for c in range(1, max_tiles + 1) for r in range(1, max_tiles + 1) if c * r <= max_tiles),
                   key=lambda g: g[0] * g[1])
    scales = [min(c * tile / width, r * tile / height) for c, r in grids]
    if all(s < 1 for s in scales):
        return grids[max(range(len(grids)), key=lambda i: (scales[i], -i))]
    return grids[min(range(len(grids)), key=lambda i: (scales[i] if scales[i] >= 1 else float("inf"), i))]


class Cohere2VisionMedia(AyaVisionMedia):
    """Command A Vision tiling (``Cohere2VisionImageProcessor``, ``crop_to_patches`` True by class default and
    in the released preprocessor_config.json): the canvas of :func:`cohere2_vision_canvas` (c x r tiles of
    ``size``, 512 px), plus a global thumbnail when c*r > 1; ``max_patches`` from the file, else 12. With
    ``crop_to_patches`` false in the file every image is one tile. LM placeholders per tile:
    (side / downsample_factor)^2 (256 for 512 px / patch 16). No video input.
    """

    family = "cohere2_vision"

    def settings(self, spec) -> dict:
        pre = spec.processor.get("preprocessor_config.json", {})
        tile, _ = fixed_tile(spec, pre)
        if "patch_size" in pre:  # Cohere2VisionProcessor writes patch_size^2 placeholders per tile
            _placeholders_agree(spec, tile, int(pre["patch_size"]) ** 2, "preprocessor_config.json patch_size")
        return {"tile": tile, "max_patches": int(pre.get("max_patches", 12)),
                "crop_to_patches": bool(pre.get("crop_to_patches", True)),
                "source": "processor files" if pre else "Cohere2VisionImageProcessor class defaults"}

    def canvas(self, spec, s: dict, height: int, width: int) -> tuple[int, int]:
        """Command A Vision's own canvas rule (no ``min_patches``); the tiles, thumbnail and tokens follow as for
        InternVL (:meth:`InternVLMedia.image`)."""
        if s["max_patches"] < 1:
            raise ConfigError(f"{spec.name}: max_patches {s['max_patches']} must be >= 1")
        return cohere2_vision_canvas(height, width, s["tile"], s["max_patches"]) if s["crop_to_patches"] else (1, 1)

    def video(self, spec, frames: int, height: int, width: int) -> DerivedMedia:
        raise no_video(f"{spec.name} (cohere2_vision)", "Cohere2VisionProcessor",
                       "Cohere2VisionForConditionalGeneration")


_NOTES = ("pixel shuffle, the SwiGLU product, logit_scale and RoPE are not matmuls (0 FLOPs)",
          "Cohere2 layers run attention and MLP in parallel off one LayerNorm; sliding-window layers are windowed "
          "under --causal half (lm_tokens_sq_beyond_window), the eager square under --causal full",
          "the TILE_i / TILE_GLOBAL / start / end markers are text tokens (part of --seq-len), not placeholders")

register_family(Family(
    name="aya_vision", model_types=("aya_vision",), build=build, hf_class="AyaVisionForConditionalGeneration",
    is_vlm=True, media=AyaVisionMedia(),
    notes=_NOTES + ("with vision_feature_layer other than -1 the tower layers after it are forward-only in "
                    "training (their output reaches no loss)",)))

register_family(Family(
    name="cohere2_vision", model_types=("cohere2_vision",), build=build,
    hf_class="Cohere2VisionForConditionalGeneration", is_vlm=True, media=Cohere2VisionMedia(), notes=_NOTES))

register_family(Family(name="cohere2", model_types=("cohere2",), build=build_text, hf_class="Cohere2ForCausalLM",
                       is_vlm=False))

__all__ = ["AyaVisionMedia", "Cohere2VisionMedia", "cohere2_vision_canvas", "read_cohere2_lm", "tiled_canvas"]
