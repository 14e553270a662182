"""``llamafactory``: LLaMA-Factory's MFU script (``scripts/stat_utils/cal_mfu.py`` @ ff6d4d12eeb0,
``compute_model_flops``). LLaMA-Factory's trainer prints the Hugging Face ``total_flos`` (``hf-trainer``) in its
train metrics but computes no MFU from it; its MFU is this script: it runs ``max_steps`` of pre-training on
``c4_demo`` at ``cutoff_len`` and divides ``train_steps_per_second x compute_model_flops(...)`` by a per-device peak
(H100/H800 989, A100/A800 312, V100 125, RTX 4090 98 TFLOP/s).

``compute_model_flops(model, total_batch_size = per-device batch x world size, seq_length = cutoff_len)`` reads the
top-level config (``hidden_size``, ``intermediate_size``, heads, layers, ``vocab_size``, ``tie_word_embeddings``) and
returns, per step, 3 x [B*s*L*(3*2*h*F + 2*h*h*(2 + 2*G // H)) + B*L*2*2*h*s^2] + 3 x B*s*h*V (x 2 when the
embeddings are untied): a dense MLP of ``intermediate_size`` in every layer (MoE configs too), q = h (head_dim
ignored), the k/v width h*G // H in integer arithmetic, no causal half, the configured length for every row.
Forward FLOPs here are those / 3.
"""

from __future__ import annotations

from typing import Any

from ...arch.spec import ModelSpec
from ...stats.batch import BatchStats
from ..breakdown import Options
from .base import Convention, Pin, register_convention

_COMPOSITE = ("LLaMA-Factory's cal_mfu.py reads hidden_size / intermediate_size / heads from the top level of the "
              "config, which a composite VLM config (transformers 5) does not have: the script fails (TypeError)")


def _forward(spec: ModelSpec, s: BatchStats, _: Options) -> dict[str, Any]:
    lm, h = spec.lm, spec.lm.hidden_size
    tokens = s.lm_padded_tokens  # total_batch_size x seq_length
    seq = s.lm_padded_tokens / s.lm_samples
    L, H, G, V = lm.num_layers, lm.num_heads, lm.num_kv_heads, lm.vocab_size
    F = lm.intermediate_size
    embedding = h * V * (1 if lm.tie_word_embeddings else 2)
    return {"lm.attn_proj": L * (2 * h * h * 2 + 2 * (2 * h * h * G // H)) * tokens,
            "lm.dense_mlp": L * 3 * 2 * h * F * tokens,
            "lm.attn_core": L * 2 * 2 * h * seq * tokens,
            "lm.logits": embedding * tokens,
            "lm.routed_experts": 0, "lm.shared_experts": 0, "lm.router": 0, "lm.mtp": 0}


LLAMAFACTORY = register_convention(Convention(
    name="llamafactory",
    pin=Pin("LLaMA-Factory (MFU script)", "hiyouga/LLaMA-Factory", "scripts/stat_utils/cal_mfu.py",
            "compute_model_flops (calculate_mfu)", "main ff6d4d12eeb0 (2026-08-18)",
            verified="tests/flops/test_framework_record.py: the script's own compute_model_flops (loaded from the "
                     "pinned source with AutoConfig stubbed to hand it the preset's config) on the 21 cases; "
                     "tests/flops/test_hf_trainer_convention.py by hand"),
    formula=("3 x [B*s*L*(6hF + 2h^2(2 + 2*(G//H))) + 4B*L*h*s^2] + 3*B*s*h*V*(2 if untied else 1), B = per-device "
             "batch x world size, s = cutoff_len (configured)"),
    deviations=("a dense MLP of intermediate_size in every layer: MoE experts, router and shared experts not "
                "modelled (Qwen3-MoE billed as a dense 6144-wide MLP)",
                "q and o projections h x h (head_dim ignored); k/v h*G//H", "attention core: no causal half, the "
                "configured length for every row", "input embedding billed as a GEMM when untied",
                "MLA, MTP, vision: not modelled; composite VLM configs make the script fail",
                "not the Trainer's total_flos (that is hf-trainer)", "always x3"),
    forward=_forward,
    families=("llama", "qwen2", "qwen3", "qwen3_moe", "mistral", "deepseek_v3"),
    refuses={f: _COMPOSITE for f in ("qwen2_vl", "qwen2_5_vl", "qwen3_vl", "qwen3_vl_moe", "qwen3_5", "qwen3_5_moe",
                                     "gemma3", "internvl", "llava_onevision", "mistral3", "idefics3", "smolvlm",
                                     "glm4v", "glm4v_moe", "llava", "llava_next", "llava_next_video", "paligemma")},
))
