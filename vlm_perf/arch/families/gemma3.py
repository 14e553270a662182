"""Gemma 3 (transformers ``gemma3``: ``Gemma3ForConditionalGeneration``; text-only ``gemma3_text``).

Read from transformers ``models/gemma3/modeling_gemma3.py``, ``configuration_gemma3.py``,
``processing_gemma3.py`` and ``image_processing_pil_gemma3.py``:

* **Tower**: SigLIP (:mod:`.siglip`) on every image resized to ``image_size`` (896 px, patch 14 ->
  64 x 64 = 4096 patches, full attention per image, no CLS).
* **Projector** (``Gemma3MultiModalProjector``): reshape to side x side, AvgPool2d(kernel = side /
  sqrt(mm_tokens_per_image)) (no FLOPs) -> ``mm_tokens_per_image`` (256) tokens -> Gemma RMSNorm(h_v) ->
  ``matmul`` with ``mm_input_projection_weight`` (h_v x h_text, no bias). The pool is the statistics'
  ``spatial_merge_size`` (4: 16 patches per LM token).
* **LM** (``Gemma3TextModel``): GQA with q/k RMSNorm over head_dim, ``attention_bias`` on q/k/v/o, GeGLU MLP
  (gate/up/down, no bias), 4 RMSNorms per layer, final norm, lm_head tied by default. ``layer_types`` (or
  ``sliding_window_pattern``, default 6: five sliding layers then one full) picks the sliding-window layers
  (window ``sliding_window`` tokens, query included: ``kv > q - W``). Logit soft-capping is elementwise.
* **Image blocks**: with ``token_type_ids`` (training) each image's placeholders attend bidirectionally
  within their block in every layer (:class:`~vlm_perf.arch.blocks.ImageBlockAttention`).
"""

from __future__ import annotations

import math
from dataclasses import replace
from typing import Any, Mapping

from ...errors import ConfigError, UnsupportedModelError
from ..blocks import ImageBlockAttention, LMLayerNorms, NormLinearProjector
from ..fields import Fields, text_section
from ..parts import LANGUAGE_MODEL, MERGER
from ..spec import LMSpec, ModelSpec, VisionSpec
from . import Family, register_family
from .decoder import lm_blocks
from .media import DerivedMedia, MediaRule, no_video, positive
from .siglip import fixed_tile, read_siglip, siglip_blocks

# Gemma3TextConfig class defaults (transformers 5.x): the released configs rely on them (gemma-3-4b-it's
# text_config lists only hidden_size, intermediate_size, num_hidden_layers, sliding_window, rope_scaling)
TEXT_DEFAULTS = {"vocab_size": 262_208, "hidden_size": 2304, "intermediate_size": 9216, "num_hidden_layers": 26,
                 "num_attention_heads": 8, "num_key_value_heads": 4, "head_dim": 256, "sliding_window": 4096,
                 "sliding_window_pattern": 6, "attention_bias": False, "tie_word_embeddings": True}


def _int(f: Fields, key: str) -> int:
    """A non-negative integer field, Gemma3TextConfig's class default when absent."""
    if f.opt(key) is None:
        return TEXT_DEFAULTS[key]
    return f.int(key)
MM_TOKENS_DEFAULT = 256  # Gemma3Config.mm_tokens_per_image
# Gemma3Processor.images_kwargs: forced on every image-processor call (beats preprocessor_config.json)
PROCESSOR_FORCED = {"do_pan_and_scan": False, "pan_and_scan_min_crop_size": 256, "pan_and_scan_max_num_crops": 4,
                    "pan_and_scan_min_ratio_to_activate": 1.2}


