"""LLaVA (transformers ``llava``: ``LlavaForConditionalGeneration``): LLaVA-1.5 (CLIP tower) and Pixtral-12B
(Pixtral tower), one module for both towers.

Read from transformers ``models/llava/modeling_llava.py`` (``LlavaModel.get_image_features``,
``LlavaMultiModalProjector``), ``configuration_llava.py``, ``processing_llava.py``, ``models/clip/modeling_clip.py``
(``CLIPVisionModel``), ``models/pixtral/modeling_pixtral.py`` and ``processing_pixtral.py``:

* **CLIP tower** (``vision_config.model_type`` ``clip_vision_model``): ``patch_embedding`` Conv2d(C -> h_v,
  kernel = stride = patch, **no bias**); a learned ``class_embedding`` (CLS) prepended to each image;
  a learned position table of (image_size/patch)^2 + 1 entries; ``pre_layrnorm`` LayerNorm; ``num_hidden_layers``
  pre-norm layers: LayerNorm, q/k/v/out Linear (all with bias), attention over the image's (n + 1) positions,
  LayerNorm, fc1 -> quick_gelu -> fc2 (bias); ``post_layernorm`` on the pooled CLS only (no matmul).
  **Every layer runs**: ``vision_feature_layer`` (LLaVA default -2) only selects which hidden state feeds the
  projector; ``CLIPEncoder`` loops over all layers. The layers after the deepest selected hidden state (LLaVA-1.5:
  the last one) reach no loss, so training never back-propagates through them: forward FLOPs only
  (:class:`~vlm_perf.arch.blocks.ForwardOnly`; both measured in ``tests/verify/test_llava_flops.py``).
* ``vision_feature_select_strategy`` "default" drops the CLS position before the projector (n rows per image,
  n LM tokens); "full" keeps it: on a CLIP tower the projector runs on n + 1 rows per image and the LM gets
  n + 1 image tokens (``LlavaProcessor``: (s/p)^2 + ``num_additional_image_tokens``, no - 1 under "full"); the
  Pixtral tower has no CLS, so "full" is its only strategy ("default" drops a real patch and breaks
  transformers' per-image split: refused). LLaVA-NeXT refuses "full" on CLIP (its ``pack_image_features``
  views each tile's rows as the (image_size/patch)^2 grid, which n + 1 rows do not fill).
* **Pixtral tower** (``pixtral``, Pixtral-12B): as :mod:`.mistral3` (no-bias conv, ``ln_pre`` RMSNorm, gated SiLU
  layers with 2D RoPE, no CLS, no position table), but no patch merger: every patch is one LM token.
* **Projector** (``LlavaMultiModalProjector``): Linear(h_v x n_feature_layers -> h_text) -> act ->
  Linear(h_text -> h_text), bias ``multimodal_projector_bias`` (class default True), no norm in front (its
  first GEMM's input gradient is due only when the tower trains).
* **LM**: ``text_config`` (llama for LLaVA-1.5, mistral for Pixtral-12B, qwen2 for some community variants).

Defaults: a ``vision_config`` dict takes its tower class's defaults (``CLIPVisionConfig``: width 768, 12 layers,
224 px, patch 32; ``PixtralVisionConfig``: 1024, 24 layers, patch 16); ``LlavaConfig`` fields
(``vision_feature_layer`` -2, ``vision_feature_select_strategy`` "default", ``multimodal_projector_bias`` True,
``tie_word_embeddings`` False unless ``text_config`` ties) take ``LlavaConfig``'s class defaults; a ``llama``
``text_config`` takes ``LlamaConfig``'s (llava-1.5-7b-hf ships only model_type, vocab_size, max_position_embeddings
and rms_norm_eps), a ``mistral`` one ``MistralConfig``'s (sliding_window 4096 unless the file says null, as
llava-v1.6-mistral-7b-hf does); other LMs must state their sizes.
"""

from __future__ import annotations

from typing import Any, Mapping

