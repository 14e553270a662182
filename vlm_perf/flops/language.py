"""Per-token LM GEMM tables the named conventions start from (exact FLOPs: :mod:`vlm_perf.flops.blocks`).

S = tokens (sum of causal sub-sequence lengths), S2 = sum of squared lengths. Per token:
  GQA projections   2*(h*(q + 2*G*d) + q*h)
  MLA projections   2*(h*r_q + r_q*H*d_qk  [or h*H*d_qk without q LoRA]
                       + h*(r_kv + d_rope) + r_kv*H*(d_nope + d_v) + H*d_v*h)
  dense MLP         2*3*h*F                    (all supported LMs use SwiGLU)
  routed experts    2*3*h*F_e*k
  shared experts    2*3*h*F_sh*n_shared
  router            2*h*E
  logits            2*h*V                      (real vocabulary, every position)
Attention core per layer: 2*S2*H*(d_qk + d_v), times ``causal_factor`` (0.5 = flash-style
causal half, 1 = full square as an eager/masked kernel computes it).
MTP (DeepSeek-V3, per module): eh_proj 2*(2h)*h + one MoE decoder layer + logits.
The input-embedding lookup is not a matmul and is not counted.
"""

from __future__ import annotations

from ..arch.spec import LMSpec


def attn_proj_per_token(lm: LMSpec) -> int:
    """Forward FLOPs per token of one layer's attention projections."""
    h = lm.hidden_size
    if lm.mla is None:
        q = lm.q_width
        return 2 * (h * (q + 2 * lm.kv_width) + q * h)
    a, heads = lm.mla, lm.num_heads
    q_proj = h * heads * a.qk_head_dim if a.q_lora_rank is None else h * a.q_lora_rank + a.q_lora_rank * heads * a.qk_head_dim
    kv_proj = h * (a.kv_lora_rank + a.qk_rope_head_dim) + a.kv_lora_rank * heads * (a.qk_nope_head_dim + a.v_head_dim)
    return 2 * (q_proj + kv_proj + heads * a.v_head_dim * h)


def attn_core_per_token_sq(lm: LMSpec) -> int:
    """Forward FLOPs of one layer's full attention core per unit of S2: 2*H*(d_qk + d_v)."""
    if lm.mla is None:
        return 2 * lm.num_heads * 2 * lm.head_dim
    return 2 * lm.num_heads * (lm.mla.qk_head_dim + lm.mla.v_head_dim)


def moe_per_token(lm: LMSpec) -> dict[str, int]:
    """Forward FLOPs per token of one MoE layer's routed experts, shared experts and router."""
    moe, h = lm.moe, lm.hidden_size
    if moe is None:
        return {"routed": 0, "shared": 0, "router": 0}
    return {
        "routed": 2 * 3 * h * moe.expert_intermediate_size * moe.top_k,
        "shared": 2 * 3 * h * moe.shared_intermediate_size * moe.num_shared_experts,
        "router": 2 * h * moe.num_experts,
    }


def linear_per_token(lm: LMSpec) -> dict[str, int]:
    """Forward FLOPs per token of the main stack's weight GEMMs and the logits, by component
    (= 2 x the active matmul parameters; the conventions start from this too)."""
    h, moe = lm.hidden_size, moe_per_token(lm)
    return {
        "lm.attn_proj": lm.num_layers * attn_proj_per_token(lm),
        "lm.dense_mlp": lm.num_dense_layers * 2 * 3 * h * lm.intermediate_size,
        "lm.routed_experts": lm.num_moe_layers * moe["routed"],
        "lm.shared_experts": lm.num_moe_layers * moe["shared"],
        "lm.router": lm.num_moe_layers * moe["router"],
        "lm.logits": 2 * h * lm.vocab_size,
    }


def mtp_mlp_per_token(lm: LMSpec, router: bool = True) -> int:
    """Forward FLOPs per token of an MTP module's MLP: the type of the last main decoder layer."""
    if bool(lm.moe_layers) and lm.moe_layers[-1] == lm.num_layers - 1:
        moe = moe_per_token(lm)
        return moe["routed"] + moe["shared"] + (moe["router"] if router else 0)
    return 2 * 3 * lm.hidden_size * lm.intermediate_size
