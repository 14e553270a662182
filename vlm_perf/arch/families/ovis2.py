"""Ovis2 (transformers ``ovis2``: ``Ovis2ForConditionalGeneration``): a visual tokenizer and a visual vocabulary.

Read from transformers 5.24 ``models/ovis2/modeling_ovis2.py``, ``configuration_ovis2.py``,
``image_processing_pil_ovis2.py`` and ``processing_ovis2.py``:

* **Tower** (``Ovis2VisionModel``, AIMv2-style): Conv2d patch embed (kernel = stride = patch, with bias) ->
  RMSNorm -> + a learned table of (image_size/patch)² positions (one per patch of the fixed tile: never
  interpolated, so every tile is exactly ``image_size``) -> ``num_hidden_layers`` pre-RMSNorm layers (q/k/v/out
  with ``qkv_bias``, attention over the tile's patches, SwiGLU gate/up/down with ``mlp_bias``) -> RMSNorm.
* **Visual head** (inside ``Ovis2VisionModel``, so part of the tower here as in transformers): the
  ``hidden_stride`` s x s fold (a reshape) -> ``head_linear`` Linear(s²·h -> V - I, no bias) -> ``head_norm``
  LayerNorm -> softmax (V = ``vision_config.vocab_size``, I = ``num_visual_indicator_tokens``): each folded
  token becomes a probability over the visual vocabulary (:class:`~vlm_perf.arch.blocks.VisualVocabularyHead`).
* **Visual embedding table** (``Ovis2VisualEmbeddingTable``, the projector part): the probabilities, padded
  with I zero columns, times the V x h embedding table: one (tokens x V) @ (V x h) matmul; the indicator
  tokens' embeddings are integer look-ups (no FLOPs). Its input is the tower's output with no weights in
  between, so its input gradient is due only when the tower trains.
* **LM**: ``text_config`` is a Qwen2 decoder; ``lm_head`` Linear(hidden_size -> vocab_size), tied to the
  embeddings by default (``Ovis2Config.tie_word_embeddings`` True).

Media: images only (``Ovis2Processor`` has no video processor).
"""

from __future__ import annotations

from typing import Any, Mapping

from ...errors import ConfigError, UnsupportedModelError
from ..blocks import (ExtraNorms, LinearProjector, PatchEmbed, PositionTable, VisionLayers,
                      VisualVocabularyHead)
from ..fields import Fields
from ..parts import MERGER, VISION_TOWER
from ..spec import ModelSpec, VisionSpec
from . import Family, register_family
from .decoder import lm_blocks, read_lm, vision_and_text_sections
from .media import DerivedMedia, MediaRule, no_video, positive

# Ovis2VisionConfig class defaults (transformers 5.24 configuration_ovis2.py); num_visual_indicator_tokens 5 is
# also what Ovis2Config passes when it builds the vision config
VISION_DEFAULTS: dict[str, Any] = {
    "hidden_size": 1024, "intermediate_size": 2816, "num_hidden_layers": 24, "num_attention_heads": 8,
    "num_channels": 3, "image_size": 224, "patch_size": 14, "qkv_bias": False, "mlp_bias": False,
    "vocab_size": 16384, "hidden_stride": 1, "num_visual_indicator_tokens": 5, "tokenize_function": "softmax"}
# Ovis2Config class defaults for the fields the model reads outside text_config
TOP_DEFAULTS: dict[str, Any] = {"hidden_size": 1536, "vocab_size": 151643, "tie_word_embeddings": True}
TOKENIZE_FUNCTIONS = ("softmax", "gumbel_argmax", "st_argmax")  # Ovis2VisionModel.forward: none is a matmul

# Ovis2ImageProcessorPil class defaults (transformers 5.24); Ovis2Processor's image_seq_length default 256
PROCESSOR_DEFAULTS: dict[str, Any] = {"size": {"height": 384, "width": 384}, "crop_to_patches": False,
                                      "min_patches": 1, "max_patches": 12, "use_covering_area_grid": True}
IMAGE_SEQ_LENGTH = 256
COVERING_THRESHOLD = 0.9  # crop_image_to_patches' covering_threshold (not a processor setting)


