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
    #: analysis blocks with their own summary.json key and section (`vlm_perf.report.providers.SectionProvider`)
    sections: list = field(default_factory=list)
