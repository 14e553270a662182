"""``automodel``: NeMo Automodel's LLM-recipe MFU numerator (``nemo_automodel/components/utils/flops_utils.py``,
release 0.7.0), chosen by ``get_flops_formula_for_hf_config`` from the config class.

Inputs as the LLM recipe passes them: per micro-batch ``input_ids.shape`` = (rows, padded row length), so
S = rows x padded length (padding included) and the attention core uses the padded row length s (a packed row is
priced as one sequence of the pack length). Forward FLOPs here are the formulas / 3:

* ``qwen3_flops`` (Qwen2/Qwen3/Qwen3-MoE and, text backbone only, Qwen3-VL / Qwen3-VL-MoE): per layer
  2S*h*(q + 2G*d) + 2S*s*q (causal half) + 2S*q*h, MLP 2S*3h*F_e*k in EVERY layer (dense: F x 1), no router,
  logits 2S*h*V; d = head_dim.
* ``llama2_flops`` (LlamaConfig): the same with q = h (head_dim ignored) and k = 1.

No formula adds a vision term; the VLM recipe (``recipes/vlm/finetune.py``) logs no MFU at all, so a VLM number
comes only from the LLM recipe on a Qwen3-VL config.
"""

from __future__ import annotations

from typing import Any

from ...arch.spec import ModelSpec
from ...stats.batch import BatchStats
from ..breakdown import Options
from .base import Convention, Pin, register_convention

_NOT_COMPUTED = ("Automodel's get_flops_formula_for_hf_config has no formula for this config class; its "
                 "transformer_flops fallback reports 'not computed' for composite VLM configs (no top-level "
                 "hidden_size / num_hidden_layers)")


def _forward(spec: ModelSpec, s: BatchStats, _: Options) -> dict[str, Any]:
    lm, h = spec.lm, spec.lm.hidden_size
    tokens = s.lm_padded_tokens
    seq = s.lm_padded_tokens / s.lm_samples
    if lm.family == "llama":
        q, kv, width, k = h, h * lm.num_kv_heads // lm.num_heads, lm.intermediate_size, 1
    else:
        q, kv = lm.num_heads * lm.head_dim, lm.num_kv_heads * lm.head_dim
        width = lm.moe.expert_intermediate_size if lm.moe is not None else lm.intermediate_size
        k = lm.moe.top_k if lm.moe is not None else 1
    L = lm.num_layers
    mlp = 2 * L * 3 * h * width * k * tokens
    return {"lm.attn_proj": 2 * L * (h * (q + 2 * kv) + q * h) * tokens,
            "lm.attn_core": 2 * L * q * seq * tokens,
            "lm.dense_mlp": mlp if lm.moe is None else 0,
            "lm.routed_experts": mlp if lm.moe is not None else 0,
            "lm.shared_experts": 0, "lm.router": 0, "lm.mtp": 0,
            "lm.logits": 2 * h * lm.vocab_size * tokens}


AUTOMODEL = register_convention(Convention(
    name="automodel",
    pin=Pin("NeMo Automodel", "NVIDIA-NeMo/Automodel", "nemo_automodel/components/utils/flops_utils.py",
            "get_flops_formula_for_hf_config -> qwen3_flops / llama2_flops (LLM recipe train_ft.py)",
            "release 0.7.0 (PyPI)",
            verified="tests/flops/test_framework_conventions.py: Automodel's own flops_utils functions (installed "
                     "nemo_automodel 0.7.0, module loaded by path) on dense, MoE and Qwen3-VL configs"),
    formula=("6*S*L*[h(q + 2G*d) + s*q + q*h + 3h*F_e*k] + 6*S*h*V with S = rows x padded length and s = padded "
             "row length (Llama: q = h, k = 1); no vision term"),
    deviations=("vision tower and mergers not counted (text backbone only, even for Qwen3-VL)",
                "attention core on the padded row length (a packed row priced as one sequence), causal half",
                "linear terms on padded tokens",
                "Qwen3-MoE: no router GEMM; every layer billed as MoE",
                "Llama: q = h assumed (head_dim ignored)",
                "deepseek_v3 / qwen3_5 formulas (deepseekv3_flops, qwen3_5_flops) not reproduced here "
                "(not defined)",
                "always x3"),
    forward=_forward,
    counts_vision=False,
    families=("qwen2", "qwen3", "qwen3_moe", "qwen3_vl", "qwen3_vl_moe", "llama"),
    refuses={f: _NOT_COMPUTED for f in ("qwen2_vl", "qwen2_5_vl", "gemma3", "internvl", "llava_onevision",
                                         "mistral3", "idefics3", "smolvlm", "glm4v", "glm4v_moe", "llava",
                                         "mllama")},
))
