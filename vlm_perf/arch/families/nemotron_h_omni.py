"""Nemotron omni / Nemotron-Nano-VL (transformers ``nemotron_h_omni``: ``NemotronH_Omni_Reasoning_V3``): a RADIO
vision tower, a pixel-shuffle MLP projector and a Nemotron-H (Mamba-2 hybrid) LM.

Read from transformers 5.24 ``models/radio/modeling_radio.py`` and ``models/nemotron_h_omni/{modeling,
image_processing,video_processing,processing}_nemotron_h_omni.py``:

* **Tower (``RadioModel``)**: the input conditioner is detached (``make_preprocessor_external``: the processor
  normalises). CPE patch generator: images arrive as flattened patches and go through ``patch_projection``
  (Linear C·P² -> d, no bias); video tubelets (``video_temporal_patch_size`` frames stacked on the channels) through
  ``video_patch_projection`` (Linear T_p·C·P² -> d, no bias) -> :class:`~vlm_perf.arch.blocks.ImageVideoPatchEmbed`.
  A learned position table of (max_img_size/P)² entries is bilinearly interpolated to the grid (not a matmul), then
  ``num_cls_tokens + num_registers`` learned prefix tokens are prepended to every image / tubelet (the
  ``vision_cls_tokens`` statistic, ``cls_per_frame`` = that sum). ``num_hidden_layers`` pre-norm layers
  (LayerNorm, q/k/v with ``qkv_bias``, o with bias, LayerScale ``lambda1`` on both branches, MLP fc1 -> GELU ->
  fc2 of width int(d·mlp_ratio), or SwiGLU of width round_up_8(int(int(d·mlp_ratio)·2/3)) with
  ``use_swiglu_ffn``), full bidirectional attention **per image** (images of one call are packed, ``cu_seqlens``
  keeps each image to itself) and per tubelet. No final norm; the prefix tokens are dropped before the projector.
* **Projector**: pixel shuffle by ``downsample_ratio`` (0.5: 2x2 patches -> one token of 4d, no FLOPs),
  RMSNorm(4d) -> Linear(4d -> ``projector_hidden_size``) -> relu² -> Linear(-> LM hidden), no biases.
* **LM**: ``text_config`` (legacy ``llm_config``) is a Nemotron-H config (:mod:`.nemotron_h`: Mamba-2, attention,
  MLP and MoE layers; MTP refused there, so is the ``vision_final_layernorm`` that only MTP checkpoints build).

* **Audio** (``audio_config``, part ``audio``): transformers' ``ParakeetEncoder`` (FastConformer) on the mel
  features of every clip of the call padded to the longest: x8 subsampling (Conv2d 1 -> c 3x3/2, then twice a
  depthwise 3x3/2 + pointwise 1x1 conv, Linear(c·mel/8 -> d)), layers of two half-step feed-forwards,
  relative-position attention (Transformer-XL: ``relative_k_proj`` on the 2T − 1 sinusoidal positions, the q·Rᵀ
  term over T x (2T − 1) per clip), a convolution module (pointwise d -> 2d, GLU, depthwise k, BatchNorm, pointwise)
  and LayerNorms; then ``embed_audio`` RMSNorm -> Linear -> relu² -> Linear on every encoder row (padding included;
  the padding rows are dropped after it). Media: 1 + samples // 160 mel frames, h(h(h(frames))) LM placeholders.

Refused: the Parakeet ``layerdrop`` > 0 (random layer skipping in training; the class default 0.1 applies when the
field is absent), subsampling other than x8 by kernel-3 stride-2 convolutions, EVS video pruning
(``video_pruning_rate`` > 0) for videos.
"""

from __future__ import annotations

import math
from typing import Any, Mapping

from ...errors import ConfigError, UnsupportedModelError
from ..audio import clip_tokens
from ..blocks import (AudioMlpProjector, ConformerLayers, ExtraParams, ImageVideoPatchEmbed, MlpProjector,
                      ParakeetSubsampling, PositionTable, VisionLayers)
from ..fields import Fields
from ..parts import AUDIO, MERGER, VISION_TOWER
from ..spec import AudioSpec, ModelSpec, VisionSpec
from . import Family, register_family
from .media import DerivedAudio, DerivedMedia, MediaRule, positive
from .nano_vl_v2 import REMOTE_MODEL_TYPE, tile_side, to_omni_layout
from .nemotron_h import read_nemotron_h

