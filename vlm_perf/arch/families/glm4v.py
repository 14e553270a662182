"""GLM-4.1V (``glm4v``), GLM-4.5V (``glm4v_moe``) and GLM-4.6V (``glm46v``): GLM ViT + downsample conv +
gated merger + GLM LM (dense or MoE).

As transformers builds them (``glm4v/modeling_glm4v.py``, ``glm4v_moe/modeling_glm4v_moe.py``,
``glm46v/modeling_glm46v.py``):

* tower (``vision_tower``): Conv3d patch embed C x T_p x P^2 -> h_v **with bias**; ``post_conv_layernorm``
  RMSNorm; a learned (image_size / patch)^2 position table resampled with bicubic ``grid_sample`` (not a
  matmul); ``depth`` blocks of RMSNorm -> fused qkv (bias = ``attention_bias``) + proj (no bias) ->
  RMSNorm -> **gated SiLU MLP of width ``out_hidden_size``** (``Glm4VisionMlp``; ``intermediate_size`` is
  NOT the tower's MLP width), no biases; ``post_layernorm`` RMSNorm. Attention is full per image and per
  temporal patch of a video (``cu_seqlens`` repeats h*w t times).
* projector (``merger`` stage): ``downsample`` Conv2d(h_v -> d, kernel = stride = m, bias) on each m x m
  block, then ``merger``: Linear(d -> d, no bias) -> LayerNorm(d) -> GELU -> gated MLP d ->
  ``intermediate_size`` -> d (no biases); d = ``out_hidden_size`` = the LM width.
* LM: ``glm4v_text``: q/k/v with bias (always), o without, head_dim = hidden / heads, fused gate_up SwiGLU,
  **4 RMSNorms per layer**; ``glm4v_moe_text``: explicit ``head_dim`` (GLM-4.5V: 96 x 128 = 12288-wide
  queries), q/k/v bias = ``attention_bias``, 2 RMSNorms per layer, layers < ``first_k_dense_replace`` dense,
  the rest MoE: fp32 router h -> E (+ the stored ``e_score_correction_bias``, a buffer in the checkpoint),
  top-k routed experts of ``moe_intermediate_size``, one shared MLP of ``moe_intermediate_size *
  n_shared_experts``. No MTP layer is built (GLM-4.5V's checkpoint ships none).

Media (:class:`GlmMedia`): ``Glm4vImageProcessor`` / ``Glm4vVideoProcessor`` smart resize, whose pixel
bounds apply to t x h x w with t = ``temporal_patch_size`` for an image (not h x w as in Qwen2-VL).
"""

from __future__ import annotations

import math
from typing import Any, Mapping

from ...errors import ConfigError, UnsupportedModelError
from ..blocks import (DecoderAttention, DenseMLP, DownsampleConv, ExtraNorms, FinalNorm, GatedMergerMLP, LMHead,
                      LMLayerNorms, MoEMLP, PatchEmbed, PositionTable, TokenEmbedding, VisionLayers)
from ..fields import Fields, text_section
from ..parts import LANGUAGE_MODEL, MERGER, VISION_TOWER
from ..spec import LMSpec, ModelSpec, MoESpec, VisionSpec
from . import Family, register_family
from .media import DerivedMedia, MediaRule, positive

# transformers' class defaults (Glm4vVisionConfig / Glm4vTextConfig / Glm4vMoeTextConfig): only these are
# defaulted when a config omits the field
_VISION_ATTENTION_BIAS = False
_MOE_ATTENTION_BIAS = True


