"""MiniCPM-V 4.6 / 4.7 and MiniCPM-OCR (transformers ``minicpmv4_6`` / ``minicpmv4_7`` / ``minicpm_ocr``; one
module: the three share every shape).

Read from transformers 5.24 ``models/minicpmv4_6/modeling_minicpmv4_6.py`` (``minicpm_ocr/modeling_minicpm_ocr.py``
is the same code; ``minicpmv4_7`` adds only canvas M-RoPE position ids, not a matmul):

* **Tower** (``MiniCPMV4_6VisionModel``, SigLIP NaViT): ``patch_embedding`` Conv2d(C -> h_v, kernel = stride =
  patch, bias) on the packed patches, learned position table ((image_size/patch)^2 rows, nearest lookup: not a
  matmul), ``num_hidden_layers`` SigLIP layers (LayerNorm, q/k/v/out Linear with bias, attention per image /
  slice, LayerNorm, fc1 -> GELU-tanh -> fc2). In ``downsample_mode`` ``"16x"`` (the 4.6 / 4.7 default) the
  ``vit_merger`` (``MiniCPMV4_6ViTWindowAttentionMerger``) runs after layer ``insert_layer_id``: LayerNorm,
  attention inside each 2x2 window, then LayerNorm(4h_v) -> Linear(4h_v -> 4i_v) -> GELU-tanh -> Linear(4i_v ->
  h_v) plus the window mean; the remaining layers run on the quarter grid. ``"4x"`` (MiniCPM-OCR's default):
  no vit_merger, every layer on the full grid. ``post_layernorm``.
* **Projector** (``MiniCPMV4_6Merger``, ``merger_times`` 1): 2x2 fold -> LayerNorm(4h_v) -> Linear(4h_v ->
  4h_v) -> GELU -> Linear(4h_v -> h_text), on patches / 16 (``"16x"``) or / 4 (``"4x"``) rows. No perceiver
  resampler: these transformers classes have none (earlier MiniCPM-V releases with one are remote code only).
* **LM**: ``text_config`` ``qwen3_5_text`` (the Qwen3.5 hybrid gated-delta-net / full-attention decoder,
  :mod:`.qwen3_5`) or ``qwen3_5_moe_text`` (its MoE variant: routed top-k experts + a gated shared expert in
  every layer); top-level ``tie_word_embeddings`` (class default False; MiniCPM-OCR True).

Media: ``MiniCPMV4_6ImageProcessor`` slicing (what transformers maps ``minicpmv4_6`` and ``minicpmv4_7`` to):
an overview image resized to about ``scale_resolution``² pixels plus, for larger images, rows x cols slices
of a refined resize; every side a multiple of patch x 4 (``"16x"``) or patch x 2 (``"4x"``); LM image tokens
per slice = its patches / 16 (or / 4). One image is two grids: the overview (1, h, w) and the slices (n, h', w').
Videos (``MiniCPMV4_6VideoProcessor``): every sampled frame is sliced like an image (unsliced frames upscaled), so
a T-frame video is the grids (T, h, w) and (T·n, h', w'), T times a frame's tokens; ``stack_frames`` > 1 refused.
"""

from __future__ import annotations

import math
from typing import Any, Mapping

from ...errors import ConfigError, UnsupportedModelError
from ..blocks import (ExtraParams, FoldedTokens, MlpProjector, PatchEmbed, PositionTable, VisionLayers,
                      WindowAttentionMerger)
from ..fields import Fields
from ..parts import MERGER, VISION_TOWER
from ..spec import ModelSpec, VisionSpec
from . import Family, register_family
from .media import DerivedMedia, MediaRule, positive
from .qwen3_5 import lm_blocks, read_lm

# composite-config class defaults (configuration_minicpmv4_6.py / _4_7.py / configuration_minicpm_ocr.py)
CLASS_DEFAULTS = {"minicpmv4_6": {"tie_word_embeddings": False, "downsample_mode": "16x"},
                  "minicpmv4_7": {"tie_word_embeddings": False, "downsample_mode": "16x"},
                  "minicpm_ocr": {"tie_word_embeddings": True, "downsample_mode": "4x"}}
# the vision-config class defaults (MiniCPMV4_6VisionConfig; the same in 4.7 and OCR)
VISION_DEFAULTS = {"hidden_size": 768, "intermediate_size": 3072, "num_hidden_layers": 12, "num_attention_heads": 12,
                   "num_channels": 3, "image_size": 224, "patch_size": 16}
