"""Which conventions reproduce a number a log printed, within its print precision (pure, no I/O).

A printed value carries its own precision: "554.3" stands for anything in [554.25, 554.35). Every
convention's number for the same run, scaled into the printed unit, either falls in that interval (a match:
this framework, at this version, could have printed it) or not. For the closest convention the component
table minus ``exact``'s says where the printed number departs from what the model executes.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import Mapping

from ...errors import ConfigError
from ..breakdown import COMPONENTS, Breakdown

_NUMBER = re.compile(r"^[+-]?(\d+)(?:\.(\d*))?(?:[eE]([+-]?\d+))?$")


def print_half_unit(text: str) -> float:
    """Half a unit of the last printed digit of ``text`` ("554.3" -> 0.05, "1.2e3" -> 50, "554" -> 0.5)."""
    t = text.strip().replace(",", "")
    m = _NUMBER.match(t)
    if m is None:
        raise ConfigError(f"printed number {text[:40]!r} is not a plain decimal (e.g. 554.3 or 5.543e2)")
    decimals = len(m.group(2) or "")
    exponent = int(m.group(3) or 0)
    return 0.5 * 10.0 ** (exponent - decimals)


@dataclass(frozen=True)
class Reading:
    """One convention's number in the printed unit, and whether the printed text could come from it."""

    convention: str
    value: float
    matches: bool
    rel_diff: float  # (value - printed) / printed


def reconcile(results: Mapping[str, Breakdown], printed: str, scale: float) -> list[Reading]:
    """``results``: convention -> Breakdown for the same run; ``scale`` turns FLOPs into the printed unit
    (e.g. 1 / (step_time * gpus * 1e12) for TFLOP/s/GPU). Closest first."""
    half = print_half_unit(printed)
    target = float(printed.strip().replace(",", ""))
    if not math.isfinite(target) or target == 0:
        raise ConfigError(f"printed number {printed!r} must be finite and non-zero")
    out = []
    for name, b in results.items():
        value = float(b.total) * scale
        out.append(Reading(name, value, abs(value - target) <= half * (1 + 1e-9), (value - target) / target))
    return sorted(out, key=lambda r: abs(r.rel_diff))


def component_difference(result: Breakdown, exact: Breakdown) -> dict[str, float]:
    """``result`` minus ``exact`` per component (FLOPs), the components where they differ, largest first."""
    diff = {c: float(result.components.get(c, 0)) - float(exact.components.get(c, 0)) for c in COMPONENTS}
    return dict(sorted(((c, d) for c, d in diff.items() if d), key=lambda kv: -abs(kv[1])))
