"""ERNIE-4.5-VL-MoE (transformers ``ernie4_5_vl_moe``: ``Ernie4_5_VLMoeForConditionalGeneration``).

Read from transformers 5.24 ``models/ernie4_5_vl_moe/modeling_ernie4_5_vl_moe.py``, ``configuration_...``,
``image_processing_pil_ernie4_5_vl_moe.py``, ``video_processing_ernie4_5_vl_moe.py`` and ``processing_...``:

* **Tower** (``Ernie4_5_VLMoeVisionTransformerPretrainedModel``): patch embed Linear(C·p² -> h_v, no bias) on
  every patch, 2D RoPE (no matmul), ``depth`` pre-LayerNorm layers (``qkv`` Linear h_v -> 3 h_v and ``proj``, both
  with bias; attention within each frame; MLP fc1 / fc2 with bias, ``intermediate_size`` wide), final LayerNorm.
* **Projector** (``Ernie4_5_VLMoeVariableResolutionResamplerModel``,
  :class:`~vlm_perf.arch.blocks.TemporalResampler`): the m x m fold, ``spatial_linear`` on every folded token, frame
  pairs (an image's frame with itself; a video's even with its odd frames), ``temporal_linear``, ``mlp`` to the LM
  width, RMSNorm: one LM token per pair (the statistics' temporal chunk of 2).
* **LM** (``Ernie4_5_VLMoeTextModel``): GQA attention (3D RoPE: no matmul; ``use_bias`` on q/k/v/o), the layers of
  ``mlp_layer_types`` "dense" a gated MLP of ``intermediate_size``, the "sparse" ones a modality-isolated MoE
  (:class:`~vlm_perf.arch.blocks.ModalityMoEMLP`: shared MLP of ``moe_num_shared_experts`` x
  ``moe_intermediate_size[0]`` on every token, text experts of ``moe_intermediate_size[0]`` on text tokens, vision
  experts of ``moe_intermediate_size[1]`` on vision tokens, each pool with its own router); ``lm_head`` tied by
  default (``Ernie4_5_VLMoeConfig.tie_word_embeddings``).

Vision tokens of the MoE are those the processor's ``moe_mm_token_type_ids`` marks: every visual placeholder plus
the image / video start and end tokens around it (the chat template writes one pair per item; counted here as
part of the item's visual tokens). A forward without ``moe_mm_token_type_ids`` sends every token to the text
experts; that is not what the processor feeds and is not modelled.
"""

from __future__ import annotations

from typing import Any, Mapping

from ...errors import ConfigError, UnsupportedModelError
from ..blocks import (DecoderAttention, DenseMLP, ExtraNorms, FinalNorm, LMHead, LMLayerNorms, ModalityMoEMLP,
                      PatchEmbed, TemporalResampler, TokenEmbedding, VisionLayers)
from ..fields import Fields
from ..parts import LANGUAGE_MODEL, MERGER, VISION_TOWER
from ..resize import smart_resize
from ..spec import LMSpec, ModelSpec, MoESpec, VisionSpec
from . import Family, register_family
from .media import DerivedMedia, MediaRule, pixel_bounds, positive

# Ernie4_5_VLMoeVisionConfig / Ernie4_5_VLMoeTextConfig / Ernie4_5_VLMoeConfig class defaults (transformers 5.24)
VISION_DEFAULTS: dict[str, Any] = {"depth": 32, "hidden_size": 1280, "num_heads": 16, "in_channels": 3,
                                   "patch_size": 14, "spatial_merge_size": 2, "intermediate_size": 4 * 1280,
                                   "temporal_merge_size": 2}
TEXT_DEFAULTS: dict[str, Any] = {"vocab_size": 103424, "hidden_size": 2560, "intermediate_size": 12288,
                                 "num_hidden_layers": 28, "num_attention_heads": 20, "num_key_value_heads": 4,
                                 "use_bias": False, "moe_intermediate_size": [1536, 512], "moe_k": 6,
                                 "moe_num_experts": 64, "moe_num_shared_experts": 2}
