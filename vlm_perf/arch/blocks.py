"""Block kinds: the typed inventory a model family's description is made of (pure, no I/O).

A family (``vlm_perf.arch.families``) turns a config into a tuple of blocks; each block says which
trainable part it belongs to (``part``: one of :data:`vlm_perf.arch.parts.STAGES`), how many identical
copies the model has (``count``) and the shapes of its weights. Two things derive from the same
inventory:

* **parameters**: every block's :meth:`Block.params` (stored tensors of ONE copy, times ``count`` in
  :func:`inventory_params`);
* **FLOPs**: ``vlm_perf.flops.blocks`` registers one FLOPs function per block kind (a block kind without
  one is an error, not a silent 0).

Parameter conventions (they match how released Hugging Face checkpoints store tensors): every weight,
bias and norm scale is counted; ``LayerNorm`` = weight + bias (2 x width), ``RMSNorm`` = weight only;
rotary embeddings have none; a tied ``lm_head`` is the embedding matrix, stored once (0 here).

Widths are in elements, counts in layers or modules. A block never reads a config dict: the family does.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from ..errors import ConfigError
from .parts import DEEPSTACK_MERGER, LANGUAGE_MODEL, MERGER, STAGES, VISION_TOWER

__all__ = [
    "Block", "ClsToken", "ExtraParams", "LinearProjector", "DecoderAttention", "DenseMLP", "FinalNorm", "LMHead", "LMLayerNorms", "MLAttention",
    "MoEMLP", "MTPModules", "MlpProjector", "PatchEmbed", "PositionTable", "StoredOnly", "TokenEmbedding",
    "VisionLayers", "GatedDecoderAttention", "GatedDeltaNet", "SharedGateMoEMLP",
    "inventory_params", "linear_params", "norm_params",
]


def linear_params(n_in: int, n_out: int, bias: bool) -> int:
    """nn.Linear(n_in, n_out): weight (+ bias)."""
    return n_in * n_out + (n_out if bias else 0)


def norm_params(width: int, kind: str) -> int:
    """``layernorm``: weight + bias; ``rmsnorm``: weight; ``none``: 0."""
    if kind == "layernorm":
        return 2 * width
    if kind == "rmsnorm":
        return width
    if kind == "none":
        return 0
    raise ValueError(f"unknown norm kind {kind!r}")


@dataclass(frozen=True)
class Block:
    """Base class of every block kind: ``part`` (stage) and ``count`` identical copies."""

    kind: ClassVar[str] = "block"
    part: str
    count: int

    def __post_init__(self) -> None:
        if self.part not in STAGES:
            raise ValueError(f"{type(self).__name__}: part must be one of {', '.join(STAGES)}, got {self.part!r}")
        if self.count < 0:
            raise ConfigError(f"{type(self).__name__}: count must be >= 0, got {self.count}")

    def params(self) -> int:
        """Stored parameters of ONE copy."""
        raise NotImplementedError

    def describe(self) -> str:
        """One line for docs/families.md (generated from the inventory)."""
        raise NotImplementedError


# --------------------------------------------------------------------------- vision tower


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
class PositionTable(Block):
    """Learned absolute position table (looked up/interpolated, not a matmul: parameters only)."""

    kind: ClassVar[str] = "position_table"
    entries: int
    width: int

    def params(self) -> int:
        return self.entries * self.width

    def describe(self) -> str:
        return f"learned position table {self.entries} x {self.width} (interpolation not counted)"


@dataclass(frozen=True)
class ClsToken(Block):
    """A learned CLS token prepended to every tile/frame (parameters only; its positions are carried by
    the ``vision_cls_tokens`` statistic and counted in every :class:`VisionLayers`)."""

    kind: ClassVar[str] = "cls_token"
    width: int

    def params(self) -> int:
        return self.width

    def describe(self) -> str:
        return f"CLS token ({self.width}) prepended to each tile"


@dataclass(frozen=True)
class VisionLayers(Block):
    """``count`` identical pre-norm ViT layers (bidirectional attention).

    ``attention``: ``"frame"`` = full attention per image / tile / temporal slice (statistic
    ``vision_patches_sq_frame``), ``"window"`` = Qwen2.5-VL windows (``vision_window_sq``), ``"item"`` = one
    sequence over all frames of a grid row / video chunk (Kimi K2.5 MoonViT3d: ``vision_patches_sq_item``).
    ``cls``: the sequence carries one CLS token per frame/tile (rows ``vision_patches + vision_cls_tokens``).
    ``mlp_gated``: gate/up/down (3 matrices) vs fc1/fc2 (2).
    ``layer_scale``: two learned per-channel scales (InternViT ``lambda_1``/``lambda_2``).
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


# --------------------------------------------------------------------------- projector / merger


@dataclass(frozen=True)
class MlpProjector(Block):
    """Norm -> Linear(in -> hidden) -> act -> Linear(hidden -> out) on ``vision_merged_tokens`` rows.

    Covers the Qwen patch merger (``in`` = m^2 h_v after the 2x2 fold; ``norm_width`` h_v pre-fold or
    m^2 h_v post-fold for deepstack mergers) and InternVL's pixel-shuffle MLP (LayerNorm(4d) -> Linear ->
    GELU -> Linear). The first GEMM's input is the tower output; the norm in front of it has weights,
    so a trainable projector needs that GEMM's input gradient even when the tower is frozen.
    ``component``: the FLOPs component it is reported under. ``cls_rows``: the tower's CLS positions are fed too
    (LLaVA ``vision_feature_select_strategy`` "full" on a CLIP tower): rows ``vision_merged_tokens +
    vision_cls_tokens``.
    """

    kind: ClassVar[str] = "mlp_projector"
    in_width: int
    hidden_width: int
    out_width: int
    norm_width: int
    norm: str = "layernorm"
    bias: bool = True
    component: str = "vision.merger"
    cls_rows: bool = False

    @property
    def rows_stats(self) -> tuple[str, ...]:
        """The statistics whose sum is its row count."""
        return ("vision_merged_tokens", "vision_cls_tokens") if self.cls_rows else ("vision_merged_tokens",)

    def params(self) -> int:
        return (norm_params(self.norm_width, self.norm) + linear_params(self.in_width, self.hidden_width, self.bias)
                + linear_params(self.hidden_width, self.out_width, self.bias))

    def describe(self) -> str:
        name = "deepstack merger" if self.component == "vision.deepstack_merger" else "projector"
        return (f"{self.count} {name}: {self.norm}({self.norm_width}) -> {self.in_width} -> {self.hidden_width} "
                f"-> {self.out_width} on merged tokens")


# --------------------------------------------------------------------------- language model


@dataclass(frozen=True)
class TokenEmbedding(Block):
    """Input embedding table (a lookup: parameters only)."""

    kind: ClassVar[str] = "token_embedding"
    vocab: int
    width: int

    def params(self) -> int:
        return self.vocab * self.width

    def describe(self) -> str:
        return f"token embedding {self.vocab} x {self.width} (lookup, not counted as FLOPs)"


@dataclass(frozen=True)
class DecoderAttention(Block):
    """``count`` GQA self-attention sublayers: q/k/v/o projections (+ q/k RMSNorm over head_dim).

    ``window``: sliding-window size in tokens (None = full causal attention); ``q_bias`` covers q/k/v.
    """

    kind: ClassVar[str] = "decoder_attention"
    hidden: int
    num_heads: int
    num_kv_heads: int
    head_dim: int
    qkv_bias: bool
    o_bias: bool
    qk_norm: bool
    window: int | None = None

    @property
    def q_width(self) -> int:
        return self.num_heads * self.head_dim

    @property
    def kv_width(self) -> int:
        return self.num_kv_heads * self.head_dim

    def proj_per_token(self) -> int:
        """Forward FLOPs per token of one sublayer's projections."""
        h, q = self.hidden, self.q_width
        return 2 * (h * (q + 2 * self.kv_width) + q * h)

    def core_per_token_sq(self) -> int:
        """Forward FLOPs of one sublayer's attention core per unit of S^2 (full square)."""
        return 2 * self.num_heads * 2 * self.head_dim

    def params(self) -> int:
        h = self.hidden
        p = (linear_params(h, self.q_width, self.qkv_bias) + 2 * linear_params(h, self.kv_width, self.qkv_bias)
             + linear_params(self.q_width, h, self.o_bias))
        return p + (2 * self.head_dim if self.qk_norm else 0)

    def describe(self) -> str:
        kind = f"sliding-window ({self.window})" if self.window else "full causal"
        return (f"{self.count} {kind} GQA attention, {self.num_heads} q / {self.num_kv_heads} kv heads x "
                f"{self.head_dim}{', q/k norm' if self.qk_norm else ''}")


@dataclass(frozen=True)
class MLAttention(Block):
    """``count`` DeepSeek multi-head latent attention sublayers (q LoRA optional, kv LoRA)."""

    kind: ClassVar[str] = "mla_attention"
    hidden: int
    num_heads: int
    q_lora_rank: int | None
    kv_lora_rank: int
    qk_nope_head_dim: int
    qk_rope_head_dim: int
    v_head_dim: int

    @property
    def qk_head_dim(self) -> int:
        return self.qk_nope_head_dim + self.qk_rope_head_dim

    def proj_per_token(self) -> int:
        h, heads = self.hidden, self.num_heads
        if self.q_lora_rank is None:
            q_proj = h * heads * self.qk_head_dim
        else:
            q_proj = h * self.q_lora_rank + self.q_lora_rank * heads * self.qk_head_dim
        kv_proj = (h * (self.kv_lora_rank + self.qk_rope_head_dim)
                   + self.kv_lora_rank * heads * (self.qk_nope_head_dim + self.v_head_dim))
        return 2 * (q_proj + kv_proj + heads * self.v_head_dim * h)

    def core_per_token_sq(self) -> int:
        return 2 * self.num_heads * (self.qk_head_dim + self.v_head_dim)

    def params(self) -> int:
        h, heads = self.hidden, self.num_heads
        if self.q_lora_rank:
            q = (linear_params(h, self.q_lora_rank, False) + self.q_lora_rank
                 + linear_params(self.q_lora_rank, heads * self.qk_head_dim, False))
        else:
            q = linear_params(h, heads * self.qk_head_dim, False)
        kv = (linear_params(h, self.kv_lora_rank + self.qk_rope_head_dim, False) + self.kv_lora_rank
              + linear_params(self.kv_lora_rank, heads * (self.qk_nope_head_dim + self.v_head_dim), False))
        return q + kv + linear_params(heads * self.v_head_dim, h, False)

    def describe(self) -> str:
        return (f"{self.count} MLA attention, {self.num_heads} heads, q LoRA {self.q_lora_rank}, "
                f"kv LoRA {self.kv_lora_rank}")