def read_gemma3_lm(f: Fields, tie_default: bool = True) -> LMSpec:
    """An :class:`LMSpec` of a Gemma 3 text model (family ``gemma3_text``)."""
    if f.opt("use_bidirectional_attention", False):
        raise UnsupportedModelError(f"{f.source}: {f.name_of('use_bidirectional_attention')} is true (an "
                                    "encoder-style Gemma 3): non-causal text attention is not modelled")
    hidden, heads, layers = _int(f, "hidden_size"), _int(f, "num_attention_heads"), _int(f, "num_hidden_layers")
    if heads == 0 or layers == 0:
        raise ConfigError(f"{f.source}: {f.name_of('num_attention_heads')} and {f.name_of('num_hidden_layers')} "
                          "must be positive")
    types = f.opt("layer_types")
    if types is None:
        pattern = int(f.opt("sliding_window_pattern", TEXT_DEFAULTS["sliding_window_pattern"]))
        types = ["sliding_attention" if (i + 1) % pattern else "full_attention" for i in range(layers)]
    if len(types) != layers or any(t not in ("sliding_attention", "full_attention") for t in types):
        raise ConfigError(f"{f.source}: {f.name_of('layer_types')} must list 'sliding_attention' / "
                          f"'full_attention' for each of the {layers} layers, got {types!r}")
    sliding = tuple(i for i, t in enumerate(types) if t == "sliding_attention")
    window = f.opt("sliding_window", TEXT_DEFAULTS["sliding_window"])
    if sliding and not window:
        raise ConfigError(f"{f.source}: {len(sliding)} sliding_attention layers but {f.name_of('sliding_window')} "
                          "is not set")
    return LMSpec(family="gemma3_text", num_layers=layers, hidden_size=hidden, num_heads=heads,
                  num_kv_heads=_int(f, "num_key_value_heads"), head_dim=_int(f, "head_dim"),
                  intermediate_size=_int(f, "intermediate_size"), vocab_size=_int(f, "vocab_size"),
                  tie_word_embeddings=bool(f.opt("tie_word_embeddings", tie_default)),
                  qkv_bias=bool(f.opt("attention_bias", False)), qk_norm=True,
                  sliding_window=int(window) if sliding else None, sliding_layers=sliding if window else ())


def gemma3_lm_blocks(lm: LMSpec) -> tuple:
    """The decoder inventory with Gemma's four RMSNorms per layer (input, post-attention, pre- and
    post-feedforward); attention and MLP blocks as every decoder LM (GeGLU has SwiGLU's three matrices)."""
    return tuple(replace(b, norms_per_layer=4) if isinstance(b, LMLayerNorms) else b for b in lm_blocks(lm))


def build_text(config: Mapping[str, Any], source: str, name: str = "") -> ModelSpec:
    text, section = text_section(config)
    lm = read_gemma3_lm(Fields(text, section, source))
    return ModelSpec(name=name or str(config.get("_name_or_path") or "gemma3_text"), model_type="gemma3_text",
                     lm=lm, source=source, family="gemma3_text", blocks=gemma3_lm_blocks(lm))


def build(config: Mapping[str, Any], source: str, name: str = "") -> ModelSpec:
    top = Fields(config, "", source)
    if not isinstance(config.get("text_config"), dict):
        raise ConfigError(f"{source}: gemma3 config lacks required field text_config")
    text, section = text_section(config)
    lm = read_gemma3_lm(Fields(text, section, source), tie_default=True)
    vc = config.get("vision_config")
    if not isinstance(vc, dict):
        raise ConfigError(f"{source}: gemma3 config lacks required field vision_config")
    tower = read_siglip(vc, source)
    tokens = int(top.opt("mm_tokens_per_image", MM_TOKENS_DEFAULT))
    per_side = math.isqrt(tokens)
    if per_side * per_side != tokens or per_side == 0 or tower.side % per_side:
        raise ConfigError(f"{source}: mm_tokens_per_image {tokens} must be a square whose side divides the "
                          f"{tower.side} patches per image side (Gemma3MultiModalProjector's average pool)")
    pool = tower.side // per_side
    vision = VisionSpec(family="gemma3", depth=tower.depth, hidden_size=tower.width, num_heads=tower.num_heads,
                        head_dim=tower.head_dim, intermediate_size=tower.mlp_width, mlp_gated=False,
                        patch_size=tower.patch_size, temporal_patch_size=1, in_channels=tower.channels,
                        spatial_merge_size=pool, out_hidden_size=lm.hidden_size,
                        num_position_embeddings=tower.patches, patch_embed_bias=True, norm="layernorm")
    blocks = siglip_blocks(tower) + (
        NormLinearProjector(part=MERGER, count=1, in_width=tower.width, out_width=lm.hidden_size,
                            norm_width=tower.width, norm="rmsnorm", bias=False),
    ) + gemma3_lm_blocks(lm) + (
        ImageBlockAttention(part=LANGUAGE_MODEL, count=lm.num_layers, num_heads=lm.num_heads, head_dim=lm.head_dim,
                            tokens=tokens),
    )
    spec = ModelSpec(name=name or str(config.get("_name_or_path") or "gemma3"), model_type="gemma3", lm=lm,
                     vision=vision, source=source, family="gemma3", blocks=blocks)
    # SigLIP's position table has one entry per patch of image_size (no interpolation): every image and pan-and-scan
    # crop is that one tile, and the shared fixed-tile rule refuses any other grid
    spec.extra.update(image_size=tower.image_size, mm_tokens_per_image=tokens, fixed_grid_side=tower.side)
    return spec


