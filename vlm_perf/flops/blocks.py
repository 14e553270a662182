"""Exact forward FLOPs of each block kind, registered beside its formula (pure, no I/O).

``@block_flops(Kind)`` registers the function that turns one :class:`~vlm_perf.arch.blocks.Block` of that
kind (all ``count`` copies) and the batch statistics into :class:`~vlm_perf.flops.terms.Term` s; a second
registration for the same kind is rejected, and :func:`inventory_terms` refuses a block kind without one
(never a silent 0). Every matmul is counted (2 FLOPs per multiply-add), nothing else: norms,
activations, RoPE, interpolation, pooling, pixel shuffle and embedding lookups are not matmuls.

Statistics used (see :class:`vlm_perf.stats.BatchStats`): ``vision_patches`` (patch-embed rows),
``vision_cls_tokens`` (extra tower positions), ``vision_patches_sq_frame`` / ``vision_window_sq`` (sums of
squared attention-sequence lengths), ``vision_merged_tokens`` (projector rows), ``lm_tokens`` and
``lm_tokens_sq``. Attention cores are ``4 * q * sum(len^2)`` (Q K^T and A V); vision attention is
bidirectional (never halved), LM attention is multiplied by the causal factor (0.5 flash-style, 1 eager).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Iterable, TypedDict

from ..arch.blocks import (Block, ClsToken, ExtraParams, DecoderAttention, DenseMLP, FinalNorm, LMHead, LMLayerNorms,
                           MLAttention, MlpProjector, MoEMLP, MTPModules, PatchEmbed, PositionTable,
                           StoredOnly, TokenEmbedding, VisionLayers)
from ..stats.batch import BatchStats
from .terms import INPUT_PIXELS, INPUT_STAGE, INPUT_TOWER, INPUT_UPSTREAM, Term, matmul


@dataclass(frozen=True)
class FlopsContext:
    """How to count what the statistics alone do not say: the LM causal rule.

    ``causal="half"`` (factor 0.5): a causal flash kernel, which also skips what a sliding window masks
    (``lm_tokens_sq - lm_tokens_sq_beyond_window``); ``"full"`` (factor 1): the eager square, which
    computes every score entry whatever the mask.
    """

    causal: str = "half"

    @property
    def causal_factor(self) -> Any:
        return 0.5 if self.causal == "half" else 1


BlockFlopsFn = Callable[[Any, BatchStats, FlopsContext], list]
BLOCK_FLOPS: dict[type, BlockFlopsFn] = {}


def block_flops(kind: type) -> Callable[[BlockFlopsFn], BlockFlopsFn]:
    """Register the FLOPs function of a block kind (duplicates rejected)."""
    def register(fn: BlockFlopsFn) -> BlockFlopsFn:
        if kind in BLOCK_FLOPS:
            raise ValueError(f"FLOPs of block kind {kind.__name__} already registered ({BLOCK_FLOPS[kind].__name__})")
        BLOCK_FLOPS[kind] = fn
        return fn
    return register


def inventory_terms(blocks: Iterable[Block], stats: BatchStats, ctx: FlopsContext) -> list[Term]:
    """Terms of every block, in inventory order."""
    terms: list[Term] = []
    for block in blocks:
        fn = BLOCK_FLOPS.get(type(block))
        if fn is None:
            raise NotImplementedError(f"no FLOPs function registered for block kind {type(block).__name__}")
        if block.count:
            terms += fn(block, stats, ctx)
    return terms


def _no_flops(block: Block, stats: BatchStats, ctx: FlopsContext) -> list[Term]:
    """0 (no matmul)"""
    return []


for _kind in (PositionTable, ClsToken, TokenEmbedding, LMLayerNorms, FinalNorm, StoredOnly, ExtraParams):
    block_flops(_kind)(_no_flops)


# --------------------------------------------------------------------------- vision


@block_flops(PatchEmbed)
def _patch_embed(b: PatchEmbed, s: BatchStats, ctx: FlopsContext) -> list[Term]:
    """2·P·in·width (P = vision_patches)"""
    return [Term("vision.patch_embed", b.count * matmul(s.vision_patches, b.in_volume, b.width), b.part,
                 input_kind=INPUT_PIXELS)]


@block_flops(VisionLayers)
def _vision_layers(b: VisionLayers, s: BatchStats, ctx: FlopsContext) -> list[Term]:
    """per layer 2·R·(4·h·q + f·h·i) + 4·q·Σlen² (R = patches [+ CLS], f = 2 or 3; per frame/tile or window)"""
    rows = s.vision_patches + s.vision_cls_tokens if b.cls else s.vision_patches
    squares = {"window": s.vision_window_sq, "item": s.vision_patches_sq_item}.get(b.attention,
                                                                                  s.vision_patches_sq_frame)
    width, attn_width = b.width, b.attn_width
    return [
        Term("vision.attn_proj", b.count * (matmul(rows, width, 3 * attn_width) + matmul(rows, attn_width, width)),
             b.part),
        Term("vision.attn_core", 4 * attn_width * (b.count * squares), b.part, weights=False),
        Term("vision.mlp", b.count * b.mlp_matrices * matmul(rows, width, b.mlp_width), b.part),
    ]


@block_flops(MlpProjector)
def _mlp_projector(b: MlpProjector, s: BatchStats, ctx: FlopsContext) -> list[Term]:
    """2·M·(in·hidden + hidden·out) (M = vision_merged_tokens [+ vision_cls_tokens when the CLS rows are fed])"""
    rows = s.vision_merged_tokens + s.vision_cls_tokens if b.cls_rows else s.vision_merged_tokens
    fc1 = matmul(rows, b.in_width, b.hidden_width)
    fc2 = matmul(rows, b.hidden_width, b.out_width)
    if b.count != 1:
        fc1, fc2 = b.count * fc1, b.count * fc2
    first_input = INPUT_TOWER if b.norm != "none" else INPUT_UPSTREAM  # Linear first: no norm needs its input grad
    return [Term(b.component, fc1, b.part, input_kind=first_input), Term(b.component, fc2, b.part)]


# --------------------------------------------------------------------------- language model


def _core(per_sq: int, s: BatchStats, ctx: FlopsContext, window: int | None = None) -> Any:
    if window and ctx.causal == "half":
        return per_sq * (s.lm_tokens_sq - s.lm_tokens_sq_beyond_window) * ctx.causal_factor
    return per_sq * s.lm_tokens_sq * ctx.causal_factor


@block_flops(DecoderAttention)
@block_flops(MLAttention)
def _attention(b: DecoderAttention | MLAttention, s: BatchStats, ctx: FlopsContext) -> list[Term]:
    """per layer projections·S + 2·H·(d_qk + d_v)·Σs²·(½ causal half, windowed if sliding | 1 eager)"""
    window = getattr(b, "window", None)
    return [Term("lm.attn_proj", b.count * b.proj_per_token() * s.lm_tokens, b.part),
            Term("lm.attn_core", b.count * _core(b.core_per_token_sq(), s, ctx, window), b.part, weights=False)]


@block_flops(DenseMLP)
def _dense_mlp(b: DenseMLP, s: BatchStats, ctx: FlopsContext) -> list[Term]:
    """per layer 2·S·3·h·F"""
    return [Term("lm.dense_mlp", b.count * b.per_token() * s.lm_tokens, b.part)]


@block_flops(MoEMLP)
def _moe_mlp(b: MoEMLP, s: BatchStats, ctx: FlopsContext) -> list[Term]:
    """per layer 2·S·(3·h·(k·F_e + n_sh·F_sh) + h·E)"""
    per = b.per_token()
    return [Term("lm.routed_experts", b.count * per["routed"] * s.lm_tokens, b.part),
            Term("lm.shared_experts", b.count * per["shared"] * s.lm_tokens, b.part),
            Term("lm.router", b.count * per["router"] * s.lm_tokens, b.part)]


@block_flops(LMHead)
def _lm_head(b: LMHead, s: BatchStats, ctx: FlopsContext) -> list[Term]:
    """2·S·h·V (every position, real vocabulary)"""
    return [Term("lm.logits", b.per_token() * s.lm_tokens, b.part)]


@block_flops(MTPModules)
def _mtp(b: MTPModules, s: BatchStats, ctx: FlopsContext) -> list[Term]:
    """per module 2·S·(2h·h + layer + h·V) + its attention core"""
    core = _core(b.attention.core_per_token_sq(), s, ctx)
    return [Term("lm.mtp", b.count * b.per_token() * s.lm_tokens, b.part),
            Term("lm.mtp", b.count * core, b.part, weights=False)]


# --- glm4v ---

from ..arch.blocks import DownsampleConv, ExtraNorms, GatedMergerMLP  # noqa: E402

block_flops(ExtraNorms)(_no_flops)


@block_flops(DownsampleConv)
def _downsample_conv(b: DownsampleConv, s: BatchStats, ctx: FlopsContext) -> list[Term]:
    """2·M·(m²·h_v)·d_out (M = merged tokens; the projector's first op: input gradient only if the tower trains)"""
    return [Term("vision.merger", b.count * matmul(s.vision_merged_tokens, b.in_width, b.out_width), b.part,
                 input_kind=INPUT_UPSTREAM)]


@block_flops(GatedMergerMLP)
def _gated_merger(b: GatedMergerMLP, s: BatchStats, ctx: FlopsContext) -> list[Term]:
    """2·M·(d² + 3·d·F) (M = merged tokens: proj d -> d, gate/up d -> F, down F -> d)"""
    rows, d, f = s.vision_merged_tokens, b.width, b.hidden_width
    return [Term("vision.merger", b.count * matmul(rows, d, d), b.part),
            Term("vision.merger", b.count * 3 * matmul(rows, d, f), b.part)]
# --- gemma3 ---
from ..arch.blocks import ImageBlockAttention, NormLinearProjector  # noqa: E402


@block_flops(NormLinearProjector)
def _norm_linear_projector(b: NormLinearProjector, s: BatchStats, ctx: FlopsContext) -> list[Term]:
    """2·M·in·out (M = vision_merged_tokens: pooled tokens)"""
    first_input = INPUT_TOWER if b.norm != "none" else INPUT_UPSTREAM
    return [Term(b.component, b.count * matmul(s.vision_merged_tokens, b.in_width, b.out_width), b.part,
                 input_kind=first_input)]


@block_flops(ImageBlockAttention)
def _image_block_attention(b: ImageBlockAttention, s: BatchStats, ctx: FlopsContext) -> list[Term]:
    """per layer 4·H·d·n²/2 per image block (vision_frames) under causal half; 0 under causal full"""
    if ctx.causal != "half":
        return []
    per_block = 2 * b.num_heads * b.head_dim * b.tokens * b.tokens  # (2·H·2d) x n²/2
    return [Term("lm.attn_core", b.count * per_block * s.vision_frames, b.part, weights=False)]


# --- siglip ---
from ..arch.blocks import SiglipPoolingHead  # noqa: E402


class _TermKind(TypedDict):
    """The :class:`Term` flags several terms of one block share (typed ``**`` arguments)."""

    weights: bool
    input_kind: str


@block_flops(SiglipPoolingHead)
def _siglip_pooling_head(b: SiglipPoolingHead, s: BatchStats, ctx: FlopsContext) -> list[Term]:
    """per image: 2·w·w (q) + 2·w·w (out) + 4·w·i (MLP) on 1 probe row (vision_frames), 2·N·w·2w (k, v) + 4·w·N (core);
    never back-propagated (output discarded)"""
    w, frames, patches = b.width, s.vision_frames, s.vision_patches
    once = _TermKind(weights=False, input_kind=INPUT_PIXELS)  # forward only: no weight or input gradient
    return [Term("vision.attn_proj", b.count * (2 * matmul(frames, w, w) + matmul(patches, w, 2 * w)), b.part, **once),
            Term("vision.attn_core", b.count * 4 * w * patches, b.part, **once),
            Term("vision.mlp", b.count * 2 * matmul(frames, w, b.mlp_width), b.part, **once)]
# --- qwen3_5 ---
from ..arch.blocks import GatedDecoderAttention, GatedDeltaNet, SharedGateMoEMLP  # noqa: E402

block_flops(GatedDecoderAttention)(_attention)
block_flops(SharedGateMoEMLP)(_moe_mlp)


@block_flops(GatedDeltaNet)
def _gated_delta_net(b: GatedDeltaNet, s: BatchStats, ctx: FlopsContext) -> list[Term]:
    """per layer projections·S + 2·ch·k·(S + (k−1)·rows) + Hv·(4·C·dk + 6·dk·dv + 2·C·dv)·S (chunk C = 64)

    The delta rule is linear in S (``--causal`` does not apply: every chunk computes its full C x C blocks,
    then masks). Training: the projections and the conv are weight GEMMs (x3); the delta rule's input
    gradient is 2x its forward + the triangular solves' gradient 2·Hv·C·(dv + dk) per token − 4·2·Hv·C·dk·dv
    per sequence (first chunk's zero state, last chunk's unused update). Tokens are real tokens: a kernel
    that pads each sequence to a multiple of C (transformers' fallback) adds < C tokens per sequence.
    """
    rows = s.lm_tokens
    conv_outputs = rows + (b.conv_kernel - 1) * s.lm_samples  # padding k−1 both sides per row, sliced off after
    delta = b.count * b.delta_rule_per_token() * rows
    delta_input_grad = 2 * delta + b.count * (b.delta_rule_backward_extra_per_token() * rows
                                              - b.delta_rule_backward_saved_per_sequence() * s.lm_sequences)
    return [Term("lm.attn_proj", b.count * b.proj_per_token() * rows, b.part),
            Term("lm.attn_proj", b.count * b.conv_per_output() * conv_outputs, b.part),
            Term("lm.attn_core", delta, b.part, weights=False, input_grad=delta_input_grad)]
# --- mistral3 / idefics3 ---

from ..arch.blocks import LinearProjector  # noqa: E402


@block_flops(LinearProjector)
def _linear_projector(b: LinearProjector, s: BatchStats, ctx: FlopsContext) -> list[Term]:
    """Σ_i 2·M·w_i·w_{i+1} (M = vision_merged_tokens)"""
    rows = s.vision_merged_tokens
    first_input = INPUT_TOWER if b.norm != "none" else INPUT_UPSTREAM
    return [Term("vision.merger", b.count * matmul(rows, n_in, n_out),
                 b.part, input_kind=first_input if i == 0 else INPUT_STAGE)
            for i, (n_in, n_out, _) in enumerate(b.linears())]
# --- llava ---
from dataclasses import replace  # noqa: E402

from ..arch.blocks import ForwardOnly  # noqa: E402


@block_flops(ForwardOnly)
def _forward_only(b: ForwardOnly, s: BatchStats, ctx: FlopsContext) -> list[Term]:
    """the wrapped module's forward FLOPs x count; no weight or input gradient in training"""
    terms = inventory_terms((b.module,), s, ctx)
    return [replace(t, forward=b.count * t.forward if b.count != 1 else t.forward, weights=False,
                    input_kind=INPUT_PIXELS, input_grad=None) for t in terms]
# --- paligemma ---
from ..arch.blocks import PrefixLMSquare  # noqa: E402


@block_flops(PrefixLMSquare)
def _prefix_lm_square(b: PrefixLMSquare, s: BatchStats, ctx: FlopsContext) -> list[Term]:
    """per layer 4·H·d·Σs²·½ under causal half (the other half of the square); 0 under causal full"""
    if ctx.causal != "half":
        return []
    return [Term("lm.attn_core", b.count * 2 * b.num_heads * 2 * b.head_dim * s.lm_tokens_sq * ctx.causal_factor,
                 b.part, weights=False)]
# --- llava_next_video ---
from ..arch.blocks import PooledVideoProjector  # noqa: E402


@block_flops(PooledVideoProjector)
def _pooled_video_projector(b: PooledVideoProjector, s: BatchStats, ctx: FlopsContext) -> list[Term]:
    """the wrapped projector on M - M_video + M_video / pool² rows (video frames pooled before it)"""
    # frames of side^2 rows with an even side (the family checks it): the division is exact
    rows = s.vision_merged_tokens - s.video_merged_tokens + s.video_merged_tokens // (b.pool * b.pool)
    return inventory_terms((b.module,), replace(s, vision_merged_tokens=rows), ctx)
# --- gpt_oss ---
from ..arch.blocks import BiasedMoEMLP, SinkDecoderAttention  # noqa: E402

block_flops(SinkDecoderAttention)(_attention)  # the sink column is a softmax input, not a matmul
block_flops(BiasedMoEMLP)(_moe_mlp)  # expert and router biases are adds
# --- mllama ---
from ..arch.blocks import CrossAttention, CrossLayerMLP, TextOnly, TileMaskProduct, TowerTokenLinear  # noqa: E402
from .terms import INPUT_OWN  # noqa: E402


@block_flops(TowerTokenLinear)
def _tower_token_linear(b: TowerTokenLinear, s: BatchStats, ctx: FlopsContext) -> list[Term]:
    """2·(P + T·F)·in·out (P = vision_patches, F = vision_frames; input gradient only when the tower trains)"""
    rows = s.vision_patches + b.tokens_per_frame * s.vision_frames
    return [Term("vision.merger", b.count * matmul(rows, b.in_width, b.out_width), b.part, input_kind=INPUT_UPSTREAM)]


@block_flops(TileMaskProduct)
def _tile_mask_product(b: TileMaskProduct, s: BatchStats, ctx: FlopsContext) -> list[Term]:
    """2·Σ L² (the mask's outer product per image; data, forward only)"""
    return [Term("vision.attn_core", b.count * 2 * s.vision_patches_sq_frame, b.part, weights=False,
                 input_kind=INPUT_PIXELS)]


@block_flops(CrossAttention)
def _cross_attention(b: CrossAttention, s: BatchStats, ctx: FlopsContext) -> list[Term]:
    """per layer 2·S·2·h·H·d (q, o; S: LM tokens of microbatches with images) + 2·V·2·h·kv·d (k, v on V vision
    tokens) + 4·H·d·Σ S·V (whole rectangle)"""
    n, h, q = b.count, b.hidden, b.q_width
    text = s.lm_tokens - s.lm_tokens_no_vision  # the layer is skipped in microbatches without images
    vision_rows = s.vision_patches + b.kv_tokens_per_frame * s.vision_frames
    cross = s.lm_x_vision_patches + b.kv_tokens_per_frame * s.lm_x_vision_frames
    half = n * 2 * q * cross  # one of the two core matmuls (QKᵀ or AV)
    query_input = INPUT_STAGE if b.query_from_vision else INPUT_OWN
    terms = [Term("lm.attn_proj", n * matmul(text, h, q), b.part, input_kind=query_input),
             Term("lm.attn_proj", n * 2 * matmul(vision_rows, h, b.kv_width), b.part, input_kind=INPUT_UPSTREAM),
             Term("lm.attn_proj", n * matmul(text, q, h), b.part)]
    if b.query_from_vision or ctx.causal == "half":  # fused kernels compute dQ, dK, dV together
        return terms + [Term("lm.attn_core", 2 * half, b.part, weights=False)]
    # eager: dK, dP, dV (3 halves) whenever k/v need a gradient; dQ only when the queries do (the LM trains)
    return terms + [Term("lm.attn_core", 2 * half, b.part, weights=False, input_grad=3 * half),
                    Term("lm.attn_core", 0 * half, b.part, weights=False, input_kind=INPUT_OWN, input_grad=half)]


@block_flops(CrossLayerMLP)
def _cross_layer_mlp(b: CrossLayerMLP, s: BatchStats, ctx: FlopsContext) -> list[Term]:
    """per layer 2·S·3·h·F, S = LM tokens of microbatches with images (lm_tokens - lm_tokens_no_vision)"""
    return [Term("lm.dense_mlp", b.count * b.per_token() * (s.lm_tokens - s.lm_tokens_no_vision), b.part)]


@block_flops(TextOnly)
def _text_only(b: TextOnly, s: BatchStats, ctx: FlopsContext) -> list[Term]:
    """the wrapped module's terms; input gradients only when the LM trains (no vision gradient reaches them)"""
    return [replace(t, input_kind=INPUT_OWN) if t.input_kind in (INPUT_STAGE, INPUT_UPSTREAM) else t
            for t in inventory_terms((b.module,), s, ctx)]
# --- llama4 ---
from ..arch.blocks import ChunkedDecoderAttention  # noqa: E402


@block_flops(ChunkedDecoderAttention)
def _chunked_attention(b: ChunkedDecoderAttention, s: BatchStats, ctx: FlopsContext) -> list[Term]:
    """per layer projections·S + 2·H·(d_qk + d_v)·(Σs² − beyond chunks)·½ (causal half) | Σs² (eager)"""
    if ctx.causal == "half":
        core = b.core_per_token_sq() * (s.lm_tokens_sq - s.lm_tokens_sq_beyond_chunks) * ctx.causal_factor
    else:
        core = b.core_per_token_sq() * s.lm_tokens_sq * ctx.causal_factor
    return [Term("lm.attn_proj", b.count * b.proj_per_token() * s.lm_tokens, b.part),
            Term("lm.attn_core", b.count * core, b.part, weights=False)]
# --- omni ---
from ..arch.blocks import AudioConvFrontEnd, AudioHead, AudioLayers  # noqa: E402


@block_flops(AudioConvFrontEnd)
def _audio_conv(b: AudioConvFrontEnd, s: BatchStats, ctx: FlopsContext) -> list[Term]:
    """conv1d: 2·N0·(3·mel)·d + 2·N1·(3·d)·d; conv2d: 2·N1·F1·c·9 + 2·(N2·F2 + N3·F3)·c·9c + 2·N3·(c·F3)·d
    (N0 = audio_conv_frames, N_k = audio_conv_frames_s{2^k}: the padded chunks' positions)"""
    d, mel = b.width, b.mel_bins
    if b.style == "conv1d":
        return [Term("audio.conv", b.count * matmul(s.audio_conv_frames, 3 * mel, d), b.part,
                     input_kind=INPUT_PIXELS),  # reads the mel features: no input gradient
                Term("audio.conv", b.count * matmul(s.audio_conv_frames_s2, 3 * d, d), b.part)]
    c = b.channels
    return [Term("audio.conv", b.count * matmul(s.audio_conv_frames_s2 * b.freq_bins(1), 9, c), b.part,
                 input_kind=INPUT_PIXELS),
            Term("audio.conv", b.count * matmul(s.audio_conv_frames_s4 * b.freq_bins(2), 9 * c, c), b.part),
            Term("audio.conv", b.count * matmul(s.audio_conv_frames_s8 * b.freq_bins(3), 9 * c, c), b.part),
            Term("audio.conv", b.count * matmul(s.audio_conv_frames_s8, c * b.freq_bins(3), d), b.part)]


@block_flops(AudioLayers)
def _audio_layers(b: AudioLayers, s: BatchStats, ctx: FlopsContext) -> list[Term]:
    """per layer 2·A·(4·d·q + 2·d·f) + 4·q·Σlen² (A = audio_tokens; bidirectional within chunks/windows)"""
    rows, width, q = s.audio_tokens, b.width, b.attn_width
    return [Term("audio.attn_proj", b.count * (matmul(rows, width, 3 * q) + matmul(rows, q, width)), b.part),
            Term("audio.attn_core", 4 * q * (b.count * s.audio_tokens_sq), b.part, weights=False),
            Term("audio.mlp", b.count * 2 * matmul(rows, width, b.mlp_width), b.part)]


@block_flops(AudioHead)
def _audio_head(b: AudioHead, s: BatchStats, ctx: FlopsContext) -> list[Term]:
    """Σ_i 2·O·w_i·w_{i+1} (O = audio_out_tokens)"""
    return [Term("audio.proj", b.count * matmul(s.audio_out_tokens, i, o), b.part) for i, o in b.linears()]
# --- aya_vision ---
from ..arch.blocks import SwiGLUProjector  # noqa: E402


@block_flops(SwiGLUProjector)
def _swiglu_projector(b: SwiGLUProjector, s: BatchStats, ctx: FlopsContext) -> list[Term]:
    """2·M·(in·A + A/2·out) (M = vision_merged_tokens, A = hidden width; the SwiGLU product is elementwise)"""
    rows = s.vision_merged_tokens
    first_input = INPUT_TOWER if b.norm != "none" else INPUT_UPSTREAM
    return [Term("vision.merger", b.count * matmul(rows, b.in_width, b.hidden_width), b.part, input_kind=first_input),
            Term("vision.merger", b.count * matmul(rows, b.hidden_width // 2, b.out_width), b.part)]
# --- ssm ---
from ..arch.blocks import Mamba2Mixer, PlainMLP  # noqa: E402


@block_flops(Mamba2Mixer)
def _mamba2_mixer(b: Mamba2Mixer, s: BatchStats, ctx: FlopsContext) -> list[Term]:
    """per layer projections·S + 2·ch·K·S + (2·Q·(G·N + d_in) + 4·N·d_in)·S (chunk Q)

    The conv is causal (left-padded, S outputs per channel, as ``causal_conv1d``). The scan is linear in S
    (``--causal`` does not apply: each chunk's Q x Q blocks are computed, then masked). Training: the
    projections and the conv are weight GEMMs (x3); every scan product has two activation operands (x, B, C,
    the chunk states) that need gradients: input gradient 2x its forward.
    """
    rows = s.lm_tokens
    return [Term("lm.attn_proj", b.count * b.proj_per_token() * rows, b.part),
            Term("lm.attn_proj", b.count * b.conv_per_output() * rows, b.part),
            Term("lm.attn_core", b.count * b.scan_per_token() * rows, b.part, weights=False)]


@block_flops(PlainMLP)
def _plain_mlp(b: PlainMLP, s: BatchStats, ctx: FlopsContext) -> list[Term]:
    """per layer 2·2·h·w·S"""
    return [Term("lm.dense_mlp", b.count * b.per_token() * s.lm_tokens, b.part)]
# --- minicpmv ---
from ..arch.blocks import FoldedTokens, WindowAttentionMerger  # noqa: E402


@block_flops(FoldedTokens)
def _folded_tokens(b: FoldedTokens, s: BatchStats, ctx: FlopsContext) -> list[Term]:
    """the wrapped layers on P / f² rows and Σ len² / f⁴ (every slice side a multiple of f: exact)"""
    f2 = b.fold * b.fold
    folded = replace(s, vision_patches=s.vision_patches // f2,
                     vision_patches_sq_frame=s.vision_patches_sq_frame // (f2 * f2))
    return inventory_terms((b.module,), folded, ctx)


@block_flops(WindowAttentionMerger)
def _window_attention_merger(b: WindowAttentionMerger, s: BatchStats, ctx: FlopsContext) -> list[Term]:
    """2·P·4·h·q + 4·q·P·k² (windows of k² patches) + 2·(P/k²)·(k²h·k²i + k²i·h)"""
    rows, u = s.vision_patches, b.unit
    h, q, i = b.width, b.attn_width, b.mlp_width
    merged = rows // u
    return [
        Term("vision.attn_proj", b.count * (matmul(rows, h, 3 * q) + matmul(rows, q, h)), b.part),
        Term("vision.attn_core", b.count * 4 * q * u * rows, b.part, weights=False),
        Term("vision.mlp", b.count * (matmul(merged, u * h, u * i) + matmul(merged, u * i, h)), b.part),
    ]
# --- nemotron_h_omni ---
from ..arch.blocks import ImageVideoPatchEmbed  # noqa: E402


@block_flops(ImageVideoPatchEmbed)
def _image_video_patch_embed(b: ImageVideoPatchEmbed, s: BatchStats, ctx: FlopsContext) -> list[Term]:
    """2·(P − P_video)·in_image·width + 2·P_video·in_video·width (P = vision_patches, P_video = video_patches)"""
    flops = matmul(s.vision_patches - s.video_patches, b.image_volume, b.width)
    if b.video_volume:
        flops = flops + matmul(s.video_patches, b.video_volume, b.width)
    return [Term("vision.patch_embed", b.count * flops, b.part, input_kind=INPUT_PIXELS)]
# --- nemotron_h moe ---
from ..arch.blocks import PlainMoEMLP  # noqa: E402


@block_flops(PlainMoEMLP)
def _plain_moe_mlp(b: PlainMoEMLP, s: BatchStats, ctx: FlopsContext) -> list[Term]:
    """per layer 2·S·(2·in·F·k + 2·h·L + 2·h·F_sh + h·E) (in = L or h; top-k routed, as the kernels run)"""
    per = b.per_token()
    return [Term("lm.routed_experts", b.count * per["routed"] * s.lm_tokens, b.part),
            Term("lm.shared_experts", b.count * per["shared"] * s.lm_tokens, b.part),
            Term("lm.router", b.count * per["router"] * s.lm_tokens, b.part)]
# --- nemotron_h_omni audio (Parakeet) ---
from ..arch.blocks import AudioMlpProjector, ConformerLayers, ParakeetSubsampling  # noqa: E402


@block_flops(ParakeetSubsampling)
def _parakeet_subsampling(b: ParakeetSubsampling, s: BatchStats, ctx: FlopsContext) -> list[Term]:
    """2·N1·F1·9·c + Σ_{k=2,3} 2·N_k·F_k·(9·c + c²) + 2·N3·(c·F3)·d (N_k = audio_conv_frames_s{2^k}, F_k = mel
    bins halved k times; depthwise 3x3 convs: 9 taps per channel)"""
    c = b.channels
    terms = [Term("audio.conv", b.count * matmul(s.audio_conv_frames_s2 * b.freq_bins(1), 9, c), b.part,
                  input_kind=INPUT_PIXELS)]  # reads the mel features: no input gradient
    for rows, k in ((s.audio_conv_frames_s4, 2), (s.audio_conv_frames_s8, 3)):
        terms.append(Term("audio.conv", b.count * (matmul(rows * b.freq_bins(k), 9, c)
                                                   + matmul(rows * b.freq_bins(k), c, c)), b.part))
    terms.append(Term("audio.conv", b.count * matmul(s.audio_conv_frames_s8, c * b.freq_bins(3), b.width), b.part))
    return terms


@block_flops(ConformerLayers)
def _conformer_layers(b: ConformerLayers, s: BatchStats, ctx: FlopsContext) -> list[Term]:
    """per layer 2·A·(2·2·d·f + d·(2q + 2kv) + 3d² + k·d) + 2·(2A − n)·d·q + 4·q·Σ T² + 2·q·(2·Σ T² − A)
    (A = audio_tokens, n = audio_items: each clip's 2T − 1 relative positions go through relative_k_proj)"""
    rows, d, q = s.audio_tokens, b.width, b.num_heads * b.head_dim
    kv = b.num_kv_heads * b.head_dim
    return [
        Term("audio.mlp", b.count * 2 * (matmul(rows, d, b.ffn) + matmul(rows, b.ffn, d)), b.part),
        Term("audio.attn_proj", b.count * (matmul(rows, d, q + 2 * kv) + matmul(rows, q, d)), b.part),
        Term("audio.attn_proj", b.count * matmul(2 * rows - s.audio_items, d, q), b.part,
             input_kind=INPUT_PIXELS),  # relative_k_proj reads the sinusoidal table: no input gradient
        Term("audio.attn_core", b.count * (4 * q * s.audio_tokens_sq + 2 * q * (2 * s.audio_tokens_sq - rows)), b.part,
             weights=False),
        Term("audio.conv", b.count * (matmul(rows, d, 2 * d) + matmul(rows, b.conv_kernel, d) + matmul(rows, d, d)),
             b.part),
    ]


@block_flops(AudioMlpProjector)
def _audio_mlp_projector(b: AudioMlpProjector, s: BatchStats, ctx: FlopsContext) -> list[Term]:
    """2·A·(d·hidden + hidden·out) (A = audio_tokens, padding rows included)"""
    return [Term("audio.proj", b.count * (matmul(s.audio_tokens, b.in_width, b.hidden_width)
                                          + matmul(s.audio_tokens, b.hidden_width, b.out_width)), b.part)]
# --- sam ---
from ..arch.blocks import HybridAligner, SamEmbed, SamNeck, SamVisionLayers, StridedConvs  # noqa: E402


def _tiles(b: Any, s: BatchStats) -> Any:
    """Fixed-size tiles of the batch: vision_patches // tile_patches (vision_frames without tile_patches)."""
    return s.vision_patches // b.tile_patches if b.tile_patches else s.vision_frames


@block_flops(SamEmbed)
def _sam_embed(b: SamEmbed, s: BatchStats, ctx: FlopsContext) -> list[Term]:
    """2·T·side²·in·width (T = tiles; input is pixels)"""
    return [Term("vision.patch_embed", b.count * matmul(_tiles(b, s) * b.side * b.side, b.in_volume, b.width),
                 b.part, input_kind=INPUT_PIXELS)]


@block_flops(SamVisionLayers)
def _sam_vision_layers(b: SamVisionLayers, s: BatchStats, ctx: FlopsContext) -> list[Term]:
    """per layer and tile (n sequences of L = S² tokens, S = window or side): 2·n·L·4h² (qkv, proj on padded
    windows) + 4·h·n·L² (core) + 4·h·n·L·S (relative positions) + 2·side²·2·h·m (MLP on real tokens)"""
    h, side, seq_side = b.width, b.side, b.attention_side
    seq_len = seq_side * seq_side
    tiles = _tiles(b, s) * b.count
    rows = b.sequences * seq_len
    terms = [Term("vision.attn_proj", matmul(tiles * rows, h, 3 * h) + matmul(tiles * rows, h, h), b.part),
             Term("vision.attn_core", 4 * h * b.sequences * seq_len * seq_len * tiles, b.part, weights=False),
             Term("vision.mlp", 2 * matmul(tiles * side * side, h, b.mlp_width), b.part)]
    if b.rel_pos:  # q x tables: weight-like (the tables are parameters)
        terms.insert(2, Term("vision.attn_core", 2 * matmul(tiles * rows, b.head_dim * b.num_heads, seq_side),
                             b.part))
    return terms


@block_flops(SamNeck)
def _sam_neck(b: SamNeck, s: BatchStats, ctx: FlopsContext) -> list[Term]:
    """per tile 2·side²·(width·c + 9·c²) (reported as vision.mlp)"""
    positions = _tiles(b, s) * b.side * b.side * b.count
    return [Term("vision.mlp", matmul(positions, b.width, b.channels) + matmul(positions, 9 * b.channels, b.channels),
                 b.part)]


@block_flops(StridedConvs)
def _strided_convs(b: StridedConvs, s: BatchStats, ctx: FlopsContext) -> list[Term]:
    """per tile and run Σ_i 2·side_i²·9·c_i·c_(i+1) (side_i: output side of conv i) [+ 2·side_n²·c_n·linear]"""
    tiles = _tiles(b, s) * (b.count * b.runs)
    terms = [Term(b.component, matmul(tiles * side * side, 9 * c_in, c_out), b.part,
                  input_kind=b.first_input if i == 0 else INPUT_STAGE)
             for i, (c_in, c_out, side) in enumerate(zip(b.channels[:-1], b.channels[1:], b.sides()))]
    if b.linear:
        terms.append(Term(b.component, matmul(tiles * b.out_tokens, b.channels[-1], b.linear), b.part))
    return terms


@block_flops(HybridAligner)
def _hybrid_aligner(b: HybridAligner, s: BatchStats, ctx: FlopsContext) -> list[Term]:
    """2·M·(low·out/2 + high·out/2 + out²) (M = vision_merged_tokens); the two first Linears read the towers"""
    rows, half = s.vision_merged_tokens, b.out_width // 2
    return [Term("vision.merger", b.count * matmul(rows, b.low_width, half), b.part, input_kind=INPUT_UPSTREAM),
            Term("vision.merger", b.count * matmul(rows, b.high_width, half), b.part, input_kind=INPUT_UPSTREAM),
            Term("vision.merger", b.count * matmul(rows, b.out_width, b.out_width), b.part)]
# --- gemma3n ---
from ..arch.blocks import AltUpLayer, AltUpStreams, LaurelBlock, PerLayerInputGate, SharedKVDecoderAttention  # noqa: E402

block_flops(SharedKVDecoderAttention)(_attention)  # q/o projections (proj_per_token), the usual core


@block_flops(AltUpLayer)
def _altup_layer(b: AltUpLayer, s: BatchStats, ctx: FlopsContext) -> list[Term]:
    """per layer 2·S·(2·h·n + n³ + n²) (routers, coefficients) + 2·S·h·n² (the stream mix: two activations)"""
    return [Term("lm.altup", b.count * b.weight_per_token() * s.lm_tokens, b.part),
            Term("lm.altup", b.count * b.mix_per_token() * s.lm_tokens, b.part, weights=False)]


@block_flops(LaurelBlock)
def _laurel(b: LaurelBlock, s: BatchStats, ctx: FlopsContext) -> list[Term]:
    """per layer 2·S·2·h·r"""
    return [Term("lm.laurel", b.count * 2 * matmul(s.lm_tokens, b.hidden, b.rank), b.part)]


@block_flops(PerLayerInputGate)
def _per_layer_gate(b: PerLayerInputGate, s: BatchStats, ctx: FlopsContext) -> list[Term]:
    """per layer 2·S·2·h·p"""
    return [Term("lm.per_layer_input", b.count * 2 * matmul(s.lm_tokens, b.hidden, b.width), b.part)]


@block_flops(AltUpStreams)
def _altup_streams(b: AltUpStreams, s: BatchStats, ctx: FlopsContext) -> list[Term]:
    """2·S·h·L·p (per-layer input projection) + 2·S·2·(n - 1)·h² (stream projections in and out)"""
    rows, h = s.lm_tokens, b.hidden
    return [Term("lm.per_layer_input", b.count * matmul(rows, h, b.layers * b.per_layer_width), b.part),
            Term("lm.altup", b.count * 2 * (b.streams - 1) * matmul(rows, h, h), b.part)]
from ..arch.blocks import AudioEmbedder, ChunkedConformerLayers, SSCPFrontEnd  # noqa: E402


@block_flops(SSCPFrontEnd)
def _sscp(b: SSCPFrontEnd, s: BatchStats, ctx: FlopsContext) -> list[Term]:
    """2·N1·F1·c0·k0 + 2·N2·F2·c1·c0·k1 + 2·N2·(c1·F2)·d (N1 = audio_conv_frames_s2, N2 = audio_conv_frames_s4)"""
    (c0, c1), (k0, k1) = b.channels, b.kernels
    f1, f2 = b.freq_bins(1), b.freq_bins(2)
    return [Term("audio.conv", b.count * matmul(s.audio_conv_frames_s2 * f1, k0[0] * k0[1], c0), b.part,
                 input_kind=INPUT_PIXELS),  # reads the mel features
            Term("audio.conv", b.count * matmul(s.audio_conv_frames_s4 * f2, c0 * k1[0] * k1[1], c1), b.part),
            Term("audio.conv", b.count * matmul(s.audio_conv_frames_s4, c1 * f2, b.width), b.part)]


@block_flops(ChunkedConformerLayers)
def _conformer(b: ChunkedConformerLayers, s: BatchStats, ctx: FlopsContext) -> list[Term]:
    """per layer 2·R·(4d² + 8d² + 8d² + 2d² + d² + d·K) + 2·calls·(P+F+1)·d² + 2·Q·d·(2C + P+F+1)
    (R = audio_tokens, Q = audio_tokens_sq: block-padded query rows)"""
    rows, d, n = s.audio_tokens, b.width, b.count
    return [Term("audio.attn_proj", n * 4 * matmul(rows, d, d), b.part),
            Term("audio.attn_proj", n * matmul(s.audio_calls * b.positions, d, d), b.part,
                 input_kind=INPUT_PIXELS),  # pos_proj on the sinusoids: constants, no input gradient
            Term("audio.attn_core", n * 2 * d * (2 * b.context + b.positions) * s.audio_tokens_sq, b.part,
                 weights=False),
            Term("audio.mlp", n * (4 * matmul(rows, d, 4 * d) + matmul(rows, d, 2 * d) + matmul(rows, d, d)), b.part),
            Term("audio.conv", n * matmul(rows, b.conv_kernel, d), b.part)]  # depthwise: K taps per channel


@block_flops(AudioEmbedder)
def _audio_embedder(b: AudioEmbedder, s: BatchStats, ctx: FlopsContext) -> list[Term]:
    """2·O·d·h (O = audio_out_tokens)"""
    return [Term("audio.proj", b.count * matmul(s.audio_out_tokens, b.width, b.out_width), b.part)]
# --- phi4_multimodal ---
from ..arch.blocks import SeparatorProjector  # noqa: E402


@block_flops(SeparatorProjector)
def _separator_projector(b: SeparatorProjector, s: BatchStats, ctx: FlopsContext) -> list[Term]:
    """Σ_i 2·M·w_i·w_{i+1} (M = vision_merged_tokens: every placeholder row, separators included); the first
    GEMM's input holds trainable separators: its input gradient is due whenever the projector trains"""
    return [Term("vision.merger", b.count * matmul(s.vision_merged_tokens, n_in, n_out), b.part,
                 input_kind=INPUT_TOWER if i == 0 else INPUT_STAGE)
            for i, (n_in, n_out, _) in enumerate(b.linears())]


from ..arch.blocks import AudioProjection, ConformerFrontEnd, NemoConformerLayers  # noqa: E402


@block_flops(ConformerFrontEnd)
def _conformer_front_end(b: ConformerFrontEnd, s: BatchStats, ctx: FlopsContext) -> list[Term]:
    """The NeMo ``dw_striding`` subsampling: Parakeet's formula (one rule for both)."""
    return _parakeet_subsampling(b, s, ctx)


@block_flops(NemoConformerLayers)
def _nemo_conformer_layers(b: NemoConformerLayers, s: BatchStats, ctx: FlopsContext) -> list[Term]:
    """per layer 2·A·(2·3·d·f + 4·d² + 2·d·e + d·e) + 2·P·d·m·(k + p) + 4·d·Σlen² (A = audio_tokens, P = A + (k−1)·
    audio_sequences: the depthwise conv's padded outputs, trimmed after the pointwise conv)"""
    rows, d, m, n = s.audio_tokens, b.width, b.multiplier, b.count
    padded = rows + (b.kernel - 1) * s.audio_sequences
    return [Term("audio.mlp", n * 2 * (matmul(rows, d, 2 * b.mlp_width) + matmul(rows, b.mlp_width, d)), b.part),
            Term("audio.attn_proj", n * 4 * matmul(rows, d, d), b.part),
            Term("audio.attn_core", 4 * d * (n * s.audio_tokens_sq), b.part, weights=False),
            Term("audio.conv", n * (matmul(rows, d, 2 * b.glu_width) + matmul(rows, d, b.glu_width)), b.part),
            Term("audio.conv", n * matmul(padded, d * m, b.kernel), b.part),  # depthwise: k taps per channel
            Term("audio.conv", n * matmul(padded, d * m, b.sep_width), b.part)]


@block_flops(AudioProjection)
def _audio_projection(b: AudioProjection, s: BatchStats, ctx: FlopsContext) -> list[Term]:
    """Σ_i 2·O·w_i·w_{i+1} (O = audio_out_tokens: every encoder output row)"""
    return [Term("audio.proj", b.count * matmul(s.audio_out_tokens, i, o), b.part) for i, o in b.linears()]