@dataclass(frozen=True)
class LMLayerNorms(Block):
    """The two RMSNorms of each decoder layer (input / post-attention): parameters only."""

    kind: ClassVar[str] = "lm_layer_norms"
    hidden: int
    norms_per_layer: int = 2

    def params(self) -> int:
        return self.norms_per_layer * self.hidden

    def describe(self) -> str:
        return f"{self.count} x {self.norms_per_layer} RMSNorm({self.hidden}) per layer"


@dataclass(frozen=True)
class DenseMLP(Block):
    """``count`` dense gated (SwiGLU) MLPs h -> F -> h, no bias."""

    kind: ClassVar[str] = "dense_mlp"
    hidden: int
    width: int

    def per_token(self) -> int:
        return 2 * 3 * self.hidden * self.width

    def params(self) -> int:
        return 3 * self.hidden * self.width

    def describe(self) -> str:
        return f"{self.count} dense gated MLP {self.hidden} -> {self.width}"


@dataclass(frozen=True)
class MoEMLP(Block):
    """``count`` MoE MLPs: router h -> E (+ DeepSeek correction bias), top-k routed experts of width F_e,
    ``num_shared`` shared experts of width F_sh (all gated, no bias)."""

    kind: ClassVar[str] = "moe_mlp"
    hidden: int
    num_experts: int
    top_k: int
    expert_width: int
    num_shared: int = 0
    shared_width: int = 0
    router_bias: bool = False

    def per_token(self) -> dict[str, int]:
        h = self.hidden
        return {"routed": 2 * 3 * h * self.expert_width * self.top_k,
                "shared": 2 * 3 * h * self.shared_width * self.num_shared,
                "router": 2 * h * self.num_experts}

    def params(self) -> int:
        h = self.hidden
        routed = self.num_experts * 3 * h * self.expert_width
        shared = self.num_shared * 3 * h * self.shared_width
        router = self.num_experts * h + (self.num_experts if self.router_bias else 0)
        return routed + shared + router

    def active_params(self) -> int:
        """What one token touches: top-k routed + shared experts + router."""
        h = self.hidden
        router = self.num_experts * h + (self.num_experts if self.router_bias else 0)
        return self.top_k * 3 * h * self.expert_width + self.num_shared * 3 * h * self.shared_width + router

    def describe(self) -> str:
        shared = f" + {self.num_shared} shared ({self.shared_width})" if self.num_shared else ""
        return (f"{self.count} MoE MLP: {self.num_experts} experts top-{self.top_k} of width {self.expert_width}"
                f"{shared}, router {self.hidden} -> {self.num_experts}")


@dataclass(frozen=True)
class FinalNorm(Block):
    kind: ClassVar[str] = "final_norm"
    hidden: int

    def params(self) -> int:
        return self.hidden

    def describe(self) -> str:
        return f"final RMSNorm({self.hidden})"


@dataclass(frozen=True)
class LMHead(Block):
    """Output projection h -> V on every position (the logits GEMM); 0 stored params when tied."""

    kind: ClassVar[str] = "lm_head"
    hidden: int
    vocab: int
    tied: bool

    def per_token(self) -> int:
        return 2 * self.hidden * self.vocab

    def params(self) -> int:
        return 0 if self.tied else self.vocab * self.hidden

    def describe(self) -> str:
        return f"lm_head {self.hidden} -> {self.vocab}{' (tied to the embedding)' if self.tied else ''}"


@dataclass(frozen=True)
class MTPModules(Block):
    """DeepSeek-V3 multi-token prediction: ``count`` modules of enorm + hnorm + eh_proj (2h -> h) + one
    decoder layer (``attention`` + ``mlp``) + shared_head.norm, each with its own logits on the shared head.

    Not part of the model's stored-parameter total (released checkpoints keep them separately)."""

    kind: ClassVar[str] = "mtp_modules"
    hidden: int
    vocab: int
    attention: DecoderAttention | MLAttention  # the decoder layer's attention (GatedDecoderAttention included)
    mlp: DenseMLP | MoEMLP

    def per_token(self, router: bool = True) -> int:
        """Forward FLOPs per token of one module (eh_proj, decoder layer GEMMs, logits)."""
        mlp = self.mlp.per_token()
        mlp_flops = (mlp["routed"] + mlp["shared"] + (mlp["router"] if router else 0)) if isinstance(mlp, dict) \
            else mlp
        return 2 * 2 * self.hidden * self.hidden + self.attention.proj_per_token() + mlp_flops \
            + 2 * self.hidden * self.vocab

    def params(self) -> int:
        h = self.hidden
        return 2 * h + linear_params(2 * h, h, False) + self.attention.params() + self.mlp.params() + 2 * h + h

    def describe(self) -> str:
        return f"{self.count} MTP modules (eh_proj 2h -> h, one decoder layer, logits); not in the total"


@dataclass(frozen=True)
class ExtraParams(Block):
    """Parameters outside any matmul the inventory counts (a mask token, a final tower norm): ``numel``
    per copy, described by ``label``."""

    kind: ClassVar[str] = "extra_params"
    label: str
    numel: int

    def params(self) -> int:
        return self.numel

    def describe(self) -> str:
        return f"{self.label} ({self.numel} params, no matmul)"


@dataclass(frozen=True)
class StoredOnly(Block):
    """Modules a checkpoint stores but the forward pass never runs (e.g. a deepstack merger whose index is
    duplicated or beyond the tower depth): their parameters count, their FLOPs do not."""

    kind: ClassVar[str] = "stored_only"
    module: Block

    def params(self) -> int:
        return self.module.params()

    def describe(self) -> str:
        return f"{self.count} stored but never run: {self.module.describe()}"


def inventory_params(blocks, part: str | None = None) -> int:
    """Stored parameters of an inventory (optionally of one part): sum of count x params()."""
    return sum(b.count * b.params() for b in blocks if part is None or b.part == part
               if not isinstance(b, MTPModules))


# every stage a block may belong to, re-exported for family modules
PARTS = (VISION_TOWER, MERGER, DEEPSTACK_MERGER, LANGUAGE_MODEL)


# --- glm4v ---


@dataclass(frozen=True)
class ExtraNorms(Block):
    """``count`` standalone norms of ``width`` outside any layer (GLM's ``post_conv_layernorm`` and
    ``post_layernorm`` RMSNorms around the tower): parameters only, no matmul."""

    kind: ClassVar[str] = "extra_norms"
    width: int
    norm: str = "rmsnorm"
    what: str = "norm"

    def params(self) -> int:
        return norm_params(self.width, self.norm)

    def describe(self) -> str:
        return f"{self.count} x {self.norm}({self.width}): {self.what}"


@dataclass(frozen=True)
class DownsampleConv(Block):
    """A Conv2d with kernel = stride = the merge size on each m x m block of tower outputs (GLM's
    ``visual.downsample``): one GEMM on ``vision_merged_tokens`` rows of ``in_width`` (= m^2 h_v) values
    to ``out_width``. It is the projector's FIRST op (no norm in front of it), so its input gradient is
    needed only when the tower upstream is trainable."""

    kind: ClassVar[str] = "downsample_conv"
    in_width: int
    out_width: int
    bias: bool = True

    def params(self) -> int:
        return linear_params(self.in_width, self.out_width, self.bias)

    def describe(self) -> str:
        return (f"downsample conv (kernel = stride = merge) {self.in_width} -> {self.out_width}"
                f"{' (+bias)' if self.bias else ''} on merged tokens")


@dataclass(frozen=True)
class GatedMergerMLP(Block):
    """GLM's ``visual.merger`` on ``vision_merged_tokens`` rows: Linear(d -> d) -> ``norm``(d) -> GELU ->
    gated MLP (gate/up d -> ``hidden_width``, down ``hidden_width`` -> d)."""

    kind: ClassVar[str] = "gated_merger_mlp"
    width: int
    hidden_width: int
    norm: str = "layernorm"
    bias: bool = False

    def params(self) -> int:
        d, f = self.width, self.hidden_width
        return (linear_params(d, d, self.bias) + norm_params(d, self.norm) + 2 * linear_params(d, f, self.bias)
                + linear_params(f, d, self.bias))

    def describe(self) -> str:
        return (f"merger: Linear {self.width} -> {self.width}, {self.norm}, GELU, gated MLP "
                f"{self.width} -> {self.hidden_width} -> {self.width} on merged tokens")


__all__ += ["DownsampleConv", "ExtraNorms", "GatedMergerMLP"]
# --- gemma3 ---


@dataclass(frozen=True)
class NormLinearProjector(Block):
    """Norm -> one Linear(in -> out) on ``vision_merged_tokens`` rows (Gemma 3: average pool 4x4 (no FLOPs)
    -> RMSNorm(h_v) -> ``matmul(x, mm_input_projection_weight)``, no bias). With a weighted norm in front,
    a trainable projector needs the GEMM's input gradient even when the tower is frozen."""

    kind: ClassVar[str] = "norm_linear_projector"
    in_width: int
    out_width: int
    norm_width: int
    norm: str = "rmsnorm"
    bias: bool = False
    component: str = "vision.merger"

    def params(self) -> int:
        return norm_params(self.norm_width, self.norm) + linear_params(self.in_width, self.out_width, self.bias)

    def describe(self) -> str:
        return (f"{self.count} projector: {self.norm}({self.norm_width}) -> Linear {self.in_width} -> "
                f"{self.out_width}{' (+bias)' if self.bias else ''} on pooled tokens")