def _int(f: Fields, key: str, default: int, minimum: int = 1) -> int:
    value = f.opt(key, default)
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise ConfigError(f"{f.source}: field {f.name_of(key)} must be an integer >= {minimum}, got {value!r}")
    return value


def build(config: Mapping[str, Any], source: str, name: str = "") -> ModelSpec:
    vc, tc, text_type = vision_and_text_sections(config, source, "ovis2", "qwen2", ("qwen2",))
    top = Fields(config, "", source)
    tie = bool(config.get("tie_word_embeddings", TOP_DEFAULTS["tie_word_embeddings"]))
    lm = read_lm(Fields(dict(tc, tie_word_embeddings=tie), "text_config", source), text_type, tie_default=True)
    for key in ("hidden_size", "vocab_size"):  # lm_head and the visual table read the top-level values
        value = _int(top, key, TOP_DEFAULTS[key])
        text_value = lm.hidden_size if key == "hidden_size" else lm.vocab_size
        if value != text_value:
            where = "" if key in config else " (Ovis2Config's class default)"
            raise UnsupportedModelError(f"{source}: ovis2 {key} {value}{where} differs from text_config.{key} "
                                        f"{text_value}; lm_head / the visual embedding table would not fit the LM")
    f = Fields(vc, "vision_config", source)
    d = VISION_DEFAULTS
    width, heads = _int(f, "hidden_size", d["hidden_size"]), _int(f, "num_attention_heads", d["num_attention_heads"])
    if width % heads:
        raise ConfigError(f"{source}: vision_config.hidden_size {width} is not divisible by num_attention_heads {heads}")
    image_size, patch = _int(f, "image_size", d["image_size"]), _int(f, "patch_size", d["patch_size"])
    side, stride = image_size // patch, _int(f, "hidden_stride", d["hidden_stride"])
    if side == 0:
        raise ConfigError(f"{source}: vision_config.image_size {image_size} is smaller than patch_size {patch}")
    if side % stride:
        raise UnsupportedModelError(f"{source}: a {side} x {side} patch tile is not a multiple of hidden_stride "
                                    f"{stride}; the zero-padded fold is not modelled")
    vocab = _int(f, "vocab_size", d["vocab_size"])
    indicators = _int(f, "num_visual_indicator_tokens", d["num_visual_indicator_tokens"], minimum=0)
    if indicators >= vocab:
        raise ConfigError(f"{source}: vision_config.num_visual_indicator_tokens {indicators} leaves no visual "
                          f"words in vocab_size {vocab}")
    if f.opt("tokenize_function", d["tokenize_function"]) not in TOKENIZE_FUNCTIONS:
        raise UnsupportedModelError(f"{source}: vision_config.tokenize_function "
                                    f"{f.opt('tokenize_function')!r}: transformers knows {', '.join(TOKENIZE_FUNCTIONS)}")
    depth, mlp = _int(f, "num_hidden_layers", d["num_hidden_layers"]), _int(f, "intermediate_size",
                                                                           d["intermediate_size"])
    qkv_bias, mlp_bias = bool(f.opt("qkv_bias", d["qkv_bias"])), bool(f.opt("mlp_bias", d["mlp_bias"]))
    channels = _int(f, "num_channels", d["num_channels"])
    vision = VisionSpec(
        family="ovis2", depth=depth, hidden_size=width, num_heads=heads, head_dim=width // heads,
        intermediate_size=mlp, mlp_gated=True, patch_size=patch, temporal_patch_size=1, in_channels=channels,
        spatial_merge_size=stride, out_hidden_size=lm.hidden_size, num_position_embeddings=side * side,
        patch_embed_bias=True, norm="rmsnorm")
    blocks = (
        PatchEmbed(part=VISION_TOWER, count=1, in_volume=channels * patch * patch, width=width, bias=True),
        ExtraNorms(part=VISION_TOWER, count=1, width=width, norm="rmsnorm", what="patch-embedding rms_norm"),
        PositionTable(part=VISION_TOWER, count=1, entries=side * side, width=width),
        VisionLayers(part=VISION_TOWER, count=depth, width=width, num_heads=heads, head_dim=width // heads,
                     mlp_width=mlp, mlp_gated=True, attention="frame", qkv_bias=qkv_bias, proj_bias=qkv_bias,
                     mlp_bias=mlp_bias, norm="rmsnorm"),
        ExtraNorms(part=VISION_TOWER, count=1, width=width, norm="rmsnorm", what="post-encoder rms_norm"),
        VisualVocabularyHead(part=VISION_TOWER, count=1, in_width=width * stride * stride, vocab=vocab - indicators),
        LinearProjector(part=MERGER, count=1, widths=(vocab, lm.hidden_size), biases=(False,),
                        label="visual embedding table (probabilities @ table)"),
    ) + lm_blocks(lm)
    spec = ModelSpec(name=name or str(config.get("_name_or_path") or "ovis2"), model_type="ovis2", lm=lm,
                     vision=vision, source=source, family="ovis2", blocks=blocks)
    spec.extra.update(image_size=image_size, fixed_grid_side=side)
    return spec