MODES = {"16x": 4, "4x": 2}
# the LMs transformers builds from text_config (AutoModel): Qwen3.5 dense (4.6, 4.7-1B, OCR) and Qwen3.5-MoE
# (MiniCPM-V 4.7-35B-A3B, per the MiniCPM-V CookBook's v4.7 overview)
LM_TYPES = ("qwen3_5_text", "qwen3_5_moe_text")  # downsample_mode -> side fold from tower patches to LM tokens


def _int(f: Fields, key: str, default: int, minimum: int = 1) -> int:
    value = f.opt(key, default)
    if isinstance(value, (list, tuple)) and len(value) == 2 and value[0] == value[1]:
        value = value[0]
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise ConfigError(f"{f.source}: field {f.name_of(key)} must be an integer >= {minimum}, got {value!r}")
    return value


def _pair(f: Fields, key: str) -> None:
    """Only the (2, 2) kernels are modelled: the processor's token divisor and the tower's quarter grid
    (``get_downsampled_inputs`` halves each side) are fixed to them in transformers."""
    value = f.opt(key, [2, 2])
    if not isinstance(value, (list, tuple)) or list(value) != [2, 2]:
        raise UnsupportedModelError(f"{f.source}: {f.name_of(key)} {value!r}: only (2, 2) is modelled (transformers' "
                                    "processor and downsampled attention assume 2x2)")