@dataclass(frozen=True)
class ImageBlockAttention(Block):
    """Bidirectional attention inside each image's token block of a causal LM (Gemma 3 ``token_type_ids``):
    ``count`` layers, ``tokens`` placeholders per block (``mm_tokens_per_image``), one block per image or
    pan-and-scan crop (statistic ``vision_frames``). FLOPs only: the score entries above the causal diagonal
    that the mask re-opens, ``tokens^2 / 2`` per block per layer (continuous "causal half" convention);
    under ``--causal full`` the eager square already holds them (0 here). Parameters: none."""

    kind: ClassVar[str] = "image_block_attention"
    num_heads: int
    head_dim: int
    tokens: int

    def params(self) -> int:
        return 0

    def describe(self) -> str:
        return (f"{self.count} layers: image tokens attend bidirectionally within their block of {self.tokens} "
                f"(+{self.tokens}^2/2 score entries per image per layer under causal half)")


# --- siglip ---


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
# --- qwen3_5 ---
# Qwen3.5 / Qwen3.5-MoE hybrid LM (transformers models/qwen3_5*/modeling_*.py): gated-delta-net linear
# attention layers, full-attention layers with an output gate, MoE with a sigmoid-gated shared expert.


@dataclass(frozen=True)
class GatedDecoderAttention(DecoderAttention):
    """Full causal GQA attention whose ``q_proj`` also emits a per-channel output gate (h -> 2·H·d;
    ``attn_out * sigmoid(gate)`` before ``o_proj``), q/k RMSNorm over head_dim (Qwen3.5, Qwen3-Next)."""

    kind: ClassVar[str] = "gated_decoder_attention"

    def proj_per_token(self) -> int:
        h, q = self.hidden, self.q_width
        return 2 * (h * (2 * q + 2 * self.kv_width) + q * h)

    def params(self) -> int:
        return super().params() + linear_params(self.hidden, self.q_width, self.qkv_bias)

    def describe(self) -> str:
        return super().describe() + ", output gate (q_proj h -> 2·H·d)"


@dataclass(frozen=True)
class GatedDeltaNet(Block):
    """``count`` gated-delta-net linear-attention sublayers (Qwen3.5 ``Qwen3_5GatedDeltaNet``).

    Projections: ``in_proj_qkv`` h -> 2·Hk·dk + Hv·dv, ``in_proj_z`` h -> Hv·dv, ``in_proj_b`` and
    ``in_proj_a`` h -> Hv, ``out_proj`` Hv·dv -> h (no biases); a depthwise causal ``conv1d`` (kernel k, no
    bias) over the 2·Hk·dk + Hv·dv qkv channels; per-head ``dt_bias`` and ``A_log`` (Hv each) and a gated
    RMSNorm over dv. The delta rule itself is counted as the chunked algorithm (chunk ``chunk`` = 64, the
    chunk of transformers' torch fallback and of flash-linear-attention's kernels) computes its matmuls;
    see :func:`delta_rule_per_token` and docs/families.md.
    """

    kind: ClassVar[str] = "gated_delta_net"
    hidden: int
    key_heads: int
    key_head_dim: int
    value_heads: int
    value_head_dim: int
    conv_kernel: int
    chunk: int = 64

    @property
    def key_width(self) -> int:
        return self.key_heads * self.key_head_dim

    @property
    def value_width(self) -> int:
        return self.value_heads * self.value_head_dim

    @property
    def conv_channels(self) -> int:
        """Channels of the depthwise conv: q, k and v (2·Hk·dk + Hv·dv)."""
        return 2 * self.key_width + self.value_width

    def proj_per_token(self) -> int:
        """Forward FLOPs per token of the five projections (qkv, z, b, a in; out)."""
        h = self.hidden
        return 2 * h * (self.conv_channels + self.value_width + 2 * self.value_heads) + 2 * self.value_width * h

    def conv_per_output(self) -> int:
        """Forward FLOPs of the depthwise conv per output position: 2·channels·k."""
        return 2 * self.conv_channels * self.conv_kernel

    def delta_rule_per_token(self) -> int:
        """Forward FLOPs per token of the chunked delta rule (C = chunk, all per value head, q/k repeated to
        Hv heads): per chunk of C tokens k_beta·kᵀ and q·kᵀ (2·C²·dk each), then the scan's
        k_cumdecay·S, q·S and kᵀ·v_new (2·C·dk·dv each) and intra·v_new (2·C²·dv); per token:
        Hv·(4·C·dk + 6·dk·dv + 2·C·dv)."""
        c, dk, dv = self.chunk, self.key_head_dim, self.value_head_dim
        return self.value_heads * (4 * c * dk + 6 * dk * dv + 2 * c * dv)

    def delta_rule_backward_extra_per_token(self) -> int:
        """Backward FLOPs per token beyond 2x the forward: the gradient of the two unit-triangular solves
        (``solve_triangular`` backward forms grad_A = -grad_B·Xᵀ, a C x C matmul over dv and over dk)."""
        return 2 * self.value_heads * self.chunk * (self.value_head_dim + self.key_head_dim)

    def delta_rule_backward_saved_per_sequence(self) -> int:
        """Backward FLOPs per sequence below 2x the forward: the first chunk reads a zero initial state
        (no gradient to it: 2 matmuls of 2·C·dk·dv) and the last chunk's state update is never used."""
        return 4 * 2 * self.value_heads * self.chunk * self.key_head_dim * self.value_head_dim

    def params(self) -> int:
        h, hv = self.hidden, self.value_heads
        proj = (linear_params(h, self.conv_channels, False) + linear_params(h, self.value_width, False)
                + 2 * linear_params(h, hv, False) + linear_params(self.value_width, h, False))
        return proj + self.conv_channels * self.conv_kernel + 2 * hv + self.value_head_dim

    def describe(self) -> str:
        return (f"{self.count} gated-delta-net linear attention, {self.key_heads} key heads x {self.key_head_dim}, "
                f"{self.value_heads} value heads x {self.value_head_dim}, depthwise conv k={self.conv_kernel}, "
                f"chunked delta rule (chunk {self.chunk})")


@dataclass(frozen=True)
class SharedGateMoEMLP(MoEMLP):
    """MoE MLP whose shared expert output is scaled by ``sigmoid(shared_expert_gate(x))``, a Linear(h -> 1)
    (Qwen2-MoE / Qwen3.5-MoE); the gate is counted with the shared experts."""

    kind: ClassVar[str] = "shared_gate_moe_mlp"

    def per_token(self) -> dict[str, int]:
        out = super().per_token()
        out["shared"] += 2 * self.hidden * self.num_shared
        return out

    def params(self) -> int:
        return super().params() + self.num_shared * self.hidden

    def active_params(self) -> int:
        return super().active_params() + self.num_shared * self.hidden

    def describe(self) -> str:
        return super().describe() + ", sigmoid shared-expert gate h -> 1"
# --- mistral3 / idefics3 ---


@dataclass(frozen=True)
class LinearProjector(Block):
    """A projector that is a chain of Linears on ``vision_merged_tokens`` rows, with an optional norm over
    the tower output in front (``norm_width`` wide, before any fold).

    ``widths`` = (in, w_1, ..., out): Linear i maps widths[i] -> widths[i+1] with bias ``biases[i]``;
    activations, unfold and pixel shuffle between them are not matmuls. Mistral 3: RMSNorm(h_v) -> patch
    merger Linear(4 h_v -> h_v) -> Linear(h_v -> h_text) -> GELU -> Linear(h_text -> h_text); Idefics3 /
    SmolVLM: pixel shuffle -> Linear(h_v s^2 -> h_text) with no norm. With a weighted norm in front the
    first GEMM needs its input gradient whenever the projector trains; without one, only when the tower does.
    """

    kind: ClassVar[str] = "linear_projector"
    widths: tuple[int, ...]
    biases: tuple[bool, ...]
    norm_width: int = 0
    norm: str = "none"
    label: str = "projector"

    def __post_init__(self) -> None:
        super().__post_init__()
        if len(self.widths) < 2 or len(self.biases) != len(self.widths) - 1:
            raise ValueError(f"LinearProjector: {len(self.widths)} widths need {len(self.widths) - 1} bias flags, "
                             f"got {len(self.biases)}")

    def linears(self) -> tuple[tuple[int, int, bool], ...]:
        """(in, out, bias) of each Linear, in order."""
        return tuple(zip(self.widths[:-1], self.widths[1:], self.biases))

    def params(self) -> int:
        return norm_params(self.norm_width, self.norm) + sum(linear_params(i, o, b) for i, o, b in self.linears())

    def describe(self) -> str:
        chain = " -> ".join(str(w) for w in self.widths)
        norm = f"{self.norm}({self.norm_width}) -> " if self.norm != "none" else ""
        return f"{self.count} {self.label}: {norm}Linear chain {chain} on merged tokens"
# --- llava ---


@dataclass(frozen=True)
class ForwardOnly(Block):
    """A module that runs but whose output reaches no loss, so autograd never back-propagates through it: its
    forward FLOPs count in training too, with neither weight nor input gradient. LLaVA's CLIP tower with
    ``vision_feature_layer`` -2: the last layer runs (``CLIPEncoder`` loops over every layer) but only the
    hidden state before it feeds the projector. ``module`` carries its own ``count``; ``count`` copies of it."""

    kind: ClassVar[str] = "forward_only"
    module: Block

    def params(self) -> int:
        return self.module.count * self.module.params()

    def describe(self) -> str:
        return f"{self.count} x forward only (output unused, never back-propagated): {self.module.describe()}"
