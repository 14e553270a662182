"""The LM attention kernel against ``--causal`` (`vlm_perf.analysis.attention_kernel`, the run's ``attention``): the
``attention_kernel`` block of summary.json. Its warning and note are among the run's messages (the report's "Gaps
and warnings", the terminal's warnings), and the verdict line names the warning (`sections.headline.verdict`), since
it changes the number to quote."""

from __future__ import annotations

from ..parts import ReportPart, register_part
from ..schema import key

_PRODUCER = "analysis.attention_kernel"

_FIELDS = (
    key("causal", "text", str, "the --causal setting of the exact FLOPs (half | full)", _PRODUCER),
    key("implementation", "text", str, "the LM's attn_implementation as the model config states it (text_config's, "
        "else the top level's)", _PRODUCER, nullable=True),
    key("evidence", "text", list, "evidence of an eager core (the config, the profiler trace's ops)", _PRODUCER),
    key("full_over_half", "ratio", (int, float), "exact FLOPs under --causal full / under --causal half over the "
        "windows the means use (set with the warning)", _PRODUCER, nullable=True),
    key("warning", "text", str, "the warning (evidence, size, fix: --causal full); null when none", _PRODUCER,
        nullable=True),
)

register_part(ReportPart(
    "attention_kernel", order=7, compute=lambda c: c.run.attention, summary=lambda result: result.to_dict(),
    keys=(key("attention_kernel", "block", dict, "the LM attention kernel against --causal: an eager core counted "
              "causal half is a warning with its size", _PRODUCER, fields=_FIELDS),)))
