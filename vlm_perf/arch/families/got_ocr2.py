"""GOT-OCR2 (transformers ``got_ocr2``: ``GotOcr2ForConditionalGeneration``).

Read from transformers ``models/got_ocr2/modeling_got_ocr2.py``, ``configuration_got_ocr2.py``,
``processing_got_ocr2.py`` and ``image_processing_pil_got_ocr2.py``:

* **Tower**: the SAM / ViTDet encoder of :mod:`.sam` (1024-px tile, patch 16 -> 64 x 64, 12 layers of which
  ``global_attn_indexes`` are global and the rest use 14 x 14 windows on the grid zero-padded to 70 x 70,
  decomposed relative positions; neck to ``output_channels`` 256). Every tile is exactly ``image_size``
  pixels (the patch embed raises otherwise).
* **Projector** (``GotOcr2MultiModalProjector``): Conv2d 3x3/2 (256 -> 512, no bias) -> Conv2d 3x3/2
  (512 -> h_text, no bias) -> Linear(h_text -> h_text, bias): 64 x 64 -> 32 x 32 -> 16 x 16 = 256 tokens per
  tile. Its first op is the conv (no norm in front): input gradient only when the tower trains.
* **LM**: ``text_config`` is a Qwen2 decoder; ``lm_head`` tied by default (``GotOcr2Config``).

``image_seq_length`` (config, 576 by class default) is not read by the model; the processor writes
``num_image_tokens`` (256) placeholders per tile, which must equal the projector's output.
"""

from __future__ import annotations

from typing import Any, Mapping

from ...errors import ConfigError, UnsupportedModelError
from ..blocks import StridedConvs, strided_side
from ..fields import Fields
from ..parts import MERGER
from ..spec import ModelSpec, VisionSpec
from . import Family, register_family
from .decoder import lm_blocks, read_lm
from .internvl import tiled_canvas
from .media import DerivedMedia, MediaRule, positive
from .sam import read_sam, sam_blocks

GOT_MLP_DIM = 3072  # GotOcr2VisionConfig.mlp_dim class default
# GotOcr2Processor.images_kwargs: passed to the image processor on every call (beats preprocessor_config.json)
PROCESSOR_FORCED = {"crop_to_patches": False, "min_patches": 1, "max_patches": 12}
PROCESSOR_TOKENS = 256  # GotOcr2Processor.num_image_tokens


def build(config: Mapping[str, Any], source: str, name: str = "") -> ModelSpec:
    tc, vc = config.get("text_config"), config.get("vision_config")
    if not isinstance(tc, dict) or not isinstance(vc, dict):
        missing = "text_config" if not isinstance(tc, dict) else "vision_config"
        raise ConfigError(f"{source}: got_ocr2 config lacks required field {missing}")
    if tc.get("model_type", "qwen2") != "qwen2":
        raise UnsupportedModelError(f"{source}: got_ocr2 with text_config.model_type {tc.get('model_type')!r} is "
                                    "not modelled; supported LM: qwen2")
    text = dict(tc)
    if "tie_word_embeddings" in config:
        text["tie_word_embeddings"] = config["tie_word_embeddings"]
    lm = read_lm(Fields(text, "text_config", source), "qwen2", tie_default=True)
    tower = read_sam(vc, source, "vision_config", GOT_MLP_DIM)
    projector = StridedConvs(part=MERGER, count=1, channels=(tower.out_channels, 2 * tower.out_channels,
                                                             lm.hidden_size),
                             side=tower.side, linear=lm.hidden_size, component="vision.merger",
                             first_input="upstream", tile_patches=tower.side ** 2)
    # summary: the projector's 4x fold as the merge (a grid side that 4 does not divide gives ceil(ceil(s/2)/2)
    # tokens per side: merge 1 in the summary then; the inventory's per-tile counts are exact either way)
    vision = VisionSpec(family="got_ocr2", depth=tower.depth, hidden_size=tower.width, num_heads=tower.num_heads,
                        head_dim=tower.width // tower.num_heads, intermediate_size=tower.mlp_width, mlp_gated=False,
                        patch_size=tower.patch_size, temporal_patch_size=1, in_channels=tower.channels,
                        spatial_merge_size=4 if tower.side % 4 == 0 else 1, out_hidden_size=lm.hidden_size,
                        num_position_embeddings=tower.side ** 2 if tower.abs_pos else 0, patch_embed_bias=True,
                        norm="layernorm")
    blocks = sam_blocks(tower, tower.side ** 2) + (projector,) + lm_blocks(lm)
    spec = ModelSpec(name=name or str(config.get("_name_or_path") or "got_ocr2"), model_type="got_ocr2", lm=lm,
                     vision=vision, source=source, family="got_ocr2", blocks=blocks)
    spec.extra.update(image_size=tower.image_size, tile_size=tower.image_size,
                      tokens_per_tile=projector.out_tokens, fixed_grid_side=tower.side)
    return spec


