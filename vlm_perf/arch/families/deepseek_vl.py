"""DeepSeek-VL (transformers ``deepseek_vl``: ``DeepseekVLForConditionalGeneration``).

Read from transformers ``models/deepseek_vl/modeling_deepseek_vl.py``, ``configuration_deepseek_vl.py``,
``processing_deepseek_vl.py`` and ``image_processing_pil_deepseek_vl.py``:

* **Tower**: SigLIP (:mod:`.siglip`; the composite config gives no SigLIP overrides, so SigLIP's class
  defaults apply, ``vision_use_head`` True included: the attention-pooling head runs on every image and its
  output is discarded, forward only). The projector reads ``last_hidden_state`` (after ``post_layernorm``).
* **Aligner** (``DeepseekVLAligner``): Linear(h_v -> h, bias) -> GELU -> Linear(h -> h, bias) on every patch
  token (no merge, no norm in front: its first GEMM needs an input gradient only when the tower trains).
* **LM**: ``text_config`` is a Llama decoder; ``lm_head`` tied by default (``DeepseekVLConfig``).

Media: every image is resized (longest side to ``size``, 384) and padded to a square ``size`` x ``size``
tile, a fixed cost per image; LM placeholders = ``num_image_tokens`` (576) = the tower's patches.
"""

from __future__ import annotations

from typing import Any, Mapping

from ...errors import ConfigError, UnsupportedModelError
from ..blocks import LinearProjector
from ..fields import Fields
from ..parts import MERGER
from ..spec import LMSpec, ModelSpec, VisionSpec
from . import Family, register_family
from .decoder import lm_blocks, read_lm
from .media import DerivedMedia, MediaRule, no_video, positive
from .siglip import fixed_tile, read_siglip, siglip_blocks


def read_llama_text(config: Mapping[str, Any], source: str, family: str) -> LMSpec:
    """The Llama ``text_config`` of a DeepSeek-VL / DeepSeek-VL-hybrid / Janus config (tied head by default;
    the composite config's ``tie_word_embeddings`` is the one transformers ties by)."""
    tc = config.get("text_config")
    if not isinstance(tc, dict):
        raise ConfigError(f"{source}: {family} config lacks required field text_config")
    if tc.get("model_type", "llama") != "llama":
        raise UnsupportedModelError(f"{source}: {family} with text_config.model_type {tc.get('model_type')!r} is "
                                    "not modelled; supported LM: llama")
    text = dict(tc)
    if "tie_word_embeddings" in config:
        text["tie_word_embeddings"] = config["tie_word_embeddings"]
    return read_lm(Fields(text, "text_config", source), "llama", tie_default=True)


def build(config: Mapping[str, Any], source: str, name: str = "") -> ModelSpec:
    vc = config.get("vision_config")
    lm = read_llama_text(config, source, "deepseek_vl")
    if not isinstance(vc, dict):
        raise ConfigError(f"{source}: deepseek_vl config lacks required field vision_config")
    tower = read_siglip(vc, source)
    vision = VisionSpec(family="deepseek_vl", depth=tower.depth, hidden_size=tower.width, num_heads=tower.num_heads,
                        head_dim=tower.head_dim, intermediate_size=tower.mlp_width, mlp_gated=False,
                        patch_size=tower.patch_size, temporal_patch_size=1, in_channels=tower.channels,
                        spatial_merge_size=1, out_hidden_size=lm.hidden_size,
                        num_position_embeddings=tower.patches, patch_embed_bias=True, norm="layernorm")
    blocks = siglip_blocks(tower) + (
        LinearProjector(part=MERGER, count=1, widths=(tower.width, lm.hidden_size, lm.hidden_size),
                        biases=(True, True), label="aligner"),
    ) + lm_blocks(lm)
    spec = ModelSpec(name=name or str(config.get("_name_or_path") or "deepseek_vl"), model_type="deepseek_vl",
                     lm=lm, vision=vision, source=source, family="deepseek_vl", blocks=blocks)
    spec.extra.update(image_size=tower.image_size, fixed_grid_side=tower.side)
    return spec


class DeepseekVLMedia(MediaRule):
    """DeepSeek-VL: every image resized (longest side to ``size``) and padded to a ``size`` x ``size`` square
    (``do_pad``, class default True), a fixed cost per image; ``size`` from preprocessor_config.json, else the
    tower's ``image_size`` (it must equal it: SigLIP's position table has one entry per patch of that tile).
    LM placeholders per image: ``num_image_tokens`` of processor_config.json (576 by default), which must equal
    the tower's patches (the model refuses a mismatch). ``do_pad`` false (non-square tiles) is refused. No video.
    """

    family = "deepseek_vl"

    def settings(self, spec) -> dict:
        pre = spec.processor.get("preprocessor_config.json", {})
        tile, size = fixed_tile(spec, pre)
        if not pre.get("do_pad", True):
            raise UnsupportedModelError(f"{spec.name}: do_pad false leaves non-square images, which the SigLIP "
                                        "position table cannot take; not modelled")
        proc = spec.processor.get("processor_config.json", {})
        tokens = int(proc.get("num_image_tokens", (tile // spec.vision.patch_size) ** 2))
        if tokens != (tile // spec.vision.patch_size) ** 2:
            raise UnsupportedModelError(f"{spec.name}: processor num_image_tokens {tokens} differs from the "
                                        f"{(tile // spec.vision.patch_size) ** 2} patches of a {tile}-px image")
        return {"size": tile, "num_image_tokens": tokens,
                "source": "processor files" if size else "tower image_size (reference default)"}

    def image(self, spec, height: int, width: int) -> DerivedMedia:
        height, width = positive((height, width), "image size (H, W pixels)")
        s = self.settings(spec)
        side = s["size"] // spec.vision.patch_size
        return DerivedMedia("image", (height, width), (s["size"], s["size"]), (1, side, side), s["num_image_tokens"])

    def video(self, spec, frames: int, height: int, width: int) -> DerivedMedia:
        raise no_video(f"{spec.name} (deepseek_vl)", "DeepseekVLProcessor", "DeepseekVLForConditionalGeneration")


register_family(Family(
    name="deepseek_vl", model_types=("deepseek_vl",), build=build, hf_class="DeepseekVLForConditionalGeneration",
    is_vlm=True, media=DeepseekVLMedia(),
    notes=("resize and square padding are not matmuls; every image costs one size x size tile",
           "SigLIP's pooling head (vision_use_head, class default True) runs forward only: its output is discarded")))
