"""Exact forward FLOPs of the recurrent block kinds (:mod:`vlm_perf.arch.blocks.recurrent`): linear-attention and
state-space sequence mixers (gated delta net, Mamba-2).
"""

from __future__ import annotations

from ...arch.blocks import GatedDeltaNet, Mamba2Mixer
from ...stats.batch import BatchStats
from ..terms import Term
from .base import FlopsContext, block_flops


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
