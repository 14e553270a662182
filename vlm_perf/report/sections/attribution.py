"""Step-time attribution: the fit of seconds per iteration against LM and vision FLOPs."""

from __future__ import annotations

from ..content import B, Bullets, SectionContent, T
from . import SectionInputs, register_section


@register_section("attribution", order=40)
def attribution(inputs: SectionInputs) -> SectionContent:
    a = inputs.summary["attribution"]
    if not a.get("ok"):
        return SectionContent("Step-time attribution", [Bullets([T(f"not fitted: {a.get('reason')}")])])
    vis = a.get("vision_tflops_per_gpu")
    overhead = f"{a['overhead_s']:.3f} s + " if a.get("model") != "no_overhead" else ""
    lines = [T(f"seconds/iteration ≈ {overhead}LM FLOPs at ", B(f"{a['lm_tflops_per_gpu']:.0f}"), " TFLOP/s/GPU",
               *((" + vision FLOPs at ", B(f"{vis:.0f}"), " TFLOP/s/GPU") if vis else ()),
               f" (R² {a['r2']:.3f}, {a['windows']} windows).")]
    if a.get("model") == "no_overhead":
        lines.append(T(a["reason"]))
    if vis and a["lm_tflops_per_gpu"]:
        lines.append(T(f"The vision part runs at {100 * vis / a['lm_tflops_per_gpu']:.0f}% of the LM's achieved rate."))
    return SectionContent("Step-time attribution", [Bullets(lines)])
