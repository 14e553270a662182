"""Report sections: the ``section`` of each registered report part (`vlm_perf.report.parts.ReportPart`).

A section turns `SectionInputs` into a `SectionContent` (a title and typed blocks,
`vlm_perf.report.content`) or ``None`` when it has nothing to say for this run; its part's order places
it in the report (the checks headline is 0). Every module of this package is imported by `all_sections`.
A part with no block of its own and no figure (a section over summary.json keys the core writes) can
use the shortcut ``@register_section(name, order)``; a duplicate name is an error.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable

from ..content import SectionContent
from ..parts import PARTS, ReportPart, all_parts, register_part

if TYPE_CHECKING:
    from ...analysis.run import RunAnalysis
    from ..context import ReportContext


@dataclass
class SectionInputs:
    run: "RunAnalysis"
    ctx: "ReportContext"
    summary: dict  # the content of summary.json (JSON-clean)
    figures: dict[str, str | None] = field(default_factory=dict)  # PNG name -> None if drawn, else why not
    out_dir: "Path | None" = None  # the (temporary) report folder figures are drawn into

    def result(self, name: str) -> Any:
        """The typed result of part ``name`` (`ReportContext.results`; None when not computed)."""
        return self.ctx.results.get(name)


#: a section is its report part (name, order, build = the part's ``section``)
Section = ReportPart
SECTIONS = PARTS


def register_section(name: str, order: int) -> Callable:
    """Decorator registering ``build`` as the section of a part ``name`` at position ``order`` (no summary
    block, no figure: `vlm_perf.report.parts.register_part` declares those)."""
    def decorate(build: Callable[[SectionInputs], SectionContent | None]):
        register_part(ReportPart(name, order, section=build))
        return build
    return decorate


def all_sections() -> list[ReportPart]:
    """Every part with a section, in report order."""
    return [p for p in all_parts() if p.section is not None]


def build_sections(inputs: SectionInputs) -> list[SectionContent]:
    out = []
    for part in all_sections():
        content = part.section(inputs)  # type: ignore[misc]
        if content is not None:
            content.anchor = content.anchor or part.name
            out.append(content)
    return out