# --- paligemma ---


@dataclass(frozen=True)
class PrefixLMSquare(Block):
    """PaliGemma's prefix-LM mask (``token_type_ids``: image tokens + ``<bos>`` + prompt attend bidirectionally,
    the suffix causally). transformers refuses FlashAttention for it (the mask would be lost), and eager and SDPA
    compute every score entry of the square whatever the mask (also on Gemma 2's sliding-window layers), so the
    core is the whole square under both ``--causal`` rules: under ``half`` this block adds the half that the
    attention blocks leave out (``4·H·d·Σs²·½`` per layer; 0 under ``full``). Parameters: none."""

    kind: ClassVar[str] = "prefix_lm_square"
    num_heads: int
    head_dim: int

    def params(self) -> int:
        return 0

    def describe(self) -> str:
        return (f"{self.count} layers: prefix-LM mask, no causal-skipping kernel in transformers: the whole "
                "score square under both causal rules")
# --- llava_next_video ---


@dataclass(frozen=True)
class PooledVideoProjector(Block):
    """LLaVA-NeXT-Video's projector: ``module`` (the LLaVA 2-layer MLP) on every image row, but on video frames only
    after the ``vision_resampler`` (average / max pool, stride ``pool``: no FLOPs, no parameters), i.e. on
    1/pool^2 of each frame's rows. Parameters: the wrapped projector's."""

    kind: ClassVar[str] = "pooled_video_projector"
    module: Block
    pool: int

    def params(self) -> int:
        return self.module.count * self.module.params()

    def describe(self) -> str:
        return f"{self.module.describe()}; video frames pooled {self.pool}x{self.pool} first (rows / {self.pool ** 2})"
# --- gpt_oss ---


@dataclass(frozen=True)
class SinkDecoderAttention(DecoderAttention):
    """GQA attention with one learned **attention sink** logit per head (gpt-oss): the sink joins each row's
    softmax as an extra column and is then dropped, so it changes the weights but adds no matmul (the
    projections and the Q K^T / A V core are those of :class:`DecoderAttention`); ``num_heads`` parameters."""

    kind: ClassVar[str] = "sink_decoder_attention"

    def params(self) -> int:
        return super().params() + self.num_heads

    def describe(self) -> str:
        return super().describe() + ", attention sinks (1 logit per head)"


@dataclass(frozen=True)
class BiasedMoEMLP(MoEMLP):
    """gpt-oss MoE MLP: a biased router h -> E (top-k, softmax over the k chosen logits) and E experts whose
    fused gate/up projection (h -> 2·F) and down projection (F -> h) carry biases; the clamped SwiGLU is
    elementwise. FLOPs are :class:`MoEMLP`'s (biases add no matmul)."""

    kind: ClassVar[str] = "biased_moe_mlp"

    def _expert_bias(self) -> int:
        return 2 * self.expert_width + self.hidden

    def params(self) -> int:
        return super().params() + self.num_experts * self._expert_bias()

    def active_params(self) -> int:
        return super().active_params() + self.top_k * self._expert_bias()

    def describe(self) -> str:
        return super().describe() + " (biased experts and router)"
# --- mllama ---


@dataclass(frozen=True)
class TowerTokenLinear(Block):
    """One Linear(``in_width`` -> ``out_width``) on every token the tower outputs: ``vision_patches`` +
    ``tokens_per_frame`` x ``vision_frames`` rows (Mllama: the CLS token of each of the T tiles of an image, whose
    grid is one frame of T stacked tiles, so ``tokens_per_frame`` = T). Its input is the tower output and nothing
    trainable sits before it in its stage: its input gradient is due only when the tower trains."""

    kind: ClassVar[str] = "tower_token_linear"
    in_width: int
    out_width: int
    bias: bool
    tokens_per_frame: int

    def params(self) -> int:
        return linear_params(self.in_width, self.out_width, self.bias)

    def describe(self) -> str:
        return (f"{self.count} projector: Linear {self.in_width} -> {self.out_width}{' (+bias)' if self.bias else ''} "
                f"on every tower output token (patches + {self.tokens_per_frame} CLS per image)")


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
class CrossAttention(Block):
    """``count`` cross-attention sublayers (kind ``cross_attention``): every LM token of a sample attends to the
    vision tokens of that sample's images (Mllama ``MllamaTextCrossAttention``).

    q_proj (h -> H·d) and o_proj (H·d -> h) on ``lm_tokens``; k_proj / v_proj (h -> kv·d each) on the vision tokens
    (``vision_patches`` + ``kv_tokens_per_frame`` x ``vision_frames``; their input is the projector output, so
    their input gradient is due only when a vision part trains); RMSNorm over head_dim on q and k (``qk_norm``).
    The whole decoder layer runs only in microbatches with vision input (``MllamaTextModel`` skips it otherwise): q/o
    rows are ``lm_tokens - lm_tokens_no_vision`` (k/v and the core are 0 without vision tokens anyway).
    Core: ``4·H·d·Σ_samples S x V`` (QKᵀ and AV over the whole text x vision rectangle: the cross-attention mask
    is additive, no kernel skips it; ``--causal`` does not apply), from the statistics ``lm_x_vision_patches`` +
    ``kv_tokens_per_frame`` x ``lm_x_vision_frames``.

    ``query_from_vision`` False for the first cross-attention layer: its queries come from text-only layers, so
    with the LM frozen and a vision part trainable neither q_proj's input gradient nor, under eager attention,
    dQ runs (dK, dP and dV do).
    """

    kind: ClassVar[str] = "cross_attention"
    hidden: int
    num_heads: int
    num_kv_heads: int
    head_dim: int
    kv_tokens_per_frame: int
    qk_norm: bool = True
    query_from_vision: bool = True

    @property
    def q_width(self) -> int:
        return self.num_heads * self.head_dim

    @property
    def kv_width(self) -> int:
        return self.num_kv_heads * self.head_dim

    def params(self) -> int:
        h = self.hidden
        return (2 * linear_params(h, self.q_width, False) + 2 * linear_params(h, self.kv_width, False)
                + (2 * self.head_dim if self.qk_norm else 0))

    def describe(self) -> str:
        return (f"{self.count} cross-attention to the sample's vision tokens, {self.num_heads} q / {self.num_kv_heads} "
                f"kv heads x {self.head_dim}{', q/k norm' if self.qk_norm else ''}; k/v on vision tokens, core "
                "4·H·d·Σ S·V (whole rectangle)")


@dataclass(frozen=True)
class TextOnly(Block):
    """``module`` on the text path before the first cross-attention layer: nothing earlier carries a vision
    gradient, so its input gradient runs only when its own stage (the LM) trains. Parameters: the module's."""

    kind: ClassVar[str] = "text_only"
    module: Block

    def params(self) -> int:
        return self.module.count * self.module.params()

    def describe(self) -> str:
        return f"{self.module.describe()} (text path before the first cross-attention layer)"


@dataclass(frozen=True)
class CrossLayerMLP(DenseMLP):
    """The gated MLPs of ``count`` cross-attention decoder layers (Mllama ``MllamaCrossAttentionDecoderLayer.mlp``):
    shapes and parameters of :class:`DenseMLP`, but they run only in microbatches with vision input
    (``MllamaTextModel`` skips a cross-attention decoder layer entirely when there are no cross-attention states):
    rows ``lm_tokens - lm_tokens_no_vision``."""

    kind: ClassVar[str] = "cross_layer_mlp"

    def describe(self) -> str:
        return super().describe() + " (cross-attention layers: only microbatches with images)"


__all__ += ["CrossAttention", "CrossLayerMLP", "TextOnly", "TileMaskProduct", "TowerTokenLinear"]
# --- llama4 ---


@dataclass(frozen=True)
class ChunkedDecoderAttention(DecoderAttention):
    """GQA attention that attends causally **within consecutive chunks** of ``chunk`` tokens (Llama 4's RoPE layers,
    ``attention_chunk_size``): a chunk-aware kernel computes Σ_chunks c²/2 score entries (statistic
    ``lm_tokens_sq_beyond_chunks``); eager attention (``--causal full``) computes the whole square. Projections and
    parameters are :class:`DecoderAttention`'s (Llama 4's q/k L2 norm has no weights)."""

    kind: ClassVar[str] = "chunked_decoder_attention"
    chunk: int = 0

    def describe(self) -> str:
        return super().describe().replace("full causal", f"chunked causal ({self.chunk})", 1)


__all__ += ["ChunkedDecoderAttention"]
# --- omni ---
# Audio encoders of the Qwen2.5-Omni / Qwen3-Omni thinkers (transformers models/qwen2_5_omni, qwen3_omni_moe:
# ``*AudioEncoder``): a convolutional front-end over mel-spectrogram chunks, Whisper-style encoder layers, an
# output head. Rows come from the ``audio_*`` statistics (vlm_perf.stats.audio: one encoder call per forward).


def halve(n: int) -> int:
    """Length after a kernel-3, stride-2, padding-1 convolution: (n - 1) // 2 + 1."""
    return (n - 1) // 2 + 1


