"""LLaVA-OneVision (transformers ``llava_onevision``: ``LlavaOnevisionForConditionalGeneration``).

Read from transformers ``models/llava_onevision/modeling_llava_onevision.py`` (``get_image_features``,
``pack_image_features``, ``image_size_to_num_patches``, ``get_video_features``, ``apply_pooling``),
``processing_llava_onevision.py`` (``_get_number_of_features``, ``_get_unpadded_features``),
``image_processing_pil_llava_onevision.py`` and ``image_processing_utils.select_best_resolution``:

* **Tower**: SigLIP (:mod:`.siglip`; so400m at 384 px, patch 14: 27 x 27 = 729 patches per tile, 26 layers in
  the -hf configs), full attention per tile / frame. ``vision_feature_layer`` (int or list) only selects which
  hidden states feed the projector: the whole tower runs.
* **Projector**: Linear(h_v x n_feature_layers -> h_text) -> GELU -> Linear(h_text -> h_text) (bias:
  ``multimodal_projector_bias``) on EVERY patch of every tile (base + grid tiles), before unpadding; then
  ``unpad_image`` and, above 1.1 x the ``anyres_max_N`` budget, a bilinear shrink (no FLOPs), and one learned
  ``image_newline`` per row (a parameter, stored here with the projector part). Videos: projector on every
  frame's 729 patches, then bilinear 2x pooling (no FLOPs) to ceil(27/2)^2 = 196 tokens per frame, plus one
  newline per video.
* **LM**: ``text_config`` decoder (Qwen2 in the released checkpoints).

Only ``vision_feature_select_strategy`` "full" is modelled ("default" drops a real SigLIP patch and cannot be
re-gridded by ``pack_image_features``).
"""

from __future__ import annotations

import math
from typing import Any, Mapping

from ...errors import ConfigError, UnsupportedModelError
from ..blocks import ExtraParams, MlpProjector, VisionLayers
from ..fields import Fields, text_section
from ..parts import MERGER
from ..spec import ModelSpec, VisionSpec
from . import Family, register_family
from .decoder import feature_layer_depth, forward_only_after, lm_blocks, read_lm
from .media import DerivedMedia, MediaRule, positive
from .siglip import read_siglip, siglip_blocks

LM_FAMILIES = ("qwen2", "qwen3", "qwen3_moe", "llama", "mistral")  # text_config.model_type values read here
# LlavaOnevisionConfig's vision sub-config defaults (SigLIP so400m-384 with the last layer dropped)
VISION_DEFAULTS = {"hidden_size": 1152, "intermediate_size": 4304, "patch_size": 14, "image_size": 384,
                   "num_hidden_layers": 26, "num_attention_heads": 16, "vision_use_head": False}
# LlavaOnevisionConfig / LlavaOnevisionImageProcessor default image_grid_pinpoints: 384 x {1..6} squared
DEFAULT_PINPOINTS = tuple((384 * a, 384 * b) for a in range(1, 7) for b in range(1, 7))


def _aspect_budget(value: Any, source: str) -> int:
    """N of ``anyres_max_N`` (transformers parses it with ``int(s.strip("anyres_max_"))``)."""
    text = str(value)
    if not text.startswith("anyres_max_") or not text[len("anyres_max_"):].isdigit():
        raise UnsupportedModelError(f"{source}: vision_aspect_ratio {value!r}: only 'anyres_max_N' is modelled")
    return int(text[len("anyres_max_"):])


def _pinpoints(value: Any, source: str) -> tuple[tuple[int, int], ...]:
    if value is None:
        return DEFAULT_PINPOINTS
    if (not isinstance(value, (list, tuple)) or not value
            or any(not isinstance(p, (list, tuple)) or len(p) != 2 or any(isinstance(v, bool) or not isinstance(v, int)
                                                                          or v <= 0 for v in p) for p in value)):
        raise ConfigError(f"{source}: image_grid_pinpoints must be a list of [height, width] pixel pairs, "
                          f"got {value!r}")
    return tuple((int(h), int(w)) for h, w in value)


