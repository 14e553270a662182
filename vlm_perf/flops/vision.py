"""Exact forward FLOPs of a Qwen-style vision tower and its mergers, from vision statistics.

Counts every matmul (convolution included), nothing else: norms, activations, RoPE and the
bilinear position-table interpolation are elementwise and left out, as a FLOP counter does.

Per patch and layer (h_v width, q_v attention width, i_v MLP width):
  qkv + proj     2*(3*h_v*q_v + q_v*h_v)
  MLP            2*f*h_v*i_v       (f = 3 gated SwiGLU, 2 plain fc1/fc2)
Attention core, per attention sequence of p patches: 2*p^2*q_v (Q K^T) + 2*p^2*q_v (A V),
summed per frame in full-attention layers (P2 = sum t*(h*w)^2) and per window in Qwen2.5-VL's
windowed layers (sum of window^2). Bidirectional: never halved.
Patch embed: Conv3d with kernel = stride = patch, i.e. a GEMM 2*P*(C*T_p*P_s^2)*h_v.
Merger: (m^2*h_v -> m^2*h_v -> d_out) on M merged tokens; each deepstack merger the same.
"""

from __future__ import annotations

from ..arch.spec import VisionSpec
from ..stats.batch import BatchStats
from .terms import INPUT_PIXELS, INPUT_TOWER, MERGER, VISION_TOWER, Term, matmul


def vision_terms(v: VisionSpec, s: BatchStats) -> list[Term]:
    patches = s.vision_patches
    width, attn_width = v.hidden_size, v.attn_width
    mlp_matrices = 3 if v.mlp_gated else 2
    attn_core = 4 * attn_width * (v.num_full_layers * s.vision_patches_sq_frame
                                  + v.num_window_layers * s.vision_window_sq)
    merger_fc1 = matmul(s.vision_merged_tokens, v.merger_width, v.merger_width)
    merger_fc2 = matmul(s.vision_merged_tokens, v.merger_width, v.out_hidden_size)
    terms = [
        Term("vision.patch_embed", matmul(patches, v.patch_volume, width), VISION_TOWER, input_kind=INPUT_PIXELS),
        Term("vision.attn_proj", v.depth * (matmul(patches, width, 3 * attn_width) + matmul(patches, attn_width, width)),
             VISION_TOWER),
        Term("vision.attn_core", attn_core, VISION_TOWER, weights=False),
        Term("vision.mlp", v.depth * mlp_matrices * matmul(patches, width, v.intermediate_size), VISION_TOWER),
        Term("vision.merger", merger_fc1, MERGER, input_kind=INPUT_TOWER),
        Term("vision.merger", merger_fc2, MERGER),
    ]
    if v.num_deepstack:
        terms += [
            Term("vision.deepstack_merger", v.num_deepstack * merger_fc1, MERGER, input_kind=INPUT_TOWER),
            Term("vision.deepstack_merger", v.num_deepstack * merger_fc2, MERGER),
        ]
    return terms
