"""PaliGemma 1 / 2 (transformers ``paligemma``: ``PaliGemmaForConditionalGeneration``).

Read from transformers ``models/paligemma/modeling_paligemma.py``, ``configuration_paligemma.py``,
``processing_paligemma.py``, ``models/gemma/modeling_gemma.py`` and ``models/gemma2/modeling_gemma2.py``:

* **Tower**: SigLIP (:mod:`.siglip`, ``last_hidden_state``: every layer reaches the loss) on every image resized
  to ``image_size`` (224 / 448 / 896 px, patch 14 -> 256 / 1024 / 4096 patches, full attention per image).
* **Projector** (``PaliGemmaMultiModalProjector``): one Linear(h_v -> ``projection_dim``, bias) on every patch;
  no norm in front (its input gradient is due only when the tower trains). ``PaliGemmaConfig`` copies its
  top-level ``projection_dim`` into the tower config; it must equal the LM width (``masked_scatter``).
* **LM**: ``text_config`` Gemma (PaliGemma 1: GQA, GeGLU MLP gate/up/down, 2 RMSNorms per layer) or Gemma 2
  (PaliGemma 2: 4 RMSNorms per layer, ``layer_types`` alternating sliding / full, logit soft-capping: elementwise),
  no q/k norm, ``attention_bias`` on q/k/v/o, head tied by default. Embedding scaling by sqrt(h) and the image
  features' scaling are elementwise (0 FLOPs).
* **Prefix-LM mask**: with ``token_type_ids`` the image tokens, ``<bos>``, the prompt and its "\\n" attend
  bidirectionally, the suffix causally. transformers refuses FlashAttention for this model
  (``_supports_flash_attn = False``); eager and SDPA compute the whole score square whatever the mask, on the
  sliding layers too. So the LM attention core is billed as the square under both ``--causal`` rules
  (:class:`~vlm_perf.arch.blocks.PrefixLMSquare`; measured in ``tests/verify/test_paligemma_flops.py``); a
  block-sparse flex-attention kernel would compute less (this is then an upper bound).

Defaults: a ``text_config`` / ``vision_config`` dict takes its own config class's defaults (``GemmaConfig`` /
``Gemma2Config`` / ``SiglipVisionConfig``), not ``PaliGemmaConfig``'s ``sub_configs_defaults`` (those apply only
when the section is absent, which the released configs never are).
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any, Mapping

from ...errors import ConfigError, UnsupportedModelError
from ..blocks import DecoderAttention, LMLayerNorms, NormLinearProjector, PrefixLMSquare
from ..fields import Fields
from ..parts import LANGUAGE_MODEL, MERGER
from ..spec import LMSpec, ModelSpec, VisionSpec
from ..validate import bounded
from . import Family, register_family
from .decoder import lm_blocks
from .media import DerivedMedia, MediaRule, no_video, positive
from .siglip import fixed_tile, read_siglip, siglip_blocks

LM_FAMILIES = ("gemma", "gemma2")
# GemmaConfig / Gemma2Config class defaults (transformers 5.x configuration_gemma.py / configuration_gemma2.py)
GEMMA_DEFAULTS = {"vocab_size": 256_000, "hidden_size": 3072, "intermediate_size": 24_576, "num_hidden_layers": 28,
                  "num_attention_heads": 16, "num_key_value_heads": 16, "head_dim": 256}
GEMMA2_DEFAULTS = {"vocab_size": 256_000, "hidden_size": 2304, "intermediate_size": 9216, "num_hidden_layers": 26,
                   "num_attention_heads": 8, "num_key_value_heads": 4, "head_dim": 256, "sliding_window": 4096}
PROJECTION_DIM_DEFAULT = 2048  # PaliGemmaConfig.projection_dim


def _int(f: Fields, key: str, defaults: Mapping[str, int]) -> int:
    value = f.opt(key, defaults[key])
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        raise ConfigError(f"{f.source}: field {f.name_of(key)} must be a positive integer, got {value!r}")
    return value


def read_gemma_lm(f: Fields, family: str, tie_default: bool = True) -> LMSpec:
    """An :class:`LMSpec` of a Gemma (``gemma``) or Gemma 2 (``gemma2``) text model."""
    d = GEMMA_DEFAULTS if family == "gemma" else GEMMA2_DEFAULTS
    layers = _int(f, "num_hidden_layers", d)
    window: int | None = None
    sliding: tuple[int, ...] = ()
    if family == "gemma2":
        types = f.opt("layer_types") or ["sliding_attention" if (i + 1) % 2 else "full_attention"
                                         for i in range(layers)]  # Gemma2Config.__post_init__
        if len(types) != layers or any(t not in ("sliding_attention", "full_attention") for t in types):
            raise ConfigError(f"{f.source}: {f.name_of('layer_types')} must list 'sliding_attention' / "
                              f"'full_attention' for each of the {layers} layers, got {types!r}")
        raw = f.opt("sliding_window", d["sliding_window"])
        if raw is not None and (isinstance(raw, bool) or not isinstance(raw, int) or raw <= 0):
            raise ConfigError(f"{f.source}: field {f.name_of('sliding_window')} must be a positive integer or null, "
                              f"got {raw!r}")
        sliding = tuple(i for i, t in enumerate(types) if t == "sliding_attention") if raw is not None else ()
        window = raw if sliding else None
    return LMSpec(family=family, num_layers=layers, hidden_size=_int(f, "hidden_size", d),
                  num_heads=_int(f, "num_attention_heads", d), num_kv_heads=_int(f, "num_key_value_heads", d),
                  head_dim=_int(f, "head_dim", d), intermediate_size=_int(f, "intermediate_size", d),
                  vocab_size=_int(f, "vocab_size", d), tie_word_embeddings=bool(f.opt("tie_word_embeddings", tie_default)),
                  qkv_bias=bool(f.opt("attention_bias", False)), qk_norm=False, sliding_window=window,
                  sliding_layers=sliding)


def build(config: Mapping[str, Any], source: str, name: str = "") -> ModelSpec:
    top = Fields(config, "", source)
    vc, tc = config.get("vision_config"), config.get("text_config")
    if not isinstance(vc, dict) or not isinstance(tc, dict):
        missing = "vision_config" if not isinstance(vc, dict) else "text_config"
        raise ConfigError(f"{source}: config lacks required field {missing} for model_type paligemma")
    text_type = tc.get("model_type", "gemma")
    if text_type not in LM_FAMILIES:
        raise UnsupportedModelError(f"{source}: paligemma with text_config.model_type {text_type!r} is not modelled; "
                                    f"supported LMs: {', '.join(LM_FAMILIES)}")
    # PaliGemmaConfig.tie_word_embeddings (class default True) is the composite's; the LM head follows it
    text = {**tc, "tie_word_embeddings": bool(config.get("tie_word_embeddings", tc.get("tie_word_embeddings", True)))}
    lm = read_gemma_lm(Fields(text, "text_config", source), text_type)
    tower = read_siglip(vc, source)
    proj = top.opt("projection_dim", PROJECTION_DIM_DEFAULT)
    if isinstance(proj, bool) or not isinstance(proj, int) or proj != lm.hidden_size:
        raise ConfigError(f"{source}: projection_dim {proj!r} must equal text_config.hidden_size {lm.hidden_size} "
                          "(the projected image features replace LM token embeddings)")
    for section, data in (("text_config", tc), ("vision_config", vc)):  # stated copies of the tower's patch count
        stated = data.get("num_image_tokens")
        if stated is not None and (isinstance(stated, bool) or stated != tower.patches):
            raise ConfigError(f"{source}: {section}.num_image_tokens {bounded(stated)} differs from the "
                              f"{tower.patches} patches of the tower's tile ((image_size {tower.image_size} / "
                              f"patch_size {tower.patch_size})^2, one image token per patch)")
    vision = VisionSpec(family="paligemma", depth=tower.depth, hidden_size=tower.width, num_heads=tower.num_heads,
                        head_dim=tower.head_dim, intermediate_size=tower.mlp_width, mlp_gated=False,
                        patch_size=tower.patch_size, temporal_patch_size=1, in_channels=tower.channels,
                        spatial_merge_size=1, out_hidden_size=lm.hidden_size,
                        num_position_embeddings=tower.patches, patch_embed_bias=True, norm="layernorm")
    # eager / SDPA compute the whole square on every layer (sliding ones included): attention blocks without a
    # window, plus the other half of the square under --causal half
    decoder = tuple(replace(b, window=None) if isinstance(b, DecoderAttention)
                    else replace(b, norms_per_layer=4) if isinstance(b, LMLayerNorms) and text_type == "gemma2"
                    else b for b in lm_blocks(lm))
    blocks = siglip_blocks(tower) + (
        NormLinearProjector(part=MERGER, count=1, in_width=tower.width, out_width=lm.hidden_size,
                            norm_width=tower.width, norm="none", bias=True),
    ) + decoder + (
        PrefixLMSquare(part=LANGUAGE_MODEL, count=lm.num_layers, num_heads=lm.num_heads, head_dim=lm.head_dim),)
    spec = ModelSpec(name=name or str(config.get("_name_or_path") or "paligemma"), model_type="paligemma", lm=lm,
                     vision=vision, source=source, family="paligemma", blocks=blocks)
    # the tower runs one fixed tile (its position table has one entry per patch of image_size, no interpolation):
    # the shared fixed-tile rule (BatchStats.from_batch, the metadata's grid check) refuses any other grid
    spec.extra.update(image_size=tower.image_size, image_seq_length=tower.patches, fixed_grid_side=tower.side)
    return spec


class PaliGemmaMedia(MediaRule):
    """PaliGemma: every image resized to the tower's ``image_size`` (``SiglipImageProcessor``: a fixed cost per
    image, no tiling, no aspect ratio kept); ``image_seq_length`` placeholders per image
    (``PaliGemmaProcessor`` reads it from the image processor: ``preprocessor_config.json``, else the tower's
    patch count, which it must equal). Several images per sample are accepted. No video input."""

    family = "paligemma"

    def settings(self, spec) -> dict:
        pre = spec.processor.get("preprocessor_config.json", {})
        tile, size = fixed_tile(spec, pre)
        seq = pre.get("image_seq_length", spec.extra["image_seq_length"])
        if seq != spec.extra["image_seq_length"]:
            raise ConfigError(f"{spec.name}: preprocessor image_seq_length {seq} differs from the "
                              f"{spec.extra['image_seq_length']} patches the tower gives per image")
        return {"size": tile, "image_seq_length": seq,
                "source": "processor files" if pre else "tower image_size (reference default)"}

    def image(self, spec, height: int, width: int) -> DerivedMedia:
        height, width = positive((height, width), "--image-size")
        s = self.settings(spec)
        side = spec.extra["image_size"] // spec.vision.patch_size
        return DerivedMedia("image", (height, width), (s["size"], s["size"]), (1, side, side), s["image_seq_length"])

    def video(self, spec, frames: int, height: int, width: int) -> DerivedMedia:
        raise no_video(f"{spec.name} (paligemma)", "PaliGemmaProcessor", "PaliGemmaForConditionalGeneration")


register_family(Family(
    name="paligemma", model_types=("paligemma",), build=build, hf_class="PaliGemmaForConditionalGeneration",
    is_vlm=True, media=PaliGemmaMedia(),
    notes=("prefix-LM mask: FlashAttention refused by transformers, eager/SDPA compute the whole score square, so the "
           "LM core is billed as the square under both --causal rules (sliding layers included)",
           "embedding / image-feature scaling and logit soft-capping are elementwise (0 FLOPs)")))
