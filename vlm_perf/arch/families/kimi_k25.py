"""Kimi K2.5 (transformers 5.24 ``kimi_k25``: ``Kimi_K25ForConditionalGeneration``; MoonViT3d tower, DeepSeek-V3 LM).

Read from transformers' ``models/kimi_k25/modeling_kimi_k25.py`` (5.24):

* **Tower** (``Kimi_K25VisionModel``): the MoonViT maths of Kimi-VL (``kimi_vl.moonvit_blocks``): Conv2d(3 -> h_v,
  kernel = stride = patch, bias) applied to **every frame**; the learned ``pos_emb_height x pos_emb_width`` table
  resampled bicubically by an ``embedding_bag`` (not a matmul) plus a fixed sinusoidal time table (a buffer, no
  parameters; row 0 = zeros for single-frame rows); ``num_hidden_layers`` pre-norm layers (q/k/v/out projections
  with bias, axial 2D RoPE, GELU-tanh MLP fc1/fc2 with bias); ``final_layernorm``. Attention: ``cu_seqlens`` from
  ``get_vision_attention_seqlens(..., merge_temporal=True)``: each ``grid_thw`` row (an image, or one video chunk
  of up to ``temporal_patch_size`` frames) is ONE sequence of t·h·w patches -- block-diagonal over the whole
  chunk, not per frame (statistic ``vision_patches_sq_item``).
* **Temporal pooling** (``temporal_merge``): the row's frames are averaged (an ``index_add_`` with weights 1/t: no
  matmul) into one frame's h·w patches, grouped 2x2.
* **Projector** (``Kimi_K25MultimodalProjection``): LayerNorm(``projection_hidden_size`` = h_v) on each patch, the
  k x k fold, ``in_proj`` Linear(k²h_v -> k²h_v, bias), GELU, ``out_proj`` Linear(k²h_v -> LM hidden, bias): the
  Kimi-VL projector on ceil(t / chunk)·(h/k)·(w/k) rows per grid row.
* **LM**: ``AutoModel`` of ``text_config`` (``deepseek_v3``: MLA + MoE; a hub ``kimi_k2`` text type is renamed to
  ``deepseek_v3`` by the config, as here); transformers' DeepseekV3 builds no multi-token-prediction layers, so
  ``num_nextn_predict_layers`` is taken as 0. ``lm_head`` is tied to the embeddings when the TOP-LEVEL
  ``tie_word_embeddings`` says so (``Kimi_K25Config`` default: true) whatever ``text_config`` says [measured].

Media (``Kimi_K25ImageProcessor`` / ``Kimi_K25VideoProcessor``): ``navit_resize`` -- scale = min(1,
sqrt(max_patches / (max(1, H//p)·max(1, W//p))), side_max·p/H, side_max·p/W), sides ``max(1, int(side·scale))``
capped at side_max·p, then padded UP to multiples of k·p. Images: ``max_patches`` 16384; videos: the SAMPLED frames
cut into chunks of ``temporal_patch_size`` (4) frames, each chunk one ``video_grid_thw`` row, ``max_patches``
4096; ``size.max_height`` (side_max, in patches) 512 for both. LM placeholders: image h·w/k²; video
(h/k)(w/k) per chunk (``Kimi_K25Processor.replace_video_token``).
"""

from __future__ import annotations

import math
from typing import Any, Mapping

from ...errors import ConfigError, UnsupportedModelError
from ..fields import Fields
from ..spec import ModelSpec, VisionSpec
from . import Family, register_family
from .decoder import lm_blocks, read_lm, vision_and_text_sections
from .kimi_vl import moonvit_blocks
from .media import DerivedMedia, MediaRule, positive

# transformers 5.24 Kimi_K25VisionConfig class defaults (the hub config's remote-code names in brackets)
VISION_DEFAULTS = {"patch_size": 14, "pos_emb_height": 64, "pos_emb_width": 64, "pos_emb_time": 4,
                   "num_attention_heads": 16, "num_hidden_layers": 27, "hidden_size": 1152,
                   "intermediate_size": 4304}
REMOTE_NAMES = {"pos_emb_height": "init_pos_emb_height", "pos_emb_width": "init_pos_emb_width",
                "pos_emb_time": "init_pos_emb_time", "hidden_size": "vt_hidden_size",
                "num_hidden_layers": "vt_num_hidden_layers", "num_attention_heads": "vt_num_attention_heads",
                "intermediate_size": "vt_intermediate_size"}
# remote-code vision_config switches transformers 5.24 does not read: a value other than Kimi K2.5's (or absent)
# means a different architecture than the one transformers builds -- refused, not counted as K2.5
REMOTE_SWITCHES = {"mm_projector_type": ("patchmerger",), "merge_type": ("sd2_tpool",),
                   "video_attn_type": ("spatial_temporal",), "pos_emb_type": ("divided_fixed",),
                   "norm_type": ("layernorm",), "mlp_type": ("mlp2",)}