@dataclass(frozen=True)
class AudioConvFrontEnd(Block):
    """The audio encoder's convolutions, run on every mel chunk padded to the longest chunk of the call.

    ``style="conv1d"`` (Qwen2.5-Omni, Whisper): Conv1d(mel -> d, k 3, pad 1) over ``audio_conv_frames`` positions,
    then Conv1d(d -> d, k 3, stride 2) over ``audio_conv_frames_s2``; both biased.
    ``style="conv2d"`` (Qwen3-Omni AuT): three Conv2d(3x3, stride 2, pad 1, biased) 1 -> c -> c -> c over
    (mel bins, frames), i.e. F_k x T_k outputs with F_k = mel halved k times and T_k from
    ``audio_conv_frames_s2/_s4/_s8``, then ``conv_out`` Linear(c·F_3 -> d, no bias) on ``audio_conv_frames_s8`` rows.
    The first convolution reads features (no input gradient)."""

    kind: ClassVar[str] = "audio_conv_front_end"
    style: str
    mel_bins: int
    width: int
    channels: int = 0  # conv2d: downsample_hidden_size

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.style not in ("conv1d", "conv2d"):
            raise ValueError(f"AudioConvFrontEnd.style must be 'conv1d' or 'conv2d', got {self.style!r}")

    def freq_bins(self, k: int) -> int:
        """Mel bins after ``k`` stride-2 Conv2d layers."""
        n = self.mel_bins
        for _ in range(k):
            n = halve(n)
        return n

    def params(self) -> int:
        d, m = self.width, self.mel_bins
        if self.style == "conv1d":
            return (m * 3 * d + d) + (d * 3 * d + d)
        c = self.channels
        return (9 * c + c) + 2 * (c * 9 * c + c) + linear_params(c * self.freq_bins(3), d, False)

    def describe(self) -> str:
        if self.style == "conv1d":
            return (f"audio conv front-end: Conv1d {self.mel_bins} -> {self.width} (k3), Conv1d {self.width} -> "
                    f"{self.width} (k3, stride 2), on mel chunks padded to the call's longest chunk")
        return (f"audio conv front-end: 3 x Conv2d 3x3 stride 2 (1 -> {self.channels} -> {self.channels} -> "
                f"{self.channels}) over {self.mel_bins} mel bins x frames, Linear {self.channels * self.freq_bins(3)} "
                f"-> {self.width}, on mel chunks padded to the call's longest chunk")


@dataclass(frozen=True)
class AudioLayers(Block):
    """``count`` Whisper-style pre-LayerNorm encoder layers on ``audio_tokens`` rows: q/k/v/out projections
    (``k_bias``: whether k_proj has a bias; Whisper and Qwen2.5-Omni: none), bidirectional attention within each
    chunk / window (``audio_tokens_sq``), fc1/fc2 GELU MLP with biases."""

    kind: ClassVar[str] = "audio_layers"
    width: int
    num_heads: int
    head_dim: int
    mlp_width: int
    k_bias: bool = False

    @property
    def attn_width(self) -> int:
        return self.num_heads * self.head_dim

    def params(self) -> int:
        h, q, i = self.width, self.attn_width, self.mlp_width
        attn = 2 * linear_params(h, q, True) + linear_params(h, q, self.k_bias) + linear_params(q, h, True)
        return 2 * norm_params(h, "layernorm") + attn + linear_params(h, i, True) + linear_params(i, h, True)

    def describe(self) -> str:
        return (f"{self.count} audio encoder layers, width {self.width}, {self.num_heads}x{self.head_dim} heads, "
                f"attention within chunks/windows, plain MLP {self.width}->{self.mlp_width}->{self.width}, layernorm")


@dataclass(frozen=True)
class AudioHead(Block):
    """The audio encoder's output head on ``audio_out_tokens`` rows (the LM's audio placeholders): LayerNorm
    (``ln_post``) then a chain of biased Linears ``widths`` (Qwen2.5-Omni: stride-2 average pool first (no matmul),
    then proj d -> out; Qwen3-Omni: proj1 d -> d, GELU, proj2 d -> out)."""

    kind: ClassVar[str] = "audio_head"
    widths: tuple[int, ...]
    pooled: bool = False

    def linears(self) -> tuple[tuple[int, int], ...]:
        return tuple(zip(self.widths[:-1], self.widths[1:]))

    def params(self) -> int:
        return norm_params(self.widths[0], "layernorm") + sum(linear_params(i, o, True) for i, o in self.linears())

    def describe(self) -> str:
        pool = "stride-2 average pool, " if self.pooled else ""
        return f"audio output head: {pool}layernorm({self.widths[0]}) -> Linear {' -> '.join(map(str, self.widths))}"


__all__ += ["AudioConvFrontEnd", "AudioHead", "AudioLayers", "halve"]
# --- aya_vision ---


