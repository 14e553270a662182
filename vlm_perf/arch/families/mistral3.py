"""Mistral 3 / Mistral-Small-3.x (transformers ``mistral3``: ``Mistral3ForConditionalGeneration``, Pixtral tower).

Read from transformers ``models/mistral3/modeling_mistral3.py``, ``models/pixtral/modeling_pixtral.py`` and
``models/pixtral/image_processing_pil_pixtral.py`` / ``processing_pixtral.py``:

* **Tower** (``PixtralVisionModel``): ``patch_conv`` Conv2d(C -> h_v, kernel = stride = patch, **no bias**),
  ``ln_pre`` RMSNorm, ``num_hidden_layers`` layers: RMSNorm, q/k/v/o Linear(h_v -> h_v, no bias), 2D RoPE,
  RMSNorm, gated SiLU MLP gate/up/down (no bias). No CLS token, no position table. Every layer runs.
* **Projector** (``Mistral3MultiModalProjector``): RMSNorm(h_v) on the patches -> ``patch_merger``: unfold
  each image's spatial_merge_size^2 block -> ``merging_layer`` Linear(m^2 h_v -> h_v, no bias) -> ``linear_1``
  Linear(h_v -> h_text) -> GELU -> ``linear_2`` Linear(h_text -> h_text) (both with bias =
  ``multimodal_projector_bias``).
* **LM**: ``text_config`` ``mistral`` (Mistral-Small) or ``llama``; a Mistral ``sliding_window`` applies to
  every layer (``--causal half`` counts it windowed, ``--causal full`` the eager square).

Counted per image (additive over images): the patch conv on the image's own patches and attention over the
image's own patches (sum of n^2). transformers' eager Pixtral differs when several images share a forward:
it runs the conv on the batch **zero-padded** to the largest height and width, and joins every image of
the microbatch into ONE sequence with a block-diagonal mask, so eager computes (sum n)^2 where a
block-masked / varlen kernel computes sum n^2 (the number here). With one image per forward both agree.
"""

from __future__ import annotations

import math
from typing import Any, Mapping

from ...errors import ConfigError, UnsupportedModelError
from ..blocks import ExtraParams, LinearProjector, PatchEmbed, VisionLayers
from ..fields import Fields
from ..parts import MERGER, VISION_TOWER
from ..spec import ModelSpec, VisionSpec
from . import Family, register_family
from .decoder import feature_layer_depth, forward_only_after, lm_blocks, read_lm, vision_and_text_sections
from .media import DerivedMedia, MediaRule, no_video, positive

LM_FAMILIES = ("mistral", "llama")
# Mistral-Small-3.1-24B-Instruct-2503 preprocessor_config.json: size.longest_edge 1540 (the Pixtral image
# processor's class default is 1024); PixtralProcessor replaces the patch size by patch x spatial_merge_size.
REFERENCE_LONGEST_EDGE = 1540



def build(config: Mapping[str, Any], source: str, name: str = "") -> ModelSpec:
    top = Fields(config, "", source)
    vc, tc, text_type = vision_and_text_sections(config, source, "mistral3", "mistral", LM_FAMILIES)
    if vc.get("model_type", "pixtral") != "pixtral":
        raise UnsupportedModelError(f"{source}: mistral3 with vision_config.model_type {vc.get('model_type')!r} is "
                                    "not modelled (pixtral only)")
    layer = top.opt("vision_feature_layer", -1)
    if not isinstance(layer, int) or isinstance(layer, bool):
        raise UnsupportedModelError(f"{source}: vision_feature_layer {layer!r}: only one feature layer is modelled "
                                    "(transformers' RMSNorm and patch merger assume width h_v)")
    text = dict(tc)
    # Mistral3Config's class default ties the head (tie_word_embeddings=True); released configs set it
    text["tie_word_embeddings"] = bool(config.get("tie_word_embeddings", tc.get("tie_word_embeddings", True)))
    lm = read_lm(Fields(text, "text_config", source), text_type)
    f = Fields(vc, "vision_config", source)
    width = int(f.opt("hidden_size", 1024))
    heads = int(f.opt("num_attention_heads", 16))
    if width % heads:
        raise ConfigError(f"{source}: vision_config.hidden_size {width} is not divisible by num_attention_heads {heads}")
    patch = f.square("patch_size") if "patch_size" in vc else 16
    merge = int(top.opt("spatial_merge_size", 2))
    bias = bool(top.opt("multimodal_projector_bias", False))
    _, used = feature_layer_depth(layer, int(f.opt("num_hidden_layers", 24)), source)
    vision = VisionSpec(
        family="mistral3", depth=int(f.opt("num_hidden_layers", 24)), hidden_size=width, num_heads=heads,
        head_dim=width // heads, intermediate_size=int(f.opt("intermediate_size", 4096)), mlp_gated=True,
        patch_size=patch, temporal_patch_size=1, in_channels=int(f.opt("num_channels", 3)),
        spatial_merge_size=merge, out_hidden_size=lm.hidden_size, patch_embed_bias=False, norm="rmsnorm",
    )
    blocks = (
        PatchEmbed(part=VISION_TOWER, count=1, in_volume=vision.patch_volume, width=width, bias=False),
        ExtraParams(part=VISION_TOWER, count=1, label="ln_pre RMSNorm", numel=width),
        # every layer runs; those after the selected hidden state feed no loss (forward only in training)
        *forward_only_after(VisionLayers(part=VISION_TOWER, count=vision.depth, width=width, num_heads=heads,
                                         head_dim=vision.head_dim, mlp_width=vision.intermediate_size, mlp_gated=True,
                                         attention="frame", qkv_bias=False, proj_bias=False, mlp_bias=False,
                                         norm="rmsnorm"), used),
        LinearProjector(part=MERGER, count=1, widths=(merge * merge * width, width, lm.hidden_size, lm.hidden_size),
                        biases=(False, bias, bias), norm_width=width, norm="rmsnorm",
                        label="projector (patch merger + MLP)"),
    ) + lm_blocks(lm)
    spec = ModelSpec(name=name or str(config.get("_name_or_path") or "mistral3"), model_type="mistral3", lm=lm,
                     vision=vision, source=source, family="mistral3", blocks=blocks)
    return spec


