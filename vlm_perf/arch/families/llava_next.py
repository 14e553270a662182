"""LLaVA-NeXT / LLaVA-1.6 (transformers ``llava_next``: ``LlavaNextForConditionalGeneration``).

Read from transformers ``models/llava_next/modeling_llava_next.py`` (``get_image_features``,
``image_size_to_num_patches``, ``pack_image_features``, ``unpad_image``), ``configuration_llava_next.py``,
``processing_llava_next.py`` (``_get_number_of_features``, ``_get_unpadded_features``) and
``image_processing_pil_llava_next.py`` (``get_image_patches``):

* **Tower, projector, LM**: LLaVA's (:func:`.llava.llava_parts`): CLIP ViT (336 px, patch 14: 577 positions per
  tile with the CLS), ``vision_feature_layer`` -2 (the layers after it run forward only), "default" strategy (CLS
  dropped: 576 rows per tile), projector Linear -> GELU -> Linear on every row of every tile, then the LM
  (Mistral / Vicuna (llama) / Yi (llama) in the released checkpoints).
* **Anyres**: the image is fitted to the best ``image_grid_pinpoints`` resolution (``select_best_resolution``),
  padded, cut into rows x cols tiles of the tower's ``image_size``, plus one **base tile** (the whole image resized):
  ``1 + rows*cols`` tiles through tower and projector (a batch's padding tiles are sliced off before the tower).
  After the projector the grid features are unpadded back to the image's aspect (no shrink, unlike
  LLaVA-OneVision) and each row gets one learned ``image_newline`` (a parameter of the projector part here).
  LM tokens: 576 (base) + unpadded grid features + one per row.
* ``LlavaNextConfig`` has no ``LlavaConfig`` tie rule: only the top-level ``tie_word_embeddings`` (class default
  False) ties the head.

**LLaVA-NeXT-Video** (``llava_next_video``: ``LlavaNextVideoForConditionalGeneration``, read from
``models/llava_next_video/modeling_llava_next_video.py`` (``get_video_features``, ``LlavaNextVideoPooler``) and
``processing_llava_next_video.py`` (``replace_video_token``)): images exactly as LLaVA-NeXT; every video frame (at the
tower's ``image_size``) runs the whole tower with its CLS, the "default" strategy drops the CLS, then the
``vision_resampler`` pools 2 x 2 (``spatial_pool_mode`` "average" or "max": no FLOPs) **before** the projector, which
therefore runs on (side/2)^2 rows per frame (:class:`~vlm_perf.arch.blocks.PooledVideoProjector`); LM tokens
(side^2 // 4) per frame (the processor hard-codes the 4), no newline. ``LlavaNextVideoConfig`` keeps LLaVA's tie rule.
"""

from __future__ import annotations

from typing import Any, Mapping

from ...errors import ConfigError, UnsupportedModelError
from ..blocks import ExtraParams, MlpProjector, PooledVideoProjector
from ..fields import Fields
from ..parts import MERGER
from ..spec import ModelSpec
from dataclasses import replace
from . import Family, register_family
from .decoder import lm_blocks
from .llava import llava_parts
from .llava_onevision import select_best_resolution, unpadded_features
from .media import DerivedMedia, MediaRule, no_video, positive

# LlavaNextConfig.__post_init__'s default image_grid_pinpoints
DEFAULT_PINPOINTS = ((336, 672), (672, 336), (672, 672), (1008, 336), (336, 1008))


def _pinpoints(value: Any, source: str) -> tuple[tuple[int, int], ...]:
    if value is None:
        return DEFAULT_PINPOINTS
    if (not isinstance(value, (list, tuple)) or not value
            or any(not isinstance(p, (list, tuple)) or len(p) != 2
                   or any(isinstance(v, bool) or not isinstance(v, int) or v <= 0 for v in p) for p in value)):
        raise ConfigError(f"{source}: image_grid_pinpoints must be a list of [height, width] pixel pairs, "
                          f"got {value!r}")
    return tuple((int(h), int(w)) for h, w in value)


def build(config: Mapping[str, Any], source: str, name: str = "", model_type: str = "llava_next") -> ModelSpec:
    video = model_type == "llava_next_video"
    lm, vision, blocks, extra = llava_parts(config, source, model_type, towers=("clip_vision_model",),
                                            tie_from_text=video)  # LlavaNextVideoConfig keeps LLaVA's tie rule
    if video:
        top = Fields(config, "", source)
        mode, stride = top.opt("spatial_pool_mode", "average"), top.opt("spatial_pool_stride", 2)
        if mode not in ("average", "max"):
            raise UnsupportedModelError(f"{source}: spatial_pool_mode {mode!r}: only 'average' / 'max' pooling is "
                                        "modelled (a 'conv' resampler has weights and FLOPs)")
        side = extra["image_size"] // vision.patch_size
        if stride != 2 or side % 2:
            raise UnsupportedModelError(f"{source}: spatial_pool_stride {stride!r} with {side} patches per side: "
                                        "LlavaNextVideoProcessor counts side^2 // 4 tokens per frame, which only a "
                                        "stride-2 pool of an even side produces")
        blocks = tuple(PooledVideoProjector(part=b.part, count=1, module=b, pool=2) if isinstance(b, MlpProjector)
                       else b for b in blocks)
    pinpoints = _pinpoints(Fields(config, "", source).opt("image_grid_pinpoints"), source)
    tile = extra["image_size"]
    bad = [p for p in pinpoints if p[0] % tile or p[1] % tile]
    if bad:
        raise UnsupportedModelError(f"{source}: image_grid_pinpoints {bad} are not multiples of the {tile}-px tile "
                                    "(transformers' grid reshape would fail)")
    blocks = blocks + (ExtraParams(part=MERGER, count=1, label="image_newline", numel=lm.hidden_size),)
    spec = ModelSpec(name=name or str(config.get("_name_or_path") or model_type), model_type=model_type, lm=lm,
                     vision=replace(vision, family=model_type), source=source, family=model_type,
                     blocks=blocks + lm_blocks(lm))
    spec.extra.update(extra, pinpoints=pinpoints)
    return spec