def build(config: Mapping[str, Any], source: str, name: str = "") -> ModelSpec:
    top = Fields(config, "", source)
    text, section = text_section(config)
    lm_type = text.get("model_type") if section else None
    lm_type = lm_type or "qwen2"  # LlavaOnevisionConfig's text sub-config default
    if lm_type not in LM_FAMILIES:
        raise UnsupportedModelError(f"{source}: text_config.model_type {lm_type!r} is not a supported "
                                    f"LLaVA-OneVision LM ({', '.join(LM_FAMILIES)})")
    # LlavaOnevisionConfig: a false top-level tie_word_embeddings takes text_config's true one
    tie = bool(config.get("tie_word_embeddings", False)) or bool(
        (config.get("text_config") or {}).get("tie_word_embeddings", False))
    lm = read_lm(Fields({**text, "tie_word_embeddings": tie}, section, source), lm_type)
    vc = config.get("vision_config")
    tower = read_siglip(vc if isinstance(vc, dict) else {}, source, VISION_DEFAULTS)
    if top.opt("vision_feature_select_strategy", "full") != "full":
        raise UnsupportedModelError(f"{source}: vision_feature_select_strategy must be 'full' (SigLIP has no CLS "
                                    "token; 'default' drops a patch that pack_image_features cannot re-grid)")
    n_layers, used = feature_layer_depth(top.opt("vision_feature_layer", -1), tower.depth, source)
    bias = bool(top.opt("multimodal_projector_bias", True))
    budget = _aspect_budget(top.opt("vision_aspect_ratio", "anyres_max_9"), source)
    pinpoints = _pinpoints(config.get("image_grid_pinpoints"), source)
    vision = VisionSpec(family="llava_onevision", depth=tower.depth, hidden_size=tower.width,
                        num_heads=tower.num_heads, head_dim=tower.head_dim, intermediate_size=tower.mlp_width,
                        mlp_gated=False, patch_size=tower.patch_size, temporal_patch_size=1,
                        in_channels=tower.channels, spatial_merge_size=1, out_hidden_size=lm.hidden_size,
                        num_position_embeddings=tower.patches, patch_embed_bias=True, norm="layernorm")
    # every SigLIP layer runs; those after the deepest selected hidden state feed no loss (forward only)
    tower_blocks = tuple(part for block in siglip_blocks(tower)
                         for part in (forward_only_after(block, used) if isinstance(block, VisionLayers) else (block,)))
    blocks = tower_blocks + (
        MlpProjector(part=MERGER, count=1, in_width=tower.width * n_layers, hidden_width=lm.hidden_size,
                     out_width=lm.hidden_size, norm_width=0, norm="none", bias=bias),
        ExtraParams(part=MERGER, count=1, label="image_newline", numel=lm.hidden_size),
    ) + lm_blocks(lm)
    spec = ModelSpec(name=name or str(config.get("_name_or_path") or "llava_onevision"), model_type="llava_onevision",
                     lm=lm, vision=vision, source=source, family="llava_onevision", blocks=blocks)
    spec.extra.update(image_size=tower.image_size, pinpoints=pinpoints, aspect_budget=budget,
                      fixed_grid_side=tower.side)  # SigLIP tiles and video frames: one fixed tile
    return spec


def select_best_resolution(height: int, width: int, pinpoints) -> tuple[int, int]:
    """The (height, width) pinpoint transformers' ``select_best_resolution`` picks: the largest effective
    resolution min(int(w*s) * int(h*s), w*h) with s = min(W/w, H/h), ties to the least waste W*H - effective,
    first in list order otherwise."""
    best: tuple[int, int] | None = None
    best_effective, best_waste = 0, float("inf")
    for ph, pw in pinpoints:
        scale = min(pw / width, ph / height)
        effective = min(int(width * scale) * int(height * scale), width * height)
        waste = pw * ph - effective
        if effective > best_effective or (effective == best_effective and waste < best_waste):
            best, best_effective, best_waste = (ph, pw), effective, waste
    if best is None:  # unreachable for a built spec: _pinpoints rejects an empty list
        raise ConfigError("select_best_resolution: no pinpoints to choose from")
    return best


