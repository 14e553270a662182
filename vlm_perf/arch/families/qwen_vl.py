"""Qwen2-VL, Qwen2.5-VL, Qwen3-VL and Qwen3-VL-MoE: Qwen-style ViT + patch merger (+ deepstack) + Qwen LM.

Config traps handled here (see docs/conventions.md):

* Qwen2-VL: ``vision_config.hidden_size`` is the merger OUTPUT width; the ViT width is ``embed_dim``
  and its MLP width is ``embed_dim * mlp_ratio``.
* ``in_chans`` (Qwen2/2.5-VL) vs ``in_channels`` (Qwen3-VL).
* Qwen3-VL-MoE: the top-level ``tie_word_embeddings`` wins over ``text_config``'s class default.
* ``fullatt_block_indexes`` / ``deepstack_visual_indexes``: transformers tests ``layer_num in indexes``
  for each tower layer, so only distinct indexes inside the tower change the computation; one deepstack
  merger module is still STORED per configured entry (``len(deepstack_visual_indexes)``).

Inventory: Conv3d patch embed (bias in Qwen3-VL), learned position table (Qwen3-VL), ``depth`` ViT
layers (full attention per frame; Qwen2.5-VL's windowed layers a separate group), the main merger
(``ln_q`` over h_v, Linear(m^2 h_v -> m^2 h_v), GELU, Linear(-> d_out)), Qwen3-VL's deepstack mergers
(post-shuffle LayerNorm over m^2 h_v), then the LM inventory of :mod:`.decoder`.
"""

from __future__ import annotations

from typing import Any, Mapping, TypedDict

from ..blocks import MlpProjector, PatchEmbed, PositionTable, StoredOnly, VisionLayers
from ...errors import ConfigError
from ..fields import Fields, text_section
from ..parts import DEEPSTACK_MERGER, MERGER, VISION_TOWER
from ..spec import LMSpec, ModelSpec, VisionSpec
from . import Family, register_family
from .decoder import lm_blocks, read_lm
from .media import qwen_media

_LM_FAMILY = {"qwen2_vl": "qwen2", "qwen2_5_vl": "qwen2", "qwen3_vl": "qwen3", "qwen3_vl_moe": "qwen3_moe"}


def read_vision(f: Fields, family: str) -> VisionSpec:
    if family == "qwen2_vl":
        width = f.int("embed_dim")
        mlp = int(width * f.req("mlp_ratio"))
        out = f.int("hidden_size")  # merger output width in Qwen2-VL
        gated = False
    else:
        width = f.int("hidden_size")
        mlp = f.int("intermediate_size")
        out = f.int("out_hidden_size")
        gated = family == "qwen2_5_vl"
    heads = f.int("num_heads")
    # Switches whose absence would silently change the count are required, not defaulted.
    window = f.int("window_size") if family == "qwen2_5_vl" else None
    fullatt = f.int_list("fullatt_block_indexes", ()) if window else ()
    if window and not fullatt:
        f.req("fullatt_block_indexes")
    return VisionSpec(
        family=family, depth=f.int("depth"), hidden_size=width, num_heads=heads, head_dim=width // heads,
        intermediate_size=mlp, mlp_gated=gated, patch_size=f.int("patch_size", "spatial_patch_size"),
        temporal_patch_size=f.int("temporal_patch_size"), in_channels=f.int("in_channels", "in_chans"),
        spatial_merge_size=f.int("spatial_merge_size"), out_hidden_size=out,
        window_size=int(window) if window else None, fullatt_block_indexes=fullatt,
        deepstack_visual_indexes=f.int_list("deepstack_visual_indexes") if family == "qwen3_vl" else (),
        num_position_embeddings=f.int("num_position_embeddings") if family == "qwen3_vl" else 0,
        patch_embed_bias=family == "qwen3_vl", norm="rmsnorm" if family == "qwen2_5_vl" else "layernorm",
    )


