"""The SigLIP vision tower (transformers ``siglip_vision_model``: ``SiglipVisionModel``) as a block inventory.

Shared by Gemma 3 and LLaVA-OneVision. Read from transformers ``models/siglip/modeling_siglip.py``:
Conv2d patch embed (kernel = stride = patch, bias) -> (image/patch)^2 patches, **no CLS token**, learned
position table of ``num_patches`` entries (interpolated only with ``interpolate_pos_encoding``: not a matmul)
-> ``num_hidden_layers`` pre-norm layers: LayerNorm, q/k/v/out projections (all with bias), attention over
the image's patches, LayerNorm, MLP fc1 -> GELU-tanh -> fc2 (bias) -> ``post_layernorm``. The whole tower
runs whichever hidden state a VLM picks (``vision_feature_layer``).

Field defaults are ``SiglipVisionConfig``'s class defaults (what transformers fills in when a config omits
them). ``vision_use_head`` (class default **True**; the released Gemma 3 and LLaVA-OneVision configs set
false) adds an attention-pooling head that runs on every image although these VLMs discard its output
(:class:`~vlm_perf.arch.blocks.SiglipPoolingHead`: forward only).
"""

from __future__ import annotations

from dataclasses import dataclass

from ...errors import ConfigError, UnsupportedModelError
from ..blocks import ExtraParams, PatchEmbed, PositionTable, SiglipPoolingHead, VisionLayers
from ..fields import Fields
from ..parts import VISION_TOWER

# SiglipVisionConfig class defaults (transformers 5.x configuration_siglip.py)
SIGLIP_DEFAULTS = {"hidden_size": 768, "intermediate_size": 3072, "num_hidden_layers": 12,
                   "num_attention_heads": 12, "num_channels": 3, "image_size": 224, "patch_size": 16,
                   "vision_use_head": True}


@dataclass(frozen=True)
class Siglip:
    """SigLIP tower dimensions as read from ``vision_config``."""

    width: int
    depth: int
    num_heads: int
    mlp_width: int
    channels: int
    image_size: int  # pixels per side of the (square) input image / tile
    patch_size: int
    use_head: bool = False

    @property
    def head_dim(self) -> int:
        return self.width // self.num_heads

    @property
    def side(self) -> int:
        """Patches per image side: image_size // patch_size (SigLIP's conv drops any remainder)."""
        return self.image_size // self.patch_size

    @property
    def patches(self) -> int:
        return self.side * self.side

    @property
    def patch_volume(self) -> int:
        return self.channels * self.patch_size * self.patch_size


def _square(f: Fields, key: str, default: int) -> int:
    value = f.opt(key, default)
    if isinstance(value, (list, tuple)):
        if len(value) != 2 or value[0] != value[1]:
            raise UnsupportedModelError(f"{f.source}: {f.name_of(key)} {value!r}: only square images/patches "
                                        "are modelled")
        value = value[0]
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        raise ConfigError(f"{f.source}: field {f.name_of(key)} must be a positive integer, got {value!r}")
    return value


def read_siglip(vc: dict, source: str, defaults: dict | None = None) -> Siglip:
    """A :class:`Siglip` from ``vision_config``; ``defaults`` override the SigLIP class defaults where the
    composite config class fills in others (LLaVA-OneVision's so400m defaults)."""
    d = {**SIGLIP_DEFAULTS, **(defaults or {})}
    f = Fields(vc, "vision_config", source)
    model_type = vc.get("model_type", "siglip_vision_model")
    if model_type not in ("siglip_vision_model", "siglip"):
        raise UnsupportedModelError(f"{source}: vision_config.model_type {model_type!r}: only the SigLIP tower "
                                    "(siglip_vision_model) is modelled for this family")
    def positive(key: str) -> int:
        value = f.opt(key, d[key])
        if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
            raise ConfigError(f"{source}: field {f.name_of(key)} must be a positive integer, got {value!r}")
        return value

    width = positive("hidden_size")
    heads = positive("num_attention_heads")
    if width % heads:
        raise ConfigError(f"{source}: vision_config.hidden_size {width} is not divisible by "
                          f"vision_config.num_attention_heads {heads}")
    tower = Siglip(width=width, depth=positive("num_hidden_layers"), num_heads=heads,
                   mlp_width=positive("intermediate_size"), channels=positive("num_channels"),
                   image_size=_square(f, "image_size", d["image_size"]),
                   patch_size=_square(f, "patch_size", d["patch_size"]),
                   use_head=bool(f.opt("vision_use_head", d["vision_use_head"])))
    if tower.side == 0:
        raise ConfigError(f"{source}: vision_config.image_size {tower.image_size} is smaller than patch_size "
                          f"{tower.patch_size}")
    return tower


def siglip_blocks(t: Siglip) -> tuple:
    """Patch embed, position table, ``depth`` ViT layers (per-image attention, plain MLP, biases,
    LayerNorm), post LayerNorm (+ the pooling head with ``vision_use_head``)."""
    head = (SiglipPoolingHead(part=VISION_TOWER, count=1, width=t.width, mlp_width=t.mlp_width),) if t.use_head else ()
    return (PatchEmbed(part=VISION_TOWER, count=1, in_volume=t.patch_volume, width=t.width, bias=True),
            PositionTable(part=VISION_TOWER, count=1, entries=t.patches, width=t.width),
            VisionLayers(part=VISION_TOWER, count=t.depth, width=t.width, num_heads=t.num_heads,
                         head_dim=t.head_dim, mlp_width=t.mlp_width, mlp_gated=False, attention="frame",
                         cls=False, qkv_bias=True, proj_bias=True, mlp_bias=True, norm="layernorm"),
            ExtraParams(part=VISION_TOWER, count=1, label="post LayerNorm", numel=2 * t.width)) + head


def fixed_tile(spec, pre: dict) -> tuple[int, dict]:
    """(tile, size) of a fixed-size SigLIP tower's image processor: ``size`` is ``preprocessor_config.json``'s
    ``{"height", "width"}`` (empty when absent) and must equal the tower's square ``image_size`` — SigLIP's
    learned position table has one entry per patch of that tile, so another size is refused."""
    raw = pre.get("size")
    size: dict = raw if isinstance(raw, dict) else {}
    tile = int(spec.extra["image_size"])
    if size and (size.get("height"), size.get("width")) != (tile, tile):
        raise UnsupportedModelError(f"{spec.name}: preprocessor size {size} differs from the tower's {tile}-px "
                                    "image_size (SigLIP's position table has one entry per patch of that tile)")
    return tile, size

