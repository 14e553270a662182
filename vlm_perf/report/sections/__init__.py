"""Report sections: a registry of small objects, one module per section, registered where defined.

A section is a name, an order (position in the report; the checks headline is 0) and a ``build``
function that turns `SectionInputs` into a `SectionContent` (a title and typed blocks,
`vlm_perf.report.content`) or ``None`` when it has nothing to say for this run. Every module of
this package is imported by `all_sections`, so adding a section is adding a module that calls
``@register_section``; a duplicate name is an error.
"""

from __future__ import annotations

import importlib
import pkgutil
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Callable

from ..content import SectionContent

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


@dataclass(frozen=True)
class Section:
    name: str
    order: int
    build: Callable[[SectionInputs], SectionContent | None]


SECTIONS: dict[str, Section] = {}


def register_section(name: str, order: int) -> Callable:
    """Decorator registering ``build`` as section ``name`` at position ``order``."""
    def decorate(build: Callable[[SectionInputs], SectionContent | None]):
        if name in SECTIONS:
            raise ValueError(f"report section {name!r} is already registered")
        SECTIONS[name] = Section(name, order, build)
        return build
    return decorate


def all_sections() -> list[Section]:
    """Every section of this package, in report order."""
    for module in pkgutil.iter_modules(__path__):
        importlib.import_module(f"{__name__}.{module.name}")
    return sorted(SECTIONS.values(), key=lambda s: (s.order, s.name))


def build_sections(inputs: SectionInputs) -> list[SectionContent]:
    out = []
    for section in all_sections():
        content = section.build(inputs)
        if content is not None:
            content.anchor = content.anchor or section.name
            out.append(content)
    return out
