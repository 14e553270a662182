"""The log's own TFLOP/s/GPU against the recomputation of its formula."""

from __future__ import annotations

from ..content import B, Bullets, SectionContent, T
from . import SectionInputs, register_section


@register_section("crosscheck", order=20)
def crosscheck(inputs: SectionInputs) -> SectionContent:
    cc = inputs.summary["log_crosscheck"]
    if cc.get("status") in ("ok", "mismatch", "world_size_inferred"):
        items = [T("status ", B(cc["status"]), f" over {cc['windows']} windows ({cc.get('basis', 'metadata')}); the "
                   f"log's number implies a world size of {cc['implied_world_size']:.2f} GPUs (stated: "
                   f"{cc.get('world_size')}).")]
        if "ratio_logged_to_recomputed" in cc:
            items.append(T(f"logged / recomputed ({cc['convention']}) = {cc['ratio_logged_to_recomputed']:.4f}"))
        for name, ratio in (cc.get("candidates") or {}).items():
            items.append(T(f"logged / {name} = {ratio:.4f}"))
        items += [T(f"likely cause: {c}") for c in cc.get("likely_causes", [])]
    else:
        items = [T(cc.get("message", str(cc.get("status"))))]
    return SectionContent("Log cross-check", [Bullets(items)])
