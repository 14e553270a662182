"""`load_run`: a finished run on disk -> `RunAnalysis` + report context (the CLI and notebooks use it).

This is the top layer: it wires ingest (logs, metadata, run configuration) to analysis.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterable, Sequence

from .analysis import DEFAULT_CONVENTIONS, RunAnalysis, analyze_run, vision_share
from .arch import load_model
from .arch.spec import ModelSpec
from .flops import get_convention
from .hardware import device_peak
from .report import ReportContext
from .stats import BatchStats

LOG_NAME = re.compile(r"(\.log(\.gz|\.zst)?|^progress\.txt|^trainer_state\.json|^trainer_log\.jsonl|^logging\.jsonl"
                      r"|events\.out\.tfevents.*)$")
METADATA_NAME = re.compile(r"^metadata.*\.(jsonl|ndjson)(\.gz|\.zst)?$")


@dataclass
class LoadedRun:
    analysis: RunAnalysis
    context: ReportContext
    spec: ModelSpec
    iterations: object  # pl.DataFrame: deduplicated iteration table from the log
    raw: object  # pl.DataFrame: every parsed record


def discover(run: Path) -> tuple[list[Path], list[Path], Path]:
    """(log files, metadata paths, run directory) of a log file or a run directory."""
    if not run.exists():
        raise ValueError(f"{run}: no such log file or run directory")
    folder = run.parent if run.is_file() else run
    metadata = sorted(p for p in folder.iterdir() if p.is_file() and METADATA_NAME.match(p.name))
    if (folder / "metadata").is_dir():
        metadata.append(folder / "metadata")
    if run.is_file():  # a log file: the metadata and manifest next to it belong to the same run
        return [run], metadata, folder
    logs = sorted(p for p in run.iterdir() if p.is_file() and LOG_NAME.search(p.name))
    if not logs:
        raise ValueError(f"{run}: no training log found (looked for *.log[.gz|.zst], progress.txt, "
                         f"trainer_state.json, TensorBoard events)")
    return logs, metadata, run


def estimate_from_config(config, spec: ModelSpec) -> BatchStats:
    """Per-iteration statistics from seq_length x global_batch_size (+ one stated image grid per sample)."""
    seq = config.seq_length
    batch = getattr(config, "global_batch_size", None)
    if not seq or not batch:
        raise ValueError("no metadata, and the log / run.yaml state no seq_length and global_batch_size to "
                         "estimate from; pass --metadata PATH")
    grid = getattr(config, "image_grid", None)
    grids = [tuple(grid)] * int(batch) if grid and spec.vision is not None else []
    return BatchStats.from_batch(seq_len=int(seq), samples=int(batch), image_grids=grids, spec=spec)


def vision_gaps(spec: ModelSpec, stats: BatchStats | None, frame, estimated: bool) -> list[str]:
    """Messages when a VLM's vision would silently count as zero."""
    if not estimated and (frame is None or frame.height == 0):
        return ["the metadata has no usable rows: every window lacks statistics (check the files, or drop them "
                "to get an estimate from the run configuration)"]
    if spec.vision is None:
        return []
    patches = stats.vision_patches if estimated and stats is not None else (
        float(frame["vision_patches"].sum()) if frame is not None and frame.height else 0)
    if patches:
        return []
    if estimated:
        return [f"{spec.name} has a vision tower but no image grid is stated: vision FLOPs are counted as ZERO in "
                "this estimate; set image_grid: [t, h, w] (one image per sample) in run.yaml, or pass --metadata"]
    return [f"{spec.name} has a vision tower but the metadata carries no image/video grids: vision FLOPs are "
            "ZERO; check the keys are image_grid_thw / video_grid_thw (docs/metadata-schema.md)"]