def _build(model_type: str):
    defaults = CLASS_DEFAULTS[model_type]

    def build(config: Mapping[str, Any], source: str, name: str = "") -> ModelSpec:
        top = Fields(config, "", source)
        vc, tc = config.get("vision_config"), config.get("text_config")
        if not isinstance(vc, dict) or not isinstance(tc, dict):
            raise ConfigError(f"{source}: config lacks required field "
                              f"{'vision_config' if not isinstance(vc, dict) else 'text_config'} for {model_type}")
        text_type = tc.get("model_type", "qwen3_5_text")
        if text_type not in LM_TYPES:
            raise UnsupportedModelError(f"{source}: text_config.model_type {text_type!r}: only the "
                                        f"{' / '.join(LM_TYPES)} LMs are modelled for {model_type}")
        text = dict(tc)
        text["tie_word_embeddings"] = bool(config.get("tie_word_embeddings", defaults["tie_word_embeddings"]))
        lm, linear = read_lm(Fields(text, "text_config", source), moe=text_type == "qwen3_5_moe_text")
        f = Fields(vc, "vision_config", source)
        width, heads = _int(f, "hidden_size", 768), _int(f, "num_attention_heads", 12)
        if width % heads:
            raise ConfigError(f"{source}: vision_config.hidden_size {width} is not divisible by num_attention_heads "
                              f"{heads}")
        depth, mlp = _int(f, "num_hidden_layers", 12), _int(f, "intermediate_size", 3072)
        image, patch = _int(f, "image_size", 224), _int(f, "patch_size", 16)
        if image < patch:
            raise ConfigError(f"{source}: vision_config.image_size {image} is smaller than patch_size {patch}")
        mode = top.opt("downsample_mode", defaults["downsample_mode"])
        if mode not in MODES:
            raise ConfigError(f"{source}: field downsample_mode must be one of {sorted(MODES)}, got {mode!r}")
        _pair(top, "merge_kernel_size")
        _pair(f, "window_kernel_size")
        if top.opt("merger_times", 1) != 1:
            raise UnsupportedModelError(f"{source}: merger_times {top.opt('merger_times')!r}: only 1 is modelled "
                                        "(the processor's token count assumes one merge round)")
        insert = top.opt("insert_layer_id", 6)  # the top-level value overrides vision_config's in transformers
        if isinstance(insert, bool) or not isinstance(insert, int):
            raise ConfigError(f"{source}: field insert_layer_id must be an integer, got {insert!r}")
        if mode == "16x" and not 0 <= insert < depth:
            raise UnsupportedModelError(f"{source}: insert_layer_id {insert} outside 0..{depth - 1}: transformers never "
                                        "runs the vit_merger but still halves the grid (the forward fails)")
        side = image // patch
        vision = VisionSpec(family=model_type, depth=depth, hidden_size=width, num_heads=heads, head_dim=width // heads,
                            intermediate_size=mlp, mlp_gated=False, patch_size=patch, temporal_patch_size=1,
                            in_channels=_int(f, "num_channels", 3), spatial_merge_size=MODES[mode],
                            out_hidden_size=lm.hidden_size, num_position_embeddings=side * side,
                            patch_embed_bias=True, norm="layernorm")

        def layers(n: int) -> VisionLayers:
            return VisionLayers(part=VISION_TOWER, count=n, width=width, num_heads=heads, head_dim=width // heads,
                                mlp_width=mlp, mlp_gated=False, attention="frame", norm="layernorm")

        merger = WindowAttentionMerger(part=VISION_TOWER, count=1, width=width, num_heads=heads,
                                       head_dim=width // heads, mlp_width=mlp, window=2)
        if mode == "16x":
            tower: tuple = (layers(insert + 1), merger)
            if depth - insert - 1:
                tower += (FoldedTokens(part=VISION_TOWER, count=1, module=layers(depth - insert - 1), fold=2),)
        else:  # built but never run in "4x": parameters only
            tower = (layers(depth), ExtraParams(part=VISION_TOWER, count=1, label="vit_merger (not run in 4x mode)",
                                                numel=merger.params()))
        blocks = (
            PatchEmbed(part=VISION_TOWER, count=1, in_volume=vision.patch_volume, width=width, bias=True),
            PositionTable(part=VISION_TOWER, count=1, entries=side * side, width=width),
        ) + tower + (
            ExtraParams(part=VISION_TOWER, count=1, label="post_layernorm", numel=2 * width),
            MlpProjector(part=MERGER, count=1, in_width=4 * width, hidden_width=4 * width, out_width=lm.hidden_size,
                         norm_width=4 * width, norm="layernorm", bias=True),
        ) + lm_blocks(lm, linear)
        spec = ModelSpec(name=name or str(config.get("_name_or_path") or model_type), model_type=model_type, lm=lm,
                         vision=vision, source=source, family=model_type, blocks=blocks)
        spec.extra["layer_types"] = linear["types"]
        spec.extra["downsample_mode"] = mode
        return spec
    return build


# ------------------------------------------------------------------------------------------------ slicing rule
# MiniCPMV4_6ImageProcessor class defaults
PROCESSOR_DEFAULTS = {"max_slice_nums": 9, "scale_resolution": 448, "patch_size": 14, "slice_mode": True,
                      "downsample_mode": "16x"}
# MiniCPMV4_6VideoProcessor's further class defaults (MiniCPMOcrVideoProcessor: the same, downsample_mode "4x")
VIDEO_DEFAULTS = {"max_num_frames": 128, "stack_frames": 1}


def _to_multiple(length: float, unit: int) -> int:
    """Nearest multiple of ``unit`` (Python's round: halves to even), at least one ``unit``."""
    return max(round(length / unit) * unit, unit)


def best_resize(height: float, width: float, scale: int, unit: int, upscale: bool) -> tuple[int, int]:
    """A size of about ``scale``² pixels with the aspect ratio kept (only when larger, or ``upscale``), each side
    then moved to the nearest multiple of ``unit`` (= patch x fold)."""
    if height * width > scale * scale or upscale:
        aspect = width / height
        height = int(scale / math.sqrt(aspect))
        width = int(height * aspect)
    return _to_multiple(height, unit), _to_multiple(width, unit)


def slice_grid(height: int, width: int, max_slices: int, scale: int) -> tuple[int, int] | None:
    """(rows, cols) of slices, or None for no slicing: n = min(ceil(H·W / scale²), max) slices (None if n <= 1);
    among n-1, n, n+1 slices (2..max) the factorisation rows x cols whose log aspect is nearest the image's, ties
    to more rows."""
    n = min(math.ceil(height * width / (scale * scale)), max_slices)
    if n <= 1:
        return None
    target = math.log(width / height)
    best, err = (1, 1), float("inf")
    for total in (n - 1, n, n + 1):
        if total == 1 or total > max_slices:
            continue
        for rows in range(1, total + 1):
            if total % rows:
                continue
            e = abs(target - math.log((total // rows) / rows))
            if e < err or (e == err and rows > best[0]):
                best, err = (rows, total // rows), e
    return best


class MiniCPMVMedia(MediaRule):
    """``MiniCPMV4_6ImageProcessor`` (slice mode, the class default): overview = :func:`best_resize` of the image
    (upscaled only when not sliced); sliced images (:func:`slice_grid`) add rows x cols slices, each
    :func:`best_resize` (upscaling) of (H / rows, W / cols) after both sides are moved to multiples of rows /
    cols. LM image tokens per slice: its patches / 16 (``"16x"``) or / 4 (``"4x"``); the ``<image>``,
    ``<slice>``, image-id and newline markers are text (part of ``--seq-len``). Settings from
    preprocessor_config.json, else the class defaults (max_slice_nums 9, scale_resolution 448, patch_size 14);
    ``MiniCPMV4_6Processor`` passes no size kwargs. Videos (``MiniCPMV4_6VideoProcessor``, settings from
    video_preprocessor_config.json else its class defaults): every sampled frame is sliced like an image, an
    unsliced frame always upscaled; a T-frame video is T x one frame's grids and tokens; ``stack_frames`` > 1
    (sub-second frames pasted into one canvas per second) is refused (see :meth:`video`)."""

    def __init__(self, family: str):
        self.family = family

    defaults: Mapping[str, Any] = PROCESSOR_DEFAULTS
    processor_class = "MiniCPMV4_6ImageProcessor"

    def settings(self, spec) -> dict:
        pre = spec.processor.get("preprocessor_config.json", {})
        out = {k: pre.get(k, v) for k, v in self.defaults.items()}
        out["source"] = "processor files" if pre else f"{self.processor_class} class defaults"
        return out

    def upscale_unsliced(self, settings: Mapping[str, Any]) -> bool:
        """Whether an image that is not sliced is upscaled to about scale_resolution² (always, for 4.6 / 4.7)."""
        return True

    def image(self, spec, height: int, width: int) -> DerivedMedia:
        height, width = positive((height, width), "image size (H, W pixels)")
        s = self.settings(spec)
        grids, (rows, cols), (oh, ow), tokens = self._slices(spec, s, height, width, self.upscale_unsliced(s),
                                                             "image processor")
        p = spec.vision.patch_size
        return DerivedMedia("image", (height, width), (oh, ow), grids[0], tokens, tiles=1 + rows * cols,
                            extra_grids=tuple(grids[1:]),
                            detail={"slices": [rows, cols], "slice_px": [grids[-1][1] * p, grids[-1][2] * p]})

    def _slices(self, spec, s: Mapping[str, Any], height: int, width: int, upscale: bool, what: str):
        """One picture (an image, or one video frame) through the slicing rule: its grids (overview, then the
        slices), (rows, cols) (0, 0 unsliced), the overview size in pixels and its LM tokens."""
        v = spec.vision
        if s["patch_size"] != v.patch_size:
            raise UnsupportedModelError(f"{spec.name}: the {what}'s patch_size {s['patch_size']} differs "
                                        f"from vision_config.patch_size {v.patch_size}")
        if s["downsample_mode"] != spec.extra["downsample_mode"]:
            raise UnsupportedModelError(f"{spec.name}: the {what}'s downsample_mode {s['downsample_mode']!r}"
                                        f" differs from the model's {spec.extra['downsample_mode']!r} (config.json "
                                        "downsample_mode): the placeholders would not match the features; state "
                                        "the mode the model runs in in both files")
        fold = MODES[s["downsample_mode"]]
        unit, scale, p = v.patch_size * fold, int(s["scale_resolution"]), v.patch_size
        grid = slice_grid(height, width, int(s["max_slice_nums"]), scale) if s["slice_mode"] else None
        oh, ow = best_resize(height, width, scale, unit, upscale=grid is None and upscale)
        grids = [(1, oh // p, ow // p)]
        rows = cols = 0
        if grid is not None:
            rows, cols = grid
            sh, sw = best_resize(_to_multiple(height, rows) / rows, _to_multiple(width, cols) / cols, scale, unit,
                                 upscale=True)
            grids.append((rows * cols, sh // p, sw // p))
        tokens = sum(t * h * w for t, h, w in grids) // (fold * fold)
        return grids, (rows, cols), (oh, ow), tokens

    video_processor_class = "MiniCPMV4_6VideoProcessor"

    def video_settings(self, spec) -> dict:
        """video_preprocessor_config.json, else the video processor's class defaults (the image ones plus
        max_num_frames 128 and stack_frames 1)."""
        vid = spec.processor.get("video_preprocessor_config.json", {})
        out = {k: vid.get(k, v) for k, v in {**PROCESSOR_DEFAULTS, **VIDEO_DEFAULTS,
                                             "downsample_mode": self.defaults["downsample_mode"]}.items()}
        for key in ("max_num_frames", "stack_frames", "max_slice_nums", "scale_resolution", "patch_size"):
            value = out[key]
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ConfigError(f"{spec.name}: video_preprocessor_config.json field {key} must be an integer "
                                  f">= 1, got {value!r}")
        out["source"] = "processor files" if vid else f"{self.video_processor_class} class defaults"
        return out

    def video(self, spec, frames: int, height: int, width: int) -> DerivedMedia:
        """``MiniCPMV4_6VideoProcessor`` (also MiniCPM-OCR's: the same code, default ``"4x"``): every frame is a
        picture through the image slicing rule (:meth:`_slices`), an unsliced frame always upscaled (no
        ``small_image_upsize`` for videos); per frame an ``<image>`` run of overview tokens then rows x cols
        ``<slice>`` runs (``MiniCPMV4_6Processor.replace_video_token``). ``frames`` are the sampled ones: the
        processor's ``sample_frames`` takes one frame per started second of the clip, at most
        ``max_num_frames`` (:func:`sampled_frames`). ``stack_frames`` > 1 (sub-second frames pasted into one
        canvas per second) is refused: which frames are stacked depends on the clip's duration, not on T."""
        frames, height, width = positive((frames, height, width), "video size (T frames, H, W pixels)")
        s = self.video_settings(spec)
        if s["stack_frames"] != 1:
            raise UnsupportedModelError(f"{spec.name}: video_preprocessor_config.json stack_frames "
                                        f"{s['stack_frames']}: only 1 is modelled (stacked sub-second frames "
                                        "depend on the clip's duration); give the grids (t, h, w patches) instead")
        grids, (rows, cols), (oh, ow), tokens = self._slices(spec, s, height, width, True, "video processor")
        p = spec.vision.patch_size
        return DerivedMedia("video", (frames, height, width), (oh, ow), (frames, grids[0][1], grids[0][2]),
                            frames * tokens, tiles=frames * (1 + rows * cols),
                            extra_grids=tuple((frames * t, h, w) for t, h, w in grids[1:]),
                            detail={"frames": frames, "slices": [rows, cols], "tiles_per_frame": 1 + rows * cols,
                                    "slice_px": [grids[-1][1] * p, grids[-1][2] * p]})


def sampled_frames(duration: float, max_num_frames: int = 128) -> int:
    """Frames ``MiniCPMV4_6VideoProcessor.sample_frames`` keeps (``stack_frames`` 1) for a clip of ``duration``
    seconds: one per started second, or ``max_num_frames`` for a clip longer than ``max_num_frames`` seconds."""
    if isinstance(duration, bool) or not isinstance(duration, (int, float)) or not duration > 0:
        raise ConfigError(f"video duration must be a positive number of seconds, got {duration!r}")
    if isinstance(max_num_frames, bool) or not isinstance(max_num_frames, int) or max_num_frames < 1:
        raise ConfigError(f"max_num_frames must be an integer >= 1, got {max_num_frames!r}")
    return max_num_frames if duration > max_num_frames else math.ceil(duration)


class MiniCPMOcrMedia(MiniCPMVMedia):
    """``MiniCPMOcrImageProcessor``: the MiniCPM-V slicing (same helper functions, class defaults 9 slices, 448,
    patch 14, ``"4x"``) plus ``small_image_upsize``: ``"always"`` (class default) upscales an unsliced image like
    4.6; ``"never"`` keeps an unsliced image's size (sides only moved to multiples of patch x fold); sliced images
    are unchanged by it. ``"adaptive"`` (upscaling chosen per image and per slice from the glyph size and density
    OpenCV measures: the pixels' content) is refused: give the grids (t, h, w patches) instead. Videos: the 4.6
    video processor's rule (:meth:`MiniCPMVMedia.video`; ``MiniCPMOcrVideoProcessor`` is the same code)."""

    defaults = {**PROCESSOR_DEFAULTS, "downsample_mode": "4x", "small_image_upsize": "always"}
    processor_class = "MiniCPMOcrImageProcessor"

    def upscale_unsliced(self, settings: Mapping[str, Any]) -> bool:
        mode = settings["small_image_upsize"]
        if mode not in ("always", "never"):
            raise UnsupportedModelError(f"minicpm_ocr: small_image_upsize {mode!r}: only 'always' and 'never' are "
                                        "modelled ('adaptive' depends on the image content); give the grids (t, h, "
                                        "w patches) instead")
        return mode == "always"


_NOTES = ("tower layers after insert_layer_id run on the quarter grid (after the 2x2 window-attention merger)",
          "gated-delta layers: chunked delta rule (chunk 64) matmuls counted, as in qwen3_5",
          "position lookups, the window mean and the 2x2 folds are not matmuls (0 FLOPs)",
          "drop_vision_last_layer is not read by transformers' classes: every tower layer runs")
for _type, _cls in (("minicpmv4_6", "MiniCPMV4_6ForConditionalGeneration"),
                    ("minicpmv4_7", "MiniCPMV4_7ForConditionalGeneration"),
                    ("minicpm_ocr", "MiniCPMOcrForConditionalGeneration")):
    register_family(Family(name=_type, model_types=(_type,), build=_build(_type), hf_class=_cls, is_vlm=True,
                           media=MiniCPMOcrMedia(_type) if _type == "minicpm_ocr" else MiniCPMVMedia(_type),
                           notes=_NOTES))
