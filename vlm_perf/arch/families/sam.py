"""The SAM / ViTDet image encoder as a block inventory (no family of its own).

Shared by GOT-OCR2 (transformers ``got_ocr2_vision``: ``GotOcr2VisionEncoder``) and DeepSeek-VL-hybrid's
high-resolution tower (``sam_vision_model``: ``SamVisionEncoder``). Read from transformers
``models/sam/modeling_sam.py`` and ``models/got_ocr2/modeling_got_ocr2.py`` (generated from the same
modular code): Conv2d patch embed (kernel = stride = patch, bias) on exactly ``image_size`` pixels (any other
size raises), + a learned absolute position grid (``use_abs_pos``) -> ``num_hidden_layers`` pre-norm layers,
windowed (``window_size``, zero-padded to a multiple) except those in ``global_attn_indexes`` (global
attention), decomposed relative positions (``use_rel_pos``), fused qkv (``qkv_bias``), MLP lin1/lin2 of
``mlp_dim`` -> neck: Conv 1x1 (no bias) -> LayerNorm -> Conv 3x3 (no bias) -> LayerNorm to
``output_channels``. Field defaults are the vision config class's (GotOcr2VisionConfig: ``mlp_dim`` 3072;
SamVisionConfig: ``mlp_dim`` = hidden x ``mlp_ratio`` (4.0)).
"""

from __future__ import annotations

from dataclasses import dataclass

from ...errors import ConfigError, UnsupportedModelError
from ..blocks import SamEmbed, SamNeck, SamVisionLayers
from ..fields import Fields
from ..parts import VISION_TOWER

# GotOcr2VisionConfig / SamVisionConfig class defaults (transformers 5.x; identical except mlp_dim)
SAM_DEFAULTS = {"hidden_size": 768, "output_channels": 256, "num_hidden_layers": 12, "num_attention_heads": 12,
                "num_channels": 3, "image_size": 1024, "patch_size": 16, "qkv_bias": True, "use_abs_pos": True,
                "use_rel_pos": True, "window_size": 14, "global_attn_indexes": (2, 5, 8, 11)}


@dataclass(frozen=True)
class Sam:
    """SAM tower dimensions as read from its vision config."""

    width: int
    depth: int
    num_heads: int
    mlp_width: int
    channels: int
    image_size: int
    patch_size: int
    out_channels: int
    window: int
    global_layers: tuple[int, ...]
    qkv_bias: bool = True
    abs_pos: bool = True
    rel_pos: bool = True

    @property
    def side(self) -> int:
        return self.image_size // self.patch_size

    @property
    def patch_volume(self) -> int:
        return self.channels * self.patch_size * self.patch_size


def _int(f: Fields, key: str, default, minimum: int = 1) -> int:
    value = f.opt(key, default)
    if isinstance(value, (list, tuple)):
        if len(value) != 2 or value[0] != value[1]:
            raise UnsupportedModelError(f"{f.source}: {f.name_of(key)} {value!r}: only square images/patches are "
                                        "modelled")
        value = value[0]
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise ConfigError(f"{f.source}: field {f.name_of(key)} must be an integer >= {minimum}, got {value!r}")
    return value


def read_sam(vc: dict, source: str, section: str, mlp_default: int | None) -> Sam:
    """A :class:`Sam` from the vision config ``vc``; ``mlp_default`` None: ``hidden_size`` x ``mlp_ratio``
    (SamVisionConfig), else that width (GotOcr2VisionConfig: 3072)."""
    f = Fields(vc, section, source)
    width, heads = _int(f, "hidden_size", SAM_DEFAULTS["hidden_size"]), _int(f, "num_attention_heads", 12)
    if width % heads:
        raise ConfigError(f"{source}: {section}.hidden_size {width} is not divisible by num_attention_heads {heads}")
    depth = _int(f, "num_hidden_layers", SAM_DEFAULTS["num_hidden_layers"])
    mlp = f.opt("mlp_dim", mlp_default)
    if mlp is None:
        mlp = int(width * float(f.opt("mlp_ratio", 4.0)))
    if isinstance(mlp, bool) or not isinstance(mlp, int) or mlp <= 0:
        raise ConfigError(f"{source}: {section}.mlp_dim must be a positive integer, got {mlp!r}")
    glob = f.opt("global_attn_indexes", SAM_DEFAULTS["global_attn_indexes"])
    if not isinstance(glob, (list, tuple)) or any(isinstance(i, bool) or not isinstance(i, int) for i in glob):
        raise ConfigError(f"{source}: {section}.global_attn_indexes must be a list of layer indexes, got {glob!r}")
    t = Sam(width=width, depth=depth, num_heads=heads, mlp_width=mlp,
            channels=_int(f, "num_channels", 3), image_size=_int(f, "image_size", SAM_DEFAULTS["image_size"]),
            patch_size=_int(f, "patch_size", SAM_DEFAULTS["patch_size"]),
            out_channels=_int(f, "output_channels", SAM_DEFAULTS["output_channels"]),
            window=_int(f, "window_size", SAM_DEFAULTS["window_size"], minimum=0),
            global_layers=tuple(sorted({i for i in glob if 0 <= i < depth})),
            qkv_bias=bool(f.opt("qkv_bias", True)), abs_pos=bool(f.opt("use_abs_pos", True)),
            rel_pos=bool(f.opt("use_rel_pos", True)))
    if t.side == 0:
        raise ConfigError(f"{source}: {section}.image_size {t.image_size} is smaller than patch_size {t.patch_size}")
    return t


def sam_blocks(t: Sam, tile_patches: int, necks: int = 1) -> tuple:
    """Patch embed (+ absolute positions), the windowed and the global layers, ``necks`` necks on the grid;
    ``tile_patches``: patches of one tile (image) in the family's summary grid (the tile count is
    ``vision_patches // tile_patches``)."""
    windowed = t.depth - len(t.global_layers) if t.window else 0

    def layers(count: int, window: int) -> SamVisionLayers:
        return SamVisionLayers(part=VISION_TOWER, count=count, width=t.width, num_heads=t.num_heads,
                               mlp_width=t.mlp_width, side=t.side, window=window, qkv_bias=t.qkv_bias,
                               rel_pos=t.rel_pos, tile_patches=tile_patches)

    return (SamEmbed(part=VISION_TOWER, count=1, in_volume=t.patch_volume, width=t.width, side=t.side,
                     abs_pos=t.abs_pos, tile_patches=tile_patches),
            layers(windowed, t.window), layers(t.depth - windowed, 0),
            SamNeck(part=VISION_TOWER, count=necks, width=t.width, channels=t.out_channels, side=t.side,
                    tile_patches=tile_patches))
