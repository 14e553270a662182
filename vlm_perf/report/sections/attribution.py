"""Step-time attribution: the fit of seconds per iteration against LM and vision FLOPs."""

from __future__ import annotations

from ..content import B, Bullets, SectionContent, T
from ..units import run_rate_unit
from . import SectionInputs, register_section


@register_section("attribution", order=40)
def attribution(inputs: SectionInputs) -> SectionContent:
    a = inputs.summary["attribution"]
    if not a.get("ok"):
        return SectionContent("Step-time attribution", [Bullets([T(f"not fitted: {a.get('reason')}")])])
    vis = a.get("vision_tflops_per_gpu")
    overhead = f"{a['overhead_s']:.3f} s + " if a.get("model") != "no_overhead" else ""
    unit = run_rate_unit(inputs.summary)
    lines = [T(f"seconds/iteration ≈ {overhead}LM FLOPs at ", B(unit.fmt(a['lm_tflops_per_gpu'], 0)), f" {unit.per_gpu}",
               *((" + vision FLOPs at ", B(unit.fmt(vis, 0)), f" {unit.per_gpu}") if vis else ()),
               f" (R² {a['r2']:.3f}, {a['windows']} windows).")]
    if a.get("model") == "no_overhead":
        lines.append(T(a["reason"]))
    if vis and a["lm_tflops_per_gpu"]:
        lines.append(T(f"The vision part runs at {100 * vis / a['lm_tflops_per_gpu']:.0f}% of the LM's achieved rate."))
    return SectionContent("Step-time attribution", [Bullets(lines)])
