"""Where the time went, per part: the run folder's profiler traces joined with the exact FLOPs per part.

One report part (`vlm_perf.report.parts`): the run's ``trace_parts`` (`vlm_perf.analysis.trace_summary.trace_part`), the block is `summary["trace_parts"]`
(`vlm_perf.analysis.trace_summary`), the section below draws its figure. Nothing here when the run folder
holds no trace.
"""

from __future__ import annotations


from ..content import B, Bullets, C, FigureRef, Paragraph, SectionContent, T, Table, fmt, rate_unit
from ..parts import ReportPart, register_part
from ..schema import NUMBER, key as _k
from . import SectionInputs

TITLE = "Where the time went, per part"


def _ms(seconds) -> str:
    return fmt(None if seconds is None else seconds * 1e3, 2)


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
    result = (inputs.result("trace_parts") or (None, None))[1]
    if result is not None and result.parts.height and inputs.out_dir is not None:
        import matplotlib.pyplot as plt

        from ...analysis.trace_parts import trace_parts_figure

        plt.close(trace_parts_figure(result, inputs.out_dir / "trace_parts.png"))
        blocks.append(FigureRef("trace_parts.png", "Step time per part per profiled step (labels: the part's "
                                                   "achieved FLOP/s)"))
    return SectionContent(TITLE, blocks)


_TRACE = tuple(_k(n, u, t, m, "analysis.trace_summary", **kw) for n, u, t, m, kw in (
    ("files", "text", list, "profiler trace files of the run folder (run.discover.traces_of)", {}),
    ("flops_source", "text", str, "metadata (exact per part), trace shapes (recorded matmuls only) or null",
     {"nullable": True}),
    ("ranks", "count", int, "ranks the traces hold", {}),
    ("iterations", "count", list, "training iterations of the profiled steps", {}),
    ("steps", "block", list, "per profiled step: rank, step, iteration, step_s (the ProfilerStep range, s)", {}),
    ("step_time_s", "s", NUMBER, "Σ profiled step time over ranks and steps", {}),
    ("max_sum_gap", "fraction", NUMBER, "largest |Σ parts - step| / step over the steps", {}),
    ("parts", "block", list, "per part: time_s, time_share, forward_s, backward_s (s, fraction); flops, flops_share "
     "(FLOPs, fraction); flops_per_s (FLOP/s); mfu (fraction); rate_vs_lm (ratio); excess_vs_lm_s (s)", {}),
    ("unattributed_s", "s", NUMBER, "time in no known range (shown, never hidden)", {}),
    ("unattributed_share", "fraction", NUMBER, "unattributed_s / step_time_s", {"nullable": True}),
    ("flops_total", "FLOPs", NUMBER, "Σ FLOPs of the parts over the profiled rank-steps", {"nullable": True}),
    ("report_exact_flops", "FLOPs", NUMBER, "the report's exact FLOPs (analysis.run per_iteration exact_total) of the "
     "profiled iterations, per rank-step / world size", {"nullable": True}),
    ("flops_match_report", "bool", bool, "flops_total = report_exact_flops (null when not comparable: not every "
     "rank traced, or no metadata)", {"nullable": True}),
    ("peak_tflops", "TFLOP/s/GPU", NUMBER, "the peak the per-part MFU divides by", {"nullable": True}),
    ("top", "block", list, "top ops / kernels by time: name, part, time_s, count", {}),
    ("notes", "text", list, "what the attribution assumed or could not do", {}),
))


register_part(ReportPart(
    "trace_parts", order=36, section=trace_parts, summary=lambda result: result[0],
    compute=lambda c: c.run.trace_parts,
    keys=(_k("trace_parts", "block", dict, "where the profiled step time went, per part, joined with exact FLOPs "
             "(null when the run folder holds no profiler trace)", "analysis.trace_summary", nullable=True,
             fields=_TRACE),)))