# Processor class defaults (transformers 5.24 NemotronH_Omni_Reasoning_V3ImageProcessor / VideoProcessor)
IMAGE_DEFAULTS = {"patch_size": 16, "downsample_ratio": 0.5, "min_num_patches": 1024, "max_num_patches": 13312,
                  "max_model_len": 16384}
WHOLE_CLIP = 1 << 40  # AudioSpec.n_window for an encoder without chunks: one chunk per clip, however long
VIDEO_DEFAULTS = {"patch_size": 16, "downsample_ratio": 0.5, "video_target_num_patches": 1024,
                  "video_maintain_aspect_ratio": True}


def _section(config: Mapping[str, Any], source: str, *names: str) -> tuple[dict, str]:
    for name in names:
        value = config.get(name)
        if isinstance(value, Mapping):
            return dict(value), name
    raise ConfigError(f"{source}: field {names[0]} (a mapping) is required")


def _count(f: Fields, key: str, default: int, least: int) -> int:
    """An integer field >= ``least`` (default when absent); ConfigError naming it otherwise."""
    value = f.opt(key, default)
    if isinstance(value, bool) or not isinstance(value, int) or value < least:
        raise ConfigError(f"{f.source}: field {f.name_of(key)} must be an integer >= {least}, got {value!r}")
    return value


def _ratio(f: Fields, key: str, default: float) -> float:
    value = f.opt(key, default)
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 < value < 1e6:
        raise ConfigError(f"{f.source}: field {f.name_of(key)} must be a positive number, got {value!r}")
    return float(value)


def radio_mlp_width(width: int, ratio: float, swiglu: bool) -> int:
    """RadioMLP: int(d·ratio); RadioSwiGLUFFN: two thirds of that, rounded up to a multiple of 8."""
    hidden = int(width * ratio)
    return (int(hidden * 2 / 3) + 7) // 8 * 8 if swiglu else hidden


def read_parakeet(f: Fields, lm_hidden: int) -> tuple[AudioSpec, tuple]:
    """The Parakeet (FastConformer) sound encoder and ``embed_audio`` of an ``audio_config`` (transformers
    ``ParakeetEncoderConfig`` defaults; the omni config forces ``attention_bias`` and ``scale_input`` false)."""
    d, heads = _count(f, "hidden_size", 1024, 1), _count(f, "num_attention_heads", 8, 1)
    kv = _count(f, "num_key_value_heads", heads, 1)
    if d % heads or heads % kv:
        raise ConfigError(f"{f.source}: audio_config.hidden_size {d} / num_attention_heads {heads} / "
                          f"num_key_value_heads {kv} do not divide")
    mel = _count(f, "num_mel_bins", 80, 1)
    for key, want in (("subsampling_factor", 8), ("subsampling_conv_kernel_size", 3), ("subsampling_conv_stride", 2)):
        if f.opt(key, want) != want:
            raise UnsupportedModelError(f"{f.source}: audio_config.{key} {f.opt(key)!r}: only the x8 subsampling of "
                                        "kernel-3 stride-2 convolutions is modelled")
    if mel % 8:
        raise ConfigError(f"{f.source}: audio_config.num_mel_bins {mel} is not a multiple of 8 (transformers sizes the "
                          "subsampling Linear as mel // 8 while the convolutions give ceil halvings)")
    if f.opt("layerdrop", 0.1):
        raise UnsupportedModelError(f"{f.source}: audio_config.layerdrop {f.opt('layerdrop', 0.1)} (the class default "
                                    "0.1 when absent) skips random encoder layers in training; set it to 0 to count")
    channels = _count(f, "subsampling_conv_channels", 256, 1)
    audio = AudioSpec(family="nemotron_h_omni", frontend="parakeet", num_mel_bins=mel, d_model=d,
                      num_layers=_count(f, "num_hidden_layers", 24, 0), num_heads=heads,
                      ffn_dim=_count(f, "intermediate_size", 4096, 1), output_dim=lm_hidden, n_window=WHOLE_CLIP,
                      downsample_hidden_size=channels)
    blocks = (
        ParakeetSubsampling(part=AUDIO, count=1, mel_bins=mel, channels=channels, width=d),
        ConformerLayers(part=AUDIO, count=audio.num_layers, width=d, num_heads=heads, num_kv_heads=kv,
                        head_dim=d // heads, ffn=audio.ffn_dim, conv_kernel=_count(f, "conv_kernel_size", 9, 1),
                        bias=bool(f.opt("attention_bias", False)), conv_bias=bool(f.opt("convolution_bias", True))),
        AudioMlpProjector(part=AUDIO, count=1, in_width=d, hidden_width=_count(f, "projection_hidden_size", d, 1),
                          out_width=lm_hidden, bias=bool(f.opt("projection_bias", False))),
    )
    return audio, blocks


