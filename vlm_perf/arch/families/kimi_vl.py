"""Kimi-VL (remote code ``kimi_vl``: ``KimiVLForConditionalGeneration``, MoonViT tower, DeepSeek-V3 LM).

Not in transformers 5.24: read from the checkpoint's remote code as vLLM mirrors it,
vllm-project/vllm ``vllm/model_executor/models/moonvit.py`` @ 97d4c384797422487d141f4f9d0289a39802f92f and
``vllm/model_executor/models/kimi_vl.py`` @ 0322cc0e288e08969696a3c9e0295c168e2c5034 (both "adapted from
huggingface.co/moonshotai/Kimi-VL-A3B-Instruct/blob/main/modeling_kimi_vl.py"):

* **Tower** (``MoonVitPretrainedModel``): ``MoonVisionPatchEmbed`` = Conv2d(3 -> h_v, kernel = stride = patch,
  with bias) plus a learned ``init_pos_emb_height x init_pos_emb_width`` table, bicubically interpolated per
  image (``Learnable2DInterpPosEmb``: not a matmul); ``num_hidden_layers`` pre-norm layers
  (``MoonVitEncoderLayer``): LayerNorm, ``wqkv`` Linear(h_v -> 3 h_v, bias) + 2D RoPE, attention, ``wo``
  Linear(h_v -> h_v, bias), LayerNorm, ``MLP2`` fc0/fc1 Linear(h_v -> i_v -> h_v, bias, GELU-tanh); then
  ``final_layernorm``. Attention is **block-diagonal per image** (``cu_seqlens`` from ``grid_hws``: each image
  one sequence of h x w patches, no CLS).
* **Projector** (``KimiVLMultiModalProjector``): LayerNorm(h_v, eps 1e-5) on each patch, the 2x2
  ``patch_merger`` fold (a reshape), ``linear_1`` Linear(4 h_v -> 4 h_v, bias), GELU, ``linear_2``
  Linear(4 h_v -> h_text, bias).
* **LM**: ``DeepseekV3ForCausalLM`` (MLA + MoE, ``text_config.model_type`` ``deepseek_v3``); the remote LM
  builds no multi-token-prediction layers, so ``num_nextn_predict_layers`` is taken as 0 whatever the file says.

Media: images only (vLLM's ``KimiVLProcessingInfo.get_supported_mm_limits`` is ``{"image": None}``; a video is
fed as separate frame images by the chat layer, so give frames as images).
"""

from __future__ import annotations

import math
from typing import Any, Mapping

from ...errors import ConfigError, UnsupportedModelError
from ..blocks import ExtraNorms, MlpProjector, PatchEmbed, PositionTable, VisionLayers
from ..fields import Fields
from ..parts import MERGER, VISION_TOWER
from ..spec import ModelSpec, VisionSpec
from . import Family, register_family
from .decoder import lm_blocks, read_lm, vision_and_text_sections
from .media import DerivedMedia, MediaRule, positive

# Kimi-VL-A3B-Instruct's preprocessor_config.json (KimiVLImageProcessor): patch_size 14, in_token_limit 4096,
# pad_input true, merge_kernel_size [2, 2]; used for the shipped preset (that checkpoint) only
REFERENCE_PROCESSOR = {"patch_size": 14, "in_token_limit": 4096, "pad_input": True, "merge_kernel_size": [2, 2]}
REFERENCE_PRESET = "preset:kimi-vl-a3b-instruct"
# KimiVLImageProcessor.__init__'s defaults: the class a checkpoint's remote code builds (hub
# moonshotai/Kimi-VL-A3B-Instruct image_processing_kimi_vl.py; transformers 5.24 has no Kimi-VL class). Read from
# its port Blaizzy/mlx-vlm mlx_vlm/models/kimi_vl/processing_kimi_vl.py @ 9e4016d0f920f9b82cb9ae0d18f5f4ef3821e962
# (same signature: patch_size 14, pad_input False, in_token_limit 4096, merge_kernel_size None -> [2, 2]).
# pad_input False CENTRE-CROPS each side down to a multiple of merge x patch where the checkpoint's file pads up.
CLASS_DEFAULTS = {"patch_size": 14, "in_token_limit": 4096, "pad_input": False, "merge_kernel_size": [2, 2]}
CLASS_SOURCE = ("KimiVLImageProcessor class defaults (hub remote code image_processing_kimi_vl.py, as ported in "
                "mlx-vlm @ 9e4016d; transformers 5.24 has no Kimi-VL class)")