@dataclass(frozen=True)
class SwiGLUProjector(Block):
    """Aya Vision / Command A Vision projector on ``vision_merged_tokens`` rows (after the pixel shuffle, no
    FLOPs): optional ``norm``(in) -> Linear(in -> ``hidden_width``, bias) -> split in halves, SiLU(gate) * x
    (elementwise) -> Linear(``hidden_width``/2 -> out, bias). With a weighted norm in front the first GEMM
    needs its input gradient whenever the projector trains; without one, only when the tower does."""

    kind: ClassVar[str] = "swiglu_projector"
    in_width: int
    hidden_width: int
    out_width: int
    norm: str = "layernorm"

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.hidden_width % 2:
            raise ConfigError(f"SwiGLUProjector: hidden width {self.hidden_width} must be even (split in halves)")

    def params(self) -> int:
        return (norm_params(self.in_width, self.norm) + linear_params(self.in_width, self.hidden_width, True)
                + linear_params(self.hidden_width // 2, self.out_width, True))

    def describe(self) -> str:
        norm = f"{self.norm}({self.in_width}) -> " if self.norm != "none" else ""
        return (f"{self.count} projector: {norm}Linear {self.in_width} -> {self.hidden_width}, SwiGLU halves, "
                f"Linear {self.hidden_width // 2} -> {self.out_width} on pixel-shuffled tokens")


__all__ += ["SwiGLUProjector"]


# --- ssm --- (Mamba-2 / SSD layers: Nemotron-H)


@dataclass(frozen=True)
class Mamba2Mixer(Block):
    """``count`` Mamba-2 mixers (transformers ``NemotronHMamba2Mixer`` / ``Mamba2Mixer`` layout).

    d_in = ``num_heads`` x ``head_dim``; ``in_proj`` h -> 2·d_in + 2·G·N + H (z gate, x, B, C, dt); a depthwise
    causal ``conv1d`` (kernel K, bias ``conv_bias``) over the d_in + 2·G·N x/B/C channels; per-head ``dt_bias``,
    ``A_log``, ``D``; a gated RMSNorm over d_in; ``out_proj`` d_in -> h. The selective scan is counted as the
    SSD chunked algorithm (chunk Q = ``chunk``) computes its matmuls, per token: C·Bᵀ per group inside each
    chunk (2·Q·G·N), the masked (L ∘ C·Bᵀ)·X per head (2·Q·d_in), each chunk's state Bᵀ·X (2·N·d_in) and the
    read of the carried state C·S (2·N·d_in); see :func:`scan_per_token`.
    """

    kind: ClassVar[str] = "mamba2_mixer"
    hidden: int
    num_heads: int
    head_dim: int
    state_size: int
    n_groups: int
    conv_kernel: int
    chunk: int
    conv_bias: bool = True
    proj_bias: bool = False

    @property
    def inner(self) -> int:
        """d_in = H x P."""
        return self.num_heads * self.head_dim

    @property
    def conv_channels(self) -> int:
        """Channels of the depthwise conv: x, B, C (d_in + 2·G·N)."""
        return self.inner + 2 * self.n_groups * self.state_size

    def proj_per_token(self) -> int:
        """Forward FLOPs per token of ``in_proj`` (h -> d_in + channels + H) and ``out_proj`` (d_in -> h)."""
        return 2 * self.hidden * (self.inner + self.conv_channels + self.num_heads) + 2 * self.inner * self.hidden

    def conv_per_output(self) -> int:
        """Forward FLOPs of the depthwise conv per output position: 2·channels·K."""
        return 2 * self.conv_channels * self.conv_kernel

    def scan_per_token(self) -> int:
        """Forward matmul FLOPs per token of the SSD chunked scan: 2·Q·(G·N + d_in) + 4·N·d_in. Exact for a
        sequence whose length is a multiple of Q (a partial last chunk of r tokens is billed Q·r rows of the
        two intra-chunk products: between the r² a masked kernel needs and the Q² a padding one computes).
        Decays (exp of cumulative sums), the inter-chunk state recurrence, D·x and the gate are elementwise."""
        q, n, g, d = self.chunk, self.state_size, self.n_groups, self.inner
        return 2 * q * (g * n + d) + 4 * n * d

    def params(self) -> int:
        h, d, heads = self.hidden, self.inner, self.num_heads
        proj = linear_params(h, d + self.conv_channels + heads, self.proj_bias) + linear_params(d, h, self.proj_bias)
        conv = self.conv_channels * self.conv_kernel + (self.conv_channels if self.conv_bias else 0)
        return proj + conv + 3 * heads + d  # dt_bias, A_log, D; gated-norm weight

    def describe(self) -> str:
        return (f"{self.count} Mamba-2 mixers, {self.num_heads} heads x {self.head_dim}, state {self.state_size}, "
                f"{self.n_groups} groups, depthwise conv k={self.conv_kernel}, SSD chunked scan (chunk {self.chunk})")


@dataclass(frozen=True)
class PlainMLP(Block):
    """``count`` non-gated LM MLPs: up Linear(h -> w) -> act -> down Linear(w -> h) (Nemotron-H relu²)."""

    kind: ClassVar[str] = "plain_mlp"
    hidden: int
    width: int
    bias: bool = False

    def per_token(self) -> int:
        return 2 * 2 * self.hidden * self.width

    def params(self) -> int:
        return linear_params(self.hidden, self.width, self.bias) + linear_params(self.width, self.hidden, self.bias)

    def describe(self) -> str:
        return f"{self.count} plain MLP {self.hidden} -> {self.width} -> {self.hidden} (2 matrices)"
# --- minicpmv ---


@dataclass(frozen=True)
class FoldedTokens(Block):
    """``module`` (tower layers with full attention per image / slice) run on the tokens left after a ``fold`` x
    ``fold`` spatial merge inside the tower: ``vision_patches / fold²`` rows and ``Σ (len / fold²)²`` per slice.
    MiniCPM-V 4.6's layers after the window-attention merger. Exact when every slice's side is a multiple of
    ``fold`` (the family's processor guarantees it). ``module`` carries its own ``count``."""

    kind: ClassVar[str] = "folded_tokens"
    module: Block
    fold: int

    def __post_init__(self) -> None:
        super().__post_init__()
        if not isinstance(self.module, VisionLayers) or self.module.attention != "frame" or self.module.cls:
            raise ValueError("FoldedTokens wraps VisionLayers with per-frame attention and no CLS token")
        if self.fold < 1:
            raise ValueError(f"FoldedTokens.fold must be >= 1, got {self.fold}")

    def params(self) -> int:
        return self.module.count * self.module.params()

    def describe(self) -> str:
        return f"after a {self.fold}x{self.fold} fold (1/{self.fold ** 2} of the patches): {self.module.describe()}"


@dataclass(frozen=True)
class WindowAttentionMerger(Block):
    """A ViT layer that merges ``window`` x ``window`` patches into one token (MiniCPM-V 4.6's
    ``vit_merger``): LayerNorm(h) -> q/k/v/o Linear(h -> h, bias) with attention inside each window of
    window² patches (Σ_windows (window²)² = patches · window²) -> residual; then the window's patches
    concatenated (window²·h) -> LayerNorm -> Linear(window²·h -> window²·i) -> act -> Linear(window²·i -> h), plus
    the window's mean (not a matmul), on patches / window² rows."""

    kind: ClassVar[str] = "window_attention_merger"
    width: int
    num_heads: int
    head_dim: int
    mlp_width: int  # per patch: the MLP is window²·width -> window²·mlp_width -> width
    window: int

    @property
    def attn_width(self) -> int:
        return self.num_heads * self.head_dim

    @property
    def unit(self) -> int:
        return self.window * self.window

    def params(self) -> int:
        h, q, u = self.width, self.attn_width, self.unit
        attn = linear_params(h, 3 * q, True) + linear_params(q, h, True)
        mlp = linear_params(u * h, u * self.mlp_width, True) + linear_params(u * self.mlp_width, h, True)
        return norm_params(h, "layernorm") + attn + norm_params(u * h, "layernorm") + mlp

    def describe(self) -> str:
        u = self.unit
        return (f"window-attention merger: {self.num_heads}x{self.head_dim} heads within {self.window}x{self.window} "
                f"windows, MLP {u * self.width} -> {u * self.mlp_width} -> {self.width} per window (1/{u} of the rows)")
# --- nemotron_h_omni ---


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


__all__ += ["ImageVideoPatchEmbed"]


@dataclass(frozen=True)
class PlainMoEMLP(Block):
    """``count`` Nemotron-H MoE layers (transformers ``NemotronHMoE``): router h -> E (no bias; the sigmoid /
    group-limited top-k and the correction-bias buffer are not matmuls), optional latent projections
    h -> L -> ... -> h around the experts (``latent`` 0: none), E **non-gated** experts in -> F -> in (up/down, no
    bias, relu²; in = L or h) of which top-k run per token, and ONE non-gated shared MLP h -> F_sh -> h
    (``bias``: the latent projections' and the shared MLP's biases, ``mlp_bias``)."""

    kind: ClassVar[str] = "plain_moe_mlp"
    hidden: int
    num_experts: int
    top_k: int
    expert_width: int
    shared_width: int
    latent: int = 0
    bias: bool = False

    @property
    def expert_in(self) -> int:
        return self.latent or self.hidden

    def per_token(self) -> dict[str, int]:
        h, latent = self.hidden, 2 * 2 * self.hidden * self.latent
        return {"routed": 2 * 2 * self.expert_in * self.expert_width * self.top_k + latent,
                "shared": 2 * 2 * h * self.shared_width, "router": 2 * h * self.num_experts}

    def _dense(self) -> int:
        h = self.hidden
        latent = linear_params(h, self.latent, self.bias) + linear_params(self.latent, h, self.bias) \
            if self.latent else 0
        shared = linear_params(h, self.shared_width, self.bias) + linear_params(self.shared_width, h, self.bias)
        return latent + shared + self.num_experts * h

    def params(self) -> int:
        return self.num_experts * 2 * self.expert_in * self.expert_width + self._dense()

    def active_params(self) -> int:
        """What one token touches: top-k routed experts + latent projections + shared MLP + router."""
        return self.top_k * 2 * self.expert_in * self.expert_width + self._dense()

    def describe(self) -> str:
        latent = f", latent {self.latent}" if self.latent else ""
        return (f"{self.count} MoE MLP: {self.num_experts} plain experts top-{self.top_k} of width "
                f"{self.expert_width}{latent} + 1 shared ({self.shared_width}), router {self.hidden} -> "
                f"{self.num_experts}")


__all__ += ["PlainMoEMLP"]


@dataclass(frozen=True)
class ParakeetSubsampling(Block):
    """Parakeet / FastConformer ``dw_striding`` subsampling (transformers ``ParakeetEncoderSubsamplingConv2D``),
    on the clips of one encoder call padded to its longest: Conv2d(1 -> c, 3x3, stride 2) then twice a depthwise
    Conv2d(c, 3x3, stride 2, groups c) + pointwise Conv2d(c -> c, 1x1), all biased, over (frames, mel bins); then
    Linear(c · mel/8 -> d, bias) per output frame. Rows: ``audio_conv_frames_s2/_s4/_s8`` x the mel bins halved
    1/2/3 times."""

    kind: ClassVar[str] = "parakeet_subsampling"
    mel_bins: int
    channels: int
    width: int

    def freq_bins(self, k: int) -> int:
        n = self.mel_bins
        for _ in range(k):
            n = halve(n)
        return n

    def params(self) -> int:  # freq_bins(3) = mel/8 for the mel bins the families accept (multiples of 8)
        c = self.channels
        return 10 * c + 2 * (10 * c + c * c + c) + linear_params(c * self.freq_bins(3), self.width, True)

    def describe(self) -> str:
        return (f"subsampling x8: Conv2d 1 -> {self.channels} 3x3/2, 2 x (depthwise 3x3/2 + pointwise), "
                f"Linear {self.channels * self.freq_bins(3)} -> {self.width}")


@dataclass(frozen=True)
class ConformerLayers(Block):
    """``count`` FastConformer layers (transformers ``ParakeetEncoderBlock``) on ``audio_tokens`` rows (clips padded
    to the call's longest): two half-step feed-forwards d -> f -> d, relative-position self-attention (q/k/v/o,
    ``relative_k_proj`` on the 2T − 1 sinusoidal positions of each clip, content bias u and position bias v, the
    Transformer-XL position term q·Rᵀ of T x (2T − 1) per clip and head), the convolution module (pointwise
    d -> 2d, GLU, depthwise k, BatchNorm, pointwise d -> d) and five LayerNorms."""

    kind: ClassVar[str] = "conformer_layers"
    width: int
    num_heads: int
    num_kv_heads: int
    head_dim: int
    ffn: int
    conv_kernel: int
    bias: bool = True  # attention_bias: the feed-forwards' and q/k/v/o biases
    conv_bias: bool = True

    def params(self) -> int:
        d, q, kv = self.width, self.num_heads * self.head_dim, self.num_kv_heads * self.head_dim
        ff = 2 * (linear_params(d, self.ffn, self.bias) + linear_params(self.ffn, d, self.bias))
        attn = (linear_params(d, q, self.bias) + 2 * linear_params(d, kv, self.bias) + linear_params(q, d, self.bias)
                + d * q + 2 * q)
        conv = (linear_params(d, 2 * d, self.conv_bias) + d * self.conv_kernel + (d if self.conv_bias else 0)
                + 2 * d + linear_params(d, d, self.conv_bias))
        return ff + attn + conv + 5 * 2 * d

    def describe(self) -> str:
        return (f"{self.count} FastConformer layers, width {self.width}, {self.num_heads}x{self.head_dim} heads "
                f"(relative positions), 2 FFN {self.width}->{self.ffn}, conv module k {self.conv_kernel}")


@dataclass(frozen=True)
class AudioMlpProjector(Block):
    """RMSNorm(d) -> Linear(d -> hidden) -> relu² -> Linear(hidden -> out) on ``audio_tokens`` rows (every encoder
    position of the padded call; the padding rows are dropped after it): Nemotron omni's ``embed_audio``."""

    kind: ClassVar[str] = "audio_mlp_projector"
    in_width: int
    hidden_width: int
    out_width: int
    bias: bool = False

    def params(self) -> int:
        return (self.in_width + linear_params(self.in_width, self.hidden_width, self.bias)
                + linear_params(self.hidden_width, self.out_width, self.bias))

    def describe(self) -> str:
        return f"audio projector: rmsnorm({self.in_width}) -> {self.hidden_width} -> {self.out_width} on encoder rows"


__all__ += ["AudioMlpProjector", "ConformerLayers", "ParakeetSubsampling"]


# --- sam --- (SAM / ViTDet image encoder: GOT-OCR2's tower, DeepSeek-VL-hybrid's high-resolution tower)
# Every SAM tower input is one fixed-size square tile (the patch embed refuses any other size), so these blocks
# cost a constant per tile: their FLOPs are per-tile constants times the tiles, ``vision_patches // tile_patches``
# (``tile_patches``: patches of one tile in the model's summary grid, fixed for these families; exact from grids
# and from pre-aggregated metadata rows alike), or ``vision_frames`` when ``tile_patches`` is 0.


def strided_side(side: int) -> int:
    """Output side of a Conv2d(kernel 3, stride 2, padding 1) on ``side`` positions: floor((side − 1) / 2) + 1."""
    return (side - 1) // 2 + 1


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
class SamNeck(Block):
    """SAM neck on a ``side`` x ``side`` grid per tile: Conv2d 1x1 (width -> channels, no bias) -> LayerNorm ->
    Conv2d 3x3 padding 1 (channels -> channels, no bias) -> LayerNorm (channels-first LayerNorms)."""

    kind: ClassVar[str] = "sam_neck"
    width: int
    channels: int
    side: int
    tile_patches: int = 0

    def params(self) -> int:
        c = self.channels
        return self.width * c + 9 * c * c + 2 * norm_params(c, "layernorm")

    def describe(self) -> str:
        return (f"{self.count} SAM neck: conv 1x1 {self.width} -> {self.channels}, LayerNorm, conv 3x3 "
                f"{self.channels} -> {self.channels}, LayerNorm on {self.side}x{self.side}")


@dataclass(frozen=True)
class StridedConvs(Block):
    """A chain of Conv2d(kernel 3, stride 2, padding 1, no bias) over ``channels`` (c0 -> c1 -> ...) on a
    ``side`` x ``side`` grid per tile (after a bilinear resize to ``resize`` x ``resize`` when set: not a
    matmul), then an optional Linear(c_last -> ``linear``, bias) on the output positions.

    GOT-OCR2's projector (convs 256 -> 512 -> h on 64 -> 32 -> 16, Linear h -> h: 256 tokens per tile) and
    DeepSeek-VL-hybrid's ``high_res_vision_proj`` (resize to 4·24, convs 256 -> 512 -> 1024: 24 x 24 tokens).
    ``component`` places it (``vision.merger``: projector; ``vision.mlp``: tower); ``first_input`` is the
    first conv's input kind (``upstream`` when it is the first op of the projector). ``runs``: how many times
    one stored copy runs per tile (DeepSeek-VL-hybrid applies its one ``high_res_vision_proj`` to two inputs)."""

    kind: ClassVar[str] = "strided_convs"
    channels: tuple[int, ...]
    side: int
    resize: int = 0
    linear: int = 0
    component: str = "vision.merger"
    first_input: str = "stage"
    runs: int = 1
    tile_patches: int = 0

    def __post_init__(self) -> None:
        super().__post_init__()
        if len(self.channels) < 2:
            raise ValueError("StridedConvs needs at least 2 channel widths (one conv)")

    def sides(self) -> tuple[int, ...]:
        """Output side of each conv in turn."""
        out, side = [], self.resize or self.side
        for _ in self.channels[1:]:
            side = strided_side(side)
            out.append(side)
        return tuple(out)

    @property
    def out_tokens(self) -> int:
        return self.sides()[-1] ** 2

    def params(self) -> int:
        convs = sum(9 * a * b for a, b in zip(self.channels[:-1], self.channels[1:]))
        return convs + (linear_params(self.channels[-1], self.linear, True) if self.linear else 0)

    def describe(self) -> str:
        chain = " -> ".join(str(c) for c in self.channels)
        sides = " -> ".join(str(s) for s in (self.resize or self.side,) + self.sides())
        resize = f"resize {self.side} -> {self.resize}, " if self.resize else ""
        lin = f", Linear {self.channels[-1]} -> {self.linear}" if self.linear else ""
        runs = f", run {self.runs} times per tile" if self.runs != 1 else ""
        return f"{self.count} x {resize}convs 3x3/2 {chain} on {sides}{lin}{runs}"


@dataclass(frozen=True)
class HybridAligner(Block):
    """DeepSeek-VL-hybrid's aligner on ``vision_merged_tokens`` rows: Linear(low -> out/2) on the SigLIP tokens
    and Linear(high -> out/2) on the SAM tokens (both biased, each the first op after its tower), concatenated,
    GELU, Linear(out -> out, bias)."""

    kind: ClassVar[str] = "hybrid_aligner"
    low_width: int
    high_width: int
    out_width: int

    def params(self) -> int:
        half = self.out_width // 2
        return (linear_params(self.low_width, half, True) + linear_params(self.high_width, half, True)
                + linear_params(self.out_width, self.out_width, True))

    def describe(self) -> str:
        half = self.out_width // 2
        return (f"aligner: Linear {self.low_width} -> {half} (low-res) ‖ Linear {self.high_width} -> {half} "
                f"(high-res), GELU, Linear {self.out_width} -> {self.out_width}")


__all__ += ["HybridAligner", "SamEmbed", "SamNeck", "SamVisionLayers", "StridedConvs", "strided_side"]
# --- gemma3n ---
# Gemma 3n's text decoder (transformers models/gemma3n: ``Gemma3nTextModel`` / ``Gemma3nTextDecoderLayer``): every
# layer carries AltUp (n parallel copies of the hidden state, one active), a LAuReL low-rank residual and a gated
# per-layer input; the last ``num_kv_shared_layers`` layers reuse an earlier layer's keys and values.


@dataclass(frozen=True)
class SharedKVDecoderAttention(DecoderAttention):
    """``count`` attention sublayers that reuse the keys / values of an earlier layer of the same type (Gemma 3n's
    KV-shared layers, ``kv_sharing_modes`` "reuse"): q/o projections and q RMSNorm only (no k/v projection, no
    k norm); the core attends the producer's keys (the same sequence: same square, same window)."""

    kind: ClassVar[str] = "shared_kv_decoder_attention"

    def proj_per_token(self) -> int:
        return 2 * 2 * self.hidden * self.q_width

    def params(self) -> int:
        h = self.hidden
        p = linear_params(h, self.q_width, self.qkv_bias) + linear_params(self.q_width, h, self.o_bias)
        return p + (self.head_dim if self.qk_norm else 0)

    def describe(self) -> str:
        return super().describe() + " reusing an earlier layer's keys / values (q/o only)"


@dataclass(frozen=True)
class AltUpLayer(Block):
    """``count`` AltUp predict / correct steps (``Gemma3nTextAltUp``) over ``streams`` copies of width ``hidden``.

    Per token: predict: RMSNorm -> ``modality_router`` Linear(h -> n) on the active stream, ``prediction_coefs``
    Linear(n -> n²), then the (h x n) x (n x n) stream mix (a matmul of two activations: no weight, both inputs need
    gradients); correct: ``modality_router`` Linear(h -> n) again on the layer output, ``correction_coefs``
    Linear(n -> n). Parameters: router norm and ``correct_output_scale`` (h each), router h·n, coefficients n³ + n²."""

    kind: ClassVar[str] = "altup_layer"
    hidden: int
    streams: int

    def weight_per_token(self) -> int:
        h, n = self.hidden, self.streams
        return 2 * (2 * h * n + n * n * n + n * n)

    def mix_per_token(self) -> int:
        return 2 * self.hidden * self.streams * self.streams

    def params(self) -> int:
        h, n = self.hidden, self.streams
        return 2 * h + h * n + n ** 3 + n * n

    def describe(self) -> str:
        return (f"{self.count} AltUp predict/correct over {self.streams} streams of {self.hidden} (router h -> n twice, "
                f"coefficients n -> n² and n -> n, stream mix h x n x n per token)")


@dataclass(frozen=True)
class LaurelBlock(Block):
    """``count`` LAuReL low-rank residuals (``Gemma3nTextLaurelBlock``): Linear(h -> r) -> Linear(r -> h) ->
    RMSNorm, no bias."""

    kind: ClassVar[str] = "laurel_block"
    hidden: int
    rank: int

    def params(self) -> int:
        return 2 * self.hidden * self.rank + self.hidden

    def describe(self) -> str:
        return f"{self.count} LAuReL residual {self.hidden} -> {self.rank} -> {self.hidden} + RMSNorm"


@dataclass(frozen=True)
class PerLayerInputGate(Block):
    """``count`` per-layer input gates (``Gemma3nTextDecoderLayer``): ``per_layer_input_gate`` Linear(h -> p), act,
    times the layer's per-layer input (elementwise), ``per_layer_projection`` Linear(p -> h), RMSNorm(h); no bias."""

    kind: ClassVar[str] = "per_layer_input_gate"
    hidden: int
    width: int

    def params(self) -> int:
        return 2 * self.hidden * self.width + self.hidden

    def describe(self) -> str:
        return f"{self.count} per-layer input gates {self.hidden} -> {self.width} -> {self.hidden} + RMSNorm"


@dataclass(frozen=True)
class AltUpStreams(Block):
    """Gemma 3n's model-level stream machinery (``Gemma3nTextModel``), once per token: ``per_layer_model_projection``
    Linear(h -> L·p) (+ RMSNorm(p)), ``altup_projections`` and ``altup_unembed_projections``: (n - 1) Linear(h -> h)
    each; no bias. (The per-layer embedding table is a lookup: a :class:`TokenEmbedding`.)"""

    kind: ClassVar[str] = "altup_streams"
    hidden: int
    streams: int
    layers: int
    per_layer_width: int

    def params(self) -> int:
        h = self.hidden
        return h * self.layers * self.per_layer_width + self.per_layer_width + 2 * (self.streams - 1) * h * h

    def describe(self) -> str:
        h = self.hidden
        return (f"per-layer input projection {h} -> {self.layers} x {self.per_layer_width}, {self.streams - 1} AltUp "
                f"stream projections and {self.streams - 1} unembed projections {h} -> {h}")


__all__ += ["AltUpLayer", "AltUpStreams", "LaurelBlock", "PerLayerInputGate", "SharedKVDecoderAttention"]
# Gemma 3n's audio encoder (transformers ``Gemma3nAudioEncoder``, a USM-style conformer) and its embedder. Rows from
# the ``audio_*`` statistics of one encoder call (``AudioSpec.frontend == "sscp"``, vlm_perf.stats.audio): every clip
# padded to the call's longest.


def sscp_out(n: int, kernel: int, stride: int, pad: int) -> int:
    """Output length of a convolution over ``n`` positions padded by ``pad`` in total: (n + pad - k) // s + 1."""
    return (n + pad - kernel) // stride + 1


@dataclass(frozen=True)
class SSCPFrontEnd(Block):
    """Gemma 3n's sub-sampling convolution projection (``Gemma3nAudioSubSampleConvProjection``): two Conv2d over
    (time, mel) without bias (``kernels`` / ``strides`` per conv as (time, freq); time padded (0, k - 1), freq (1, 1)),
    each followed by a cumulative group norm (one weight per channel) and ReLU, then ``input_proj_linear``
    Linear(c_1·F_2 -> d, no bias). Rows: ``audio_conv_frames_s2`` (B·T_1) and ``audio_conv_frames_s4`` (B·T_2).
    The first conv reads features (no input gradient)."""

    kind: ClassVar[str] = "sscp_front_end"
    mel_bins: int
    channels: tuple[int, int]
    kernels: tuple[tuple[int, int], tuple[int, int]]
    strides: tuple[tuple[int, int], tuple[int, int]]
    width: int

    def freq_bins(self, k: int) -> int:
        """Mel bins after ``k`` (1 or 2) convolutions."""
        n = self.mel_bins
        for i in range(k):
            n = sscp_out(n, self.kernels[i][1], self.strides[i][1], 2)
        return n

    def params(self) -> int:
        (c0, c1), (k0, k1) = self.channels, self.kernels
        return (c0 * k0[0] * k0[1] + c0) + (c1 * c0 * k1[0] * k1[1] + c1) + c1 * self.freq_bins(2) * self.width

    def describe(self) -> str:
        c0, c1 = self.channels
        return (f"audio sub-sampling convs: Conv2d 1 -> {c0} {self.kernels[0]} stride {self.strides[0]}, Conv2d "
                f"{c0} -> {c1} {self.kernels[1]} stride {self.strides[1]} over {self.mel_bins} mel bins, Linear "
                f"{c1 * self.freq_bins(2)} -> {self.width}")


@dataclass(frozen=True)
class ChunkedConformerLayers(Block):
    """``count`` Gemma 3n conformer blocks (``Gemma3nAudioConformerBlock``) on ``audio_tokens`` rows (B·T_2, padding
    included), no biases: two feed-forwards (RMSNorm, Linear(d -> 4d), SiLU, Linear(4d -> d), RMSNorm); chunked local
    attention (q/k/v Linear(d -> d), per-dim query scale, ``post`` Linear(d -> d), pre / post RMSNorm); a light conv
    (RMSNorm, Linear(d -> 2d), GLU, depthwise causal Conv1d(kernel K), RMSNorm, SiLU, Linear(d -> d)); a final RMSNorm.

    Attention: queries in blocks of W = ``chunk`` (the sequence padded to whole blocks: the statistic
    ``audio_tokens_sq`` holds those B·⌈T_2/W⌉·W query rows), each block scoring a context of C = W + P + F keys
    (P = max(0, ``context_left`` - 1) past, F = ``context_right`` future) plus P + F + 1 relative positions:
    QKᵀ 2·rows·C·d, the position term 2·rows·(P + F + 1)·d, AV 2·rows·C·d. The relative positions' sinusoids go
    through ``pos_proj`` Linear(d -> d) once per layer per encoder call (``audio_calls``), on constants."""

    kind: ClassVar[str] = "chunked_conformer_layers"
    width: int
    num_heads: int
    chunk: int
    context_left: int
    context_right: int
    conv_kernel: int

    @property
    def past(self) -> int:
        return max(0, self.context_left - 1)

    @property
    def positions(self) -> int:
        """Relative positions scored per query: P + F + 1."""
        return self.past + self.context_right + 1

    @property
    def context(self) -> int:
        """Keys per query block: W + P + F."""
        return self.chunk + self.past + self.context_right

    def params(self) -> int:
        d = self.width
        ffw = 2 * d + 8 * d * d
        attn = 2 * d + d // self.num_heads + 5 * d * d  # pre/post norms, per_dim_scale, q/k/v/post/pos_proj
        lconv = 2 * d + 3 * d * d + d * self.conv_kernel
        return 2 * ffw + attn + lconv + d

    def describe(self) -> str:
        return (f"{self.count} conformer blocks, width {self.width}, {self.num_heads} heads, chunked local attention "
                f"(blocks of {self.chunk}, {self.past} past / {self.context_right} future, relative positions), "
                f"2 feed-forwards {self.width} -> {4 * self.width}, light conv k={self.conv_kernel}")


@dataclass(frozen=True)
class AudioEmbedder(Block):
    """Gemma 3n's ``embed_audio`` (``Gemma3nMultimodalEmbedder``) on ``audio_out_tokens`` rows (the encoder output
    after the reduction stride): RMSNorm(d) -> Linear(d -> h, no bias) -> RMSNorm without scale. Parameters also
    hold its hard-token path (an embedding table ``vocab`` x d and its RMSNorm)."""

    kind: ClassVar[str] = "audio_embedder"
    width: int
    out_width: int
    vocab: int

    def params(self) -> int:
        return self.vocab * self.width + 2 * self.width + self.width * self.out_width

    def describe(self) -> str:
        return f"audio embedder: RMSNorm({self.width}) -> Linear {self.width} -> {self.out_width} on encoder outputs"


__all__ += ["AudioEmbedder", "ChunkedConformerLayers", "SSCPFrontEnd", "sscp_out"]
# --- phi4_multimodal ---


@dataclass(frozen=True)
class SeparatorProjector(LinearProjector):
    """Phi-4-multimodal's image projection (``img_projection_up`` -> GELU -> ``img_projection_down``) on every
    LM image placeholder, whose input rows include learned separators (``sub_img_feature_extensor`` after each
    row of crop tokens, ``global_img_feature_extensor`` between the crops and the global view: ``separators``
    vectors of ``widths[0]`` parameters, part of the projector). Those parameters sit in front of the first
    Linear, so a trainable projector needs that GEMM's input gradient even with a frozen tower."""

    kind: ClassVar[str] = "separator_projector"
    separators: int = 2

    def params(self) -> int:
        return super().params() + self.separators * self.widths[0]

    def describe(self) -> str:
        chain = " -> ".join(str(w) for w in self.widths)
        return (f"{self.count} {self.label}: Linear chain {chain} on every image placeholder (learned row / "
                f"global separators: {self.separators} x {self.widths[0]})")


@dataclass(frozen=True)
class ConformerFrontEnd(ParakeetSubsampling):
    """Phi-4-multimodal's NeMo conv subsampling (``Phi4MultimodalAudioNemoConvSubsampling``), on the call's mel
    features padded to its longest clip: Conv2d(1 -> c, 3x3, stride 2, pad 1), then twice a depthwise Conv2d(c,
    3x3, stride 2, groups c) + pointwise Conv2d(c -> c, 1x1), all biased, over (frames, mel bins); then
    Linear(c·F_3 -> d) on ``audio_conv_frames_s8`` rows. The first convolution reads features (no input
    gradient). Three stride-2 steps (``time_reduction`` 8): the same NeMo ``dw_striding`` layout as
    :class:`ParakeetSubsampling`, whose parameters and FLOPs it shares (its own kind, for the inventory)."""

    kind: ClassVar[str] = "conformer_front_end"

    def describe(self) -> str:
        c = self.channels
        return (f"audio conv subsampling: Conv2d 1 -> {c} (3x3/2), 2 x [depthwise Conv2d 3x3/2 + pointwise {c} -> {c}] "
                f"over {self.mel_bins} mel bins x frames, Linear {c * self.freq_bins(3)} -> {self.width}, on the "
                "call's features padded to its longest clip")


@dataclass(frozen=True)
class NemoConformerLayers(Block):
    """``count`` conformer blocks (``Phi4MultimodalAudioConformerEncoderLayer``) on ``audio_tokens`` rows: two
    half-step SwiGLU-style feed-forwards (LayerNorm, Linear d -> 2f, Linear f -> d, biased), attention (q/k/v/o
    biased, bidirectional over each sequence, a relative-position bias added: ``audio_tokens_sq``), a conv module
    (LayerNorm, GLU pointwise Conv1d d -> 2e, depthwise Conv1d k over d·m channels and pointwise Conv1d d·m -> p
    on every sequence padded by k - 1 (``audio_tokens + (k - 1)·audio_sequences`` positions), pointwise Conv1d
    d -> e) and a final LayerNorm."""

    kind: ClassVar[str] = "nemo_conformer_layers"
    width: int
    num_heads: int
    mlp_width: int
    glu_width: int  # ext_pw_out_channel
    sep_width: int  # depthwise_separable_out_channel
    multiplier: int  # depthwise_multiplier
    kernel: int

    def params(self) -> int:
        d, f, e, p, m, k = self.width, self.mlp_width, self.glu_width, self.sep_width, self.multiplier, self.kernel
        mlp = 2 * d + linear_params(d, 2 * f, True) + linear_params(f, d, True)
        conv = 2 * d + linear_params(d, 2 * e, True) + 2 * e + d * m * k + d * m + linear_params(d * m, p, True) \
            + linear_params(d, e, True)
        return 2 * mlp + 4 * linear_params(d, d, True) + conv + 2 * 2 * d

    def describe(self) -> str:
        return (f"{self.count} conformer blocks, width {self.width}, {self.num_heads} heads, 2 x half-step MLP "
                f"{self.width} -> 2x{self.mlp_width} -> {self.width}, conv module (GLU {self.glu_width}, depthwise "
                f"k{self.kernel}), relative-position attention bias")


@dataclass(frozen=True)
class AudioProjection(Block):
    """Phi-4-multimodal's audio projection (``up_proj_for_speech`` -> GELU -> ``down_proj_for_speech``, or the
    ``*_for_vision_speech`` pair when the forward has images) on every encoder output row
    (``audio_out_tokens``): biased Linears ``widths``."""

    kind: ClassVar[str] = "audio_projection"
    widths: tuple[int, ...]

    def linears(self) -> tuple[tuple[int, int], ...]:
        return tuple(zip(self.widths[:-1], self.widths[1:]))

    def params(self) -> int:
        return sum(linear_params(i, o, True) for i, o in self.linears())

    def describe(self) -> str:
        return f"audio projection: Linear {' -> '.join(map(str, self.widths))} on every encoder output row"
