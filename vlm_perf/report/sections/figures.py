"""The figures that were drawn, and a note for each one that was not."""

from __future__ import annotations

from .. import figures as drawing
from ..content import Bullets, FigureRef, SectionContent, T
from . import SectionInputs, register_section


@register_section("figures", order=60)
def figures(inputs: SectionInputs) -> SectionContent:
    blocks, skipped = [], []
    for name, caption, _ in drawing.FIGURES:
        why = inputs.figures.get(name, "not drawn")
        if why is None:
            blocks.append(FigureRef(name, caption))
        else:
            skipped.append(T(f"{caption}: not drawn ({why})."))
    if skipped:
        blocks.append(Bullets(skipped))
    return SectionContent("Figures", blocks)