PROJECTION_HIDDEN_DEFAULT = 1152  # Kimi_K25Config.projection_hidden_size
# Kimi_K25ImageProcessor / Kimi_K25VideoProcessor class defaults (transformers 5.24)
IMAGE_DEFAULTS = {"patch_size": 14, "merge_size": 2, "max_patches": 16384, "max_side": 512}
VIDEO_DEFAULTS = {"patch_size": 14, "merge_size": 2, "max_patches": 4096, "max_side": 512, "temporal_patch_size": 4}


def build(config: Mapping[str, Any], source: str, name: str = "") -> ModelSpec:
    vc, tc, text_type = vision_and_text_sections(config, source, "kimi_k25", "deepseek_v3",
                                                 ("deepseek_v3", "kimi_k2"))
    # the top-level tie_word_embeddings decides (Kimi_K25Config default true); no MTP layers in transformers
    text = dict(tc, model_type="deepseek_v3", num_nextn_predict_layers=0,
                tie_word_embeddings=bool(config.get("tie_word_embeddings", True)))
    lm = read_lm(Fields(text, "text_config", source), "deepseek_v3")
    f = Fields(vc, "vision_config", source)

    def opt_int(key: str) -> int:
        value = f.int(key) if vc.get(key) is not None else VISION_DEFAULTS[key]
        remote = REMOTE_NAMES.get(key)
        if remote and vc.get(remote) is not None and vc[remote] != value:
            raise UnsupportedModelError(
                f"{source}: vision_config.{remote} {vc[remote]!r} (remote-code name) differs from the {key} {value} "
                "transformers 5.24 builds (it reads only pos_emb_*); give vision_config." + key)
        return value

    for key, allowed in REMOTE_SWITCHES.items():
        if vc.get(key) is not None and vc[key] not in allowed:
            raise UnsupportedModelError(f"{source}: vision_config.{key} {vc[key]!r}: transformers 5.24's kimi_k25 "
                                        f"builds only {allowed[0]!r} (a different tower / projector is not modelled)")
    width, heads = opt_int("hidden_size"), opt_int("num_attention_heads")
    if heads <= 0 or width % heads:
        raise ConfigError(f"{source}: vision_config.hidden_size {width} is not divisible by num_attention_heads {heads}")
    merge = list(f.int_list("merge_kernel_size", [2, 2]))
    if len(merge) != 2 or merge[0] != merge[1] or merge[0] <= 0:
        raise UnsupportedModelError(f"{source}: vision_config.merge_kernel_size {merge!r}: only a square k x k merge "
                                    "is modelled")
    projection = config.get("projection_hidden_size", PROJECTION_HIDDEN_DEFAULT)
    if vc.get("qkv_hidden_size") is not None and vc["qkv_hidden_size"] != width:
        raise UnsupportedModelError(f"{source}: vision_config.qkv_hidden_size {vc['qkv_hidden_size']!r} differs from "
                                    f"hidden_size {width}; transformers 5.24's kimi_k25 projects q/k/v to hidden_size")
    if projection != width:
        raise ConfigError(f"{source}: projection_hidden_size {projection!r} must equal vision_config.hidden_size "
                          f"{width} (the projector's LayerNorm runs on the tower's patches)")
    frames = opt_int("pos_emb_time")
    if frames <= 0:
        raise ConfigError(f"{source}: vision_config.pos_emb_time must be positive, got {frames}")
    vision = VisionSpec(
        family="kimi_k25", depth=opt_int("num_hidden_layers"), hidden_size=width, num_heads=heads,
        head_dim=width // heads, intermediate_size=opt_int("intermediate_size"), mlp_gated=False,
        patch_size=opt_int("patch_size"), temporal_patch_size=1, in_channels=3, spatial_merge_size=merge[0],
        out_hidden_size=lm.hidden_size, num_position_embeddings=opt_int("pos_emb_height") * opt_int("pos_emb_width"),
        patch_embed_bias=True, norm="layernorm", temporal_chunk=frames)
    blocks = moonvit_blocks(vision, vision.num_position_embeddings, "item") + lm_blocks(lm)
    return ModelSpec(name=name or str(config.get("_name_or_path") or "kimi_k25"), model_type="kimi_k25", lm=lm,
                     vision=vision, source=source, family="kimi_k25", blocks=blocks)


