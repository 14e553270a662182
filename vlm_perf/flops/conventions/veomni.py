"""``veomni``: VeOmni's ``VeomniFlopsCounter`` (``veomni/utils/count_flops.py``, release 0.1.12).

Forward FLOPs here are the function's terms divided by its training factor (6 on weights, 12 on attention
cores = 3 x forward). What it counts, restated from the cited file:

* LM (``_compute_qwen_dense_text_flops`` / ``_compute_qwen3_moe_text_flops`` / ``_estimate_llama_flops``):
  6 * S * [L * (h*(2q + 2kv) + 3hF | h*E + 3h*F_e*k) + V*h] (lm_head only, the embedding is a lookup) and an
  attention core 12 * S2 * d * H * L: **no causal half**. ``head_dim`` from the config, else hidden // heads
  (Llama: always hidden // heads).
* Qwen2/2.5-VL ViT (``_estimate_qwen_vit_flop``): 6P * [L_v * (4h_v^2 + f*h_v*i_v) + (d_out + m^2h_v)*m^2h_v]
  (f = 2 Qwen2-VL, 3 Qwen2.5-VL gated; merger on P rows; **no patch embed**), attention 12 * h_v * L_full * P2
  and, for Qwen2.5-VL's window layers, 12 * h_v * P * w^2 per layer with w = (window_size // m // P_s) * m
  (an upper bound: edge windows are smaller).
* Qwen3-VL ViT (``_estimate_qwen3_vit_flop``): the patch-embed conv, a plain MLP, 1 + len(deepstack) mergers
  on P rows, 12 * h_v * L_v * P2.
* DeepSeek-V3 (``_estimate_deepseek_v3_flops``): MLA projections (the kv up-projection as one GEMM), router
  h*E, routed + shared experts of moe_intermediate_size, first_k_dense_replace dense MLPs, lm_head once, no MTP,
  and an attention core 12 * S2 * L * H * d_qk (d_qk = nope + rope, used for BOTH score and value products).
* Qwen3.5 / Qwen3.5-MoE (``_estimate_qwen3_5_family_flops``): every projection (the gated q_proj on full layers,
  in_proj_qkv / z / b / a and out_proj), the depthwise conv as k * channels parameters, router, top-k routed and
  shared experts, the shared-expert gate, lm_head once; core 12 * S2 * d * H on full-attention layers only (no
  causal half) plus the recurrent delta rule 15 * dk * dv * Hv per token per gated-delta layer; the ViT through
  the Qwen3-VL formula (no deepstack in its config).
* Per-frame ViT lengths from image **and video** grids (VeOmni's trainer builds them from both).
* ``freeze_vit``: the whole ViT (tower, patch embed and mergers) forward-only (x1 here; its 2 / 4 factors).
* LoRA (``lora_config``): :func:`veomni_lora_training`, fed by a ``Trainability`` with an adapter.
"""

from __future__ import annotations

from typing import Any

from ...arch.parts import frozen_stages
from ...arch.spec import ModelSpec
from ...stats.batch import BatchStats
from ..breakdown import VISION_COMPONENTS, Options
from ..language import linear_per_token
from .base import Convention, Pin, register_convention

VEOMNI_FAMILIES = ("qwen2_vl", "qwen2_5_vl", "qwen3_vl", "qwen3_vl_moe", "qwen2", "qwen3", "qwen3_moe", "llama",
                   "deepseek_v3", "qwen3_5", "qwen3_5_moe")
VEOMNI_HYBRID = ("qwen3_5", "qwen3_5_moe")  # estimate_func -> _estimate_qwen3_5_family_flops