TIE_DEFAULT = True
MARKERS_PER_ITEM = 2  # <|IMAGE_START|> / <|IMAGE_END|> (video: its own pair) around each placeholder run
# Ernie4_5_VLMoeImageProcessor(Pil) size {"shortest_edge": 56², "longest_edge": 28² x 6177};
# Ernie4_5_VLMoeVideoProcessor size {"shortest_edge": 299 x 28², "longest_edge": 1196 x 28²} (per frame)
IMAGE_BOUNDS = (56 * 56, 28 * 28 * 6177)
VIDEO_BOUNDS = (299 * 28 * 28, 1196 * 28 * 28)
CLASS_DEFAULTS = "Ernie4_5_VLMoe image / video processor class defaults (transformers 5.24)"


def _int(f: Fields, keys: tuple[str, ...], default: int, minimum: int = 1) -> int:
    key = next((k for k in keys if k in f.data), keys[0])
    value = f.opt(key, default)
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise ConfigError(f"{f.source}: field {f.name_of(key)} must be an integer >= {minimum}, got {value!r}")
    return value


def _vision(vc: Mapping[str, Any], source: str, lm_width: int) -> VisionSpec:
    f, d = Fields(vc, "vision_config", source), VISION_DEFAULTS
    width, heads = _int(f, ("hidden_size",), d["hidden_size"]), _int(f, ("num_heads", "num_attention_heads"),
                                                                       d["num_heads"])
    if width % heads:
        raise ConfigError(f"{source}: vision_config.hidden_size {width} is not divisible by its {heads} heads")
    patch = f.opt("patch_size", d["patch_size"])
    if isinstance(patch, (list, tuple)):
        if len(patch) != 2 or patch[0] != patch[1]:
            raise UnsupportedModelError(f"{source}: vision_config.patch_size {patch!r}: only square patches are modelled")
        patch = patch[0]
    if isinstance(patch, bool) or not isinstance(patch, int) or patch < 1:
        raise ConfigError(f"{source}: field vision_config.patch_size must be a positive integer, got {patch!r}")
    temporal = _int(f, ("temporal_merge_size",), d["temporal_merge_size"])
    if temporal != 2:
        raise UnsupportedModelError(f"{source}: vision_config.temporal_merge_size {temporal}: transformers' resampler "
                                    "is hard-coded for 2 (_temporal_slicing)")
    return VisionSpec(
        family="ernie4_5_vl_moe", depth=_int(f, ("depth", "num_hidden_layers"), d["depth"]), hidden_size=width,
        num_heads=heads, head_dim=width // heads, intermediate_size=_int(f, ("intermediate_size",),
                                                                          d["intermediate_size"]),
        mlp_gated=False, patch_size=patch, temporal_patch_size=1, in_channels=_int(f, ("in_channels",), d["in_channels"]),
        spatial_merge_size=_int(f, ("spatial_merge_size",), d["spatial_merge_size"]), out_hidden_size=lm_width,
        num_position_embeddings=0, patch_embed_bias=False, norm="layernorm", temporal_chunk=temporal)