def build(config: Mapping[str, Any], source: str, name: str = "") -> ModelSpec:
    remote, dynamic, tile = config.get("model_type") == REMOTE_MODEL_TYPE, False, None
    if remote:  # the remote-code layout (RADIO named by a timm model): renamed into this one (.nano_vl_v2)
        vision_raw = config.get("vision_config")
        dynamic = isinstance(vision_raw, Mapping) and "min_num_patches" in vision_raw
        tile = tile_side(config, source)
        name = name or str(config.get("_name_or_path") or REMOTE_MODEL_TYPE)
        config = to_omni_layout(config, source)
    top = Fields(config, "", source)
    text, text_name = _section(config, source, "text_config", "llm_config")
    lm, lm_blocks = read_nemotron_h(Fields(text, text_name, source))
    vc, _ = _section(config, source, "vision_config")
    f = Fields(vc, "vision_config", source)
    width, heads, depth = f.int("hidden_size"), f.int("num_attention_heads"), f.int("num_hidden_layers")
    vit_hidden = _count(top, "vision_hidden_size" if "vision_hidden_size" in config else "vit_hidden_size", 1280, 1)
    if vit_hidden != width:
        raise ConfigError(f"{source}: vision_hidden_size {vit_hidden} differs from vision_config.hidden_size {width} "
                          "(the projector's input is the tower's width)")
    if width % heads:
        raise ConfigError(f"{source}: vision_config.hidden_size {width} is not divisible by num_attention_heads {heads}")
    ratio = _ratio(top, "downsample_ratio", 0.5)
    merge = int(1 / ratio)  # the model's pixel_shuffle folds int(1 / ratio) patches per side
    if merge < 1 or merge * ratio != 1:
        raise UnsupportedModelError(f"{source}: downsample_ratio {ratio} is not 1/integer")
    patch = f.square("patch_size", 16)
    channels = _count(f, "num_channels", 3, 1)
    tp = top.opt("video_temporal_patch_size", 2)
    if isinstance(tp, bool) or not isinstance(tp, int) or tp < (1 if remote else 2):
        raise ConfigError(f"{source}: field video_temporal_patch_size {tp!r} must be an integer >= 2")
    if f.opt("video_temporal_patch_size", tp) != tp:  # transformers' validate_architecture refuses it too
        raise ConfigError(f"{source}: vision_config.video_temporal_patch_size {f.opt('video_temporal_patch_size')!r} "
                          f"differs from video_temporal_patch_size {tp}")
    prefix = _count(f, "num_cls_tokens", 3, 0) + _count(f, "num_registers", 7, 0)
    mlp_ratio = _ratio(f, "mlp_ratio", 4.0)
    swiglu = bool(f.opt("use_swiglu_ffn", False))
    mlp_width = radio_mlp_width(width, mlp_ratio, swiglu)
    if mlp_width < 1:
        raise ConfigError(f"{source}: vision_config.mlp_ratio {mlp_ratio} gives an MLP of width {mlp_width}")
    table_side = _count(f, "max_img_size", 2048, patch) // patch
    if f.opt("drop_path_rate", 0.0):
        raise UnsupportedModelError(f"{source}: vision_config.drop_path_rate > 0 (stochastic depth) is not modelled")
    vision = VisionSpec(
        family="nemotron_h_omni", depth=depth, hidden_size=width, num_heads=heads, head_dim=width // heads,
        intermediate_size=mlp_width, mlp_gated=swiglu, patch_size=patch, temporal_patch_size=1,
        in_channels=channels, spatial_merge_size=merge, out_hidden_size=lm.hidden_size, patch_embed_bias=False,
        norm="layernorm", cls_per_frame=prefix, num_position_embeddings=table_side * table_side)
    proj_hidden = _count(top, "projector_hidden_size", 4096, 1)
    shuffled = merge * merge * width
    blocks = (
        ImageVideoPatchEmbed(part=VISION_TOWER, count=1, image_volume=channels * patch * patch,
                             video_volume=tp * channels * patch * patch if tp > 1 else 0, width=width),
        PositionTable(part=VISION_TOWER, count=1, entries=table_side * table_side, width=width),
        ExtraParams(part=VISION_TOWER, count=1, label=f"{prefix} class + register tokens", numel=prefix * width),
        VisionLayers(part=VISION_TOWER, count=depth, width=width, num_heads=heads, head_dim=width // heads,
                     mlp_width=mlp_width, mlp_gated=swiglu, attention="frame", cls=True,
                     qkv_bias=bool(f.opt("qkv_bias", True)), proj_bias=True, mlp_bias=True, norm="layernorm",
                     layer_scale=True),
        MlpProjector(part=MERGER, count=1, in_width=shuffled, hidden_width=proj_hidden, out_width=lm.hidden_size,
                     norm_width=shuffled, norm="rmsnorm", bias=False),
    )
    audio, audio_blocks = None, ()
    raw_audio = config.get("audio_config", config.get("sound_config"))
    if raw_audio is not None:
        if not isinstance(raw_audio, Mapping):
            raise ConfigError(f"{source}: field audio_config must be a mapping, got {raw_audio!r}")
        audio, audio_blocks = read_parakeet(Fields(dict(raw_audio), "audio_config", source), lm.hidden_size)
    spec = ModelSpec(name=name or str(config.get("_name_or_path") or "nemotron_h_omni"), model_type="nemotron_h_omni",
                     lm=lm, vision=vision, source=source, family="nemotron_h_omni",
                     blocks=blocks + audio_blocks + lm_blocks, audio=audio)
    spec.extra["video_temporal_patch_size"] = tp
    spec.extra["video_pruning_rate"] = float(top.opt("video_pruning_rate", 0.0))
    if remote:
        spec.extra["remote_layout"] = REMOTE_MODEL_TYPE
        spec.extra["image_tiling"] = "dynamic" if dynamic else f"static tiles of {tile} px"
    return spec


