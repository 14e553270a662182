"""DeepSeek-VL hybrid (transformers ``deepseek_vl_hybrid``: ``DeepseekVLHybridForConditionalGeneration``).

Read from transformers ``models/deepseek_vl_hybrid/modeling_deepseek_vl_hybrid.py``,
``configuration_deepseek_vl_hybrid.py``, ``processing_deepseek_vl_hybrid.py`` and
``image_processing_pil_deepseek_vl_hybrid.py``. DeepSeek-VL (:mod:`.deepseek_vl`) plus a high-resolution branch:

* **Low-resolution tower**: SigLIP (:mod:`.siglip`, its class defaults: ``vision_use_head`` True, the pooling
  head runs forward only) on the 384-px image; the aligner reads ``last_hidden_state`` (24 x 24 = 576 tokens).
* **High-resolution tower**: ``high_res_vision_model``, the SAM encoder of :mod:`.sam` (``SamVisionModel``
  with SamVisionConfig's defaults: ViT-B, 1024 px, patch 16, 14 x 14 windows, global layers 2/5/8/11, neck to
  256 channels) on the 1024-px image. Its neck output AND the hidden state after layer
  ``global_attn_indexes[0]`` (through a second neck of the same shape, ``high_res_vision_neck``) each go
  through ``high_res_vision_proj``: a bilinear resize to 4 x 24 = 96 (not a matmul), Conv2d 3x3/2 (256 -> 512)
  and Conv2d 3x3/2 (512 -> 1024), both without bias: 24 x 24 tokens of 1024. The two results are summed with
  a learned scalar ``high_res_vision_alpha``. Every module up to the aligner is counted as the vision tower
  (the original DeepSeek-VL's hybrid vision encoder, frozen as one in its stage 1).
* **Aligner** (``DeepseekVLHybridAligner``): Linear(h_siglip -> h/2) on the low-res tokens and Linear(4 x 256 ->
  h/2) on the high-res tokens, concatenated, GELU, Linear(h -> h); every bias on.
* **LM**: Llama decoder, ``lm_head`` tied by default.

Media: each image is resized (longest side to ``high_res_size``, 1024) and padded to a square, then resized
again to ``size`` (384) and padded: a fixed cost per image; LM placeholders = ``num_image_tokens`` (576).
"""

from __future__ import annotations

from typing import Any, Mapping

from ...errors import ConfigError, UnsupportedModelError
from ..blocks import ExtraParams, HybridAligner, StridedConvs
from ..parts import MERGER, VISION_TOWER
from ..spec import ModelSpec, VisionSpec
from . import Family, register_family
from .decoder import lm_blocks
from .deepseek_vl import DeepseekVLMedia, read_llama_text
from .sam import read_sam, sam_blocks
from .siglip import read_siglip, siglip_blocks