def _text(tc: Mapping[str, Any], source: str, tie: bool) -> tuple[LMSpec, tuple[int, int], list[str], bool]:
    f, d = Fields(tc, "text_config", source), TEXT_DEFAULTS
    hidden, heads = _int(f, ("hidden_size",), d["hidden_size"]), _int(f, ("num_attention_heads",),
                                                                       d["num_attention_heads"])
    layers = _int(f, ("num_hidden_layers",), d["num_hidden_layers"])
    kv = tc.get("num_key_value_heads", d["num_key_value_heads"])
    kv = heads if kv is None else kv
    widths = f.opt("moe_intermediate_size", d["moe_intermediate_size"])
    if not isinstance(widths, (list, tuple)) or len(widths) != 2 or not all(
            isinstance(w, int) and not isinstance(w, bool) and w > 0 for w in widths):
        raise ConfigError(f"{source}: text_config.moe_intermediate_size must be [text width, vision width], got "
                          f"{widths!r}")
    types = f.opt("mlp_layer_types") or ["dense"] + ["sparse"] * (layers - 1)
    if len(types) != layers or any(t not in ("dense", "sparse") for t in types):
        raise ConfigError(f"{source}: text_config.mlp_layer_types must list 'dense' / 'sparse' for each of the "
                          f"{layers} layers, got {types!r}")
    use_bias = bool(f.opt("use_bias", d["use_bias"]))
    experts = _int(f, ("moe_num_experts", "num_experts"), d["moe_num_experts"])
    top_k = _int(f, ("moe_k", "num_experts_per_tok"), d["moe_k"])
    shared = _int(f, ("moe_num_shared_experts",), d["moe_num_shared_experts"], minimum=0)
    moe = MoESpec(num_experts=experts, top_k=top_k, expert_intermediate_size=widths[0],
                  num_shared_experts=1 if shared else 0, shared_intermediate_size=widths[0] * shared, router_bias=True)
    lm = LMSpec(family="ernie4_5_vl_moe_text", num_layers=layers, hidden_size=hidden, num_heads=heads,
                num_kv_heads=int(kv), head_dim=int(f.opt("head_dim") or hidden // heads),
                intermediate_size=_int(f, ("intermediate_size",), d["intermediate_size"]),
                vocab_size=_int(f, ("vocab_size",), d["vocab_size"]), tie_word_embeddings=tie, moe=moe,
                moe_layers=tuple(i for i, t in enumerate(types) if t == "sparse"), qkv_bias=use_bias)
    return lm, (widths[0], widths[1]), types, use_bias


def build(config: Mapping[str, Any], source: str, name: str = "") -> ModelSpec:
    vc, tc = config.get("vision_config", {}), config.get("text_config", {})
    if not isinstance(vc, dict) or not isinstance(tc, dict):
        raise ConfigError(f"{source}: ernie4_5_vl_moe vision_config / text_config must be objects")
    lm, (text_width, vision_width), _types, use_bias = _text(tc, source, bool(config.get("tie_word_embeddings",
                                                                                         TIE_DEFAULT)))
    if use_bias:
        raise UnsupportedModelError(f"{source}: text_config.use_bias true (biased LM MLPs and experts) is not modelled; "
                                    "the released ERNIE-4.5-VL configs have none")
    vision = _vision(vc, source, lm.hidden_size)
    h, moe = lm.hidden_size, lm.moe
    assert moe is not None
    blocks: list = [
        PatchEmbed(part=VISION_TOWER, count=1, in_volume=vision.patch_volume, width=vision.hidden_size, bias=False),
        VisionLayers(part=VISION_TOWER, count=vision.depth, width=vision.hidden_size, num_heads=vision.num_heads,
                     head_dim=vision.head_dim, mlp_width=vision.intermediate_size, mlp_gated=False, attention="frame",
                     qkv_bias=True, proj_bias=True, mlp_bias=True, norm="layernorm"),
        ExtraNorms(part=VISION_TOWER, count=1, width=vision.hidden_size, norm="layernorm", what="final ln"),
        TemporalResampler(part=MERGER, count=1, in_width=vision.hidden_size, merge=vision.spatial_merge_size,
                          out_width=h),
        TokenEmbedding(part=LANGUAGE_MODEL, count=1, vocab=lm.vocab_size, width=h),
        DecoderAttention(part=LANGUAGE_MODEL, count=lm.num_layers, hidden=h, num_heads=lm.num_heads,
                         num_kv_heads=lm.num_kv_heads, head_dim=lm.head_dim, qkv_bias=False, o_bias=False,
                         qk_norm=False),
        LMLayerNorms(part=LANGUAGE_MODEL, count=lm.num_layers, hidden=h),
    ]
    if lm.num_dense_layers:
        blocks.append(DenseMLP(part=LANGUAGE_MODEL, count=lm.num_dense_layers, hidden=h, width=lm.intermediate_size))
    if lm.num_moe_layers:
        blocks.append(ModalityMoEMLP(part=LANGUAGE_MODEL, count=lm.num_moe_layers, hidden=h,
                                     num_experts=moe.num_experts, top_k=moe.top_k, expert_width=text_width,
                                     num_shared=moe.num_shared_experts, shared_width=moe.shared_intermediate_size,
                                     router_bias=True, vision_width=vision_width, markers_per_item=MARKERS_PER_ITEM))
    blocks += [FinalNorm(part=LANGUAGE_MODEL, count=1, hidden=h),
               LMHead(part=LANGUAGE_MODEL, count=1, hidden=h, vocab=lm.vocab_size, tied=lm.tie_word_embeddings)]
    spec = ModelSpec(name=name or str(config.get("_name_or_path") or "ernie4_5_vl_moe"), model_type="ernie4_5_vl_moe",
                     lm=lm, vision=vision, source=source, family="ernie4_5_vl_moe", blocks=tuple(blocks))
    spec.extra["frame_pairs"] = True  # image grids t = 1, video grids t even (the statistics refuse others)
    return spec


class ErnieMedia(MediaRule):
    """ERNIE-4.5-VL images and videos: Qwen2-VL ``smart_resize`` (factor patch x merge = 28) with the pixel bounds
    of preprocessor_config.json / video_preprocessor_config.json (``size`` shortest / longest edge or min / max
    pixels), else the processor classes' (images 56² .. 28²·6177; video frames 299·28² .. 1196·28²); ``patch_size``
    and ``merge_size`` there must equal the config's. Image grid (1, h/p, w/p); a video's frames are padded to an even
    count (the processor copies the last frame), grid (t, h/p, w/p). LM tokens: one per folded token of an image
    (per pair of video frames) plus the start / end tokens around the run (they go to the vision experts)."""

    family = "ernie4_5_vl_moe"

    def settings(self, spec) -> dict:
        out: dict[str, Any] = {}
        for kind, name, default in (("image", "preprocessor_config.json", IMAGE_BOUNDS),
                                    ("video", "video_preprocessor_config.json", VIDEO_BOUNDS)):
            files = spec.processor.get(name, {})
            lo, hi, where = pixel_bounds(files, default, CLASS_DEFAULTS)
            for key, value in (("patch_size", spec.vision.patch_size), ("merge_size", spec.vision.spatial_merge_size)):
                if files.get(key, value) != value:
                    raise UnsupportedModelError(f"{spec.name}: {name} {key} {files[key]} differs from the config's "
                                                f"{value}")
            out[kind] = {"min_pixels": lo, "max_pixels": hi, "source": where}
        return out

    def _grid(self, spec, kind: str, height: int, width: int) -> tuple[int, int]:
        s, v = self.settings(spec)[kind], spec.vision
        factor = v.patch_size * v.spatial_merge_size
        return smart_resize(height, width, factor, s["min_pixels"], s["max_pixels"])

    def image(self, spec, height: int, width: int) -> DerivedMedia:
        height, width = positive((height, width), "image size (H, W pixels)")
        h, w = self._grid(spec, "image", height, width)
        p, m = spec.vision.patch_size, spec.vision.spatial_merge_size
        return DerivedMedia("image", (height, width), (h, w), (1, h // p, w // p),
                            (h // p // m) * (w // p // m) + MARKERS_PER_ITEM)

    def video(self, spec, frames: int, height: int, width: int) -> DerivedMedia:
        frames, height, width = positive((frames, height, width), "video size (T, H, W)")
        t = frames + frames % 2
        h, w = self._grid(spec, "video", height, width)
        p, m = spec.vision.patch_size, spec.vision.spatial_merge_size
        return DerivedMedia("video", (frames, height, width), (h, w), (t, h // p, w // p),
                            t // 2 * (h // p // m) * (w // p // m) + MARKERS_PER_ITEM)


register_family(Family(
    name="ernie4_5_vl_moe", model_types=("ernie4_5_vl_moe",), build=build,
    hf_class="Ernie4_5_VLMoeForConditionalGeneration", is_vlm=True, media=ErnieMedia(),
    notes=("vision tokens (placeholders + start / end markers) go to the vision experts, the rest to the text experts "
           "(moe_mm_token_type_ids as the processor writes it); the shared MLP and both routers' rows cover every token",
           "the tower attends within each frame; the resampler pairs frames (an image with itself)",
           "RoPE (2D in the tower, 3D in the LM), norms and the folds are not matmuls",
           "adapters are refused in one line (no module-name layout for this family); tower-layer slices work, the "
           "resampler and the LM (modality MoE) train or freeze as whole parts")))