# ----------------------------------------------------------------------------------------------- tiling
def aspect_ratios(lo: int, hi: int) -> list[tuple[int, int]]:
    """Every (a, b) with lo <= a·b <= hi, a then b ascending, stably sorted by a·b (the processor's order, which
    decides its ties)."""
    pairs = [(a, b) for a in range(1, hi + 1) for b in range(1, hi + 1) if lo <= a * b <= hi]
    return sorted(pairs, key=lambda p: p[0] * p[1])


def _covered(height: int, width: int, grid: tuple[int, int], side: int) -> float:
    """Fraction of the image a ``grid`` split keeps at full detail: each cell (the last row / column takes the
    remainder) counts its area, its longer side capped at ``side`` (the shorter one scaled with it)."""
    rows_h, cols_w = height // grid[0], width // grid[1]
    total = 0.0
    for r in range(grid[0]):
        for c in range(grid[1]):
            cell_h = height - r * rows_h if r == grid[0] - 1 else rows_h
            cell_w = width - c * cols_w if c == grid[1] - 1 else cols_w
            long: float = max(cell_h, cell_w)
            short: float = min(cell_h, cell_w)
            if long > side:
                short, long = short / long * side, side
            total += long * short
    return total / (height * width)


def covering_grid(height: int, width: int, side: int, max_tiles: int) -> tuple[int, int]:
    """The fewest tiles whose split covers more than 90 % of the image (ties: the better covering, then the
    earlier pair); if none does, the best covering (ties: fewer tiles)."""
    scored = [(g, _covered(height, width, g, side)) for g in aspect_ratios(1, max_tiles)]
    enough = [(g, cov) for g, cov in scored if cov > COVERING_THRESHOLD]
    if enough:
        return min(enough, key=lambda x: (x[0][0] * x[0][1], -x[1]))[0]
    return min(scored, key=lambda x: (-x[1], x[0][0] * x[0][1]))[0]


def closest_canvas(height: int, width: int, side: int, lo: int, hi: int) -> tuple[int, int]:
    """The (a, b) whose a/b is closest to width/height; on a tie the later pair wins when the image's area is over
    half the canvas a·b·side²."""
    best, best_diff = (1, 1), float("inf")
    for a, b in aspect_ratios(lo, hi):
        diff = abs(width / height - a / b)
        if diff < best_diff:
            best, best_diff = (a, b), diff
        elif diff == best_diff and width * height > 0.5 * side * side * a * b:
            best = (a, b)
    return best


def placeholders(cells: int, per_tile: int) -> int:
    """``Ovis2Processor.replace_image_token``: <IMG_START>, ``per_tile`` atoms (the whole image), <IMG_GRID>, then
    for a split into ``cells`` > 1 tiles their atoms with a <IMG_COL> / <IMG_ROW> between neighbours (cells - 1
    separators), <IMG_END>."""
    if cells == 1:
        return per_tile + 3
    return (cells + 1) * per_tile + cells + 2


