"""InternVL3 / InternVL3.5 (transformers ``internvl``: ``InternVLForConditionalGeneration``).

Read from transformers ``models/internvl/modeling_internvl.py`` and ``got_ocr2/image_processing_*``:

* **Tower (InternViT), per tile**: Conv2d patch embed (bias) -> (tile/patch)^2 patches, **one CLS token**
  prepended (+ learned absolute positions, bicubic-resized when the tile differs: not a matmul) ->
  ``num_hidden_layers`` layers: norm, q/k/v (``attention_bias``) + projection (bias), optional q/k RMSNorm
  over the whole width (``use_qk_norm``), eager attention over patches + CLS, layer scale ``lambda_1``,
  norm, MLP fc1 -> GELU -> fc2 (bias), ``lambda_2``. A final LayerNorm only when ``use_mean_pooling`` is
  false. The whole tower runs whatever ``vision_feature_layer`` is (``InternVLVisionEncoder`` loops over every
  layer); with an index other than -1 the projector reads ``hidden_states[vision_feature_layer]``, so the layers
  after it (and the final LayerNorm) reach no loss: training does not back-propagate through them, forward FLOPs
  only (:class:`~vlm_perf.arch.blocks.ForwardOnly`, measured in ``tests/verify/test_measured_internvl.py``). A
  list of layers is refused: ``get_image_features`` indexes ``hidden_states`` with it directly (a TypeError).
* **Projector**: CLS dropped (``vision_feature_select_strategy`` "default"; "full" cannot reshape), pixel
  shuffle by ``downsample_ratio`` (0.5: (p x p, d) -> (p/2 x p/2, 4d), no FLOPs), LayerNorm(4d) ->
  Linear(4d -> h_text) -> GELU -> Linear(h_text -> h_text).
* **LM**: ``text_config`` is any supported decoder LM (Qwen2 for InternVL3, Qwen3 / Qwen3-MoE for 3.5,
  gpt-oss for InternVL3.5-GPT-OSS: `gpt_oss.py`).

Tiles are the attention units: an image of n tiles is the grid ``(n, tile/patch, tile/patch)`` with one CLS
token per slice, ``merge = 1/downsample_ratio``; LM tokens = ``image_seq_length`` per tile.
"""

from __future__ import annotations

from typing import Any, Mapping

from ...errors import ConfigError, UnsupportedModelError
from ..blocks import ClsToken, ExtraParams, MlpProjector, PatchEmbed, PositionTable, VisionLayers
from ..fields import Fields
from ..parts import MERGER, VISION_TOWER
from ..spec import ModelSpec, VisionSpec
from . import Family, register_family
from .decoder import feature_layer_depth, forward_only_after, lm_blocks, read_lm, vision_and_text_sections
from .gpt_oss import read_gpt_oss_lm
from .media import DerivedMedia, MediaRule, positive

LM_FAMILIES = ("qwen2", "qwen3", "qwen3_moe", "llama", "gpt_oss")  # text_config.model_type values read here