from ...errors import ConfigError, UnsupportedModelError
from ..blocks import ClsToken, ExtraParams, MlpProjector, PatchEmbed, PositionTable, VisionLayers
from ..fields import Fields
from ..parts import MERGER, VISION_TOWER
from ..spec import LMSpec, ModelSpec, VisionSpec
from . import Family, register_family
from .decoder import feature_layer_depth, forward_only_after, lm_blocks, read_lm, vision_and_text_sections
from .media import DerivedMedia, MediaRule, no_video, positive
from .mistral3 import pixtral_resize

LM_FAMILIES = ("llama", "mistral", "qwen2")
TOWERS = ("clip_vision_model", "pixtral")
# tower class defaults (transformers 5.x configuration_clip.py CLIPVisionConfig / configuration_pixtral.py)
CLIP_DEFAULTS = {"hidden_size": 768, "intermediate_size": 3072, "num_hidden_layers": 12, "num_attention_heads": 12,
                 "num_channels": 3, "image_size": 224, "patch_size": 32}
PIXTRAL_DEFAULTS = {"hidden_size": 1024, "intermediate_size": 4096, "num_hidden_layers": 24,
                    "num_attention_heads": 16, "num_channels": 3, "image_size": 1024, "patch_size": 16}
# LlamaConfig class defaults (transformers 5.x configuration_llama.py): llava-hf/llava-1.5-7b-hf ships a partial
# text_config (model_type, vocab_size 32064, max_position_embeddings, rms_norm_eps) and relies on them
LLAMA_DEFAULTS = {"vocab_size": 32000, "hidden_size": 4096, "intermediate_size": 11008, "num_hidden_layers": 32,
                  "num_attention_heads": 32}
# MistralConfig class defaults (transformers 5.x configuration_mistral.py): llava-v1.6-mistral-7b-hf ships a partial
# text_config (intermediate_size, num_key_value_heads, vocab_size, sliding_window null, ...)
MISTRAL_DEFAULTS = {"vocab_size": 32000, "hidden_size": 4096, "intermediate_size": 14336, "num_hidden_layers": 32,
                    "num_attention_heads": 32, "num_key_value_heads": 8, "sliding_window": 4096}
TEXT_DEFAULTS = {"llama": LLAMA_DEFAULTS, "mistral": MISTRAL_DEFAULTS}
# PixtralImageProcessor's class default size.longest_edge (a shipped preprocessor_config.json overrides it; the
# mistral-community/pixtral-12b file was not checked from here)
PIXTRAL_LONGEST_EDGE = 1024


def _count(f: Fields, key: str, default: int) -> int:
    value = f.opt(key, default)
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        raise ConfigError(f"{f.source}: field {f.name_of(key)} must be a positive integer, got {value!r}")
    return value