def _deepseek_v3(spec: ModelSpec, s: BatchStats) -> dict[str, Any]:
    """``_estimate_deepseek_v3_flops`` (forward = its 6 / 12 terms over 3)."""
    lm, h = spec.lm, spec.lm.hidden_size
    mla, moe = lm.mla, lm.moe
    assert mla is not None and moe is not None
    H, dqk = lm.num_heads, mla.qk_nope_head_dim + mla.qk_rope_head_dim
    attn = h * H * dqk if mla.q_lora_rank is None else h * mla.q_lora_rank + H * dqk * mla.q_lora_rank
    attn += h * (mla.kv_lora_rank + mla.qk_rope_head_dim)
    attn += H * (mla.qk_nope_head_dim + mla.v_head_dim) * mla.kv_lora_rank + H * mla.v_head_dim * h
    n_moe = len(lm.moe_layers)  # VeOmni: num_hidden_layers - first_k_dense_replace (the same for moe_layer_freq 1)
    n_dense = lm.num_layers - n_moe
    t = s.lm_tokens
    return {"lm.attn_proj": 2 * lm.num_layers * attn * t,
            "lm.dense_mlp": 2 * n_dense * 3 * h * lm.intermediate_size * t,
            "lm.routed_experts": 2 * n_moe * 3 * h * moe.expert_intermediate_size * moe.top_k * t,
            "lm.shared_experts": 2 * n_moe * 3 * h * moe.expert_intermediate_size * moe.num_shared_experts * t,
            "lm.router": 2 * n_moe * h * moe.num_experts * t,
            "lm.logits": 2 * h * lm.vocab_size * t,  # lm_head only
            "lm.attn_core": 4 * s.lm_tokens_sq * lm.num_layers * dqk * H,  # d_qk for both products, no causal half
            "lm.mtp": 0}


def _hybrid(spec: ModelSpec, s: BatchStats) -> dict[str, Any]:
    """``_estimate_qwen3_5_family_flops`` LM part (forward): 2 x the projection, conv, router, expert and
    shared-gate parameters per token, lm_head once; core 4*S2*d*H per full layer + 5*dk*dv*Hv per token per
    gated-delta layer (its 12 and 15 over 3)."""
    from ...arch.blocks import DecoderAttention, GatedDeltaNet
    from ...arch.parts import LANGUAGE_MODEL

    blocks = tuple(b for b in spec.blocks if b.part == LANGUAGE_MODEL)
    out = {k: v * s.lm_tokens for k, v in linear_per_token(spec.lm, blocks).items()}
    out["lm.logits"] = 2 * spec.lm.hidden_size * spec.lm.vocab_size * s.lm_tokens
    core: Any = 0
    for b in blocks:
        if isinstance(b, GatedDeltaNet):
            core = core + b.count * 5 * b.key_head_dim * b.value_head_dim * b.value_heads * s.lm_tokens
        elif isinstance(b, DecoderAttention):
            core = core + b.count * 4 * s.lm_tokens_sq * b.head_dim * b.num_heads
    out["lm.attn_core"] = core
    out["lm.mtp"] = 0
    return out


def _lm(spec: ModelSpec, s: BatchStats) -> dict[str, Any]:
    if spec.lm.mla is not None:
        return _deepseek_v3(spec, s)
    if (spec.family or spec.model_type) in VEOMNI_HYBRID:
        return _hybrid(spec, s)
    lm, h = spec.lm, spec.lm.hidden_size
    d = h // lm.num_heads if spec.lm.family == "llama" else lm.head_dim
    out = {k: v * s.lm_tokens for k, v in linear_per_token(lm).items()}
    out["lm.attn_proj"] = lm.num_layers * 2 * h * (2 * lm.num_heads * d + 2 * lm.num_kv_heads * d) * s.lm_tokens
    out["lm.logits"] = 2 * h * lm.vocab_size * s.lm_tokens
    out["lm.attn_core"] = 4 * s.lm_tokens_sq * d * lm.num_heads * lm.num_layers
    out["lm.mtp"] = 0
    return out


