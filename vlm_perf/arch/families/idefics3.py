"""Idefics3 and SmolVLM / SmolVLM2 (transformers ``idefics3`` / ``smolvlm``: ``Idefics3ForConditionalGeneration``,
``SmolVLMForConditionalGeneration``; one module, the two share every shape).

Read from transformers ``models/idefics3/modeling_idefics3.py`` (``smolvlm/modeling_smolvlm.py`` is the same
code), ``idefics3/image_processing_pil_idefics3.py`` and ``smolvlm/image_processing_pil_smolvlm.py``:

* **Tower** (``Idefics3VisionTransformer``), per tile: ``patch_embedding`` Conv2d(C -> h_v, kernel = stride =
  patch, bias, "valid") -> (tile/patch)^2 patches, learned ``position_embedding`` ((image_size/patch)^2 rows;
  bucketised lookup, not a matmul), ``num_hidden_layers`` SigLIP layers: LayerNorm, q/k/v/out Linear(h_v ->
  h_v, bias), eager attention per tile, LayerNorm, fc1 -> GELU-tanh -> fc2 (bias); ``post_layernorm``. No CLS.
* **Connector** (``Idefics3Connector``): pixel shuffle by ``scale_factor`` s (views: no FLOPs) ->
  ``modality_projection.proj`` Linear(h_v s^2 -> h_text, **no bias**). No norm in front: its input gradient
  is due only when the tower trains.
* **LM**: ``text_config`` ``llama`` (Idefics3-8B: Llama 3.1 8B; SmolVLM: SmolLM2).

Tiles are the attention units: n tiles (rows x cols + one global image when split) = grid ``(n, side, side)``
with side = tile/patch, ``merge`` = s; LM image tokens = side^2 / s^2 per tile.
"""

from __future__ import annotations

import math
from typing import Any, Mapping

from ...errors import ConfigError, UnsupportedModelError
from ..blocks import ExtraParams, LinearProjector, PatchEmbed, PositionTable, VisionLayers
from ..fields import Fields
from ..parts import MERGER, VISION_TOWER
from ..spec import ModelSpec, VisionSpec
from . import Family, register_family
from .decoder import lm_blocks, read_lm, vision_and_text_sections
from .media import DerivedMedia, MediaRule, no_video, positive

LM_FAMILIES = ("llama",)
MAX_IMAGE_SIZE = 4096  # idefics3 image processors' absolute bound on the resized image (MAX_IMAGE_SIZE)



def _build(model_type: str):
    def build(config: Mapping[str, Any], source: str, name: str = "") -> ModelSpec:
        top = Fields(config, "", source)
        vc, tc, text_type = vision_and_text_sections(config, source, model_type, "llama", LM_FAMILIES)
        text = dict(tc)
        text["tie_word_embeddings"] = bool(config.get("tie_word_embeddings", tc.get("tie_word_embeddings", False)))
        lm = read_lm(Fields(text, "text_config", source), text_type)
        f = Fields(vc, "vision_config", source)
        # Idefics3VisionConfig / SmolVLMVisionConfig class defaults
        width, heads = int(f.opt("hidden_size", 1152)), int(f.opt("num_attention_heads", 16))
        if width % heads:
            raise ConfigError(f"{source}: vision_config.hidden_size {width} not divisible by num_attention_heads {heads}")
        image, patch = f.square("image_size", 224), f.square("patch_size", 32)
        scale = int(top.opt("scale_factor", 2))
        side = image // patch
        if scale <= 0 or side % scale:
            raise ConfigError(f"{source}: {side} patches per tile side is not divisible by scale_factor {scale}")
        vision = VisionSpec(
            family=model_type, depth=int(f.opt("num_hidden_layers", 12)), hidden_size=width, num_heads=heads,
            head_dim=width // heads, intermediate_size=int(f.opt("intermediate_size", 3072)), mlp_gated=False,
            patch_size=patch, temporal_patch_size=1, in_channels=int(f.opt("num_channels", 3)),
            spatial_merge_size=scale, out_hidden_size=lm.hidden_size, patch_embed_bias=True, norm="layernorm",
            num_position_embeddings=side * side,
        )
        blocks = (
            PatchEmbed(part=VISION_TOWER, count=1, in_volume=vision.patch_volume, width=width, bias=True),
            PositionTable(part=VISION_TOWER, count=1, entries=side * side, width=width),
            VisionLayers(part=VISION_TOWER, count=vision.depth, width=width, num_heads=heads,
                         head_dim=vision.head_dim, mlp_width=vision.intermediate_size, mlp_gated=False,
                         attention="frame", norm="layernorm"),
            ExtraParams(part=VISION_TOWER, count=1, label="post_layernorm", numel=2 * width),
            LinearProjector(part=MERGER, count=1, widths=(scale * scale * width, lm.hidden_size), biases=(False,),
                            label="connector (pixel shuffle + Linear)"),
        ) + lm_blocks(lm)
        spec = ModelSpec(name=name or str(config.get("_name_or_path") or model_type), model_type=model_type, lm=lm,
                         vision=vision, source=source, family=model_type, blocks=blocks)
        spec.extra["tile_size"] = image
        return spec
    return build