class Ovis2Media(MediaRule):
    """Ovis2 images (``Ovis2ImageProcessorPil`` + ``Ovis2Processor``): settings from preprocessor_config.json
    (``size``, ``crop_to_patches``, ``min_patches``, ``max_patches``, ``use_covering_area_grid``) and
    processor_config.json (``image_seq_length``), each key the files omit at its class default (size 384,
    crop_to_patches false, 1, 12, true; 256). ``size`` must equal the tower's ``image_size`` (its position table
    has one entry per patch of that tile: transformers' forward fails otherwise), and ``image_seq_length`` the
    folded tokens per tile (the model refuses a mismatch).

    Without ``crop_to_patches`` (or with max_patches 1) an image is one tile. With it, the image is split into an
    a x b grid (``covering_grid``, or ``closest_canvas`` with use_covering_area_grid false) of ``size`` tiles,
    plus a whole-image thumbnail in front when a·b > 1. Grid (tiles, side, side); LM placeholders
    ``placeholders(a·b, image_seq_length)`` (indicator tokens included)."""

    family = "ovis2"

    def settings(self, spec) -> dict:
        pre = spec.processor.get("preprocessor_config.json", {})
        proc = spec.processor.get("processor_config.json", {})
        out = {key: pre.get(key, default) for key, default in PROCESSOR_DEFAULTS.items()}
        out["image_seq_length"] = proc.get("image_seq_length", IMAGE_SEQ_LENGTH)
        given = [k for k in PROCESSOR_DEFAULTS if k in pre] + (["image_seq_length"] if "image_seq_length" in proc
                                                               else [])
        out["source"] = ("processor files" if len(given) == len(out) else
                         "Ovis2ImageProcessorPil / Ovis2Processor class defaults (transformers 5.24)" if not given
                         else "processor files; " + ", ".join(k for k in out if k not in given)
                         + ": class defaults (transformers 5.24)")
        tile, size = int(spec.extra["image_size"]), out["size"]
        if not isinstance(size, dict) or (size.get("height"), size.get("width")) != (tile, tile):
            why = " (the class default: pass the checkpoint's preprocessor_config.json)" if "size" not in pre else ""
            raise UnsupportedModelError(f"{spec.name}: image processor size {size}{why} differs from the tower's "
                                        f"{tile}-px image_size; its position table has one entry per patch of that "
                                        "tile, so transformers' forward fails on any other")
        per_tile = (spec.extra["fixed_grid_side"] // spec.vision.spatial_merge_size) ** 2
        if out["image_seq_length"] != per_tile:
            raise UnsupportedModelError(f"{spec.name}: processor image_seq_length {out['image_seq_length']} differs "
                                        f"from the {per_tile} folded tokens of a {tile}-px tile; the model refuses it")
        for key in ("min_patches", "max_patches"):
            value = out[key]
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ConfigError(f"preprocessor_config.json: {key} must be a positive integer, got {value!r}")
        return out

    def image(self, spec, height: int, width: int) -> DerivedMedia:
        height, width = positive((height, width), "image size (H, W pixels)")
        s = self.settings(spec)
        tile, side = int(spec.extra["image_size"]), int(spec.extra["fixed_grid_side"])
        grid = (1, 1)
        if s["crop_to_patches"] and s["max_patches"] > 1:
            if s["use_covering_area_grid"]:
                grid = covering_grid(height, width, tile, s["max_patches"])
            else:
                grid = closest_canvas(height, width, tile, s["min_patches"], s["max_patches"])
        cells = grid[0] * grid[1]
        tiles = cells + 1 if cells > 1 else 1
        return DerivedMedia("image", (height, width), (tile, tile), (tiles, side, side),
                            placeholders(cells, s["image_seq_length"]), tiles=tiles,
                            detail={"tile_grid": grid})

    def video(self, spec, frames: int, height: int, width: int) -> DerivedMedia:
        raise no_video(f"{spec.name} (ovis2)", "Ovis2Processor", "Ovis2ForConditionalGeneration")


register_family(Family(
    name="ovis2", model_types=("ovis2",), build=build, hf_class="Ovis2ForConditionalGeneration", is_vlm=True,
    media=Ovis2Media(),
    notes=("the visual head (Linear to the visual vocabulary) is billed in the tower's vision.mlp; the visual "
           "embedding table's probabilities @ table matmul is the projector (vision.merger)",
           "softmax / LayerNorm / RMSNorm, the hidden_stride fold and the indicator-token look-ups are not matmuls",
           "every tile (and the thumbnail of a split image) is one fixed image_size tile with its own attention",
           "adapters are refused in one line (no module-name layout for this family); tower-layer slices work, the "
           "visual head and table train or freeze with their parts")))
