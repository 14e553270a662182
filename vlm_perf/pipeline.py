"""`load_run`: a finished run on disk -> its `Run` (`vlm_perf.analysis.facade`), the `RunAnalysis` and the report
context (the CLI and notebooks use it).

This is the top layer: it opens the run through the facade and renders nothing itself; the report parts
(`vlm_perf.report.parts`) read the run's analyses.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Sequence

from .analysis import RunAnalysis
from .analysis.examine import evidence_messages, examine_log_files, vision_gaps  # noqa: F401 (their old home)
from .analysis.facade import Run
from .arch.spec import ModelSpec
from .report import ReportContext
from .report.parts import PartContext, compute_parts
from .run.core import (ESTIMATE_HELP, RunInputs, estimate_from_config, links_outside,  # noqa: F401
                       logged_global_batch_size, open_run)
from .run.discover import discover_run
from .run.options import RunOptions

__all__ = ["LoadedRun", "load_run", "report_context", "discover", "Run", "RunOptions"]


@dataclass
class LoadedRun:
    analysis: RunAnalysis
    context: ReportContext
    spec: ModelSpec
    iterations: object  # pl.DataFrame: deduplicated iteration table from the log
    raw: object  # pl.DataFrame: every parsed record
    metadata: object = None  # MetadataSource (already read) when the run has metadata, else None
    run: Run | None = None  # the facade every number above came from


def discover(run: Path) -> tuple[list[Path], list[Path], Path]:
    """(log files, metadata paths, run directory) of a log file or a run directory: the one rule of
    `vlm_perf.run.discover` (kept for callers of the earlier API)."""
    files = discover_run(run)
    return list(files.logs), list(files.metadata), files.folder


def load_run(run: str | Path, options: RunOptions | None = None, *, metadata: Sequence[str | Path] = (),
             on_step: Callable[[str], None] = lambda text: None,
             metadata_progress: Callable[[int, int], None] | None = None, per_rank: bool = False,
             **named: Any) -> LoadedRun:
    """Open one run (`Run.open`) and compute what the report shows: the `RunAnalysis` and the report context.

    ``options``: the typed run options (`RunOptions`), or the options by name (``load_run(path, gpus=64,
    frozen=["vision_tower"])``, each checked against its declaration in `vlm_perf.run.options`). Arguments
    override the manifest (run.yaml / run.json), which overrides what the log states, which overrides the
    checkpoint files. Without metadata every number is an estimate from the run configuration (and labelled so).
    ``metadata``: per-microbatch metadata paths (default: the run folder's); ``metadata_progress(done_bytes,
    total_bytes)`` is called as it is read; ``per_rank=True`` also keeps the per-(iteration, dp_rank) statistics
    (``loaded.metadata.per_rank``) from the same pass.
    """
    if options is not None and named:
        raise TypeError("load_run: give the run options either as a RunOptions or by name, not both")
    options = options if options is not None else RunOptions.of(**named)
    opened = Run.open(run, options, metadata=metadata, on_step=on_step, metadata_progress=metadata_progress,
                      per_rank=per_rank)
    context = report_context(opened)
    inputs = opened.inputs
    return LoadedRun(opened.analysis, context, inputs.spec, inputs.parsed.iterations, inputs.parsed.raw,
                     metadata=inputs.metadata, run=opened)


def report_context(run: Run) -> ReportContext:
    """The report context of ``run``: inputs, configuration, diagnostics and every report part's result. The
    analyses that read the per-microbatch FLOPs run first, so that those are freed before the other parts run."""
    inputs, config = run.inputs, run.config
    run.checks, run.balance  # noqa: B018 (evidence, checks and balance while the per-microbatch FLOPs exist)
    micro_share = run.microbatch_vision_share
    return ReportContext(
        run=str(inputs.path), gpu=config.gpu, dtype=config.dtype or "bf16", synthetic=bool(config.synthetic),
        inputs={"logs": [str(p) for p in inputs.files.logs], "metadata": [str(p) for p in inputs.metadata_paths],
                "model": config.model, "model_source": config.sources.get("model"), "causal": run.causal},
        run_config=config.to_dict(), diagnostics={"log": inputs.parsed.diagnostics.to_dict(),
                                                  "metadata": inputs.metadata_diagnostics},
        microbatch_vision_share=micro_share, results=compute_parts(PartContext(run)))