def load_run(run: str | Path, metadata: Sequence[str | Path] = (), model: str | None = None,
             gpus: int | None = None, gpu: str | None = None, peak_tflops: float | None = None,
             dtype: str | None = None, conventions: Iterable[str] = (), log_format: str = "auto",
             skip_bad: bool = False, on_step: Callable[[str], None] = lambda text: None) -> LoadedRun:
    """Parse, resolve the configuration, aggregate metadata and analyse one run.

    Arguments override the manifest (run.yaml / run.json), which overrides what the log states.
    Without metadata every number is an estimate from the run configuration (and labelled so).
    """
    from .ingest.logs import parse_logs
    from .ingest.metadata import iteration_stats, scan_microbatches
    from .ingest.runconfig import find_manifest, resolve_run_config

    conventions = list(conventions)
    defaults = not conventions
    conventions = conventions or list(DEFAULT_CONVENTIONS)
    for name in conventions:
        get_convention(name)  # fail fast on a typo
    run = Path(run)
    logs, found_metadata, run_dir = discover(run)
    meta_paths = [Path(p) for p in metadata] or found_metadata
    on_step(f"parsing {len(logs)} log file(s)")
    parsed = parse_logs(logs, format=log_format)
    overrides = {k: v for k, v in {"model": model, "num_gpus": gpus, "gpu": gpu, "dtype": dtype}.items()
                 if v is not None}
    config = resolve_run_config(parsed.run_config, find_manifest(run), overrides)
    if not config.model:
        raise ValueError("model unknown: pass --model NAME_OR_CONFIG or set 'model' in run.yaml")
    spec = load_model(config.model)
    if defaults:  # the default set keeps only conventions defined for this family (asked-for ones still refuse)
        conventions = [c for c in conventions if get_convention(c).covers(spec.family)]
    if peak_tflops is not None and not (math.isfinite(peak_tflops) and peak_tflops > 0):
        raise ValueError(f"--peak-tflops must be a positive number of TFLOP/s per GPU, got {peak_tflops!r}")
    if gpus is not None and gpus <= 0:
        raise ValueError(f"--gpus must be a positive integer, got {gpus!r}")
    peak, notes = peak_tflops, []
    if peak is None and config.gpu:
        try:
            peak = device_peak(config.gpu).flops(config.dtype or "bf16") / 1e12
        except ValueError as exc:  # partial results beat none: MFU stays empty, the gap is stated
            notes.append(f"{exc}; MFU left empty")
    frozen = tuple(config.frozen or ())
    stats_frame, micro_share, meta_diag, estimate = None, None, {}, None
    if meta_paths:
        on_step(f"aggregating metadata ({len(meta_paths)} path(s))")
        result = iteration_stats(meta_paths, spec=spec, skip_bad=skip_bad)
        stats_frame, meta_diag = result.frame, result.diagnostics.to_dict()
        micro_share = vision_share(scan_microbatches(meta_paths, spec=spec, skip_bad=skip_bad), spec, frozen)
    else:
        estimate = estimate_from_config(config, spec)
    on_step("recomputing FLOPs per window")
    analysis = analyze_run(parsed.iterations, spec, stats_frame, world_size=config.num_gpus, peak_tflops=peak,
                           conventions=conventions, frozen=frozen, estimate=estimate,
                           log_interval=config.log_interval)
    analysis.messages.extend(notes + vision_gaps(spec, estimate, stats_frame, stats_frame is None))
    if meta_diag:  # what the metadata reader noticed belongs in the report, not only in diagnostics
        skipped = meta_diag.get("rows_skipped_total", 0)
        if skipped:
            analysis.messages.append(f"metadata: {skipped} bad row(s) skipped (--skip-bad); first: "
                                     + "; ".join(meta_diag.get("bad_lines", [])[:3]))
        analysis.messages.extend(f"metadata: {note}" for note in meta_diag.get("notes", []))
    for conflict in config.conflict_messages():
        analysis.messages.append(f"configuration conflict: {conflict}")
    context = ReportContext(
        run=str(run), gpu=config.gpu, dtype=config.dtype or "bf16", synthetic=bool(config.synthetic),
        inputs={"logs": [str(p) for p in logs], "metadata": [str(p) for p in meta_paths], "model": config.model},
        run_config=config.to_dict(), diagnostics={"log": parsed.diagnostics.to_dict(), "metadata": meta_diag},
        microbatch_vision_share=micro_share)
    return LoadedRun(analysis, context, spec, parsed.iterations, parsed.raw)
