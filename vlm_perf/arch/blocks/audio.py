"""Audio-encoder blocks: convolutional front ends (Whisper-style, Parakeet, SSCP, NeMo), encoder and conformer
layers, and the audio projections into the LM.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from .base import Block, linear_params, norm_params


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
