"""Linear-attention and state-space sequence mixers (gated delta net, Mamba-2).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from ..parts import LANGUAGE_MODEL
from .base import Block, linear_params
from .laid import LayoutContext, Placed, block_layout, decoder_layers, opaque_sublayer


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


# --------------------------------------------------------------------------- per-Linear layout (vlm_perf.arch.layout)
@block_layout(GatedDeltaNet, stages=(LANGUAGE_MODEL,))
def _gated_delta_net_layout(b: GatedDeltaNet, ctx: LayoutContext) -> Placed | None:
    """On the config's ``linear_attention`` layers, laid out whole (``linear_attn``; its Linears and conv named
    so that an adapter targeting one is refused)."""
    layers = decoder_layers(b, ctx, linear=True)
    if layers is None:
        return None
    inner = ("in_proj_qkv", "in_proj_z", "in_proj_b", "in_proj_a", "out_proj", "conv1d")
    return Placed(slot="attention", layers=layers, build=opaque_sublayer(b, "linear_attn", inner))
