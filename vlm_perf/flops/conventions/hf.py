"""``hf-trainer``: the Hugging Face Trainer's ``total_flos`` (what ms-swift's ``perf_log`` turns into MFU).

transformers v5.24 ``Trainer.floating_point_ops`` -> ``ModuleUtilsMixin.floating_point_ops``
(``src/transformers/modeling_utils.py``): per micro-batch ``6 * input_ids.numel() * num_parameters(
exclude_embeddings=True)``. ``num_parameters`` walks ``named_parameters()`` (shared tensors once) and, with
``exclude_embeddings``, drops the ``.weight`` of every ``nn.Embedding`` module. So every stored parameter is
billed once per input token, padding and placeholder tokens included: the whole vision tower (conv patch embed
included), every expert, norms and biases, an untied ``lm_head``. A tied head vanishes with the embedding, and
a position table implemented as ``nn.Embedding`` (Qwen3-VL, SigLIP, CLIP, GLM-4V, Idefics3) is dropped, while
InternViT's ``nn.Parameter`` table stays. No attention term. Multi-token-prediction modules are not built by
the transformers classes (not counted).

The split by component is vlm-perf's attribution of the one parameter sum (norms are billed with the
attention projections of their layer); the total is the framework's number.
"""

from __future__ import annotations

from typing import Any

from ...arch.blocks import (ClsToken, DenseMLP, ForwardOnly, LMHead, MoEMLP, MTPModules, PatchEmbed, PlainMLP,
                            PositionTable, StoredOnly, TokenEmbedding, VisionLayers, linear_params)
from ...arch.parts import AUDIO, DEEPSTACK_MERGER, LANGUAGE_MODEL, MERGER, VISION_TOWER
from ...arch.spec import ModelSpec
from ...stats.batch import BatchStats
from ..breakdown import Options
from .base import Convention, Pin, register_convention

# families whose tower keeps its absolute position table as an nn.Parameter (not an nn.Embedding)
POSITION_PARAMETER_FAMILIES = ("internvl", "kimi_vl", "kimi_k25", "nemotron_h_omni")  # kimi_vl:
# Learnable2DInterpPosEmb.weight; kimi_k25: Kimi_K25VisionPositionEmbeddings.position_embeddings;
# nemotron_h_omni: RadioPatchEmbeddings.position_embedding
# families whose projector is an nn.Embedding subclass whose weight is excluded too (ovis2:
# Ovis2VisualEmbeddingTable, the visual vocabulary's table, used as a matmul on probabilities)
EMBEDDING_PROJECTOR_FAMILIES = ("ovis2",)
# LMs whose router "bias" is DeepSeek's e_score_correction_bias: an nn.Buffer in transformers (checkpoints store it,
# so params.py counts it), hence not in num_parameters(); gpt-oss's router bias is a real nn.Linear bias
CORRECTION_BUFFER_LMS = ("deepseek_v3", "glm4v_moe_text")

_PART_COMPONENT = {VISION_TOWER: "vision.attn_proj", MERGER: "vision.merger",
                   DEEPSTACK_MERGER: "vision.deepstack_merger", LANGUAGE_MODEL: "lm.attn_proj",
                   AUDIO: "audio.attn_proj"}  # an audio encoder's parameters: billed per LM token like the rest


def _vision_mlp_params(b: VisionLayers) -> int:
    return (b.mlp_matrices - 1) * linear_params(b.width, b.mlp_width, b.mlp_bias) \
        + linear_params(b.mlp_width, b.width, b.mlp_bias)


def hf_parameters_by_component(spec: ModelSpec) -> dict[str, int]:
    """``num_parameters(exclude_embeddings=True)`` of the transformers model, attributed to components."""
    family = spec.family or spec.model_type
    buffer_bias = getattr(spec.lm, "family", None) in CORRECTION_BUFFER_LMS
    out: dict[str, int] = {}

    def add(component: str, n: int) -> None:
        out[component] = out.get(component, 0) + n

    for b in spec.blocks:
        inner = b.module if isinstance(b, (ForwardOnly, StoredOnly)) else b
        copies = b.count * (inner.count if isinstance(b, ForwardOnly) else 1)
        if isinstance(b, (TokenEmbedding, MTPModules)):
            continue  # nn.Embedding weight (excluded); MTP modules: not built by transformers
        if isinstance(b, PositionTable) and family not in POSITION_PARAMETER_FAMILIES:
            continue  # nn.Embedding position table (excluded)
        if b.part == MERGER and family in EMBEDDING_PROJECTOR_FAMILIES:
            continue  # the projector is an nn.Embedding (excluded)
        if isinstance(inner, VisionLayers):
            mlp = _vision_mlp_params(inner)
            add("vision.mlp", copies * mlp)
            add("vision.attn_proj", copies * (inner.params() - mlp))
        elif isinstance(inner, PatchEmbed):
            add("vision.patch_embed", copies * inner.params())
        elif isinstance(inner, ClsToken):
            add("vision.attn_proj", copies * inner.params())
        elif isinstance(inner, MoEMLP):
            h = inner.hidden
            routed = inner.num_experts * 3 * h * inner.expert_width
            bias = inner.num_experts if inner.router_bias else 0
            router = inner.num_experts * h + (0 if buffer_bias else bias)
            add("lm.routed_experts", copies * routed)
            add("lm.router", copies * router)
            add("lm.shared_experts", copies * (inner.params() - routed - inner.num_experts * h - bias))
        elif isinstance(inner, (DenseMLP, PlainMLP)):
            add("lm.dense_mlp", copies * inner.params())
        elif isinstance(inner, LMHead):
            add("lm.logits", copies * inner.params())  # 0 when tied
        else:
            add(_PART_COMPONENT.get(b.part, "lm.attn_proj"), copies * inner.params())
    return out