def pixtral_resize(height: int, width: int, longest_edge: int, step: int) -> tuple[int, int]:
    """``get_resize_output_image_size`` of the Pixtral image processor: scale DOWN (never up) by
    ratio = max(H, W) / longest_edge when > 1 (floor of each side), then round each side UP to a multiple of
    ``step`` (= patch x spatial_merge_size, as ``PixtralProcessor`` passes it)."""
    ratio = max(height / longest_edge, width / longest_edge)
    if ratio > 1:
        height, width = math.floor(height / ratio), math.floor(width / ratio)
    if height <= 0 or width <= 0:
        raise UnsupportedModelError(f"image resized to {height}x{width} px: Pixtral cannot embed an empty side")
    return (-(-height // step)) * step, (-(-width // step)) * step


class Mistral3Media(MediaRule):
    """Pixtral resizing as ``PixtralProcessor`` applies it: ``size.longest_edge`` from preprocessor_config.json
    (else 1540, Mistral-Small-3.1's file), ``patch_size`` forced to patch x spatial_merge_size by the processor
    class (``PixtralProcessor._process_images``). Grid (1, H/p, W/p); LM image tokens = (H/p/m) x (W/p/m)
    ``[IMG]`` plus one ``[IMG_BREAK]`` per row (the last replaced by ``[IMG_END]``: ``break_tokens``, text tokens
    that are part of ``--seq-len`` too). No video input."""

    family = "mistral3"

    def settings(self, spec) -> dict:
        pre = spec.processor.get("preprocessor_config.json", {})
        size = pre.get("size") if isinstance(pre.get("size"), dict) else {}
        v = spec.vision
        out = {"longest_edge": int(size.get("longest_edge", REFERENCE_LONGEST_EDGE)),
               "source": "processor files" if "longest_edge" in size else "reference checkpoint default",
               "patch_step": v.patch_size * v.spatial_merge_size,
               "forced": "patch_size = patch x spatial_merge_size (PixtralProcessor._process_images)"}
        if size and "longest_edge" not in size:
            raise UnsupportedModelError(f"{spec.name}: Pixtral size {size} without longest_edge is not modelled")
        return out

    def image(self, spec, height: int, width: int) -> DerivedMedia:
        height, width = positive((height, width), "image size (H, W pixels)")
        s, v = self.settings(spec), spec.vision
        h, w = pixtral_resize(height, width, s["longest_edge"], s["patch_step"])
        grid = (1, h // v.patch_size, w // v.patch_size)
        rows, cols = grid[1] // v.spatial_merge_size, grid[2] // v.spatial_merge_size
        return DerivedMedia("image", (height, width), (h, w), grid, rows * cols,
                            detail={"break_tokens": rows})

    def video(self, spec, frames: int, height: int, width: int) -> DerivedMedia:
        raise no_video(f"{spec.name} (mistral3)", "PixtralProcessor", "Mistral3ForConditionalGeneration")


register_family(Family(
    name="mistral3", model_types=("mistral3",), build=build, hf_class="Mistral3ForConditionalGeneration",
    is_vlm=True, media=Mistral3Media(),
    notes=("per image: conv on the image's own patches and attention over its own patches (sum n^2); "
           "transformers' eager Pixtral pads a multi-image batch and joins it into one sequence ((sum n)^2)",
           "RoPE, unfold and RMSNorms are not matmuls (0 FLOPs)")))