def read_vision(f: Fields, family: str) -> tuple[VisionSpec, int]:
    """(tower summary, merger MLP width ``vision_config.intermediate_size``).

    The summary holds the config's fields in Qwen terms, as a framework applying its Qwen formula reads
    them: ``intermediate_size`` is ``vision_config.intermediate_size`` (the MERGER width; Megatron-Bridge
    bills it as the block MLP width). The real block MLP (gated, width ``out_hidden_size``) is in the
    inventory (:func:`vision_blocks`), which params and exact FLOPs use."""
    width = f.int("hidden_size")
    heads = f.int("num_heads", "num_attention_heads")
    out = f.int("out_hidden_size")
    patch = f.int("patch_size")
    image_size = f.int("image_size")
    merger_width = f.int("intermediate_size")
    vision = VisionSpec(
        family=family, depth=f.int("depth", "num_hidden_layers"), hidden_size=width, num_heads=heads,
        head_dim=width // heads, intermediate_size=merger_width, mlp_gated=True, patch_size=patch,
        temporal_patch_size=f.int("temporal_patch_size"), in_channels=f.int("in_channels"),
        spatial_merge_size=f.int("spatial_merge_size"), out_hidden_size=out,
        num_position_embeddings=(image_size // patch) ** 2, patch_embed_bias=True, norm="rmsnorm",
    )
    return vision, merger_width


def vision_blocks(v: VisionSpec, merger_width: int, qkv_bias: bool) -> tuple:
    """Tower + projector inventory of a GLM vision model."""
    return (
        PatchEmbed(part=VISION_TOWER, count=1, in_volume=v.patch_volume, width=v.hidden_size, bias=True),
        PositionTable(part=VISION_TOWER, count=1, entries=v.num_position_embeddings, width=v.hidden_size),
        ExtraNorms(part=VISION_TOWER, count=2, width=v.hidden_size, norm="rmsnorm",
                   what="post_conv_layernorm and post_layernorm"),
        VisionLayers(part=VISION_TOWER, count=v.depth, width=v.hidden_size, num_heads=v.num_heads,
                     head_dim=v.head_dim, mlp_width=v.out_hidden_size, mlp_gated=True, attention="frame",
                     qkv_bias=qkv_bias, proj_bias=False, mlp_bias=False, norm="rmsnorm"),
        DownsampleConv(part=MERGER, count=1, in_width=v.merger_width, out_width=v.out_hidden_size, bias=True),
        GatedMergerMLP(part=MERGER, count=1, width=v.out_hidden_size, hidden_width=merger_width,
                       norm="layernorm", bias=False),
    )


def read_lm(f: Fields, moe: bool, tie_default: bool = False) -> LMSpec:
    """The GLM LM: ``glm4v_text`` (dense) or ``glm4v_moe_text`` (MoE)."""
    hidden = f.int("hidden_size")
    heads = f.int("num_attention_heads")
    layers = f.int("num_hidden_layers")
    kv_heads = int(f.opt("num_key_value_heads") or heads)
    tie = bool(f.opt("tie_word_embeddings", tie_default))
    if not moe:
        return LMSpec(family="glm4v_text", num_layers=layers, hidden_size=hidden, num_heads=heads,
                      num_kv_heads=kv_heads, head_dim=hidden // heads, intermediate_size=f.int("intermediate_size"),
                      vocab_size=f.int("vocab_size"), tie_word_embeddings=tie, qkv_bias=True)
    shared = f.int("n_shared_experts")
    first_dense = f.int("first_k_dense_replace")
    spec = MoESpec(num_experts=f.int("n_routed_experts", "num_local_experts"), top_k=f.int("num_experts_per_tok"),
                   expert_intermediate_size=f.int("moe_intermediate_size"), num_shared_experts=1 if shared else 0,
                   shared_intermediate_size=f.int("moe_intermediate_size") * shared, router_bias=True)
    return LMSpec(family="glm4v_moe_text", num_layers=layers, hidden_size=hidden, num_heads=heads,
                  num_kv_heads=kv_heads, head_dim=int(f.opt("head_dim") or hidden // heads),
                  intermediate_size=f.int("intermediate_size") if first_dense else int(f.opt("intermediate_size", 0)),
                  vocab_size=f.int("vocab_size"), tie_word_embeddings=tie, moe=spec,
                  moe_layers=tuple(range(min(first_dense, layers), layers)),
                  qkv_bias=bool(f.opt("attention_bias", _MOE_ATTENTION_BIAS)))


def lm_blocks(lm: LMSpec) -> tuple:
    """LM inventory: embedding, attention (o_proj never has a bias), per-layer norms (4 dense, 2 MoE),
    dense / MoE MLP groups, final norm, lm_head."""
    h = lm.hidden_size
    blocks: list = [
        TokenEmbedding(part=LANGUAGE_MODEL, count=1, vocab=lm.vocab_size, width=h),
        DecoderAttention(part=LANGUAGE_MODEL, count=lm.num_layers, hidden=h, num_heads=lm.num_heads,
                         num_kv_heads=lm.num_kv_heads, head_dim=lm.head_dim, qkv_bias=lm.qkv_bias, o_bias=False,
                         qk_norm=False),
        LMLayerNorms(part=LANGUAGE_MODEL, count=lm.num_layers, hidden=h, norms_per_layer=2 if lm.moe else 4),
    ]
    if lm.num_dense_layers:
        blocks.append(DenseMLP(part=LANGUAGE_MODEL, count=lm.num_dense_layers, hidden=h, width=lm.intermediate_size))
    if lm.num_moe_layers:
        m = lm.moe
        assert m is not None
        blocks.append(MoEMLP(part=LANGUAGE_MODEL, count=lm.num_moe_layers, hidden=h, num_experts=m.num_experts,
                             top_k=m.top_k, expert_width=m.expert_intermediate_size, num_shared=m.num_shared_experts,
                             shared_width=m.shared_intermediate_size, router_bias=m.router_bias))
    blocks += [FinalNorm(part=LANGUAGE_MODEL, count=1, hidden=h),
               LMHead(part=LANGUAGE_MODEL, count=1, hidden=h, vocab=lm.vocab_size, tied=lm.tie_word_embeddings)]
    return tuple(blocks)


_TEXT_TYPES = {"glm4v_text": False, "glm4v_moe_text": True}


def build_glm(family: str):
    def build(config: Mapping[str, Any], source: str, name: str = "") -> ModelSpec:
        text, section = text_section(config)
        if family == "glm46v":  # sub-configs chosen by their own model_type (AutoConfig)
            text_type = text.get("model_type")
            if text_type not in _TEXT_TYPES:
                raise UnsupportedModelError(f"{source}: glm46v with text_config.model_type {text_type!r} is not "
                                            f"modelled; supported: {', '.join(_TEXT_TYPES)}")
            moe = _TEXT_TYPES[text_type]
        else:
            moe = family == "glm4v_moe"
        lm = read_lm(Fields(text, section, source), moe)
        vc = config.get("vision_config")
        if not isinstance(vc, dict):
            raise ConfigError(f"{source}: config lacks required field vision_config for model_type {family}")
        vf = Fields(vc, "vision_config", source)
        vision, merger_width = read_vision(vf, family)
        if vision.out_hidden_size != lm.hidden_size:
            raise ConfigError(f"{source}: vision_config.out_hidden_size {vision.out_hidden_size} must equal the LM "
                              f"hidden_size {lm.hidden_size} (the merger output feeds the LM)")
        qkv_bias = bool(vf.opt("attention_bias", _VISION_ATTENTION_BIAS))
        return ModelSpec(name=name or str(config.get("_name_or_path") or config.get("model_type")),
                         model_type=family, lm=lm, vision=vision, source=source, family=family,
                         blocks=vision_blocks(vision, merger_width, qkv_bias) + lm_blocks(lm))
    return build


# ------------------------------------------------------------------------------------ media

# transformers' processor class defaults (used when the checkpoint directory ships no processor files):
# Glm4vImageProcessor.size {"shortest_edge": 112*112, "longest_edge": 28*28*15000};
# Glm4vVideoProcessor.size {"shortest_edge": 112*112, "longest_edge": 28*28*2*30000}.
GLM_IMAGE_BOUNDS = (112 * 112, 28 * 28 * 15000)
GLM_VIDEO_BOUNDS = (112 * 112, 28 * 28 * 2 * 30000)


def glm_smart_resize(num_frames: int, height: int, width: int, temporal_factor: int, factor: int,
                     min_pixels: int, max_pixels: int) -> tuple[int, int]:
    """(height, width) in pixels as ``transformers.models.glm4v`` ``smart_resize`` computes them.

    Both sides are rounded to multiples of ``factor`` (= patch x merge); the pixel bounds are compared with
    t x h x w (t = ``num_frames`` rounded to ``temporal_factor``): above ``max_pixels`` both sides shrink by
    beta = sqrt(T h w / max) (floored to the factor), below ``min_pixels`` they grow (ceiled). Sides under
    one factor are first scaled up to it; an aspect ratio above 200 is refused (as transformers does).
    """
    if num_frames < temporal_factor:
        raise ConfigError(f"glm4v: {num_frames} frame(s) is fewer than temporal_patch_size {temporal_factor}; "
                          "the GLM processor refuses that")
    if height < factor or width < factor:
        scale = max(factor / height, factor / width)
        height, width = int(height * scale), int(width * scale)
    if max(height, width) / min(height, width) > 200:
        raise ConfigError(f"glm4v: aspect ratio {max(height, width) / min(height, width):.1f} is above 200; "
                          "the GLM processor refuses it")
    h_bar, w_bar = round(height / factor) * factor, round(width / factor) * factor
    t_bar = round(num_frames / temporal_factor) * temporal_factor
    if t_bar * h_bar * w_bar > max_pixels:
        beta = math.sqrt((num_frames * height * width) / max_pixels)
        h_bar = max(factor, math.floor(height / beta / factor) * factor)
        w_bar = max(factor, math.floor(width / beta / factor) * factor)
    elif t_bar * h_bar * w_bar < min_pixels:
        beta = math.sqrt(min_pixels / (num_frames * height * width))
        h_bar = math.ceil(height * beta / factor) * factor
        w_bar = math.ceil(width * beta / factor) * factor
    return h_bar, w_bar


def _size_bounds(files: Mapping[str, Any], default: tuple[int, int], what: str) -> tuple[int, int, str]:
    size = files.get("size")
    if size is None:
        return default[0], default[1], "transformers class default"
    if not isinstance(size, dict) or not size.get("shortest_edge") or not size.get("longest_edge"):
        raise ConfigError(f"{what}: size must hold shortest_edge and longest_edge (pixel bounds), got {size!r}")
    return int(size["shortest_edge"]), int(size["longest_edge"]), what


class GlmMedia(MediaRule):
    """GLM-4.xV processor rule: images through ``Glm4vImageProcessor`` (smart resize with t = T_p), videos
    through ``Glm4vVideoProcessor`` (same resize with t = the frames given, frames padded to a multiple of
    T_p). ``--video-size T,H,W``: T = frames AFTER the processor's fps sampling (``do_sample_frames``, 2 fps,
    at most 300 s, an odd count padded by one). Grid (t, h/p, w/p); LM placeholders t x h x w / m^2 (a
    video also gets begin/end-of-image and timestamp tokens per temporal patch, which are text)."""

    def __init__(self, family: str):
        self.family = family

    def settings(self, spec) -> dict:
        pre = spec.processor.get("preprocessor_config.json", {})
        vid = spec.processor.get("video_preprocessor_config.json", {})
        lo, hi, origin = _size_bounds(pre, GLM_IMAGE_BOUNDS, "preprocessor_config.json")
        vlo, vhi, vorigin = _size_bounds(vid, GLM_VIDEO_BOUNDS, "video_preprocessor_config.json")
        v = spec.vision
        for files, name in ((pre, "preprocessor_config.json"), (vid, "video_preprocessor_config.json")):
            for key, model in (("patch_size", v.patch_size), ("merge_size", v.spatial_merge_size),
                               ("temporal_patch_size", v.temporal_patch_size)):
                if key in files and int(files[key]) != model:
                    raise ConfigError(f"{name}: {key} {files[key]} differs from the model's {model}")
        return {"min_pixels": lo, "max_pixels": hi, "source": origin,
                "video": {"min_pixels": vlo, "max_pixels": vhi, "source": vorigin}}

    def _derive(self, spec, kind: str, pixels: tuple, frames: int, height: int, width: int, bounds) -> DerivedMedia:
        v = spec.vision
        h, w = glm_smart_resize(frames, height, width, v.temporal_patch_size, v.patch_size * v.spatial_merge_size,
                                bounds["min_pixels"], bounds["max_pixels"])
        t = -(-frames // v.temporal_patch_size)
        grid = (t, h // v.patch_size, w // v.patch_size)
        return DerivedMedia(kind, pixels, (h, w), grid, t * grid[1] * grid[2] // v.merge_unit)

    def image(self, spec, height: int, width: int) -> DerivedMedia:
        height, width = positive((height, width), "image size (H, W pixels)")
        # an image is one temporal patch: the processor repeats it T_p times
        t_p = spec.vision.temporal_patch_size
        return self._derive(spec, "image", (height, width), t_p, height, width, self.settings(spec))

    def video(self, spec, frames: int, height: int, width: int) -> DerivedMedia:
        frames, height, width = positive((frames, height, width), "video size (T frames, H, W pixels)")
        return self._derive(spec, "video", (frames, height, width), frames, height, width,
                            self.settings(spec)["video"])


_NOTES = ("position table resampled with bicubic grid_sample and 2D RoPE: not matmuls, not counted",
          "e_score_correction_bias (MoE) is a checkpoint buffer: counted in parameters, no FLOPs")
_HF = {"glm4v": "Glm4vForConditionalGeneration", "glm4v_moe": "Glm4vMoeForConditionalGeneration",
       "glm46v": "Glm46VForConditionalGeneration"}
for _name, _cls in _HF.items():
    register_family(Family(name=_name, model_types=(_name,), build=build_glm(_name), hf_class=_cls, is_vlm=True,
                           media=GlmMedia(_name), notes=_NOTES))

__all__ = ["GlmMedia", "build_glm", "glm_smart_resize", "lm_blocks", "read_lm", "read_vision", "vision_blocks"]
