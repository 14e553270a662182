"""Appendix: inputs, resolved run configuration and reader diagnostics (the rest is in summary.json)."""

from __future__ import annotations

import json

from ..content import C, Code, Paragraph, SectionContent, T
from . import SectionInputs, register_section


@register_section("appendix", order=90)
def appendix(inputs: SectionInputs) -> SectionContent:
    s = inputs.summary
    dump = json.dumps({"inputs": s["inputs"], "run_config": s["run_config"], "diagnostics": s["diagnostics"]},
                      indent=2, default=str)
    return SectionContent("Appendix: inputs and diagnostics", [
        Paragraph(T("Every number of this report, with the checks' details, is in ", C("summary.json"), ".")),
        Code(dump, "json")])