def llava_parts(config: Mapping[str, Any], source: str, model_type: str = "llava",
                towers: tuple[str, ...] = TOWERS, tie_from_text: bool = True) -> tuple[LMSpec, VisionSpec, tuple, dict]:
    """(LM, tower summary, tower + projector blocks, extra) of a LLaVA-style config (``LlavaConfig`` fields:
    ``vision_feature_layer``, ``vision_feature_select_strategy``, ``multimodal_projector_bias``); shared with
    LLaVA-NeXT, whose tower, projector and LM are LLaVA's. ``tie_from_text``: ``LlavaConfig.__post_init__``'s rule
    (a false top-level ``tie_word_embeddings`` takes text_config's true one); ``LlavaNextConfig`` has no such rule."""
    top = Fields(config, "", source)
    vc, tc, text_type = vision_and_text_sections(config, source, model_type, "llama", LM_FAMILIES)
    tower = vc.get("model_type", "clip_vision_model")
    if tower not in towers:
        raise UnsupportedModelError(f"{source}: {model_type} with vision_config.model_type {tower!r} is not modelled "
                                    f"({', '.join(towers)} only)")
    # LlavaConfig.__post_init__: a false top-level tie_word_embeddings takes text_config's true one
    tie = bool(config.get("tie_word_embeddings", False)) or (tie_from_text and bool(tc.get("tie_word_embeddings", False)))
    # a partial text_config takes its LM config class's defaults; an explicit null sliding_window stays null
    text = {**TEXT_DEFAULTS.get(text_type, {}),
            **{k: v for k, v in tc.items() if v is not None or k == "sliding_window"}}
    lm = read_lm(Fields({**text, "tie_word_embeddings": tie}, "text_config", source), text_type)
    f = Fields(vc, "vision_config", source)
    d = CLIP_DEFAULTS if tower == "clip_vision_model" else PIXTRAL_DEFAULTS
    width, heads = _count(f, "hidden_size", d["hidden_size"]), _count(f, "num_attention_heads", d["num_attention_heads"])
    if width % heads:
        raise ConfigError(f"{source}: vision_config.hidden_size {width} is not divisible by "
                          f"vision_config.num_attention_heads {heads}")
    depth = _count(f, "num_hidden_layers", d["num_hidden_layers"])
    mlp_width = _count(f, "intermediate_size", d["intermediate_size"])
    channels = _count(f, "num_channels", d["num_channels"])
    patch = f.square("patch_size", d["patch_size"])
    image_size = f.square("image_size", d["image_size"])
    strategy = top.opt("vision_feature_select_strategy", "default")
    if strategy not in ("default", "full"):
        raise ConfigError(f"{source}: vision_feature_select_strategy must be 'default' or 'full', got {strategy!r}")
    n_layers, used = feature_layer_depth(top.opt("vision_feature_layer", -2), depth, source)
    bias = bool(top.opt("multimodal_projector_bias", True))
    clip = tower == "clip_vision_model"
    if clip and strategy != "default" and model_type != "llava":
        raise UnsupportedModelError(f"{source}: vision_feature_select_strategy 'full' with a CLIP tower is not "
                                    f"modelled for {model_type}: transformers' pack_image_features views each tile's "
                                    "rows as the (image_size/patch)^2 grid, which the kept CLS row breaks; "
                                    "only 'default'")
    if not clip and strategy != "full":
        raise UnsupportedModelError(f"{source}: vision_feature_select_strategy 'default' with a Pixtral tower drops "
                                    "a real patch (Pixtral has no CLS) and is not modelled; only 'full'")
    side = image_size // patch
    if clip and side == 0:
        raise ConfigError(f"{source}: vision_config.image_size {image_size} is smaller than patch_size {patch}")
    vision = VisionSpec(
        family="llava", depth=depth, hidden_size=width, num_heads=heads, head_dim=width // heads,
        intermediate_size=mlp_width, mlp_gated=not clip, patch_size=patch, temporal_patch_size=1,
        in_channels=channels, spatial_merge_size=1, out_hidden_size=lm.hidden_size,
        num_position_embeddings=side * side + 1 if clip else 0, patch_embed_bias=False,
        norm="layernorm" if clip else "rmsnorm", cls_per_frame=1 if clip else 0)

    def layers(count: int) -> VisionLayers:
        if clip:
            return VisionLayers(part=VISION_TOWER, count=count, width=width, num_heads=heads, head_dim=width // heads,
                                mlp_width=mlp_width, mlp_gated=False, attention="frame", cls=True, qkv_bias=True,
                                proj_bias=True, mlp_bias=True, norm="layernorm")
        return VisionLayers(part=VISION_TOWER, count=count, width=width, num_heads=heads, head_dim=width // heads,
                            mlp_width=mlp_width, mlp_gated=True, attention="frame", qkv_bias=False, proj_bias=False,
                            mlp_bias=False, norm="rmsnorm")

    # layers after the deepest selected hidden state run (every encoder loops over all layers) but reach no loss
    stack = forward_only_after(layers(depth), used)
    embed = PatchEmbed(part=VISION_TOWER, count=1, in_volume=vision.patch_volume, width=width, bias=False)
    if clip:
        tower_blocks: tuple = (
            embed, ClsToken(part=VISION_TOWER, count=1, width=width),
            PositionTable(part=VISION_TOWER, count=1, entries=side * side + 1, width=width),
            ExtraParams(part=VISION_TOWER, count=1, label="pre_layrnorm LayerNorm", numel=2 * width), *stack,
            ExtraParams(part=VISION_TOWER, count=1, label="post_layernorm LayerNorm (pooled CLS only)",
                        numel=2 * width))
    else:
        tower_blocks = (
            embed, ExtraParams(part=VISION_TOWER, count=1, label="ln_pre RMSNorm", numel=width), *stack)
    blocks = tower_blocks + (
        MlpProjector(part=MERGER, count=1, in_width=width * n_layers, hidden_width=lm.hidden_size,
                     out_width=lm.hidden_size, norm_width=0, norm="none", bias=bias,
                     cls_rows=clip and strategy == "full"),)
    # CLIP's position table has (image_size/patch)^2 + 1 entries and LLaVA never interpolates it: one fixed tile
    # (the shared fixed-tile rule refuses other grids); Pixtral takes any size
    fixed = {"fixed_grid_side": side} if clip else {}
    return lm, vision, blocks, {"tower": tower, "image_size": image_size, "strategy": strategy, **fixed}