def navit_resize(height: int, width: int, patch: int, merge: int, max_patches: int,
                 max_side: int) -> tuple[tuple[int, int], tuple[int, int]]:
    """((resized H, W), (padded H, W)) in pixels, the Kimi K2.5 processors' resize: never upscale; the most
    restrictive of the patch budget and the per-side cap (``max_side`` patches); pad up to multiples of
    merge x patch."""
    count = max(1, height // patch) * max(1, width // patch)
    scale = min(1.0, math.sqrt(max_patches / count), max_side * patch / height, max_side * patch / width)
    h = min(max(1, int(height * scale)), max_side * patch)
    w = min(max(1, int(width * scale)), max_side * patch)
    step = merge * patch
    return (h, w), (-(-h // step) * step, -(-w // step) * step)


class KimiK25Media(MediaRule):
    """Kimi K2.5 images and videos (``navit_resize``; see the module docstring). Settings from
    preprocessor_config.json (``patch_size``, ``merge_size``, ``max_patches``, ``size.max_height``) and
    video_preprocessor_config.json (the same + ``temporal_patch_size``), else transformers 5.24's class
    defaults. Image grid (1, H'/p, W'/p). Video of T sampled frames: one grid row (T, H'/p, W'/p), which the
    statistics cut into chunks of ``temporal_patch_size`` frames exactly as the processor's chunk rows (each
    one attention sequence, averaged into (h/k)(w/k) tokens); LM placeholders ceil(T/tp)·(h/k)(w/k)."""

    family = "kimi_k25"

    @staticmethod
    def _read(files: Mapping[str, Any], defaults: Mapping[str, int]) -> dict:
        raw = files.get("size")
        size: Mapping[str, Any] = raw if isinstance(raw, dict) else {}

        def positive_int(value: Any, what: str) -> int:
            if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
                raise ConfigError(f"kimi_k25 processor setting {what} must be a positive integer, got {value!r}")
            return value

        out: dict[str, Any] = {k: positive_int(files.get(k, v), k) for k, v in defaults.items() if k != "max_side"}
        out["max_side"] = positive_int(size.get("max_height", defaults["max_side"]), "size.max_height")
        out["source"] = ("processor files" if any(k in files for k in (*defaults, "size"))
                         else "transformers 5.24 class defaults")
        return out

    def settings(self, spec) -> dict:
        image = self._read(spec.processor.get("preprocessor_config.json", {}), IMAGE_DEFAULTS)
        video = self._read(spec.processor.get("video_preprocessor_config.json", {}), VIDEO_DEFAULTS)
        v = spec.vision
        for what, s in (("image", image), ("video", video)):
            if s["patch_size"] != v.patch_size or s["merge_size"] != v.spatial_merge_size:
                raise UnsupportedModelError(f"{spec.name}: {what} processor patch {s['patch_size']} / merge "
                                            f"{s['merge_size']} disagree with the config's {v.patch_size} / "
                                            f"{v.spatial_merge_size}")
        return {**image, "video": video}

    def _grid(self, spec, s: Mapping[str, Any], height: int, width: int) -> tuple[tuple[int, int], int, int]:
        _, (h, w) = navit_resize(height, width, s["patch_size"], s["merge_size"], s["max_patches"], s["max_side"])
        return (h, w), h // s["patch_size"], w // s["patch_size"]

    def image(self, spec, height: int, width: int) -> DerivedMedia:
        height, width = positive((height, width), "image size (H, W pixels)")
        s = self.settings(spec)
        resized, gh, gw = self._grid(spec, s, height, width)
        k = spec.vision.spatial_merge_size
        return DerivedMedia("image", (height, width), resized, (1, gh, gw), gh * gw // (k * k))

    def video(self, spec, frames: int, height: int, width: int) -> DerivedMedia:
        frames, height, width = positive((frames, height, width), "video size (T frames, H, W pixels)")
        s = self.settings(spec)["video"]
        chunk = s["temporal_patch_size"]
        if chunk != spec.vision.temporal_chunk:
            raise UnsupportedModelError(
                f"{spec.name}: video temporal_patch_size {chunk} differs from vision_config.pos_emb_time "
                f"{spec.vision.temporal_chunk}, the chunk length the statistics use; give video_grid_thw rows "
                "(one per chunk, as the processor returns them) instead")
        resized, gh, gw = self._grid(spec, s, height, width)
        k = spec.vision.spatial_merge_size
        chunks = -(-frames // chunk)
        return DerivedMedia("video", (frames, height, width), resized, (frames, gh, gw), chunks * gh * gw // (k * k),
                            detail={"chunks": chunks, "frames_per_chunk": chunk})


register_family(Family(
    name="kimi_k25", model_types=("kimi_k25",), build=build,
    hf_class="Kimi_K25ForConditionalGeneration", is_vlm=True, media=KimiK25Media(),
    notes=("MoonViT3d attention is block-diagonal per image / video chunk: all frames of a chunk attend jointly "
           "(sum of (t·h·w)² over grid rows); frames are averaged (no matmul) before the 2x2 fold, so a chunk gives "
           "one frame's tokens",
           "tower and projector exact against FlopCounterMode on transformers' classes; the DeepSeek-V3 LM with "
           "eager experts (top-k routed) too")))