def patch_grid(height: int, width: int, patch: int, merge: int, min_patches: int, max_patches: int) -> tuple[int, int]:
    """(rows, columns) of patches an image is resized to (``get_patch_grid_size`` of transformers 5.24's image
    processor): the image's own grid + 1 per side (Python's round-half-even of x + 0.5), scaled down to at most
    ``max_patches``, scaled up to at least ``min_patches`` (when max > min), then each side rounded to a multiple
    of ``merge`` (up when the area stays within ``max_patches``, else down, at least ``merge``)."""
    rows, cols = round(height / patch + 0.5), round(width / patch + 0.5)
    factor = min(math.sqrt(max_patches / (rows * cols)), 1.0)
    rows, cols = math.floor(factor * rows), math.floor(factor * cols)
    if not rows * cols:
        raise UnsupportedModelError(f"nemotron_h_omni: a {height}x{width} px image scales to a {rows}x{cols} patch "
                                    f"grid under max_num_patches {max_patches} (too elongated; transformers' image "
                                    "processor fails on it)")
    if max_patches > min_patches and rows * cols < min_patches:
        factor = math.sqrt(min_patches / (rows * cols))
        rows, cols = math.ceil(factor * rows), math.ceil(factor * cols)
    if rows % merge:
        up = rows + merge - rows % merge
        rows = up if up * cols <= max_patches else max(merge, rows - rows % merge)
    if cols % merge:
        up = cols + merge - cols % merge
        cols = up if rows * up <= max_patches else max(merge, cols - cols % merge)
    return rows, cols