def _vit(spec: ModelSpec, s: BatchStats) -> dict[str, Any]:
    v = spec.vision
    assert v is not None
    family = spec.family or spec.model_type
    hv, mv, P = v.hidden_size, v.merge_unit * v.hidden_size, s.vision_patches
    merger = 2 * (v.out_hidden_size + mv) * mv * P
    if family in ("qwen2_vl", "qwen2_5_vl"):
        full = v.depth if family == "qwen2_vl" else len(v.fullatt_block_indexes)
        core = 4 * hv * full * s.vision_patches_sq_frame
        if family == "qwen2_5_vl" and v.depth > full and v.window_size:
            w = (v.window_size // v.spatial_merge_size // v.patch_size) * v.spatial_merge_size
            core = core + 4 * hv * (v.depth - full) * P * w * w
        return {"vision.patch_embed": 0,
                "vision.attn_proj": 2 * v.depth * 4 * hv * hv * P,
                "vision.mlp": 2 * v.depth * (3 if family == "qwen2_5_vl" else 2) * hv * v.intermediate_size * P,
                "vision.attn_core": core, "vision.merger": merger, "vision.deepstack_merger": 0}
    return {"vision.patch_embed": 2 * hv * v.patch_volume * P,
            "vision.attn_proj": 2 * v.depth * 4 * hv * hv * P,
            "vision.mlp": 2 * v.depth * 2 * hv * v.intermediate_size * P,
            "vision.attn_core": 4 * hv * v.depth * s.vision_patches_sq_frame,
            "vision.merger": merger,
            "vision.deepstack_merger": len(v.deepstack_visual_indexes) * merger}


def _forward(spec: ModelSpec, s: BatchStats, _: Options) -> dict[str, Any]:
    out = _lm(spec, s)
    if spec.vision is not None:
        out.update(_vit(spec, s))
    return out


def _freeze_vit_rule(spec: ModelSpec, options: Options) -> dict[str, Any]:
    """A frozen vision tower is VeOmni's ``freeze_vit``: the whole ViT (mergers included) forward-only."""
    if "vision_tower" in frozen_stages(options.frozen):
        return {c: 1 for c in VISION_COMPONENTS}
    return {}


# ------------------------------------------------------------------------------------------------ LoRA branches
# VeomniFlopsCounter.estimate_flops(lora_config=...) (count_flops.py @ 0.1.12) reads only r, target_modules,
# target_parameters, bias and moe_mode of the VeOmniLoraConfig, and its validation returns 0 FLOPs (logged) for:
# a model type outside LORA_MODULES_BY_MODEL_TYPE (veomni/lora/config.py), a regex-string target_modules, a module
# name outside that model type's list, duplicates. Then (_compute_linear_flops):
#   LM:  (4 * N_base + 6 * N_lora) * S, N_lora = r * sum(in + out) over the targeted shapes of module_shapes (dense:
#        q/k/v/o/gate/up/down x L; Qwen3-MoE: q/k/v/o only); the attention core stays 12 * S2 * d * H * L.
#   ViT (Qwen3, _estimate_qwen3_vit_flop): no vision target and bias != "all": 2 * N * P, core factor 4;
#        bias "all" without a vision target: 2 * N_patch + 4 * (N - N_patch), core 12; a vision target:
#        2 * N_patch + 4 * (N - N_patch) + 6 * N_lora (linear_fc1 / linear_fc2 match the block MLP AND the mergers),
#        core 12.
#   ViT (Qwen2/2.5, _estimate_qwen_vit_flop): the same without a patch-embed term (none counted there): 2N / 4N /
#        4N + 6 N_lora; mlp.0 / mlp.2 are the merger; Qwen2.5-VL's gate_proj / up_proj / down_proj name BOTH the
#        LM MLP and the ViT MLP.

_LM_TARGETS = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")
_VIT_TARGETS = {"qwen2_vl": ("qkv", "proj", "fc1", "fc2", "mlp.0", "mlp.2"),
                "qwen2_5_vl": ("qkv", "proj", "gate_proj", "up_proj", "down_proj", "mlp.0", "mlp.2"),
                "qwen3_vl": ("qkv", "proj", "linear_fc1", "linear_fc2"),
                "qwen3_vl_moe": ("qkv", "proj", "linear_fc1", "linear_fc2")}
_HYBRID_TARGETS = ("q_proj", "k_proj", "v_proj", "o_proj", "in_proj_qkv", "in_proj_z", "in_proj_b", "in_proj_a",
                   "out_proj", "gate_proj", "up_proj", "down_proj")  # QWEN3_5_LORA_MODULES
# LORA_MODULES_BY_MODEL_TYPE of veomni/lora/config.py @ 0.1.12, for the families this convention covers
VEOMNI_LORA_MODULES = {"qwen2": _LM_TARGETS, "qwen3": _LM_TARGETS, "qwen3_moe": _LM_TARGETS,
                       **{f: tuple(dict.fromkeys(_LM_TARGETS + v)) for f, v in _VIT_TARGETS.items()},
                       **{f: tuple(dict.fromkeys(_HYBRID_TARGETS + _VIT_TARGETS["qwen3_vl"])) for f in VEOMNI_HYBRID}}
# model types whose routed experts VeOmni adapts through target_parameters (others: 0 FLOPs)
_VEOMNI_MOE_TYPES = ("qwen3_moe", "qwen3_vl_moe", "qwen3_5_moe")


def _hybrid_lm_shapes(spec: ModelSpec) -> dict[str, list[tuple[int, int, int, str]]]:
    """``module_shapes`` of ``_estimate_qwen3_5_family_flops``: the gated q_proj (h -> 2q) and k/v/o on the
    full-attention layers, the five gated-delta projections on the others, gate/up/down of the shared expert
    (MoE) or the dense MLP on every layer."""
    from ...arch.blocks import DecoderAttention, GatedDeltaNet, MoEMLP
    from ...arch.parts import LANGUAGE_MODEL

    blocks = [b for b in spec.blocks if b.part == LANGUAGE_MODEL]
    att = next(b for b in blocks if isinstance(b, DecoderAttention))
    gdn = next(b for b in blocks if isinstance(b, GatedDeltaNet))
    moe = next((b for b in blocks if isinstance(b, MoEMLP)), None)
    h, L, nf, nl = spec.lm.hidden_size, spec.lm.num_layers, att.count, gdn.count
    q, kv, ks, vs, hv = att.q_width, att.kv_width, gdn.key_width, gdn.value_width, gdn.value_heads
    f, mlp = (moe.shared_width, "lm.shared_experts") if moe is not None else (spec.lm.intermediate_size, "lm.dense_mlp")
    a = "lm.attn_proj"
    return {"q_proj": [(h, 2 * q, nf, a)], "k_proj": [(h, kv, nf, a)], "v_proj": [(h, kv, nf, a)],
            "o_proj": [(q, h, nf, a)], "in_proj_qkv": [(h, 2 * ks + vs, nl, a)], "in_proj_z": [(h, vs, nl, a)],
            "in_proj_b": [(h, hv, nl, a)], "in_proj_a": [(h, hv, nl, a)], "out_proj": [(vs, h, nl, a)],
            "gate_proj": [(h, f, L, mlp)], "up_proj": [(h, f, L, mlp)], "down_proj": [(f, h, L, mlp)]}


def _lm_shapes(spec: ModelSpec) -> dict[str, list[tuple[int, int, int, str]]]:
    if (spec.family or spec.model_type) in VEOMNI_HYBRID:
        return _hybrid_lm_shapes(spec)
    lm, h = spec.lm, spec.lm.hidden_size
    q, kv, L = lm.num_heads * lm.head_dim, lm.num_kv_heads * lm.head_dim, lm.num_layers
    out = {"q_proj": [(h, q, L, "lm.attn_proj")], "k_proj": [(h, kv, L, "lm.attn_proj")],
           "v_proj": [(h, kv, L, "lm.attn_proj")], "o_proj": [(q, h, L, "lm.attn_proj")]}
    if lm.moe is None:  # the MoE text function lists only the attention projections
        F = lm.intermediate_size
        out.update({"gate_proj": [(h, F, L, "lm.dense_mlp")], "up_proj": [(h, F, L, "lm.dense_mlp")],
                    "down_proj": [(F, h, L, "lm.dense_mlp")]})
    return out


def _vit_shapes(spec: ModelSpec, family: str) -> dict[str, list[tuple[int, int, int, str]]]:
    v = spec.vision
    assert v is not None
    hv, i, D, mv = v.hidden_size, v.intermediate_size, v.depth, v.merge_unit * v.hidden_size
    out = {"qkv": [(hv, 3 * hv, D, "vision.attn_proj")], "proj": [(hv, hv, D, "vision.attn_proj")]}
    if family in ("qwen3_vl", "qwen3_vl_moe") + VEOMNI_HYBRID:  # the Qwen3 ViT formula (Qwen3.5: no deepstack)
        n_ds = len(v.deepstack_visual_indexes)
        out["linear_fc1"] = [(hv, i, D, "vision.mlp"), (mv, mv, 1, "vision.merger"),
                             (mv, mv, n_ds, "vision.deepstack_merger")]
        out["linear_fc2"] = [(i, hv, D, "vision.mlp"), (mv, v.out_hidden_size, 1, "vision.merger"),
                             (mv, v.out_hidden_size, n_ds, "vision.deepstack_merger")]
        return out
    out.update({"mlp.0": [(mv, mv, 1, "vision.merger")], "mlp.2": [(mv, v.out_hidden_size, 1, "vision.merger")]})
    if family == "qwen2_vl":
        out.update({"fc1": [(hv, i, D, "vision.mlp")], "fc2": [(i, hv, D, "vision.mlp")]})
    else:
        out.update({"gate_proj": [(hv, i, D, "vision.mlp")], "up_proj": [(hv, i, D, "vision.mlp")],
                    "down_proj": [(i, hv, D, "vision.mlp")]})
    return out


def _adapters(shapes: dict[str, list[tuple[int, int, int, str]]], targets: tuple[str, ...], r: int,
              rows: Any) -> dict[str, Any]:
    """6 * r * (in + out) * count * rows per targeted shape, by component."""
    out: dict[str, Any] = {}
    for name in targets:
        for n_in, n_out, count, component in shapes.get(name, ()):
            out[component] = out.get(component, 0) + 6 * r * (n_in + n_out) * count * rows
    return out


def veomni_lora_training(spec: ModelSpec, s: BatchStats, trainability: Any) -> tuple[dict[str, Any], tuple[str, ...]]:
    """VeOmni's training FLOPs under a LoRA regime (``Trainability`` with an adapter), by component."""
    from ...errors import ConventionNotDefined

    family = spec.family or spec.model_type
    adapter = trainability.adapter
    if adapter is None:
        raise ConventionNotDefined(f"convention 'veomni' counts full fine-tuning, freeze_vit and LoRA only; "
                                   f"{trainability.describe()} is none of them")
    if trainability.trainable or trainability.modules or trainability.biases:
        raise ConventionNotDefined("convention 'veomni' under LoRA bills the base as frozen: a regime that also "
                                   f"trains base weights ({trainability.describe()}) has no VeOmni number")
    why = ""
    tm = adapter.target_modules
    if family not in VEOMNI_LORA_MODULES:
        why = f"LoRA FLOPs estimation supports Qwen model types only, got {family!r}"
    elif not tm:
        why = "a VeOmniLoraConfig needs target_modules (it refuses to build without them)"
    elif isinstance(tm, str):
        why = "LoRA FLOPs estimation does not support regex-string target_modules (or 'all-linear')"
    else:
        unsupported = sorted(set(tm) - set(VEOMNI_LORA_MODULES[family]))
        if unsupported:
            why = f"unsupported {family} LoRA modules {unsupported}"
        elif adapter.target_parameters and family not in _VEOMNI_MOE_TYPES:
            why = f"target_parameters is not supported for non-MoE model type {family!r}"
        elif any(not p.endswith(("gate_up_proj", "down_proj")) for p in adapter.target_parameters):
            why = "only fused routed-expert target_parameters ending in gate_up_proj / down_proj are supported"
    if why:  # estimate_flops logs the reason and returns 0 FLOPs (MFU 0)
        raise ConventionNotDefined(f"convention 'veomni' prints 0 FLOPs for this LoRA regime: {why}")
    if adapter.target_parameters:
        raise ConventionNotDefined("convention 'veomni': VeOmni 0.1.12 counts routed-expert LoRA (target_parameters, "
                                   "_compute_routed_moe_lora_flops), which vlm-perf does not reproduce yet; use 'exact'")
    targets = tuple(tm or ())  # type: ignore[arg-type]
    forward = _forward(spec, s, Options())
    notes = []
    ignored = [k for k in ("exclude_modules", "layers_to_transform", "modules_to_save", "use_dora")
               if getattr(adapter, k)] + (["rank_pattern"] if adapter.rank_pattern else [])
    if ignored:
        notes.append(f"VeOmni's LoRA count reads r, target_modules and bias only: {', '.join(ignored)} ignored")
    out: dict[str, Any] = {}
    for c, v in forward.items():  # LM: base x4 (= forward x2), attention core x12 (= forward x3)
        if c.startswith("lm."):
            out[c] = v * (3 if c == "lm.attn_core" else 2)
    for c, v in _adapters(_lm_shapes(spec), targets, adapter.r, s.lm_tokens).items():
        out[c] = out[c] + v
    if spec.vision is not None:
        shapes = _vit_shapes(spec, family)
        vit_targets = tuple(t for t in targets if t in shapes)
        grad = bool(vit_targets) or adapter.bias == "all"
        for c, v in forward.items():
            if c.startswith("vision."):  # forward-only x1; with activation gradients x2 (patch embed x1); core x3
                out[c] = v * (1 if not grad or c == "vision.patch_embed" else 3 if c == "vision.attn_core" else 2)
        for c, v in _adapters(shapes, vit_targets, adapter.r, s.vision_patches).items():
            out[c] = out[c] + v
        notes.append("VeOmni bills the ViT from image and video grids; mergers on P patch rows")
    return out, tuple(notes)


VEOMNI = register_convention(Convention(
    name="veomni",
    pin=Pin("VeOmni", "ByteDance-Seed/VeOmni", "veomni/utils/count_flops.py",
            "VeomniFlopsCounter.estimate_flops (+ lora_config branches)", "release 0.1.12 (PyPI)",
            verified="tests/flops/test_framework_conventions.py: VeOmni's own VeomniFlopsCounter (installed "
                     "veomni 0.1.12, loaded with stubbed imports) on dense, MoE and VLM cases, DeepSeek-V3, "
                     "Qwen3.5 dense and MoE, freeze_vit too"),
    formula=("6*S*[L*(h(2q+2kv) + 3hF | hE + 3hF_e*k) + Vh] + 12*S2*d*H*L (DeepSeek-V3: MLA + experts, "
             "12*S2*L*H*d_qk; Qwen3.5: + 15*dk*dv*Hv*S per gated-delta layer); ViT 6P*[L_v(4h_v^2 + f*h_v*i_v) "
             "+ (1+n_ds)(d_out + m^2h_v)m^2h_v (+ h_v*C*T_p*P_s^2 for Qwen3-VL)] + 12h_v*(L_full*P2 "
             "+ L_window*P*w^2), image and video grids; freeze_vit: ViT forward only"),
    deviations=("LM attention core: no causal half (2x exact's causal core)",
                "mergers applied to P patches instead of M = P/m^2 merged tokens (4x)",
                "Qwen2/2.5-VL: patch embed not counted; Qwen2.5-VL windows as full w x w squares (upper bound)",
                "Qwen3-VL ViT MLP plain (correct); router counted; lm_head counted once (embedding not)",
                "frozen tower (freeze_vit): the mergers are billed forward-only too",
                "LoRA (a Trainability with an adapter, Convention.compute_regime): base x4, adapters 6*r*(in+out) "
                "per token, ViT x2 / x4 / x4 + adapters by whether it needs gradients; 0 FLOPs (refused) for a "
                "regex or unsupported target list",
                "deepseek_v3: attention core 12*S2*L*H*d_qk (d_qk = nope + rope for the value product too), kv "
                "up-projection as one GEMM, lm_head once, no MTP; LoRA: 0 FLOPs (refused), as VeOmni",
                "qwen3_5 / qwen3_5_moe: recurrent delta rule 15*dk*dv*Hv per token per gated-delta layer, full "
                "layers' core without causal half, shared-expert gate counted; LoRA: the gated q_proj (h -> 2q), "
                "the gated-delta projections, gate/up/down of the shared expert",
                "LoRA on routed experts (target_parameters) not reproduced (refused)",
                "qwen3_next / gpt_oss / seed_oss / deepseek_v4 formulas not reproduced here (not defined)"),
    forward=_forward,
    families=VEOMNI_FAMILIES,
    frozen_rule=_freeze_vit_rule,
    regime_training=veomni_lora_training,
))