def _hf_trainer(spec: ModelSpec, s: BatchStats, _: Options) -> dict[str, Any]:
    tokens = s.lm_padded_tokens  # inputs["input_ids"].numel(): rows x padded length
    return {k: 2 * n * tokens for k, n in hf_parameters_by_component(spec).items()}


HF_TRAINER = register_convention(Convention(
    name="hf-trainer",
    pin=Pin("Hugging Face Trainer (and ms-swift perf_log / LLaMA-Factory total_flos)", "huggingface/transformers",
            "src/transformers/trainer.py + src/transformers/modeling_utils.py",
            "Trainer.floating_point_ops -> ModuleUtilsMixin.floating_point_ops / num_parameters"
            "(exclude_embeddings=True)", "release v5.24.0",
            verified="tests/flops/test_framework_record.py: the framework's own function at the pinned commit on 21 cases; "
                     "tests/flops/test_hf_trainer_convention.py: model.floating_point_ops() and "
                     "num_parameters(exclude_embeddings=True) of tiny real transformers models"),
    formula=("6 * input_ids.numel() * N, N = every parameter of the model except nn.Embedding weights "
             "(vision tower, all experts, norms, biases, untied lm_head); no attention term"),
    deviations=("vision-tower and all-expert parameters billed per LM input token (padding and placeholders "
                "included), not per patch / per routed token",
                "no attention core (LM or ViT)", "no merger rows: projector parameters billed per LM token",
                "total_flos is cumulative over all processes and restored on resume; the console prints "
                "int(total_flos) >> 30 as 'GF'",
                "always x3 (6N per token), frozen parts included"),
    forward=_hf_trainer,
    families=None,
    counts_audio=True,  # every parameter, the audio encoder's included, billed per LM input token
))


# ------------------------------------------------------------------------------------------------ ms-swift MFU
# modelscope/ms-swift swift/callbacks/perf_log.py @ 3602360a5623, PerfMetricsLogCallback (the `perf_log` callback):
# on_init_end: max_tflops = (DEVICE_TFLOPS env, else a measured 8192^2 matmul in the model's dtype) x device_count,
# device_count = world_size x max(1, local GPUs // local world size); on_step_begin / on_step_end: elapsed += the
# step's wall time; on_log: logs['MFU'] = round(state.total_flos / elapsed / (max_tflops * 1e12), 6). total_flos is
# the Trainer's (summed over ranks, restored from the checkpoint on resume); elapsed starts at 0 in every process.

MS_SWIFT_MFU_DECIMALS = 6


def ms_swift_mfu(total_flos: float, elapsed_s: float, device_tflops: float, devices: int) -> float:
    """The MFU ms-swift's perf_log callback prints: ``round(total_flos / elapsed / (tflops x devices x 1e12), 6)``;
    ``total_flos`` and ``elapsed_s`` cumulative since the process started (``total_flos``: the ``ms-swift`` /
    ``hf-trainer`` convention summed over the steps)."""
    if elapsed_s <= 0 or device_tflops <= 0 or devices <= 0:
        raise ValueError("elapsed, device TFLOPS and device count must be positive")
    return round(total_flos / elapsed_s / (device_tflops * devices * 1e12), MS_SWIFT_MFU_DECIMALS)


MS_SWIFT = register_convention(Convention(
    name="ms-swift",
    variant_of="hf-trainer",
    pin=Pin("ms-swift (perf_log callback: MFU from the Trainer's total_flos)", "modelscope/ms-swift",
            "swift/callbacks/perf_log.py", "PerfMetricsLogCallback.on_init_end / on_step_end / on_log",
            "main 3602360a5623 (2026-08-22)",
            verified="tests/flops/test_framework_record.py: ms-swift's own on_log (loaded from the pinned source) "
                     "on transformers' floating_point_ops; tests/flops/test_hf_trainer_convention.py by hand"),
    formula=("FLOPs = hf-trainer's total_flos (6 * input_ids.numel() * N); printed MFU = round(total_flos / "
             "sum of step wall times / (DEVICE_TFLOPS or a measured bf16 matmul x world_size x 1e12), 6) "
             "(vlm_perf.flops.conventions.hf.ms_swift_mfu)"),
    deviations=("numerator: every hf-trainer deviation (vision tower and all experts billed per LM token, no "
                "attention term)",
                "denominator: a measured 8192x8192 matmul rate unless DEVICE_TFLOPS is set (not the datasheet peak)",
                "a cumulative average since the process started; after a resume total_flos is restored but the "
                "elapsed time restarts at 0, so the MFU is over-stated",
                "step time: on_step_begin -> on_step_end only"),
    forward=_hf_trainer,
    families=None,
))