class _TowerLayerShape(TypedDict):
    """The :class:`VisionLayers` fields the full-attention and window-attention layers share."""

    part: str
    width: int
    num_heads: int
    head_dim: int
    mlp_width: int
    mlp_gated: bool
    norm: str


class _MergerWidths(TypedDict):
    """The :class:`MlpProjector` widths the merger and the deepstack mergers share."""

    in_width: int
    hidden_width: int
    out_width: int


def vision_blocks(v: VisionSpec) -> tuple:
    """Tower + merger inventory of a Qwen-style vision model."""
    blocks: list = [PatchEmbed(part=VISION_TOWER, count=1, in_volume=v.patch_volume, width=v.hidden_size,
                               bias=v.patch_embed_bias)]
    if v.num_position_embeddings:
        blocks.append(PositionTable(part=VISION_TOWER, count=1, entries=v.num_position_embeddings,
                                    width=v.hidden_size))
    layer = _TowerLayerShape(part=VISION_TOWER, width=v.hidden_size, num_heads=v.num_heads, head_dim=v.head_dim,
                             mlp_width=v.intermediate_size, mlp_gated=v.mlp_gated, norm=v.norm)
    full = v.full_attention_layers if v.num_window_layers and v.num_full_layers else ()  # which layers are which
    if v.num_full_layers:
        blocks.append(VisionLayers(count=v.num_full_layers, attention="frame", layer_indexes=full, **layer))
    if v.num_window_layers:
        window = tuple(i for i in range(v.depth) if i not in full) if full else ()
        blocks.append(VisionLayers(count=v.num_window_layers, attention="window", layer_indexes=window, **layer))
    merger = _MergerWidths(in_width=v.merger_width, hidden_width=v.merger_width, out_width=v.out_hidden_size)
    blocks.append(MlpProjector(part=MERGER, count=1, norm_width=v.hidden_size, norm=v.norm, **merger))
    if v.num_deepstack_stored:
        taps = tuple(sorted({i for i in v.deepstack_visual_indexes if 0 <= i < v.depth}))  # the layers they read
        blocks.append(MlpProjector(part=DEEPSTACK_MERGER, count=v.num_deepstack, norm_width=v.merger_width,
                                   norm="layernorm", component="vision.deepstack_merger", taps=taps, **merger))
        if v.num_deepstack_stored != v.num_deepstack:
            # stored but never run (duplicate or out-of-range index): parameters only
            module = MlpProjector(part=DEEPSTACK_MERGER, count=1, norm_width=v.merger_width, norm="layernorm",
                                  component="vision.deepstack_merger", **merger)
            blocks.append(StoredOnly(part=DEEPSTACK_MERGER, count=v.num_deepstack_stored - v.num_deepstack,
                                     module=module))
    return tuple(blocks)


def build_qwen_vl(family: str):
    def build(config: Mapping[str, Any], source: str, name: str = "") -> ModelSpec:
        text, section = text_section(config)
        lm: LMSpec = read_lm(Fields(text, section, source), _LM_FAMILY[family])
        vc = config.get("vision_config")
        if not isinstance(vc, dict):
            raise ConfigError(f"{source}: config lacks required field vision_config for model_type {family}")
        vision = read_vision(Fields(vc, "vision_config", source), "qwen3_vl" if family == "qwen3_vl_moe" else family)
        return ModelSpec(name=name or str(config.get("_name_or_path") or config.get("model_type")),
                         model_type=family, lm=lm, vision=vision, source=source, family=family,
                         blocks=vision_blocks(vision) + lm_blocks(lm))
    return build


_HF = {"qwen2_vl": "Qwen2VLForConditionalGeneration", "qwen2_5_vl": "Qwen2_5_VLForConditionalGeneration",
       "qwen3_vl": "Qwen3VLForConditionalGeneration", "qwen3_vl_moe": "Qwen3VLMoeForConditionalGeneration"}
for _name, _cls in _HF.items():
    register_family(Family(name=_name, model_types=(_name,), build=build_qwen_vl(_name), hf_class=_cls,
                           is_vlm=True, media=qwen_media(_name)))