def rescale_to_max_len(height: int, width: int, max_len: int) -> tuple[int, int]:
    """``_resize_output_size_rescale_to_max_len``: the longest side becomes ``max_len`` (up OR down), the other
    int(max_len / aspect) rounded up to even; then ``_resize_output_size_scale_below_upper_bound`` (4096)."""
    aspect = width / height
    if width >= height:
        width = max_len
        height = int(width / aspect)
        height += height % 2
    else:
        height = max_len
        width = int(height * aspect)
        width += width % 2
    height, width = max(height, 1), max(width, 1)
    aspect = width / height
    if width >= height and width > MAX_IMAGE_SIZE:
        width, height = MAX_IMAGE_SIZE, int(MAX_IMAGE_SIZE / aspect)
    elif height > width and height > MAX_IMAGE_SIZE:
        height, width = MAX_IMAGE_SIZE, int(MAX_IMAGE_SIZE * aspect)
    return max(height, 1), max(width, 1)


def resize_for_vision_encoder(height: int, width: int, tile: int) -> tuple[int, int]:
    """``resize_for_vision_encoder``: the longer side up to a multiple of ``tile``, the other re-derived from
    the aspect ratio (int) and then rounded up to a multiple of ``tile``."""
    aspect = width / height
    if width >= height:
        width = math.ceil(width / tile) * tile
        height = math.ceil(int(width / aspect) / tile) * tile
    else:
        height = math.ceil(height / tile) * tile
        width = math.ceil(int(height * aspect) / tile) * tile
    return height, width


def split_grid(height: int, width: int, tile: int) -> tuple[int, int]:
    """(rows, cols) ``split_images`` cuts (0, 0 when the image fits one tile: no split, no global image)."""
    if height > tile or width > tile:
        return (height - tile) // tile + 1, (width - tile) // tile + 1
    return 0, 0