def build(config: Mapping[str, Any], source: str, name: str = "") -> ModelSpec:
    lm = read_llama_text(config, source, "deepseek_vl_hybrid")
    vc, hc = config.get("vision_config"), config.get("high_res_vision_config")
    for key, section in (("vision_config", vc), ("high_res_vision_config", hc)):
        if not isinstance(section, dict):
            raise ConfigError(f"{source}: deepseek_vl_hybrid config lacks required field {key}")
    assert isinstance(vc, dict) and isinstance(hc, dict)
    if hc.get("model_type", "sam_vision_model") != "sam_vision_model":
        raise UnsupportedModelError(f"{source}: high_res_vision_config.model_type {hc.get('model_type')!r}: only "
                                    "the SAM encoder (sam_vision_model) is modelled")
    low = read_siglip(vc, source)
    high = read_sam(hc, source, "high_res_vision_config", None)
    raw_global = hc.get("global_attn_indexes", (2, 5, 8, 11))
    first_global = raw_global[0] if isinstance(raw_global, (list, tuple)) and raw_global else None
    if first_global is None or first_global not in high.global_layers:
        raise ConfigError(f"{source}: high_res_vision_config.global_attn_indexes {raw_global!r}: its first entry "
                          f"must be a layer index below num_hidden_layers {high.depth} (the model reads the hidden "
                          "state after that layer)")
    if lm.hidden_size % 2:
        raise ConfigError(f"{source}: text_config.hidden_size {lm.hidden_size} is odd: the aligner concatenates two "
                          "halves of it")
    c = high.out_channels
    vision = VisionSpec(family="deepseek_vl_hybrid", depth=low.depth, hidden_size=low.width, num_heads=low.num_heads,
                        head_dim=low.head_dim, intermediate_size=low.mlp_width, mlp_gated=False,
                        patch_size=low.patch_size, temporal_patch_size=1, in_channels=low.channels,
                        spatial_merge_size=1, out_hidden_size=lm.hidden_size,
                        num_position_embeddings=low.patches, patch_embed_bias=True, norm="layernorm")
    proj = StridedConvs(part=VISION_TOWER, count=1, runs=2, channels=(c, 2 * c, 4 * c), side=high.side,
                        resize=4 * low.side, component="vision.mlp", first_input="stage", tile_patches=low.patches)
    assert proj.out_tokens == low.patches  # 4·s -> 2·s -> s
    blocks = siglip_blocks(low) + sam_blocks(high, low.patches, necks=2) + (
        proj, ExtraParams(part=VISION_TOWER, count=1, label="high_res_vision_alpha", numel=1),
        HybridAligner(part=MERGER, count=1, low_width=low.width, high_width=4 * c, out_width=lm.hidden_size),
    ) + lm_blocks(lm)
    spec = ModelSpec(name=name or str(config.get("_name_or_path") or "deepseek_vl_hybrid"),
                     model_type="deepseek_vl_hybrid", lm=lm, vision=vision, source=source,
                     family="deepseek_vl_hybrid", blocks=blocks)
    spec.extra.update(image_size=low.image_size, high_res_image_size=high.image_size, fixed_grid_side=low.side)
    return spec


class DeepseekVLHybridMedia(DeepseekVLMedia):
    """DeepSeek-VL hybrid: DeepSeek-VL's rule (:class:`.deepseek_vl.DeepseekVLMedia`: one ``size`` x ``size``
    square per image, ``num_image_tokens`` placeholders) for the SigLIP input, and the same image resized and
    padded to ``high_res_size`` (preprocessor_config.json, else 1024) for the SAM input, which must equal the
    SAM tower's ``image_size`` (its patch embed accepts no other size). A fixed cost per image. No video.
    """

    family = "deepseek_vl_hybrid"

    def settings(self, spec) -> dict:
        out = super().settings(spec)
        pre = spec.processor.get("preprocessor_config.json", {})
        raw = pre.get("high_res_size")
        high = raw if isinstance(raw, dict) else {}
        tile = int(spec.extra["high_res_image_size"])
        if high and (high.get("height"), high.get("width")) != (tile, tile):
            raise UnsupportedModelError(f"{spec.name}: preprocessor high_res_size {high} differs from the SAM "
                                        f"tower's {tile}-px image_size (its patch embed accepts only that size)")
        out["high_res_size"] = tile
        return out

    def video(self, spec, frames: int, height: int, width: int):
        raise UnsupportedModelError(f"{spec.name}: DeepSeek-VL hybrid has no video input")


register_family(Family(
    name="deepseek_vl_hybrid", model_types=("deepseek_vl_hybrid",), build=build,
    hf_class="DeepseekVLHybridForConditionalGeneration", is_vlm=True, media=DeepseekVLHybridMedia(),
    notes=("resizes, square padding, window padding/partition, relative-position interpolation, LayerNorms and "
           "the alpha-weighted sum are not matmuls; every image costs one SigLIP and one SAM pass",
           "SigLIP's pooling head (vision_use_head, class default True) runs forward only: its output is discarded",
           "the SAM necks and high_res_vision_proj convolutions (run twice: last and global hidden states) are "
           "counted in the vision tower under vision.mlp",
           "no preset: the deepseek-community/deepseek-vl-7b-chat config.json (DeepSeek-LLM LM dims) could not be "
           "read and verified offline")))