def unpadded_features(height: int, width: int, side: int, rows: int, cols: int,
                      budget: int | None) -> tuple[int, int]:
    """(grid features, newline tokens) the LM sees for the grid tiles of one image, as
    ``LlavaOnevisionProcessor._get_unpadded_features``: the (rows*side) x (cols*side) feature map is cropped back
    to the image's aspect (symmetric padding removed), bilinearly shrunk by ratio r when
    r = sqrt(h*w / (budget * side^2)) > 1.1, and every remaining row ends with one newline token. ``budget`` None:
    no shrink (LLaVA-NeXT's ``LlavaNextProcessor._get_unpadded_features``)."""
    cur_h, cur_w = side * rows, side * cols
    if width / height > cur_w / cur_h:
        new_h = int(round(height * (cur_w / width), 7))
        cur_h -= 2 * ((cur_h - new_h) // 2)
    else:
        new_w = int(round(width * (cur_h / height), 7))
        cur_w -= 2 * ((cur_w - new_w) // 2)
    if budget is None:
        return cur_h * cur_w, cur_h
    ratio = math.sqrt(cur_h * cur_w / (budget * side * side))
    if ratio > 1.1:
        return int(cur_h // ratio) * int(cur_w // ratio), int(cur_h // ratio)
    return cur_h * cur_w, cur_h


class LlavaOnevisionMedia(MediaRule):
    """LLaVA-OneVision anyres as ``LlavaOnevisionProcessor`` applies it to a one-image sample.

    The image is fitted to the best pinpoint (``image_grid_pinpoints``; ``select_best_resolution``), padded,
    cut into rows x cols tiles of the tower's ``image_size`` (384), plus one **base tile** (the whole image
    resized): ``1 + rows*cols`` tiles, all through tower and projector. LM tokens: 729 (base) + the unpadded,
    possibly shrunk grid features + one newline per row. Settings from preprocessor_config.json (``size``,
    ``image_grid_pinpoints``) and processor_config.json (``num_image_tokens``, ``vision_aspect_ratio``) when
    shipped, else the model config (the reference checkpoints ship the same values); they must agree with the
    model config, which transformers' model code uses. A sample with several images (``batch_num_images`` > 1)
    skips anyres: each image is padded square to one tile, 729 + 1 tokens (``image(..., multi_image=True)``;
    on the CLI give ``--grid 1,27,27`` for such images). Video: every frame resized to 384 x 384, one tile each,
    ceil(27/2)^2 = 196 tokens per frame + 1 newline per video.
    """

    family = "llava_onevision"

    def settings(self, spec) -> dict:
        pre = spec.processor.get("preprocessor_config.json", {})
        proc = spec.processor.get("processor_config.json", {})
        vid = spec.processor.get("video_preprocessor_config.json", {})
        tile, side = spec.extra["image_size"], spec.extra["image_size"] // spec.vision.patch_size
        out = {"tile": tile, "pinpoints": [list(p) for p in spec.extra["pinpoints"]],
               "num_image_tokens": side * side, "vision_aspect_ratio": f"anyres_max_{spec.extra['aspect_budget']}",
               "video_frame": tile, "source": "processor files" if (pre or proc or vid) else "model config",
               "multi_image": "CLI images are one-image samples (anyres)"}
        checks: list[tuple[str, Any, Any]] = []  # (what, processor-file value, model-config value)
        size = pre.get("size") if isinstance(pre.get("size"), dict) else {}
        if size:
            checks.append(("preprocessor_config.json size", (size.get("height"), size.get("width")), (tile, tile)))
        if pre.get("image_grid_pinpoints") is not None:
            checks.append(("preprocessor_config.json image_grid_pinpoints",
                           [list(p) for p in pre["image_grid_pinpoints"]], out["pinpoints"]))
        if proc.get("num_image_tokens") is not None:
            checks.append(("processor_config.json num_image_tokens", proc["num_image_tokens"], side * side))
        if proc.get("vision_aspect_ratio") is not None:
            checks.append(("processor_config.json vision_aspect_ratio", proc["vision_aspect_ratio"],
                           out["vision_aspect_ratio"]))
        vsize = vid.get("size") if isinstance(vid.get("size"), dict) else {}
        if vsize:
            checks.append(("video_preprocessor_config.json size", (vsize.get("height"), vsize.get("width")),
                           (tile, tile)))
        for what, got, want in checks:
            if got != want:
                raise UnsupportedModelError(f"{spec.name}: {what} {got!r} disagrees with the model config "
                                            f"({want!r}); transformers' model code would reject the features")
        return out

    def image(self, spec, height: int, width: int, multi_image: bool = False) -> DerivedMedia:
        height, width = positive((height, width), "image size (H, W pixels)")
        s = self.settings(spec)
        tile, side = s["tile"], s["tile"] // spec.vision.patch_size
        if multi_image:
            return DerivedMedia("image", (height, width), (tile, tile), (1, side, side), side * side + 1, tiles=1,
                                detail={"multi_image": True})
        best_h, best_w = select_best_resolution(height, width, spec.extra["pinpoints"])
        rows, cols = -(-best_h // tile), -(-best_w // tile)
        grid_tokens, newlines = unpadded_features(height, width, side, best_h // tile, best_w // tile,
                                                  spec.extra["aspect_budget"])
        tiles = 1 + rows * cols
        return DerivedMedia("image", (height, width), (tile, tile), (tiles, side, side),
                            side * side + grid_tokens + newlines, tiles=tiles,
                            detail={"best_resolution": [best_h, best_w], "tile_grid": [rows, cols],
                                    "unpadded_tokens": grid_tokens, "newline_tokens": newlines})

    def video(self, spec, frames: int, height: int, width: int) -> DerivedMedia:
        frames, height, width = positive((frames, height, width), "video size (T frames, H, W pixels)")
        s = self.settings(spec)
        side = s["video_frame"] // spec.vision.patch_size
        pooled = -(-side // 2)
        return DerivedMedia("video", (frames, height, width), (s["video_frame"], s["video_frame"]),
                            (frames, side, side), frames * pooled * pooled + 1, tiles=frames)


register_family(Family(
    name="llava_onevision", model_types=("llava_onevision",), build=build,
    hf_class="LlavaOnevisionForConditionalGeneration", is_vlm=True, media=LlavaOnevisionMedia(),
    notes=("the projector runs on every tile's patches (base + grid) before unpadding: the LM sees fewer visual "
           "tokens than the projector processed",
           "unpadding, the bilinear shrink above the anyres_max_N budget and video pooling are not matmuls (0 FLOPs)",
           "image_newline is a parameter of the projector part (no matmul)")))
