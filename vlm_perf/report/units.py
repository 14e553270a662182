"""How a run's rates and its model are written, once for every output (report.md/html, the terminal
summary, figures): the unit scales with the run, and a model read from a config.json is named by its
architecture and file rather than "config".

Rates are computed and stored (summary.json, windows table) in TFLOP/s per GPU; only their display
scales. The unit is chosen once per run from its largest rate (`rate_unit`), so every number of one
report is written in the same unit: a tiny CPU run reads "35.2 GFLOP/s/GPU", not "0.0 TFLOP/s/GPU".
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Iterable

from ..analysis.run import model_title  # noqa: F401 (titles name the model; defined with the analysis)

#: (unit, TFLOP/s per unit), largest first
UNITS = (("PFLOP/s", 1e3), ("TFLOP/s", 1.0), ("GFLOP/s", 1e-3), ("MFLOP/s", 1e-6), ("kFLOP/s", 1e-9),
         ("FLOP/s", 1e-12))


@dataclass(frozen=True)
class RateUnit:
    """A display unit for rates given in TFLOP/s."""

    name: str = "TFLOP/s"
    tflops: float = 1.0  # TFLOP/s in one of this unit

    @property
    def per_gpu(self) -> str:
        return f"{self.name}/GPU"

    def value(self, tflops: float | None) -> float | None:
        return None if tflops is None else tflops / self.tflops

    def fmt(self, tflops: float | None, digits: int = 1) -> str:
        """The number alone (``—`` when unknown), in this unit."""
        if tflops is None or (isinstance(tflops, float) and math.isnan(tflops)):
            return "—"
        return f"{tflops / self.tflops:,.{digits}f}"

    def text(self, tflops: float | None, digits: int = 1) -> str:
        """``35.2 GFLOP/s/GPU`` (``—`` when unknown)."""
        number = self.fmt(tflops, digits)
        return number if number == "—" else f"{number} {self.per_gpu}"


TFLOPS = RateUnit()


def rate_unit(values_tflops: Iterable[float | None]) -> RateUnit:
    """The unit in which the largest of ``values_tflops`` reads at least 1 (TFLOP/s from 1 TFLOP/s up
    to 1 PFLOP/s: the familiar unit of GPU training stays the default, also for unknown values)."""
    finite = [abs(v) for v in values_tflops if v is not None and math.isfinite(v) and v != 0]
    if not finite:
        return TFLOPS
    top = max(finite)
    if top >= 1.0:
        return TFLOPS
    for name, size in UNITS:
        if top >= size:
            return RateUnit(name, size)
    return RateUnit(*UNITS[-1])


def run_rate_unit(summary: dict) -> RateUnit:
    """The unit of one run's report, from its summary (every convention's mean TFLOP/s/GPU)."""
    conventions = summary.get("conventions") or {}
    return rate_unit(e.get("tflops_per_gpu_mean") for e in conventions.values())


