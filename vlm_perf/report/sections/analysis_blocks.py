"""Sections for the analysis blocks that carry their own summary.json key (`vlm_perf.report.providers`).

Peak used, the training regime, HFU, DP load balance and stragglers are built by `pipeline.load_run` as `SectionProvider`s
(``ReportContext.sections``): each has a summary block and a ``render(out_dir)`` that draws its
figures and returns a provider `Section` whose lines may mark emphasis with ``**``. Here each becomes
a registered report section; the text is split into typed spans, so it is escaped like every other
section when rendered.
"""

from __future__ import annotations

from ..content import B, Bullets, FigureRef, SectionContent, Span, T, Table
from . import SectionInputs, register_section


def _spans(text) -> tuple[Span, ...]:
    """Typed spans as they are; a string ``a **b** c`` -> plain, bold, plain spans (an unpaired ``**`` stays
    literal text)."""
    if isinstance(text, tuple):
        return text
    pieces = str(text).split("**")
    if len(pieces) % 2 == 0:  # unbalanced: keep the text as it is
        return T(str(text))
    return T(*(B(p) if i % 2 else p for i, p in enumerate(pieces) if p))


def _bridge(key: str):
    def build(inputs: SectionInputs) -> SectionContent | None:
        provider = next((p for p in inputs.ctx.sections if p.key == key), None)
        if provider is None or inputs.out_dir is None:
            return None
        section = provider.render(inputs.out_dir)
        if section is None:
            return None
        blocks: list = []
        if section.lines:
            blocks.append(Bullets([_spans(line) for line in section.lines]))
        if section.table:
            header, rows = section.table
            blocks.append(Table([str(h) for h in header], [[_spans(str(c)) for c in row] for row in rows]))
        for name, caption in section.figures:
            if (inputs.out_dir / name).exists():
                blocks.append(FigureRef(name, caption))
        return SectionContent(section.title, blocks)
    build.__name__ = f"{key}_section"
    return build


for _key, _order in (("peak", 12), ("regime", 13), ("hfu", 14), ("balance", 32), ("stragglers", 34),
                      ("memory", 36)):
    register_section(_key, order=_order)(_bridge(_key))