MAX_GRID_SIDE = 512  # Rope2DPosEmb(head_dim, 512, 512): a grid side must be < 512 patches


def build(config: Mapping[str, Any], source: str, name: str = "") -> ModelSpec:
    vc, tc, text_type = vision_and_text_sections(config, source, "kimi_vl", "deepseek_v3", ("deepseek_v3",))
    text = dict(tc, num_nextn_predict_layers=0)  # the remote DeepseekV3ForCausalLM has no MTP layers
    if "tie_word_embeddings" not in text and "tie_word_embeddings" in config:
        text["tie_word_embeddings"] = config["tie_word_embeddings"]
    lm = read_lm(Fields(text, "text_config", source), text_type)
    f = Fields(vc, "vision_config", source)
    width, heads = f.int("hidden_size"), f.int("num_attention_heads")
    if width % heads:
        raise ConfigError(f"{source}: vision_config.hidden_size {width} is not divisible by num_attention_heads {heads}")
    merge = f.int_list("merge_kernel_size") if "merge_kernel_size" in vc else [2, 2]
    if len(merge) != 2 or merge[0] != merge[1] or merge[0] <= 0:
        raise UnsupportedModelError(f"{source}: vision_config.merge_kernel_size {merge!r}: only a square k x k "
                                    "merge is modelled")
    patch = f.int("patch_size")
    depth, mlp = f.int("num_hidden_layers"), f.int("intermediate_size")
    table = f.int("init_pos_emb_height") * f.int("init_pos_emb_width")
    vision = VisionSpec(
        family="kimi_vl", depth=depth, hidden_size=width, num_heads=heads, head_dim=width // heads,
        intermediate_size=mlp, mlp_gated=False, patch_size=patch, temporal_patch_size=1, in_channels=3,
        spatial_merge_size=merge[0], out_hidden_size=lm.hidden_size, num_position_embeddings=table,
        patch_embed_bias=True, norm="layernorm")
    blocks = moonvit_blocks(vision, table, "frame") + lm_blocks(lm)
    return ModelSpec(name=name or str(config.get("_name_or_path") or "kimi_vl"), model_type="kimi_vl", lm=lm,
                     vision=vision, source=source, family="kimi_vl", blocks=blocks)


def moonvit_blocks(vision: VisionSpec, table: int, attention: str) -> tuple:
    """MoonViT (Kimi-VL) / MoonViT3d (Kimi K2.5) tower and the Kimi projector, the same maths in both:
    Conv2d patch embed (bias), a learned position table of ``table`` entries (bicubically resampled: no matmul),
    ``depth`` pre-norm LayerNorm layers (q/k/v + out projections with bias, 2D RoPE, plain GELU-tanh MLP with
    bias), ``final_layernorm``; projector LayerNorm(h_v) on each patch -> k x k fold -> Linear(k²h_v -> k²h_v) ->
    GELU -> Linear(k²h_v -> LM hidden), all with bias. ``attention``: "frame" (Kimi-VL: per image) or "item"
    (Kimi K2.5: per image / video chunk, all its frames jointly)."""
    width, heads = vision.hidden_size, vision.num_heads
    folded = vision.merger_width
    return (
        PatchEmbed(part=VISION_TOWER, count=1, in_volume=vision.patch_volume, width=width, bias=True),
        PositionTable(part=VISION_TOWER, count=1, entries=table, width=width),
        VisionLayers(part=VISION_TOWER, count=vision.depth, width=width, num_heads=heads, head_dim=vision.head_dim,
                     mlp_width=vision.intermediate_size, mlp_gated=False, attention=attention, qkv_bias=True,
                     proj_bias=True, mlp_bias=True, norm="layernorm"),
        ExtraNorms(part=VISION_TOWER, count=1, width=width, norm="layernorm", what="final_layernorm"),
        MlpProjector(part=MERGER, count=1, in_width=folded, hidden_width=folded, out_width=vision.out_hidden_size,
                     norm_width=width, norm="layernorm", bias=True),
    )


