"""What the analysis does not know about a run: inputs, configuration, diagnostics."""

from __future__ import annotations

from dataclasses import dataclass, field

import polars as pl


@dataclass
class ReportContext:
    """What the analysis does not know: inputs, configuration, diagnostics."""

    run: str
    gpu: str | None = None
    dtype: str = "bf16"
    inputs: dict = field(default_factory=dict)
    run_config: dict = field(default_factory=dict)
    diagnostics: dict = field(default_factory=dict)
    synthetic: bool = False
    microbatch_vision_share: pl.Series | None = None
    #: typed result of each report part computed for this run (`vlm_perf.report.parts.compute_parts`):
    #: its summary.json block and its section are derived from it
    results: dict = field(default_factory=dict)

    def block(self, name: str):
        """Part ``name``'s summary.json block (before JSON cleaning)."""
        from .parts import PARTS

        return PARTS[name].summary(self.results[name])
