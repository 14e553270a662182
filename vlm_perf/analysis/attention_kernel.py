"""Does the run's attention kernel contradict ``--causal``? The evidence, what it does to the numbers, the fix.

``--causal half`` (the default) counts the language model's attention core as a causal kernel runs it: only the
score entries on or below the diagonal. That is what a causal-skipping kernel computes; an **eager** core
(transformers' ``attn_implementation: eager``: a matmul for the scores, a softmax, a matmul for the values) computes
every query x key score and applies the causal mask after, so counted half its FLOPs read low (``--causal full``
counts the whole square). The evidence read here, never guessed:

* the model config's ``attn_implementation`` (or ``_attn_implementation``) of the language model: ``text_config``'s,
  else the top level's (`vlm_perf.arch.hf_config`); ``eager`` is evidence. A ``vision_config``'s value is not:
  vision attention is bidirectional and counted as the whole square under either setting;
* a profiler trace's ops in ``language_model.attention`` (`vlm_perf.analysis.trace_checks.eager_ops`): batched
  matmuls and a softmax with no fused kernel.

``sdpa`` is no evidence either way, and the note says why (transformers 5.24 ``integrations/sdpa_attention.py`` and
``masking_utils._ignore_causal_mask_sdpa``; torch's kernels): transformers hands ``torch.nn.functional.
scaled_dot_product_attention`` ``is_causal=True`` and no mask only when the microbatch needs no mask beyond
causality (no padding, no packed sequences found from the position ids, no extra mask such as bidirectional image
tokens); then torch's flash, memory-efficient (CUDA) and CPU flash kernels skip the key blocks above the diagonal
(half). With a mask, transformers passes the mask with ``is_causal=False`` and the kernel computes every score (the
whole square), as torch's math fallback always does. Which of these ran is not in a config.

The size of the error is measured, not assumed: the exact FLOPs of the selected windows' iterations are recounted
under ``--causal full`` (the same statistics, the same regime). A family whose ``--causal half`` already counts the
whole square (PaliGemma's prefix-LM mask) gets no warning: nothing there is counted half.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import polars as pl

from .flops_frame import STAT_COLUMNS, with_flops
from .trace_checks import eager_ops

__all__ = ["AttentionKernel", "attention_kernel", "attention_messages", "config_evidence", "full_over_half",
           "lm_attn_implementation", "SDPA_NOTE"]

#: what a config saying ``sdpa`` means for ``--causal half`` (a note: the config cannot say which kernel ran)
SDPA_NOTE = ("the model config says attn_implementation: sdpa: --causal half (the default) is right when "
             "transformers hands SDPA is_causal with no mask (no padding, no packed sequences, no extra mask) and "
             "torch runs its flash or memory-efficient CUDA kernel or its CPU flash kernel, which skip the keys "
             "above the diagonal; with a mask "
             "(padded or packed microbatches) transformers passes the mask instead and the kernel computes every "
             "score, as torch's math fallback always does: then use --causal full")


def lm_attn_implementation(spec: Any) -> str | None:
    """The language model's ``attn_implementation`` as the config states it (None when it states none)."""
    value = (getattr(spec, "extra", None) or {}).get("attn_implementation")
    return value if isinstance(value, str) and value else None


def config_evidence(spec: Any) -> str | None:
    """The config's evidence of an eager LM attention core, in words; None when it states no eager core."""
    return "the model config says attn_implementation: eager" if lm_attn_implementation(spec) == "eager" else None


def full_over_half(numbers: Any, spec: Any, trainability: Any) -> float | None:
    """Σ exact training FLOPs under ``--causal full`` / Σ under ``--causal half`` over the iterations the means use
    (`RunAnalysis.selection`; every iteration when no window is selected): the factor by which every exact
    TFLOP/s/GPU and MFU of a ``--causal half`` analysis (``numbers``, a `RunAnalysis`) is low for an eager core.
    None without exact FLOPs."""
    per_iteration = numbers.per_iteration
    if "exact_total" not in per_iteration.columns or per_iteration.height == 0:
        return None
    chosen = per_iteration.filter(pl.col("iteration").is_in(numbers.selection.iterations().implode()))
    chosen = chosen if chosen.height else per_iteration
    half = float(chosen["exact_total"].sum())
    if half <= 0:
        return None
    stats = chosen.select([c for c in STAT_COLUMNS if c in chosen.columns])
    full = float(with_flops(stats, spec, ["exact"], trainability, causal="full")["exact_total"].sum())
    return full / half


@dataclass(frozen=True)
class AttentionKernel:
    """What the run says about its LM attention kernel against ``--causal``: the config's ``implementation``, the
    ``evidence`` of an eager core, and, when it is counted half, the ``warning`` with ``full_over_half`` (the
    factor every exact number is low by); ``note``: the `SDPA_NOTE` for a config that says ``sdpa``."""

    causal: str
    implementation: str | None = None
    evidence: tuple[str, ...] = ()
    full_over_half: float | None = None
    warning: str | None = None
    note: str | None = None

    @property
    def messages(self) -> list[str]:
        return [m for m in (self.warning, self.note) if m]

    def to_dict(self) -> dict:
        return {"causal": self.causal, "implementation": self.implementation, "evidence": list(self.evidence),
                "full_over_half": self.full_over_half, "warning": self.warning}


def attention_kernel(numbers: Any, spec: Any, causal: str, trainability: Any, trace: Any = None) -> AttentionKernel:
    """The run's attention kernel against ``causal``: a WARNING with the evidence, the size and the fix when an eager
    core is counted ``--causal half`` (``trace``: the run's `TraceParts`, whose recorded ops are evidence too), the
    `SDPA_NOTE` when the config says ``sdpa``; nothing otherwise (and nothing under ``--causal full``)."""
    implementation = lm_attn_implementation(spec)
    if causal != "half":
        return AttentionKernel(causal, implementation)
    evidence = tuple(e for e in (config_evidence(spec), eager_ops(trace) if trace is not None else None) if e)
    if not evidence:
        return AttentionKernel(causal, implementation, note=SDPA_NOTE if implementation == "sdpa" else None)
    factor = full_over_half(numbers, spec, trainability)
    if factor is None or factor <= 1.0:  # nothing is counted half (e.g. a prefix-LM square): nothing to fix
        return AttentionKernel(causal, implementation, evidence)
    warning = (f"WARNING: eager attention counted causal half: {'; '.join(evidence)}. An eager core computes every "
               "query x key score and applies the causal mask after, but --causal half counts half of the language "
               f"model's scores, so the exact FLOPs, TFLOP/s/GPU and MFU read {100 * (1 - 1 / factor):.1f}% low "
               f"(x{factor:.4f} under --causal full). Fix: rerun with --causal full")
    return AttentionKernel(causal, implementation, evidence, factor, warning)


def attention_messages(numbers: Any, spec: Any, causal: str, trainability: Any, trace: Any = None) -> list[str]:
    """`attention_kernel`'s messages: its warning and its note."""
    return attention_kernel(numbers, spec, causal, trainability, trace).messages
