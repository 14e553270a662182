"""Appendix: the inputs read, and a link to summary.json (every number, the resolved run configuration with each
value's source, the readers' diagnostics) rather than a copy of it."""

from __future__ import annotations

from ..content import C, L, Paragraph, SectionContent, T
from . import SectionInputs, register_section

SHOWN = 3  # files named per input kind; the rest are counted (all of them are in summary.json)


def _value(value) -> list:
    if isinstance(value, list):
        shown = [x for v in value[:SHOWN] for x in (C(v), ", ")][:-1]
        return shown + ([f" and {len(value) - SHOWN} more"] if len(value) > SHOWN else [])
    return [C(value)]


@register_section("appendix", order=90)
def appendix(inputs: SectionInputs) -> SectionContent:
    s = inputs.summary
    read = s.get("inputs") if isinstance(s.get("inputs"), dict) else {}
    blocks = [Paragraph(T("Every number of this report, the checks' details, the resolved run configuration (each "
                          "value with its source) and the readers' diagnostics are in ",
                          L("summary.json", "summary.json"), ", beside this page."))]
    if read:
        blocks.append(Paragraph(T("Inputs: ", *[x for k, v in read.items() if v not in (None, [], "")
                                               for x in (f"{k} ", *_value(v), "; ")][:-1], ".")))
    return SectionContent("Appendix: inputs and diagnostics", blocks)