def build(config: Mapping[str, Any], source: str, name: str = "") -> ModelSpec:
    lm, vision, blocks, extra = llava_parts(config, source)
    spec = ModelSpec(name=name or str(config.get("_name_or_path") or "llava"), model_type="llava", lm=lm,
                     vision=vision, source=source, family="llava", blocks=blocks + lm_blocks(lm))
    spec.extra.update(extra)
    return spec


def _hw(value: Any) -> tuple[Any, Any] | None:
    """(height, width) of a processor size entry: ``{"height", "width"}``, an int, or None when absent."""
    if isinstance(value, dict) and "height" in value and "width" in value:
        return value["height"], value["width"]
    if isinstance(value, int) and not isinstance(value, bool):
        return value, value
    return None


class LlavaMedia(MediaRule):
    """Image tokens as ``LlavaProcessor`` / ``PixtralProcessor`` produce them; no video input.

    * **CLIP** (LLaVA-1.5): ``CLIPImageProcessor`` resizes the shortest edge to ``size.shortest_edge`` and
      center-crops to ``crop_size``, which must be the tower's ``image_size`` (CLIP's position table has
      exactly (image_size/patch)^2 + 1 entries): every image becomes one (1, s, s) grid, s = image_size // patch,
      plus its CLS position in the tower; s^2 LM tokens (``LlavaProcessor``: s^2 + ``num_additional_image_tokens``
      (1) - 1 under "default"). Settings from preprocessor_config.json / processor_config.json when shipped
      (they must agree with the model config: transformers would reject a mismatch), else the model config.
    * **Pixtral** (Pixtral-12B): the Pixtral resize (:func:`.mistral3.pixtral_resize`) with ``size.longest_edge``
      from preprocessor_config.json, else 1024 (``PixtralImageProcessor``'s class default), step =
      patch (``spatial_merge_size`` 1): grid (1, H/p, W/p), rows x cols ``[IMG]`` tokens plus one ``[IMG_BREAK]``
      per row (the last one ``[IMG_END]``; ``break_tokens``, text tokens that are part of ``--seq-len``).
    """

    family = "llava"

    def settings(self, spec) -> dict:
        pre = spec.processor.get("preprocessor_config.json", {})
        proc = spec.processor.get("processor_config.json", {})
        v = spec.vision
        if spec.extra["tower"] == "pixtral":
            size = pre.get("size") if isinstance(pre.get("size"), dict) else {}
            if size and "longest_edge" not in size:
                raise UnsupportedModelError(f"{spec.name}: Pixtral size {size} without longest_edge is not modelled")
            return {"tower": "pixtral", "longest_edge": int(size.get("longest_edge", PIXTRAL_LONGEST_EDGE)),
                    "source": "processor files" if "longest_edge" in size else "PixtralImageProcessor class default",
                    "patch_step": v.patch_size}
        tile = spec.extra["image_size"]
        crop = _hw(pre.get("crop_size")) if pre.get("do_center_crop", True) else _hw(pre.get("size"))
        if pre and crop is not None and tuple(crop) != (tile, tile):
            raise UnsupportedModelError(f"{spec.name}: preprocessor_config.json output size {list(crop)} differs from "
                                        f"vision_config.image_size {tile} (CLIP's position table is fixed)")
        if pre and crop is None and not pre.get("do_center_crop", True):
            raise UnsupportedModelError(f"{spec.name}: preprocessor_config.json without center crop and without a "
                                        "fixed size.height/width is not modelled")
        side = tile // v.patch_size
        strategy = spec.extra.get("strategy", "default")
        tokens = side * side + (1 if strategy == "full" else 0)  # "full": the CLS row is an image feature too
        if proc:
            patch = proc.get("patch_size", v.patch_size)
            extra = proc.get("num_additional_image_tokens", 0)
            shipped = proc.get("vision_feature_select_strategy", "default")
            if not all(isinstance(x, int) and not isinstance(x, bool) for x in (patch, extra)) or patch <= 0:
                raise ConfigError(f"{spec.name}: processor_config.json patch_size / num_additional_image_tokens must "
                                  f"be integers, got {patch!r} / {extra!r}")
            if shipped != strategy:
                raise UnsupportedModelError(f"{spec.name}: processor_config.json vision_feature_select_strategy "
                                            f"{shipped!r} disagrees with the model config ({strategy!r})")
            processor_tokens = (tile // patch) ** 2 + extra - (1 if shipped == "default" else 0)
            if processor_tokens != tokens:
                raise UnsupportedModelError(f"{spec.name}: processor_config.json gives {processor_tokens} image "
                                            f"tokens, the model's features are {tokens}; transformers would reject it")
        return {"tower": "clip_vision_model", "image_size": tile, "tokens_per_image": tokens,
                "source": "processor files" if (pre or proc) else "model config",
                "resize": "shortest edge to image_size, center crop image_size x image_size"}

    def image(self, spec, height: int, width: int) -> DerivedMedia:
        height, width = positive((height, width), "image size (H, W pixels)")
        s, v = self.settings(spec), spec.vision
        if s["tower"] == "pixtral":
            h, w = pixtral_resize(height, width, s["longest_edge"], s["patch_step"])
            rows, cols = h // v.patch_size, w // v.patch_size
            return DerivedMedia("image", (height, width), (h, w), (1, rows, cols), rows * cols,
                                detail={"break_tokens": rows})
        tile, side = s["image_size"], s["image_size"] // v.patch_size
        return DerivedMedia("image", (height, width), (tile, tile), (1, side, side), s["tokens_per_image"],
                            detail={"cls_tokens": 1})

    def video(self, spec, frames: int, height: int, width: int) -> DerivedMedia:
        raise no_video(f"{spec.name} (llava)", "LlavaProcessor / PixtralProcessor", "LlavaForConditionalGeneration",
                       "use llava_onevision / llava_next_video, whose processors take videos")


register_family(Family(
    name="llava", model_types=("llava",), build=build, hf_class="LlavaForConditionalGeneration", is_vlm=True,
    media=LlavaMedia(),
    notes=("every tower layer runs whichever hidden state vision_feature_layer selects (LLaVA-1.5: -2); the layers "
           "after it are never back-propagated (forward FLOPs only in training)",
           "CLIP: one CLS position per image in every tower layer, dropped before the projector ('default') or fed "
           "to it and to the LM as one more image token ('full')",
           "Pixtral: per image conv and attention over its own patches (sum n^2); transformers' eager Pixtral "
           "pads a multi-image batch and joins it into one sequence ((sum n)^2)",
           "position lookups, RoPE, norms and activations are not matmuls (0 FLOPs)")))