def tokens_per_tile(side: int) -> int:
    """LM tokens per tile: two 3x3/2 convs with padding 1 on a ``side`` x ``side`` grid."""
    return strided_side(strided_side(side)) ** 2


class GotOcr2Media(MediaRule):
    """GOT-OCR2: ``GotOcr2Processor.images_kwargs`` passes ``crop_to_patches=False`` (min 1, max 12 patches)
    to the image processor on every call, whatever preprocessor_config.json says, so each image is ONE tile
    resized (no aspect kept) to ``size`` (1024) unless the caller passes ``crop_to_patches=True`` at call time
    (``GotOcr2Media(crop_to_patches=True, min_patches=..., max_patches=...)``): then GotOcr2's canvas
    (:func:`.internvl.tiled_canvas`: c x r tiles, + a thumbnail when c*r > 1). Each page of ``multi_page``
    is one image. LM placeholders per tile: the processor's ``num_image_tokens`` (256; processor_config.json
    may set it), which must equal the projector's output. No video input.
    """

    family = "got_ocr2"

    def __init__(self, crop_to_patches: bool = False, **call_kwargs: Any):
        unknown = set(call_kwargs) - {"min_patches", "max_patches", "num_image_tokens"}
        if unknown:
            raise ConfigError(f"unknown GOT-OCR2 processor call kwargs: {', '.join(sorted(unknown))}")
        self.crop_to_patches = crop_to_patches
        self.call_kwargs = call_kwargs

    def settings(self, spec) -> dict:
        pre = spec.processor.get("preprocessor_config.json", {})
        tile = int(spec.extra["image_size"])
        size = pre.get("size") if isinstance(pre.get("size"), dict) else {}
        if size and (size.get("height"), size.get("width")) != (tile, tile):
            raise UnsupportedModelError(f"{spec.name}: preprocessor size {size} differs from the tower's {tile}-px "
                                        "image_size (the SAM patch embed accepts only that size)")
        proc = spec.processor.get("processor_config.json", {})
        out: dict[str, Any] = {"tile": tile, **PROCESSOR_FORCED,
                               "num_image_tokens": int(proc.get("num_image_tokens", PROCESSOR_TOKENS)),
               "source": "processor files" if pre else "tower image_size (reference default)",
               "forced": "GotOcr2Processor.images_kwargs (crop_to_patches False unless the call passes True)"}
        out.update(self.call_kwargs, crop_to_patches=self.crop_to_patches)
        produced = spec.extra["tokens_per_tile"]
        if out["num_image_tokens"] != produced:
            raise UnsupportedModelError(f"{spec.name}: the processor writes {out['num_image_tokens']} placeholders "
                                        f"per tile but the projector yields {produced} tokens per "
                                        f"{tile}-px tile (the model refuses the mismatch)")
        if not 1 <= out["min_patches"] <= out["max_patches"]:
            raise ConfigError(f"{spec.name}: min_patches {out['min_patches']} / max_patches {out['max_patches']} "
                              "invalid")
        return out

    def image(self, spec, height: int, width: int) -> DerivedMedia:
        height, width = positive((height, width), "image size (H, W pixels)")
        s = self.settings(spec)
        cols, rows = (tiled_canvas(height, width, s["tile"], s["min_patches"], s["max_patches"])
                      if s["crop_to_patches"] else (1, 1))
        tiles = cols * rows + (1 if cols * rows > 1 else 0)
        side = s["tile"] // spec.vision.patch_size
        return DerivedMedia("image", (height, width), (s["tile"], s["tile"]), (tiles, side, side),
                            tiles * s["num_image_tokens"], tiles=tiles,
                            detail={"canvas": [rows, cols], "thumbnail": cols * rows > 1})

    def video(self, spec, frames: int, height: int, width: int) -> DerivedMedia:
        raise UnsupportedModelError(f"{spec.name}: GOT-OCR2 has no video input")


register_family(Family(
    name="got_ocr2", model_types=("got_ocr2",), build=build, hf_class="GotOcr2ForConditionalGeneration",
    is_vlm=True, media=GotOcr2Media(),
    notes=("resizing, window padding/partition, relative-position interpolation and the neck's LayerNorms are "
           "not matmuls; windowed layers run qkv/proj/attention on the zero-padded windows",
           "the tower's neck convolutions are reported under vision.mlp, the relative-position products under "
           "vision.attn_core",
           "crop_to_patches is off (GotOcr2Processor forces it False); with it each tile and the thumbnail cost "
           "one tower pass (Python API: GotOcr2Media(crop_to_patches=True, ...))",
           "no preset: the hub config.json of stepfun-ai/GOT-OCR-2.0-hf was not readable offline; transformers' "
           "conversion script writes GotOcr2Config() class defaults (560,528,640 parameters = transformers' meta "
           "count of that config, tested), which a config.json omitting fields gets")))