def pan_and_scan_crops(height: int, width: int, min_crop: int, max_crops: int, min_ratio: float) -> int:
    """Crops ``Gemma3ImageProcessor.pan_and_scan`` adds for an image (0 = none): along the long side,
    round(long/short) crops clipped to [2, max_crops] and to floor(long / min_crop); none when the aspect
    ratio is below ``min_ratio`` or a crop would be shorter than ``min_crop``."""
    long, short = (width, height) if width >= height else (height, width)
    if long / short < min_ratio:
        return 0
    n = min(math.floor(long / min_crop), math.floor(long / short + 0.5))
    n = min(max_crops, max(2, n))
    if min(math.ceil(long / n), short) < min_crop:
        return 0
    return n


class Gemma3Media(MediaRule):
    """Gemma 3: every image resized to the tower's ``image_size`` (896 x 896), a fixed cost per image.

    ``Gemma3Processor.images_kwargs`` forces ``do_pan_and_scan=False`` (min crop 256, at most 4 crops, ratio
    1.2) on every call, whatever preprocessor_config.json says, so images are never cropped unless the
    caller passes ``do_pan_and_scan=True`` at call time (``Gemma3Media(pan_and_scan=True)``: each crop is
    one more 896-px image). LM tokens per image (and per crop): ``mm_tokens_per_image`` placeholders (the
    ``\\n\\n<boi> ... <eoi>\\n\\n`` around them is text). No video input.
    """

    family = "gemma3"

    def __init__(self, pan_and_scan: bool = False, **call_kwargs: Any):
        """``pan_and_scan`` / ``call_kwargs`` (``pan_and_scan_min_crop_size``, ``pan_and_scan_max_num_crops``,
        ``pan_and_scan_min_ratio_to_activate``): what a caller passes to the processor at call time."""
        unknown = set(call_kwargs) - set(PROCESSOR_FORCED)
        if unknown:
            raise ConfigError(f"unknown Gemma 3 processor call kwargs: {', '.join(sorted(unknown))}")
        self.pan_and_scan = pan_and_scan
        self.call_kwargs = call_kwargs

    def settings(self, spec) -> dict:
        pre = spec.processor.get("preprocessor_config.json", {})
        tile, size = fixed_tile(spec, pre)
        out = {"size": tile, "source": "processor files" if size else "tower image_size (reference default)",
               **PROCESSOR_FORCED, "forced": "Gemma3Processor.images_kwargs (do_pan_and_scan False unless the "
                                             "call passes True)"}
        out.update(self.call_kwargs, do_pan_and_scan=self.pan_and_scan)
        return out

    def image(self, spec, height: int, width: int) -> DerivedMedia:
        height, width = positive((height, width), "image size (H, W pixels)")
        s = self.settings(spec)
        crops = pan_and_scan_crops(height, width, s["pan_and_scan_min_crop_size"], s["pan_and_scan_max_num_crops"],
                                   s["pan_and_scan_min_ratio_to_activate"]) if self.pan_and_scan else 0
        side = spec.extra["image_size"] // spec.vision.patch_size
        return DerivedMedia("image", (height, width), (s["size"], s["size"]), (1 + crops, side, side),
                            (1 + crops) * spec.extra["mm_tokens_per_image"], tiles=1 + crops if crops else None,
                            detail={"crops": crops})

    def video(self, spec, frames: int, height: int, width: int) -> DerivedMedia:
        raise no_video(f"{spec.name} (gemma3)", "Gemma3Processor", "Gemma3ForConditionalGeneration")


register_family(Family(
    name="gemma3", model_types=("gemma3",), build=build, hf_class="Gemma3ForConditionalGeneration", is_vlm=True,
    media=Gemma3Media(),
    notes=("average pooling (4x4 -> 256 tokens), position lookup and logit soft-capping are not matmuls (0 FLOPs)",
           "sliding-window layers: windowed under --causal half (lm_tokens_sq_beyond_window), the eager square "
           "under --causal full; image blocks' bidirectional entries: +n^2/2 per image per layer under half",
           "pan-and-scan is off (Gemma3Processor forces do_pan_and_scan=False); each crop would be one more image")))

register_family(Family(
    name="gemma3_text", model_types=("gemma3_text",), build=build_text, hf_class="Gemma3ForCausalLM",
    is_vlm=False))
