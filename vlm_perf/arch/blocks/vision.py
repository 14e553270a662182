"""Vision-tower blocks: patch embeddings (a Conv as a GEMM on ``vision_patches``), ViT / SAM layers, pooling heads,
and the tower's own mask products. FLOPs: ``vlm_perf.flops.blocks.vision``; per-Linear layout: the hooks at the end.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any, ClassVar

from ..parts import VISION_TOWER
from ..trainability import ATTENTION, EMBEDDINGS, MLP, NORMS
from .base import Block, linear_params, norm_params
from .laid import AttnSub, Lin, LayoutContext, MlpSub, ModuleNames, Params, Placed, block_layout, norm


@dataclass(frozen=True)
class PatchEmbed(Block):
    """Patch embedding: a Conv2d/Conv3d with kernel = stride = patch, i.e. a GEMM on ``vision_patches``
    rows of ``in_volume`` (C x T_p x P^2) values to ``width``. Its input is pixels: no input gradient."""

    kind: ClassVar[str] = "patch_embed"
    in_volume: int
    width: int
    bias: bool

    def params(self) -> int:
        return linear_params(self.in_volume, self.width, self.bias)

    def describe(self) -> str:
        return f"patch embed conv {self.in_volume} -> {self.width}{' (+bias)' if self.bias else ''}"


@dataclass(frozen=True)
class VisionLayers(Block):
    """``count`` identical pre-norm ViT layers (bidirectional attention).

    ``attention``: ``"frame"`` = full attention per image / tile / temporal slice (statistic
    ``vision_patches_sq_frame``), ``"window"`` = Qwen2.5-VL windows (``vision_window_sq``), ``"item"`` = one
    sequence over all frames of a grid row / video chunk (Kimi K2.5 MoonViT3d: ``vision_patches_sq_item``).
    ``cls``: the sequence carries one CLS token per frame/tile (rows ``vision_patches + vision_cls_tokens``).
    ``mlp_gated``: gate/up/down (3 matrices) vs fc1/fc2 (2).
    ``layer_scale``: two learned per-channel scales (InternViT ``lambda_1``/``lambda_2``).
    ``layer_indexes``: which tower layers these copies are, where they are not the next ``count`` ones (Qwen2.5-VL's
    full-attention layers among its windowed ones); read by the per-Linear layout only.
    """

    kind: ClassVar[str] = "vision_layers"
    width: int
    num_heads: int
    head_dim: int
    mlp_width: int
    mlp_gated: bool
    attention: str = "frame"
    cls: bool = False
    qkv_bias: bool = True
    proj_bias: bool = True
    mlp_bias: bool = True
    norm: str = "layernorm"
    qk_norm: str = "none"  # norm kind over the full q/k width (InternViT use_qk_norm: rmsnorm)
    layer_scale: bool = False
    layer_indexes: tuple[int, ...] = ()

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.attention not in ("frame", "window", "item"):
            raise ValueError(f"VisionLayers.attention must be 'frame', 'window' or 'item', got {self.attention!r}")

    @property
    def attn_width(self) -> int:
        return self.num_heads * self.head_dim

    @property
    def mlp_matrices(self) -> int:
        return 3 if self.mlp_gated else 2

    def params(self) -> int:
        h, q, i = self.width, self.attn_width, self.mlp_width
        attn = linear_params(h, 3 * q, self.qkv_bias) + linear_params(q, h, self.proj_bias)
        if self.mlp_gated:
            mlp = 2 * linear_params(h, i, self.mlp_bias) + linear_params(i, h, self.mlp_bias)
        else:
            mlp = linear_params(h, i, self.mlp_bias) + linear_params(i, h, self.mlp_bias)
        extra = 2 * norm_params(q, self.qk_norm) + (2 * h if self.layer_scale else 0)
        return 2 * norm_params(h, self.norm) + attn + mlp + extra

    def describe(self) -> str:
        where = {"frame": "full attention per image/tile/frame", "window": "windowed attention",
                 "item": "full attention per image / video chunk (all its frames jointly)"}[self.attention]
        mlp = f"{'gated' if self.mlp_gated else 'plain'} MLP {self.width}->{self.mlp_width}->{self.width}"
        cls = " + CLS" if self.cls else ""
        return (f"{self.count} ViT layers, width {self.width}, {self.num_heads}x{self.head_dim} heads, "
                f"{where}{cls}, {mlp}, {self.norm}")


@dataclass(frozen=True)
class SiglipPoolingHead(Block):
    """SigLIP's attention-pooling head (``vision_use_head``): a learned probe (1 query per image / tile /
    frame) attends over the image's patches with ``nn.MultiheadAttention`` (q from the probe, k/v from the
    patches, out_proj), then LayerNorm and the tower's fc1/fc2 MLP on that one token. Gemma 3 and
    LLaVA-OneVision discard its output, so autograd never reaches it: forward FLOPs only, in training too."""

    kind: ClassVar[str] = "siglip_pooling_head"
    width: int
    mlp_width: int

    def params(self) -> int:
        w, i = self.width, self.mlp_width
        attention = linear_params(w, 3 * w, True) + linear_params(w, w, True)
        return w + attention + norm_params(w, "layernorm") + linear_params(w, i, True) + linear_params(i, w, True)

    def describe(self) -> str:
        return (f"attention-pooling head ({self.width}, MLP {self.mlp_width}): one probe query per image; output "
                "discarded (forward only)")


@dataclass(frozen=True)
class TileMaskProduct(Block):
    """Mllama's tower builds its padding-tile attention mask as an outer product (a (L, 1) x (1, L) matmul per
    image, L = the image's tower sequence): ``2·Σ L²`` = 2 x ``vision_patches_sq_frame``, once per forward,
    on data (no gradient). Parameters: none."""

    kind: ClassVar[str] = "tile_mask_product"

    def params(self) -> int:
        return 0

    def describe(self) -> str:
        return "attention-mask outer product per image (2·L² each, forward only)"


@dataclass(frozen=True)
class ImageVideoPatchEmbed(Block):
    """Two patch projections of one tower (RADIO's CPE patch generator in Nemotron omni): images through a
    Linear of ``image_volume`` (C x P^2) values, video tubelets (``T_p`` frames stacked on the channels)
    through a second Linear of ``video_volume`` (T_p x C x P^2) values, both to ``width``; rows
    ``vision_patches - video_patches`` and ``video_patches``. Inputs are pixels: no input gradient.
    ``video_volume`` 0: no video projection stored (image-only towers)."""

    kind: ClassVar[str] = "image_video_patch_embed"
    image_volume: int
    video_volume: int
    width: int
    bias: bool = False

    def params(self) -> int:
        video = linear_params(self.video_volume, self.width, self.bias) if self.video_volume else 0
        return linear_params(self.image_volume, self.width, self.bias) + video

    def describe(self) -> str:
        video = f", video tubelets {self.video_volume} -> {self.width}" if self.video_volume else ""
        return f"patch embed Linear: images {self.image_volume} -> {self.width}{video}"


@dataclass(frozen=True)
class SamEmbed(Block):
    """SAM patch embed (Conv2d kernel = stride = patch, bias) on a ``side`` x ``side`` tile, plus the learned
    absolute position grid ``side`` x ``side`` x ``width`` added to it (``use_abs_pos``; no matmul)."""

    kind: ClassVar[str] = "sam_embed"
    in_volume: int
    width: int
    side: int
    abs_pos: bool = True
    tile_patches: int = 0

    def params(self) -> int:
        return linear_params(self.in_volume, self.width, True) + (self.side * self.side * self.width
                                                                  if self.abs_pos else 0)

    def describe(self) -> str:
        pos = f" + absolute positions {self.side}x{self.side}" if self.abs_pos else ""
        return f"SAM patch embed conv {self.in_volume} -> {self.width} on a {self.side}x{self.side} grid{pos}"


@dataclass(frozen=True)
class SamVisionLayers(Block):
    """``count`` SAM / ViTDet layers on a ``side`` x ``side`` patch grid per tile: LayerNorm -> fused qkv
    Linear(h -> 3h, ``qkv_bias``) -> attention with decomposed relative position bias -> proj Linear(h -> h,
    bias) -> LayerNorm -> MLP lin1 (h -> m, bias) -> GELU -> lin2 (m -> h, bias).

    ``window`` > 0: windowed layer: the grid is zero-padded to a multiple of ``window`` after the first norm,
    so qkv, proj and attention run on ceil(side/window)^2 windows of window^2 tokens (padding included); the MLP
    runs on the side^2 real tokens. ``window`` 0: global attention over the side^2 tokens.
    ``rel_pos`` (``use_rel_pos``): per window, q is multiplied with the height and width tables (einsums
    ``bhwc,hkc->bhwk`` and ``bhwc,wkc->bhwk``: 2·2·h·L·S for L = S^2 tokens of side S); the tables
    (2S−1) x head_dim are parameters, so backward is a weight GEMM's. Tables: 2 x (2S−1) x head_dim."""

    kind: ClassVar[str] = "sam_vision_layers"
    width: int
    num_heads: int
    mlp_width: int
    side: int
    window: int = 0
    qkv_bias: bool = True
    rel_pos: bool = True
    tile_patches: int = 0

    @property
    def head_dim(self) -> int:
        return self.width // self.num_heads

    @property
    def attention_side(self) -> int:
        """Side S of one attention sequence (a window, or the whole grid)."""
        return self.window if self.window else self.side

    @property
    def sequences(self) -> int:
        """Attention sequences per tile (windows after padding, or 1)."""
        if not self.window:
            return 1
        per_side = -(-self.side // self.window)
        return per_side * per_side

    def params(self) -> int:
        h, m = self.width, self.mlp_width
        tables = 2 * (2 * self.attention_side - 1) * self.head_dim if self.rel_pos else 0
        return (2 * norm_params(h, "layernorm") + linear_params(h, 3 * h, self.qkv_bias) + linear_params(h, h, True)
                + linear_params(h, m, True) + linear_params(m, h, True) + tables)

    def describe(self) -> str:
        where = (f"{self.window}x{self.window} windows (grid padded to a multiple)" if self.window
                 else f"global attention over {self.side}x{self.side}")
        rel = ", decomposed relative positions" if self.rel_pos else ""
        return (f"{self.count} SAM layers, width {self.width}, {self.num_heads} heads, {where}{rel}, "
                f"MLP {self.width}->{self.mlp_width}->{self.width}")


@dataclass(frozen=True)
class VisualVocabularyHead(Block):
    """Ovis2's visual head (``Ovis2VisionModel.head_linear`` + ``head_norm``): after the tower's ``hidden_stride``
    fold (s x s neighbouring patches concatenated: a reshape), Linear(``in_width`` = s²·h -> ``vocab``, no bias)
    on every folded token (``vision_merged_tokens``), then LayerNorm(``vocab``) and a softmax over the visual
    vocabulary (not matmuls). ``vocab`` = the visual vocabulary less the indicator tokens."""

    kind: ClassVar[str] = "visual_vocabulary_head"
    in_width: int
    vocab: int

    def params(self) -> int:
        return linear_params(self.in_width, self.vocab, False) + norm_params(self.vocab, "layernorm")

    def describe(self) -> str:
        return (f"visual head: Linear {self.in_width} -> {self.vocab} (no bias) + LayerNorm + softmax on every "
                "folded token (a probability over the visual vocabulary)")


# --------------------------------------------------------------------------- per-Linear layout (vlm_perf.arch.layout)


@block_layout(PatchEmbed, stages=(VISION_TOWER,))
def _patch_embed_layout(b: PatchEmbed, ctx: LayoutContext) -> Placed:
    name = ctx.names.patch if ctx.names else "<vision_tower>.patch_embed"
    return Placed(head=(Lin(name, EMBEDDINGS, ("vision_patches",), b.in_volume, b.width, "vision.patch_embed", b.bias,
                            pixels=True, conv=True),))


@block_layout(ImageVideoPatchEmbed, stages=(VISION_TOWER,))
def _image_video_patch_embed_layout(b: ImageVideoPatchEmbed, ctx: LayoutContext) -> None:
    return None  # two projections on two row kinds: no per-Linear layout (the tower trains or freezes whole)


@block_layout(VisionLayers, stages=(VISION_TOWER,))
def _vision_layers_layout(b: VisionLayers, ctx: LayoutContext) -> Placed | None:
    """The layers the block names (``layer_indexes``), else the tower's layers from the first (a second block
    without indexes: which layers it is is not known, no layout)."""
    free = ctx.free("layer")
    if b.layer_indexes:
        layers = [i for i in b.layer_indexes if i in free]
    elif ctx.taken.get("layer"):
        return None
    else:
        layers = free[:b.count]
    if len(layers) != b.count:
        return None
    return Placed(slot="layer", layers=tuple(layers), build=lambda frame: vision_layer(b, frame.index, ctx.names))


def vision_layer(b: VisionLayers, i: int, names: ModuleNames | None) -> tuple[Any, ...]:
    """Tower layer ``i`` of ``b``: (attention sublayer, MLP sublayer), named by the family's table."""
    pre = names.tower_layer.format(i=i) + "." if names else f"<vision_tower>.layers.{i}."
    rows = ("vision_patches", "vision_cls_tokens") if b.cls else ("vision_patches",)
    h, q = b.width, b.attn_width
    norms = names.tower_norms if names else ("norm1", "norm2")
    qkv_names = names.tower_qkv if names else ("attn.qkv",)
    sources: tuple[int, int, int]
    if len(qkv_names) == 1:
        projections: tuple[Lin, ...] = (Lin(pre + qkv_names[0], ATTENTION, rows, h, 3 * q, "vision.attn_proj",
                                            b.qkv_bias),)
        sources = (0, 0, 0)
    else:
        projections = tuple(Lin(pre + n, ATTENTION, rows, h, q, "vision.attn_proj", b.qkv_bias) for n in qkv_names)
        sources = (0, 1, 2)
    qk_names = names.tower_qk_norms if names else ("attn.q_norm", "attn.k_norm")
    qk = tuple(norm(pre + n, q, b.qk_norm) for n in qk_names) if b.qk_norm != "none" else ()
    # InternViT layer scale: lambda_1 / lambda_2 scale each sublayer's output before the residual add
    scale = ((Params(pre + "lambda_1", NORMS, h, 0), Params(pre + "lambda_2", NORMS, h, 0)) if b.layer_scale
             else (None, None))
    core = replace(b, count=1, layer_indexes=())
    attn = AttnSub(norm(pre + norms[0], h, b.norm), projections, sources, qk, core,
                   Lin(pre + (names.tower_out if names else "attn.proj"), ATTENTION, rows, q, h, "vision.attn_proj",
                       b.proj_bias), scale[0])
    mlp_in = (names.tower_mlp_in if names else (("mlp.gate_proj", "mlp.up_proj") if b.mlp_gated else ("mlp.fc1",)))
    if len(mlp_in) != b.mlp_matrices - 1:
        raise ValueError(f"layout: {len(mlp_in)} MLP input names for a {b.mlp_matrices}-matrix MLP")
    mlp = MlpSub(norm(pre + norms[1], h, b.norm),
                 tuple(Lin(pre + n, MLP, rows, h, b.mlp_width, "vision.mlp", b.mlp_bias) for n in mlp_in),
                 Lin(pre + (names.tower_mlp_out if names else "mlp.fc2"), MLP, rows, b.mlp_width, h, "vision.mlp",
                     b.mlp_bias), scale[1])
    return (attn, mlp)
