"""Report parts: one declaration per analysis shown in the report (`ReportPart`), registered beside its code.

A part states, once: its ``name`` (its summary.json key and the report section's anchor), its ``order``
(position in the report; the checks headline is 0), the function computing its typed result from the
run (``compute``: a one-line read of a `vlm_perf.analysis.facade.Run` property, called once per run through
`PartContext.result`), how that result becomes
its summary.json block (``summary``), the schema entries of its summary keys (``keys``: `schema.Key`),
its section (``section``: `SectionInputs` -> `content.SectionContent` or None), its figures
(``figures``: `Figure`, each drawing a PNG or raising `figures.Skip` with the reason) and its lines of
the terminal summary (``terminal``). Everything else is derived from the registered parts:
summary.json's blocks (`document.build_summary`), the schema (`schema.summary_keys`), the sections of
report.md / report.html (`sections.build_sections`), the figures drawn and listed
(`figures.draw_all`, the Figures section) and the terminal summary (`terminal.number_lines`).

`register_part` rejects a duplicate name; a part registered after import (a plugin) is seen by every
output. docs/adding-a-report-section.md shows a whole part in one module.
"""

from __future__ import annotations

import importlib
import pkgutil
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, NamedTuple

if TYPE_CHECKING:
    from ..analysis.run import RunAnalysis
    from ..analysis.facade import Run
    from .content import SectionContent
    from .schema import Key
    from .sections import SectionInputs

__all__ = ["Figure", "PartContext", "ReportPart", "PARTS", "register_part", "all_parts", "compute_parts"]


class Figure(NamedTuple):
    """A PNG of the report: ``draw(run, ctx, path)`` writes it, or raises `vlm_perf.report.figures.Skip`
    with the reason there is nothing to show (the Figures section and summary.json ``figures`` say it)."""

    file: str
    caption: str
    draw: Callable[["RunAnalysis", Any, Path], Any]


def _same(result: Any) -> Any:
    return result


@dataclass(frozen=True)
class ReportPart:
    name: str
    order: int
    compute: Callable[["PartContext"], Any] | None = None  # typed result from the opened run (None: no own block)
    summary: Callable[[Any], Any] = _same  # typed result -> its summary.json block (under ``name``)
    keys: tuple["Key", ...] = ()  # schema entries of the summary keys this part writes
    section: Callable[["SectionInputs"], "SectionContent | None"] | None = None
    figures: tuple[Figure, ...] = ()
    terminal: Callable[[dict], list[str]] | None = None  # summary.json dict -> lines of the terminal summary
    terminal_order: int | None = None  # position among the terminal lines (default: ``order``)

    @property
    def build(self):  # the name the section registry used (`sections.Section.build`)
        return self.section


#: every registered part by name (registration order); `all_parts` sorts them into report order
PARTS: dict[str, ReportPart] = {}


def register_part(part: ReportPart) -> ReportPart:
    """Register ``part``; a name already registered is an error (one declaration per part)."""
    if part.name in PARTS:
        raise ValueError(f"report part {part.name!r} is already registered")
    names = [f.file for p in PARTS.values() for f in p.figures]
    for figure in part.figures:
        if figure.file in names:
            raise ValueError(f"report figure {figure.file!r} is already declared")
    from .schema import CORE

    keys = {k.name for k in CORE} | {k.name for p in PARTS.values() for k in p.keys}
    for key in part.keys:
        if key.name in keys:
            raise ValueError(f"summary key {key.name!r} is already declared")
    PARTS[part.name] = part
    return part


_BUILTIN = ("vlm_perf.report.providers",)


def all_parts() -> list[ReportPart]:
    """Every part (the built-in ones imported first), in report order."""
    for module in _BUILTIN:
        importlib.import_module(module)
    from . import sections

    for module in pkgutil.iter_modules(sections.__path__):
        importlib.import_module(f"{sections.__name__}.{module.name}")
    return sorted(PARTS.values(), key=lambda p: (p.order, p.name))


@dataclass
class PartContext:
    """What a part's ``compute`` reads: the run (`vlm_perf.analysis.facade.Run`: every analysis a cached property,
    computed once whichever part asks first). Results are computed once."""

    run: "Run"
    results: dict = field(default_factory=dict)

    @property
    def analysis(self) -> "RunAnalysis":
        """The run's windows x conventions analysis with its checks and messages."""
        return self.run.analysis

    def result(self, name: str) -> Any:
        """The typed result of part ``name``, computed on first use."""
        if name not in self.results:
            part = PARTS[name]
            self.results[name] = part.compute(self) if part.compute is not None else None
        return self.results[name]


def compute_parts(ctx: PartContext) -> dict[str, Any]:
    """Every part's typed result (name -> result, in report order) for `ReportContext.results`."""
    return {p.name: ctx.result(p.name) for p in all_parts() if p.compute is not None}
