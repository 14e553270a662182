"""The run's figures (a report part): each one drawn, or a note saying why it was not.

The Figures section lists the figures of every part (`parts.ReportPart.figures`, in report order); this
part declares the run-level ones and the summary.json ``figures`` block (drawn or skipped, per file).
"""

from __future__ import annotations

from .. import figures as drawing
from ..content import Bullets, FigureRef, SectionContent, T
from ..parts import Figure, ReportPart, register_part
from ..schema import key
from . import SectionInputs


#: the before/after figure the report's lead shows on its first screen (not repeated under Figures)
LEAD_FIGURE = "tflops.png"


def caption_of(name: str) -> str:
    return next(caption for figure, caption, _ in drawing.all_figures() if figure == name)


def figures(inputs: SectionInputs) -> SectionContent:
    blocks, skipped = [], []
    for name, caption, _ in drawing.all_figures():
        why = inputs.figures.get(name, "not drawn")
        if why is None and name == LEAD_FIGURE:
            continue  # at the top of the report
        if why is None:
            blocks.append(FigureRef(name, caption))
        else:
            skipped.append(T(f"{caption}: not drawn ({why})."))
    if skipped:
        blocks.append(Bullets(skipped))
    return SectionContent("Figures", blocks)


register_part(ReportPart(
    "figures", order=60, section=figures,
    keys=(key("figures", "block", dict, "figure file -> drawn, or skipped: reason", "report.figures"),),
    figures=(
        Figure("tflops.png", "FLOP/s per GPU over iterations, before vs after vision accounting",
               lambda run, ctx, path: drawing.tflops_over_time(run, path)),
        Figure("mfu.png", "MFU before/after vision accounting", lambda run, ctx, path: drawing.mfu_over_time(run, path)),
        Figure("components.png", "Share of each component in the exact training FLOPs",
               lambda run, ctx, path: drawing.component_shares(run, path)),
        Figure("vision_share.png", "Vision share of FLOPs per microbatch and per iteration (dashed: the run's vision "
               "share)", lambda run, ctx, path: drawing.vision_share_hist(run, ctx.microbatch_vision_share, path)),
        Figure("step_time.png", "Step time vs FLOPs with the attribution fit",
               lambda run, ctx, path: drawing.step_time_fit(run, path)),
        Figure("timeline.png", "Run timeline: training segments and the time lost",
               lambda run, ctx, path: drawing.health_timeline(run, path)),
    )))
