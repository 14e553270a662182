"""Gaps and warnings the pipeline collected (configuration conflicts, reader notes, estimates)."""

from __future__ import annotations

from ..content import Bullets, SectionContent, T
from . import SectionInputs, register_section


@register_section("warnings", order=50)
def warnings(inputs: SectionInputs) -> SectionContent | None:
    messages = inputs.summary["messages"]
    if not messages:
        return None
    return SectionContent("Gaps and warnings", [Bullets([T(m) for m in messages])])