def kimi_vl_resize(height: int, width: int, patch: int, in_token_limit: int, step: int,
                   pad_input: bool) -> tuple[int, int]:
    """``KimiVLImageProcessor.rescale``: when (W//p)(H//p) > in_token_limit, scale both sides by
    sqrt(limit / ((W//p)(H//p))) and truncate (``int``); then pad each side UP to a multiple of ``step``
    (= merge x patch, ``pad_input``) or centre-crop it DOWN to one. Never upscales."""
    patches = (width // patch) * (height // patch)
    if patches > in_token_limit:
        scale = math.sqrt(in_token_limit / patches)
        width, height = int(width * scale), int(height * scale)
    if pad_input:
        return -(-height // step) * step, -(-width // step) * step
    return height - height % step, width - width % step


class KimiVLMedia(MediaRule):
    """Kimi-VL images: ``kimi_vl_resize`` with ``patch_size``, ``in_token_limit``, ``pad_input`` and
    ``merge_kernel_size`` from preprocessor_config.json; a key the file omits, or every key when the checkpoint
    folder ships no file, takes ``KimiVLImageProcessor``'s class default (14, 4096, **false**, [2, 2]: the remote
    class is built with the file's keys as keyword arguments). The shipped preset (no folder) uses
    Kimi-VL-A3B-Instruct's own file (pad_input true). Grid (1, H'/p, W'/p) (one attention sequence per image); LM
    placeholder tokens (H'/p)(W'/p)/k^2 (vLLM ``KimiVLProcessingInfo.get_num_image_tokens``). A side of >= 512
    patches is refused, as the processor does ("Exceed pos emb"); so is an image cropped to nothing."""

    family = "kimi_vl"

    def settings(self, spec) -> dict:
        pre = spec.processor.get("preprocessor_config.json", {})
        if not pre and spec.source == REFERENCE_PRESET:
            out: dict[str, Any] = dict(REFERENCE_PROCESSOR)
            out["source"] = "Kimi-VL-A3B-Instruct preprocessor_config.json (the preset's checkpoint)"
        else:
            out = {key: pre.get(key, default) for key, default in CLASS_DEFAULTS.items()}
            given = [key for key in CLASS_DEFAULTS if key in pre]
            out["source"] = (CLASS_SOURCE if not given else "processor files" if len(given) == len(CLASS_DEFAULTS)
                             else f"processor files; {', '.join(k for k in CLASS_DEFAULTS if k not in pre)}: "
                                  + CLASS_SOURCE)
        merge = out["merge_kernel_size"]
        if list(merge) != [spec.vision.spatial_merge_size] * 2 or int(out["patch_size"]) != spec.vision.patch_size:
            raise UnsupportedModelError(f"{spec.name}: processor patch {out['patch_size']} / merge {merge} disagree "
                                        f"with the config's {spec.vision.patch_size} / {spec.vision.spatial_merge_size}")
        return out

    def image(self, spec, height: int, width: int) -> DerivedMedia:
        height, width = positive((height, width), "image size (H, W pixels)")
        s, v = self.settings(spec), spec.vision
        p, k = v.patch_size, v.spatial_merge_size
        h, w = kimi_vl_resize(height, width, p, int(s["in_token_limit"]), k * p, bool(s["pad_input"]))
        if h <= 0 or w <= 0:
            raise UnsupportedModelError(f"kimi_vl: image {height}x{width} px is cropped to {h}x{w} px (pad_input "
                                        "false): nothing to embed")
        if h // p >= MAX_GRID_SIDE or w // p >= MAX_GRID_SIDE:
            raise UnsupportedModelError(f"kimi_vl: image {height}x{width} px gives a {h // p}x{w // p} patch grid; "
                                        f"MoonViT's 2D RoPE covers sides < {MAX_GRID_SIDE} (the processor refuses it)")
        grid = (1, h // p, w // p)
        return DerivedMedia("image", (height, width), (h, w), grid, grid[1] * grid[2] // (k * k))

    def video(self, spec, frames: int, height: int, width: int) -> DerivedMedia:
        raise UnsupportedModelError("kimi_vl: the model takes images only (a video is given as its frames, each "
                                    "one image); pass the frames as images")


register_family(Family(
    name="kimi_vl", model_types=("kimi_vl",), build=build,
    hf_class="KimiVLForConditionalGeneration (remote code; not in transformers 5.24)",
    is_vlm=True, media=KimiVLMedia(),
    notes=("MoonViT attention is block-diagonal per image (sum of n^2 over images); 2D RoPE, the bicubic "
           "position-table interpolation, norms and the 2x2 fold are not matmuls (0 FLOPs)",
           "verified by hand arithmetic and FlopCounterMode on an independent re-implementation of the tower "
           "and projector (the remote code cannot be imported under transformers 5.24)")))