def video_patch_grid(height: int, width: int, target: int, merge: int, keep_aspect: bool) -> tuple[int, int]:
    """(rows, columns) of patches every frame is resized to (the video processor's ``_compute_target_patches``):
    sqrt(target / aspect) x sqrt(target · aspect) rounded, then both sides rounded up to a multiple of ``merge``
    if the area stays within ``target``, else both down (at least ``merge``); a square of the largest multiple of
    ``merge`` within sqrt(target) without ``keep_aspect``."""
    if not keep_aspect:
        side = max(merge, int(math.sqrt(target)) // merge * merge)
        return side, side
    aspect = width / max(height, 1)
    rows, cols = max(round(math.sqrt(target / aspect)), 1), max(round(math.sqrt(target * aspect)), 1)
    if merge > 1:
        rows_up = rows + (merge - rows % merge if rows % merge else 0)
        cols_up = cols + (merge - cols % merge if cols % merge else 0)
        if rows_up * cols_up <= target:
            rows, cols = rows_up, cols_up
        else:
            rows, cols = max(merge, rows - rows % merge), max(merge, cols - cols % merge)
    return rows, cols


class NemotronOmniMedia(MediaRule):
    """Nemotron omni's image and video processors.

    Images (``preprocessor_config.json``, else the processor class defaults: patch 16, downsample 0.5, 1024 to
    13312 patches, max_model_len 16384): each image is resized to :func:`patch_grid`'s grid under a patch budget
    of clamp(max((max_model_len − 4)·m², min_num_patches·images), min, max); exact when
    (max_model_len − 4)·m² >= max_num_patches (then the budget is max_num_patches whatever the call's image count;
    the shipped defaults), refused otherwise. Grid (1, rows, cols); LM tokens rows·cols/m².
    Videos (``video_preprocessor_config.json``, else target 1024 patches, aspect kept): every frame to
    :func:`video_patch_grid`'s grid; frames padded (last frame repeated) to a multiple of
    ``video_temporal_patch_size`` and stacked into tubelets: grid (ceil(T/T_p), rows, cols); LM tokens per
    tubelet rows·cols/m² (the frame labels the processor writes are text tokens, not counted here).
    """

    family = "nemotron_h_omni"

    FILES = {"image": ("preprocessor_config.json", IMAGE_DEFAULTS),
             "video": ("video_preprocessor_config.json", VIDEO_DEFAULTS)}

    def settings(self, spec) -> dict:
        out: dict[str, Any] = {}
        for key, (fname, defaults) in self.FILES.items():
            files = spec.processor.get(fname, {})
            section = {k: files.get(k, d) for k, d in defaults.items()}
            section["source"] = "processor files" if any(k in files for k in defaults) else \
                "transformers 5.24 processor class defaults"
            out[key] = section
        return out

    def _checked(self, spec, key: str) -> dict:
        """The ``image`` / ``video`` settings, refused when they disagree with the model's patch or fold."""
        section, fname = self.settings(spec)[key], self.FILES[key][0]
        if int(section["patch_size"]) != spec.vision.patch_size:
            raise UnsupportedModelError(f"{spec.name}: {fname} patch_size {section['patch_size']} differs from "
                                        f"the tower's {spec.vision.patch_size}")
        if round(1 / float(section["downsample_ratio"])) != spec.vision.spatial_merge_size:
            raise UnsupportedModelError(f"{spec.name}: {fname} downsample_ratio {section['downsample_ratio']} "
                                        f"differs from the model's 1/{spec.vision.spatial_merge_size}")
        return section

    @staticmethod
    def _remote_refused(spec, what: str) -> None:
        """Media of a remote-code ``NemotronH_Nano_VL_V2`` config are not counted (its processor is not this one)."""
        if not spec.extra.get("remote_layout"):
            return
        tiling = spec.extra.get("image_tiling", "")
        why = ("its processor tiles images InternVL-style (up to 12 tiles + a thumbnail) and the public copies "
               "disagree on the tile-grid choice (vLLM: nearest aspect ratio; another copy: an area-weighted score)"
               if tiling.startswith("static") else
               "its dynamic-resolution processor reads its patch budget from vision_config, not the files read here")
        raise UnsupportedModelError(f"{spec.name}: {what} of the remote-code {spec.extra['remote_layout']} layout "
                                    f"are not counted: {why} (the model itself, its parameters and inventory, is read)")

    def image(self, spec, height: int, width: int) -> DerivedMedia:
        height, width = positive((height, width), "image size (H, W pixels)")
        self._remote_refused(spec, "images")
        s, v = self._checked(spec, "image"), spec.vision
        m, lo, hi = v.spatial_merge_size, int(s["min_num_patches"]), int(s["max_num_patches"])
        context = (int(s["max_model_len"]) - 4) * m * m
        if not hi or context < hi:
            raise UnsupportedModelError(
                f"{spec.name}: max_num_patches {hi} with max_model_len {s['max_model_len']}: the per-image patch "
                "budget then depends on the number of images in the processor call (not modelled)")
        rows, cols = patch_grid(height, width, v.patch_size, m, lo, max(hi, lo))
        grid = (1, rows, cols)
        return DerivedMedia("image", (height, width), (rows * v.patch_size, cols * v.patch_size), grid,
                            rows * cols // (m * m))

    def video(self, spec, frames: int, height: int, width: int) -> DerivedMedia:
        frames, height, width = positive((frames, height, width), "video size (T frames, H, W pixels)")
        self._remote_refused(spec, "videos")
        tp = spec.extra["video_temporal_patch_size"]
        if spec.extra["video_pruning_rate"] > 0:
            raise UnsupportedModelError(f"{spec.name}: video_pruning_rate {spec.extra['video_pruning_rate']} (EVS: the "
                                        "model drops video tokens by content before the LM) is not modelled")
        s, v = self._checked(spec, "video"), spec.vision
        m = v.spatial_merge_size
        rows, cols = video_patch_grid(height, width, int(s["video_target_num_patches"]), m,
                                      bool(s["video_maintain_aspect_ratio"]))
        tubelets = -(-frames // tp)
        grid = (tubelets, rows, cols)
        return DerivedMedia("video", (frames, height, width), (rows * v.patch_size, cols * v.patch_size), grid,
                            tubelets * (rows * cols // (m * m)), detail={"tubelets": tubelets})


    def audio(self, spec, samples: int, longest: int | None = None) -> DerivedAudio:
        """One clip of ``samples`` samples (16 kHz): ParakeetFeatureExtractor gives 1 + samples // hop mel frames
        (hop 160; the model reads the mask's count + 1); the encoder x8 subsampling gives h(h(h(frames))) tokens,
        each one LM placeholder (the processor's ``_estimate_audio_num_embeddings``). The call's clips are padded
        to its longest (that happens in the statistics, from every clip's mel frames)."""
        (samples,) = positive((samples,), "audio length (samples)")
        if spec.audio is None:
            raise UnsupportedModelError(f"{spec.name}: the model has no audio_config; audio clips cannot be counted")
        pre = spec.processor.get("preprocessor_config.json", {})
        hop = int(pre.get("hop_length", 160))
        frames = 1 + samples // hop
        tokens = clip_tokens(spec.audio, frames)
        return DerivedAudio(samples=samples, mel_frames=frames, encoder_tokens=tokens, audio_tokens=tokens,
                            detail={"hop_length": hop})


register_family(Family(
    name="nemotron_h_omni", model_types=("nemotron_h_omni", REMOTE_MODEL_TYPE), build=build, hf_class="NemotronH_Omni_Reasoning_V3",
    is_vlm=True, media=NemotronOmniMedia(), has_audio=True,
    notes=("RADIO tower: class + register prefix tokens run through every layer (per image / tubelet) and are "
           "dropped before the projector; position-table interpolation and the pixel shuffle are not matmuls "
           "(0 FLOPs)",
           "images are packed per call but attend only within themselves (cu_seqlens); video tubelets go through "
           "their own patch projection (T_p frames stacked on the channels)",
           "LM: Nemotron-H (Mamba-2 / attention / MLP / MoE layers); MTP LMs refused",
           "audio encoder (Parakeet / FastConformer + embed_audio) counted as its own part `audio`, exact per encoder "
           "call: clips padded to the call's longest (BatchStats.from_batch(audio_frames=...)); layerdrop > 0 refused",
           "tower and projector verified by FlopCounterMode on transformers' classes; the LM's Mamba-2 layers follow "
           "the SSD training kernels (transformers' PyTorch fallback scan does more work, see nemotron_h)")))