def build(config: Mapping[str, Any], source: str, name: str = "") -> ModelSpec:
    top = Fields(config, "", source)
    vc, tc, text_type = vision_and_text_sections(config, source, "internvl", "qwen2", LM_FAMILIES)
    text = dict(tc)
    if "tie_word_embeddings" in config:
        text["tie_word_embeddings"] = config["tie_word_embeddings"]
    lm = (read_gpt_oss_lm(Fields(text, "text_config", source)) if text_type == "gpt_oss"  # InternVL3.5-GPT-OSS
          else read_lm(Fields(text, "text_config", source), text_type))
    f = Fields(vc, "vision_config", source)
    ratio = float(top.opt("downsample_ratio", 0.5))
    merge = round(1 / ratio)
    if merge * ratio != 1:
        raise UnsupportedModelError(f"{source}: downsample_ratio {ratio} is not 1/integer")
    if top.opt("vision_feature_select_strategy", "default") != "default":
        raise UnsupportedModelError(f"{source}: vision_feature_select_strategy must be 'default' (transformers "
                                    "cannot pixel-shuffle the CLS token)")
    layer = top.opt("vision_feature_layer", -1)
    if isinstance(layer, (list, tuple)):
        raise UnsupportedModelError(f"{source}: vision_feature_layer {layer!r}: InternVL reads one hidden state "
                                    "(transformers indexes hidden_states with the value; a list fails there)")
    width, heads = f.int("hidden_size"), f.int("num_attention_heads")
    _, used = feature_layer_depth(layer, f.int("num_hidden_layers"), source)
    tile, patch = f.square("image_size"), f.square("patch_size")
    side = tile // patch
    if side % merge:
        raise ConfigError(f"{source}: {side} patches per tile side is not divisible by 1/downsample_ratio = {merge}")
    vision = VisionSpec(
        family="internvl", depth=f.int("num_hidden_layers"), hidden_size=width, num_heads=heads,
        head_dim=width // heads, intermediate_size=f.int("intermediate_size"), mlp_gated=False,
        patch_size=patch, temporal_patch_size=1, in_channels=int(f.opt("num_channels", 3)),
        spatial_merge_size=merge, out_hidden_size=lm.hidden_size, patch_embed_bias=True,
        norm="rmsnorm" if f.opt("norm_type", "layer_norm") == "rms_norm" else "layernorm", cls_per_frame=1,
        num_position_embeddings=side * side + 1 if f.opt("use_absolute_position_embeddings", True) else 0,
    )
    blocks: list = [PatchEmbed(part=VISION_TOWER, count=1, in_volume=vision.patch_volume, width=width, bias=True),
                    ClsToken(part=VISION_TOWER, count=1, width=width)]
    if f.opt("use_mask_token", False):
        blocks.append(ExtraParams(part=VISION_TOWER, count=1, label="mask token", numel=width))
    if vision.num_position_embeddings:
        blocks.append(PositionTable(part=VISION_TOWER, count=1, entries=vision.num_position_embeddings, width=width))
    # layers after the selected hidden state run but reach no loss: forward FLOPs only, also in training
    blocks += forward_only_after(VisionLayers(
        part=VISION_TOWER, count=vision.depth, width=width, num_heads=heads, head_dim=vision.head_dim,
        mlp_width=vision.intermediate_size, mlp_gated=False, attention="frame", cls=True,
        qkv_bias=bool(f.opt("attention_bias", False)), norm=vision.norm,
        qk_norm="rmsnorm" if f.opt("use_qk_norm", False) else "none", layer_scale=True), used)
    if not f.opt("use_mean_pooling", True):
        blocks.append(ExtraParams(part=VISION_TOWER, count=1, label="final LayerNorm", numel=2 * width))
    shuffled = merge * merge * width
    blocks.append(MlpProjector(part=MERGER, count=1, in_width=shuffled, hidden_width=lm.hidden_size,
                               out_width=lm.hidden_size, norm_width=shuffled, norm="layernorm", bias=True))
    spec = ModelSpec(name=name or str(config.get("_name_or_path") or "internvl"), model_type="internvl", lm=lm,
                     vision=vision, source=source, family="internvl", blocks=tuple(blocks) + lm_blocks(lm))
    spec.extra["image_seq_length"] = int(top.opt("image_seq_length", (side // merge) ** 2))
    spec.extra["tile_size"] = tile
    if spec.extra["image_seq_length"] != (side // merge) ** 2:
        raise ConfigError(f"{source}: image_seq_length {spec.extra['image_seq_length']} differs from the "
                          f"{(side // merge) ** 2} tokens a {tile}-px tile gives after pixel shuffle")
    return spec


def tiled_canvas(height: int, width: int, tile: int, min_tiles: int, max_tiles: int) -> tuple[int, int]:
    """(columns, rows) GotOcr2's ``get_optimal_tiled_canvas`` picks: every (c, r) with
    min <= c*r <= max, in order of tile count (then c, then r, as ``sorted`` keeps enumeration order);
    the closest c/r to W/H wins; on an exact tie the later grid wins if the image area exceeds half
    the canvas area."""
    grids = sorted(((c, r) for c in range(1, max_tiles + 1) for r in range(1, max_tiles + 1)
                    if min_tiles <= c * r <= max_tiles), key=lambda g: g[0] * g[1])
    aspect, area = width / height, width * height
    best, best_diff = (1, 1), float("inf")
    for c, r in grids:
        diff = abs(aspect - c / r)
        if diff < best_diff:
            best, best_diff = (c, r), diff
        elif diff == best_diff and area > 0.5 * tile * tile * c * r:
            best = (c, r)
    return best


class InternVLMedia(MediaRule):
    """InternVL dynamic tiling as ``InternVLProcessor`` applies it.

    ``InternVLProcessor.images_kwargs`` forces ``crop_to_patches=True`` on every call, so images are ALWAYS
    tiled, whatever preprocessor_config.json says (the -hf checkpoints ship ``crop_to_patches: false``).
    Tile side = ``size`` of preprocessor_config.json (else the tower's ``image_size``: 448 in the reference
    checkpoints), ``min_patches`` / ``max_patches`` from the file (else 1 / 12, the class defaults the
    reference checkpoints also ship). An image becomes c*r tiles plus one thumbnail when c*r > 1.
    Video: every frame is resized to one tile (video_preprocessor_config.json ``size``, else the tile).
    """

    family = "internvl"

    def settings(self, spec) -> dict:
        pre = spec.processor.get("preprocessor_config.json", {})
        tile = spec.extra["tile_size"]
        size = pre.get("size") if isinstance(pre.get("size"), dict) else {}
        out = {"tile": int(size.get("height", tile)), "min_patches": int(pre.get("min_patches", 1)),
               "max_patches": int(pre.get("max_patches", 12)), "crop_to_patches": True,
               "source": "processor files" if pre else "reference checkpoint default",
               "forced": "crop_to_patches=True (InternVLProcessor.images_kwargs)"}
        if size and size.get("height") != size.get("width"):
            raise UnsupportedModelError(f"{spec.name}: non-square tile size {size} is not modelled")
        vid = spec.processor.get("video_preprocessor_config.json", {})
        vsize = vid.get("size") if isinstance(vid.get("size"), dict) else {}
        out["video_frame"] = int(vsize.get("height", tile))
        return out

    def _grid(self, spec, tile_px: int, tiles: int) -> tuple[int, int, int]:
        v = spec.vision
        if tile_px % (v.patch_size * v.spatial_merge_size):
            raise UnsupportedModelError(f"{spec.name}: a {tile_px}-px tile is not a multiple of patch x merge "
                                        f"({v.patch_size * v.spatial_merge_size} px); transformers cannot pixel-shuffle it")
        side = tile_px // v.patch_size
        return tiles, side, side

    def canvas(self, spec, s: dict, height: int, width: int) -> tuple[int, int]:
        """(columns, rows) of tiles for an image of ``height`` x ``width`` pixels under ``settings`` ``s``."""
        if not 1 <= s["min_patches"] <= s["max_patches"]:
            raise ConfigError(f"{spec.name}: min_patches {s['min_patches']} / max_patches {s['max_patches']} invalid")
        return tiled_canvas(height, width, s["tile"], s["min_patches"], s["max_patches"])

    def image(self, spec, height: int, width: int) -> DerivedMedia:
        height, width = positive((height, width), "image size (H, W pixels)")
        s = self.settings(spec)
        cols, rows = self.canvas(spec, s, height, width)
        tiles = cols * rows + (1 if cols * rows > 1 else 0)
        grid = self._grid(spec, s["tile"], tiles)
        per_tile = (grid[1] // spec.vision.spatial_merge_size) ** 2
        return DerivedMedia("image", (height, width), (s["tile"], s["tile"]), grid, per_tile * tiles, tiles=tiles,
                            detail={"canvas": [rows, cols], "thumbnail": cols * rows > 1})

    def video(self, spec, frames: int, height: int, width: int) -> DerivedMedia:
        frames, height, width = positive((frames, height, width), "video size (T frames, H, W pixels)")
        s = self.settings(spec)
        grid = self._grid(spec, s["video_frame"], frames)
        per_tile = (grid[1] // spec.vision.spatial_merge_size) ** 2
        return DerivedMedia("video", (frames, height, width), (s["video_frame"], s["video_frame"]), grid,
                            per_tile * frames, tiles=frames)


register_family(Family(
    name="internvl", model_types=("internvl",), build=build, hf_class="InternVLForConditionalGeneration",
    is_vlm=True, media=InternVLMedia(),
    notes=("pixel shuffle, CLS removal and position-table interpolation are not matmuls (0 FLOPs)",
           "video frames: one tile each, no thumbnail",
           "every tower layer runs; with vision_feature_layer other than -1 the layers after it are forward-only "
           "in training (their output reaches no loss)")))