class Idefics3Media(MediaRule):
    """Idefics3 / SmolVLM image splitting as their image processors apply it (``do_image_splitting`` true, the
    class default): resize so the longest side is ``size.longest_edge`` (up or down), round both sides up to
    multiples of ``max_image_size.longest_edge`` (the tile), cut rows x cols tiles and add one global image
    resized to a tile; an image that fits one tile is that tile alone. ``do_image_splitting`` false: one tile.
    Settings from preprocessor_config.json, else the released checkpoints' ratio: tile = the tower's
    ``image_size`` and longest edge = 4 tiles (Idefics3-8B 364 / 1456, SmolVLM2 512 / 2048; the class defaults
    are 364 / 1456). The processor classes pass nothing that changes sizes. Videos: SmolVLM only (:meth:`video`)."""

    def __init__(self, family: str):
        self.family = family

    def settings(self, spec) -> dict:
        pre = spec.processor.get("preprocessor_config.json", {})
        tile_default = spec.extra["tile_size"]
        size = pre.get("size") if isinstance(pre.get("size"), dict) else {}
        tiles = pre.get("max_image_size") if isinstance(pre.get("max_image_size"), dict) else {}
        if size and "longest_edge" not in size:
            raise UnsupportedModelError(f"{spec.name}: size {size} without longest_edge is not modelled")
        tile = int(tiles.get("longest_edge", tile_default))
        return {"longest_edge": int(size.get("longest_edge", 4 * tile)), "tile": tile,
                "do_image_splitting": bool(pre.get("do_image_splitting", True)),
                "source": "processor files" if pre else "reference checkpoint default (tile = vision image_size)"}

    def image(self, spec, height: int, width: int) -> DerivedMedia:
        height, width = positive((height, width), "image size (H, W pixels)")
        s, v = self.settings(spec), spec.vision
        if s["tile"] % (v.patch_size * v.spatial_merge_size):
            raise UnsupportedModelError(f"{spec.name}: a {s['tile']}-px tile is not a multiple of patch x scale_factor "
                                        f"({v.patch_size * v.spatial_merge_size} px); the connector cannot shuffle it")
        h, w = rescale_to_max_len(height, width, s["longest_edge"])
        rows = cols = 0
        if s["do_image_splitting"]:
            h, w = resize_for_vision_encoder(h, w, s["tile"])
            rows, cols = split_grid(h, w, s["tile"])
        tiles = rows * cols + 1
        side = s["tile"] // v.patch_size
        per_tile = (side // v.spatial_merge_size) ** 2
        return DerivedMedia("image", (height, width), (s["tile"], s["tile"]), (tiles, side, side), per_tile * tiles,
                            tiles=tiles, detail={"canvas": [rows, cols], "canvas_px": [h, w], "global_image": rows * cols > 0})

    def video(self, spec, frames: int, height: int, width: int) -> DerivedMedia:
        """SmolVLM only (``Idefics3Processor`` takes no videos): ``SmolVLMVideoProcessor.resize`` resizes every
        sampled frame to the longest edge, then to ``max_image_size`` x ``max_image_size`` (square, whatever the
        aspect): each frame is one tile through tower and connector, ``image_seq_len`` placeholders (the frame's
        timestamp and the video intro are text, part of ``--seq-len``); frames padded to a batch's longest video are
        all zeros and dropped by the model. Tile from video_preprocessor_config.json ``max_image_size`` (its
        ``video_sampling.video_size`` is only the first resize), else the image rule's tile (preprocessor_config.json
        ``max_image_size``, which the video processor reads when no video file ships; else the tower's image_size).
        ``frames`` = frames after the video processor's sampling (``sample_frames``: min(round(fps x duration),
        max_frames) evenly spaced indices, duplicates dropped); frames are never split into tiles. A sample with an
        image AND a video is not one processor call (SmolVLMProcessor's video pixels replace the image pixels);
        separate samples of a batch are fine. ``do_resize`` false (frames at their own size) is refused."""
        if self.family != "smolvlm":
            raise no_video(f"{spec.name} (idefics3)", "Idefics3Processor", "Idefics3ForConditionalGeneration",
                           "use a smolvlm checkpoint (SmolVLMProcessor takes videos)")
        frames, height, width = positive((frames, height, width), "--video-size")
        v = spec.vision
        vid = spec.processor.get("video_preprocessor_config.json", {})
        tiles = vid.get("max_image_size") if isinstance(vid.get("max_image_size"), dict) else {}
        tile = int(tiles.get("longest_edge", self.settings(spec)["tile"]))
        if vid.get("do_resize", True) is False:
            raise UnsupportedModelError(f"{spec.name}: video_preprocessor_config.json do_resize false leaves frames at "
                                        f"their own size (not the square {tile}-px tile the model is built for); "
                                        "not modelled")
        if tile % (v.patch_size * v.spatial_merge_size):
            raise UnsupportedModelError(f"{spec.name}: a {tile}-px video frame is not a multiple of patch x "
                                        f"scale_factor ({v.patch_size * v.spatial_merge_size} px)")
        side = tile // v.patch_size
        per_tile = (side // v.spatial_merge_size) ** 2
        return DerivedMedia("video", (frames, height, width), (tile, tile), (frames, side, side), per_tile * frames,
                            tiles=frames)


for _type, _cls in (("idefics3", "Idefics3ForConditionalGeneration"), ("smolvlm", "SmolVLMForConditionalGeneration")):
    register_family(Family(
        name=_type, model_types=(_type,), build=_build(_type), hf_class=_cls, is_vlm=True, media=Idefics3Media(_type),
        notes=("pixel shuffle and position-bucket lookups are not matmuls (0 FLOPs)",
               "the global image of a split image is a full tile through tower and connector")))