class LlavaNextMedia(MediaRule):
    """LLaVA-NeXT anyres as ``LlavaNextProcessor`` applies it (every image, one or several per sample).

    Settings from preprocessor_config.json (``crop_size``: the tile, ``image_grid_pinpoints``) and
    processor_config.json (``patch_size``, ``num_additional_image_tokens``, ``vision_feature_select_strategy``)
    when shipped, else the model config (the reference checkpoints ship the same values); they must agree with
    the model config, which transformers' model code uses to re-grid the features. No video input (that is
    ``llava_next_video``, not modelled).
    """

    family = "llava_next"

    def settings(self, spec) -> dict:
        pre = spec.processor.get("preprocessor_config.json", {})
        proc = spec.processor.get("processor_config.json", {})
        tile = spec.extra["image_size"]
        side = tile // spec.vision.patch_size
        checks: list[tuple[str, Any, Any]] = []
        crop = pre.get("crop_size")
        if isinstance(crop, dict):
            checks.append(("preprocessor_config.json crop_size", (crop.get("height"), crop.get("width")), (tile, tile)))
        if pre.get("image_grid_pinpoints") is not None:
            checks.append(("preprocessor_config.json image_grid_pinpoints",
                           [list(p) for p in pre["image_grid_pinpoints"]], [list(p) for p in spec.extra["pinpoints"]]))
        if proc:
            patch, extra = proc.get("patch_size", spec.vision.patch_size), proc.get("num_additional_image_tokens", 0)
            checks.append(("processor_config.json patch_size", patch, spec.vision.patch_size))
            checks.append(("processor_config.json num_additional_image_tokens", extra, 1))
            checks.append(("processor_config.json vision_feature_select_strategy",
                           proc.get("vision_feature_select_strategy", "default"), "default"))
        for what, got, want in checks:
            if got != want:
                raise UnsupportedModelError(f"{spec.name}: {what} {got!r} disagrees with the model config "
                                            f"({want!r}); transformers' model code would reject the features")
        return {"tile": tile, "tokens_per_tile": side * side, "pinpoints": [list(p) for p in spec.extra["pinpoints"]],
                "source": "processor files" if (pre or proc) else "model config"}

    def image(self, spec, height: int, width: int) -> DerivedMedia:
        height, width = positive((height, width), "--image-size")
        s = self.settings(spec)
        tile, side = s["tile"], s["tile"] // spec.vision.patch_size
        best_h, best_w = select_best_resolution(height, width, spec.extra["pinpoints"])
        rows, cols = best_h // tile, best_w // tile
        grid_tokens, newlines = unpadded_features(height, width, side, rows, cols, None)
        tiles = 1 + rows * cols
        return DerivedMedia("image", (height, width), (tile, tile), (tiles, side, side),
                            side * side + grid_tokens + newlines, tiles=tiles,
                            detail={"best_resolution": [best_h, best_w], "tile_grid": [rows, cols],
                                    "unpadded_tokens": grid_tokens, "newline_tokens": newlines, "cls_tokens": tiles})

    def video(self, spec, frames: int, height: int, width: int) -> DerivedMedia:
        raise no_video(f"{spec.name} (llava_next)", "LlavaNextProcessor", "LlavaNextForConditionalGeneration",
                       "use llava_next_video (LlavaNextVideoProcessor takes videos)")


def build_video(config: Mapping[str, Any], source: str, name: str = "") -> ModelSpec:
    return build(config, source, name, model_type="llava_next_video")


class LlavaNextVideoMedia(LlavaNextMedia):
    """LLaVA-NeXT-Video: images as LLaVA-NeXT (anyres, unpadding, newlines); a video of T sampled frames is T frames
    at the tower's ``image_size`` (the video processor resizes and crops every frame to it), grid (T, side, side),
    (side^2 // 4) tokens per frame (the 2 x 2 pool; ``LlavaNextVideoProcessor.replace_video_token``)."""

    family = "llava_next_video"

    def video(self, spec, frames: int, height: int, width: int) -> DerivedMedia:
        frames, height, width = positive((frames, height, width), "--video-size")
        s = self.settings(spec)
        side = s["tile"] // spec.vision.patch_size
        return DerivedMedia("video", (frames, height, width), (s["tile"], s["tile"]), (frames, side, side),
                            frames * (side * side // 4), tiles=frames, detail={"cls_tokens": frames})


register_family(Family(
    name="llava_next", model_types=("llava_next",), build=build, hf_class="LlavaNextForConditionalGeneration",
    is_vlm=True, media=LlavaNextMedia(),
    notes=("every tile (base + grid) runs the whole CLIP tower with its CLS position and the projector on its 576 "
           "patches, before unpadding: the LM sees fewer visual tokens than the projector processed",
           "the layers after vision_feature_layer (-2: the last one) are never back-propagated (forward only)",
           "unpadding is not a matmul (0 FLOPs); image_newline is a parameter of the projector part")))

register_family(Family(
    name="llava_next_video", model_types=("llava_next_video",), build=build_video,
    hf_class="LlavaNextVideoForConditionalGeneration", is_vlm=True, media=LlavaNextVideoMedia(),
    notes=("images: as llava_next; video frames: the whole CLIP tower per frame, 2x2 pooling (no FLOPs) before the "
           "projector, so the projector runs on a quarter of each frame's rows",
           "the layers after vision_feature_layer (-2: the last one) are never back-propagated (forward only)")))
