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

from ..arch.blocks import DecoderAttention, DenseMLP, LMHead, MLAttention, MoEMLP, MTPModules
from ..arch.spec import LMSpec


def _lm_inventory(lm: LMSpec) -> tuple:
    from ..arch.families.decoder import lm_blocks

    return lm_blocks(lm)


def _attention_blocks(lm: LMSpec) -> list:
    return [b for b in _lm_inventory(lm) if isinstance(b, (DecoderAttention, MLAttention))]


def attn_proj_per_token(lm: LMSpec) -> int:
    """Forward FLOPs per token of one layer's attention projections."""
    return _attention_blocks(lm)[0].proj_per_token()


def attn_core_per_token_sq(lm: LMSpec) -> int:
    """Forward FLOPs of one layer's full attention core per unit of S2: 2*H*(d_qk + d_v)."""
    return _attention_blocks(lm)[0].core_per_token_sq()


def moe_per_token(lm: LMSpec) -> dict[str, int]:
    """Forward FLOPs per token of one MoE layer's routed experts, shared experts and router."""
    moe = [b for b in _lm_inventory(lm) if isinstance(b, MoEMLP)]
    return moe[0].per_token() if moe else {"routed": 0, "shared": 0, "router": 0}


def linear_per_token(lm: LMSpec, blocks: tuple | None = None) -> dict[str, int]:
    """Forward FLOPs per token of the main stack's weight GEMMs and the logits, by component
    (= 2 x the active matmul parameters), summed over the LM inventory's blocks (``blocks``: a model's own
    inventory, e.g. a hybrid LM's; default: the decoder inventory of ``lm``); the conventions start
    from this table."""
    from ..arch.blocks import CrossAttention, GatedDeltaNet, Mamba2Mixer, PlainMLP, PlainMoEMLP, TextOnly

    out = dict.fromkeys(("lm.attn_proj", "lm.dense_mlp", "lm.routed_experts", "lm.shared_experts", "lm.router",
                         "lm.logits"), 0)
    for b in (_lm_inventory(lm) if blocks is None else blocks):
        if isinstance(b, TextOnly):  # Mllama's text-only layers: the wrapped attention / MLP
            b = b.module
        if isinstance(b, CrossAttention):  # q, k, v, o weights, billed per text token as every LM matmul weight
            out["lm.attn_proj"] += b.count * 2 * (2 * b.hidden * b.q_width + 2 * b.hidden * b.kv_width)
        elif isinstance(b, GatedDeltaNet):  # projections + depthwise conv weights
            out["lm.attn_proj"] += b.count * (b.proj_per_token() + b.conv_per_output())
        elif isinstance(b, Mamba2Mixer):  # projections + depthwise conv weights (the scan has none)
            out["lm.attn_proj"] += b.count * (b.proj_per_token() + b.conv_per_output())
        elif isinstance(b, (DecoderAttention, MLAttention)):
            out["lm.attn_proj"] += b.count * b.proj_per_token()
        elif isinstance(b, PlainMLP):
            out["lm.dense_mlp"] += b.count * b.per_token()
        elif isinstance(b, DenseMLP):
            out["lm.dense_mlp"] += b.count * b.per_token()
        elif isinstance(b, (MoEMLP, PlainMoEMLP)):
            per = b.per_token()
            out["lm.routed_experts"] += b.count * per["routed"]
            out["lm.shared_experts"] += b.count * per["shared"]
            out["lm.router"] += b.count * per["router"]
        elif isinstance(b, LMHead):
            out["lm.logits"] += b.per_token()
    return out


def mtp_mlp_per_token(lm: LMSpec, router: bool = True) -> int:
    """Forward FLOPs per token of an MTP module's MLP: the type of the last main decoder layer."""
    mtp = [b for b in _lm_inventory(lm) if isinstance(b, MTPModules)]
    if mtp:
        mlp = mtp[0].mlp
    else:  # no MTP modules: what one would run (the last main layer's MLP type)
        blocks = _lm_inventory(lm)
        last_is_moe = bool(lm.moe_layers) and lm.moe_layers[-1] == lm.num_layers - 1
        mlp = next(b for b in blocks if isinstance(b, MoEMLP if last_is_moe else DenseMLP))
    if isinstance(mlp, MoEMLP):
        per = mlp.per_token()
        return per["routed"] + per["shared"] + (per["router"] if router else 0)
    return mlp.per_token()
