"""Where the time went, per part: the run folder's profiler traces joined with the exact FLOPs per part.

The block is `summary["trace_parts"]` (`vlm_perf.analysis.trace_summary`); the figure is drawn by its
provider (`vlm_perf.report.providers.trace_provider`). Nothing here when the run folder holds no trace.
"""

from __future__ import annotations

from ..content import B, Bullets, C, FigureRef, Paragraph, SectionContent, T, Table, fmt, rate_unit
from . import SectionInputs, register_section

TITLE = "Where the time went, per part"


def _ms(seconds) -> str:
    return fmt(None if seconds is None else seconds * 1e3, 2)


@register_section("trace_parts", order=36)
def trace_parts(inputs: SectionInputs) -> SectionContent | None:
    s = inputs.summary.get("trace_parts")
    if not s:
        return None
    its = ", ".join(str(i) for i in s["iterations"]) or "unknown"
    blocks: list = [Paragraph(T(f"{len(s['steps'])} profiled step(s) over {s['ranks']} rank(s) (iteration(s) {its}) "
                                f"from {len(s['files'])} trace file(s); {_ms(s['step_time_s'])} ms of step time in all. "
                                "Every nanosecond of each step is in exactly one part (the parts add up to each step "
                                f"within {100 * s['max_sum_gap']:.4f}%)."))]
    parts = s["parts"]
    unit, scale = rate_unit([p["flops_per_s"] for p in parts])
    rows = [[T(p["part"]), T(_ms(p["time_s"])), T(fmt(p["time_share"], 1, True)), T(fmt(p["flops_share"], 1, True)),
             T(fmt(None if p["flops_per_s"] is None else p["flops_per_s"] / scale, 2)), T(fmt(p["rate_vs_lm"], 2)),
             T(fmt(p["mfu"], 1, True))] for p in parts]
    blocks.append(Table(["part", "time (ms)", "share of time", "share of FLOPs", f"achieved {unit}", "vs LM", "MFU"],
                        rows))
    items = []
    if s["flops_source"] == "metadata":
        same = s.get("flops_match_report")
        items.append(T("FLOPs per part: the exact training FLOPs of the run's metadata for the profiled iterations, "
                       f"{s['flops_total']:.4e} in all",
                       (f", the same as the report's exact FLOPs of those iterations ({s['report_exact_flops']:.4e})"
                        if same else f"; the report's exact FLOPs of those iterations are "
                        f"{s['report_exact_flops']:.4e}" if s.get("report_exact_flops") is not None else None), "."))
    elif s["flops_source"] == "trace shapes":
        items.append(T("FLOPs per part: only the matmuls the trace recorded (no metadata in the run folder): "
                       "convolutions and fused attention read low."))
    else:
        items.append(T("No FLOPs per part (no metadata and no recorded shapes): times only."))
    items.append(T("Unattributed time (device work or ops outside every known range): ", B(_ms(s["unattributed_s"])),
                   f" ms ({fmt(s['unattributed_share'], 1, True)} of the step time)."))
    items.append(T("vs LM: the part's achieved FLOP/s over the language model's; share of time above share of "
                   "FLOPs is where optimisation pays."
                   + ("" if s.get("peak_tflops") else " MFU needs the GPU peak (--gpu / --peak-tflops).")))
    items += [T("note: ", n) for n in s["notes"]]
    blocks.append(Bullets(items))
    if s["top"]:
        blocks.append(Paragraph(T("Top ops / kernels by time:")))
        blocks.append(Table(["op / kernel", "part", "time (ms)", "calls"],
                            [[T(C(t["name"][:90])), T(t["part"]), T(_ms(t["time_s"])), T(str(t["count"]))]
                             for t in s["top"]]))
    provider = next((p for p in inputs.ctx.sections if p.key == "trace_parts"), None)
    if provider is not None and inputs.out_dir is not None:
        for name, caption in provider.render(inputs.out_dir).figures:
            blocks.append(FigureRef(name, caption))
    return SectionContent(TITLE, blocks)
