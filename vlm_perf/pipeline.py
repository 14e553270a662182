"""`load_run`: a finished run on disk -> `RunAnalysis` + report context (the CLI and notebooks use it).

This is the top layer: it wires ingest (logs, metadata, run configuration) to analysis.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterable, Sequence

import polars as pl

from .analysis import DEFAULT_CONVENTIONS, RunAnalysis, analyze_run
from .analysis.balance import costs_from_row_values, microbatch_cost_columns, microbatch_vision_share
from .analysis.checks import run_checks
from .arch.spec import ModelSpec
from .errors import InputError
from .flops import get_convention
from .report import ReportContext
from .report.parts import PartContext, compute_parts
from .report.providers import balance_of, hfu_of, regime_summary, stragglers_of  # noqa: F401 (their old home)
from .report.sections.trace_parts import trace_parts_of  # noqa: F401
from .report.units import model_title
from .run.core import (ESTIMATE_HELP, Run, estimate_from_config, links_outside, logged_global_batch_size,  # noqa: F401
                       open_run)
from .run.discover import discover_run
from .stats import BatchStats


@dataclass
class LoadedRun:
    analysis: RunAnalysis
    context: ReportContext
    spec: ModelSpec
    iterations: object  # pl.DataFrame: deduplicated iteration table from the log
    raw: object  # pl.DataFrame: every parsed record
    metadata: object = None  # MetadataSource (already read) when the run has metadata, else None


def discover(run: Path) -> tuple[list[Path], list[Path], Path]:
    """(log files, metadata paths, run directory) of a log file or a run directory: the one rule of
    `vlm_perf.run.discover` (kept for callers of the earlier API)."""
    files = discover_run(run)
    return list(files.logs), list(files.metadata), files.folder


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
                "this estimate; set image_grid: [t, h, w] or image_size: [h, w] (one image per sample) in run.yaml, "
                "or pass --grid T,H,W / --image-size H,W, or --metadata"]
    return [f"{spec.name} has a vision tower but the metadata carries no image/video grids: vision FLOPs are "
            "ZERO; check the keys are image_grid_thw / video_grid_thw (docs/metadata-schema.md)"]


def load_run(run: str | Path, metadata: Sequence[str | Path] = (), model: str | None = None,
             gpus: int | None = None, gpu: str | None = None, peak_tflops: float | None = None,
             dtype: str | None = None, conventions: Iterable[str] = (), log_format: str = "auto",
             skip_bad: bool = False, on_step: Callable[[str], None] = lambda text: None,
             seq_length: int | None = None, global_batch_size: int | None = None,
             image_size: Sequence[int] | str | None = None, image_grid: Sequence[int] | str | None = None,
             images_per_sample: int | None = None, causal: str = "half",
             recompute: str | None = None, frozen: Sequence[str] | None = None, log_interval: int | None = None,
             metadata_progress: Callable[[int, int], None] | None = None,
             per_rank: bool = False, scheduler: str | None = None, logs: Sequence[str | Path] = (),
             merge_logs: bool = False, trainable: Sequence[str] | None = None,
             adapter: str | Path | None = None, qlora: bool = False) -> LoadedRun:
    """Open one run (`vlm_perf.run.core.open_run`) and analyse it: the `RunAnalysis` and the report context.

    Arguments override the manifest (run.yaml / run.json), which overrides what the log states, which
    overrides the checkpoint files (``vlm_perf.run.options``). Without metadata every number is an
    estimate from the run configuration (and labelled so). ``causal``: how ``exact`` counts the LM
    attention core, ``half`` (flash-style causal kernels, the default) or ``full`` (the whole square, as
    eager/masked attention computes it). ``recompute`` (none|selective|full[:N]) overrides the recompute
    settings the log / run.yaml state (HFU). The metadata is read once (`MetadataSource`);
    ``metadata_progress(done_bytes, total_bytes)`` is called as it is read; ``per_rank=True`` also keeps
    the per-(iteration, dp_rank) statistics (``loaded.metadata.per_rank``) from the same pass.
    ``scheduler``: read the logs and metadata on a Dask cluster (`vlm_perf.scale.cluster`; same results).
    ``logs``: the log files to read (instead of every log of the run folder); log files of two different
    runs found together are refused (`analysis.evidence.MixedRunsError`) unless ``merge_logs`` (then
    merged, and the checks say so).
    """
    from .analysis.hfu import parse_recompute

    conventions = list(conventions)
    defaults = not conventions
    conventions = conventions or list(DEFAULT_CONVENTIONS)
    recompute_cli = parse_recompute(recompute) if recompute is not None else None  # fail fast on a typo
    for name in conventions:
        get_convention(name)  # fail fast on a typo
    overrides = {"model": model, "num_gpus": gpus, "gpu": gpu, "dtype": dtype, "seq_length": seq_length,
                 "global_batch_size": global_batch_size, "image_size": image_size, "image_grid": image_grid,
                 "images_per_sample": images_per_sample, "frozen": list(frozen) if frozen else None,
                 "log_interval": log_interval, "trainable": list(trainable) if trainable else None,
                 "adapter": str(adapter) if adapter else None, "qlora": True if qlora else None}
    opened = open_run(run, metadata=metadata, overrides=overrides, peak_tflops=peak_tflops, causal=causal,
                      log_format=log_format, skip_bad=skip_bad, on_step=on_step, metadata_progress=metadata_progress,
                      per_rank=per_rank, row_columns=microbatch_cost_columns, scheduler=scheduler, logs=logs,
                      examine_logs=lambda parsed, facts: examine_log_files(parsed, facts, merge_logs, str(run)))
    config, spec, parsed, frozen_parts = opened.config, opened.spec, opened.parsed, opened.frozen
    if defaults:  # the default set keeps only conventions defined for this family (asked-for ones still refuse)
        conventions = [c for c in conventions if get_convention(c).covers(spec.family)]
    # 24 bytes per microbatch (iteration, dp_rank, lm and vision FLOPs), handed over by the source so that they
    # are freed once the balance analysis has used them; the total is never materialised here
    costs = costs_from_row_values(opened.metadata.take_row_values(), total=False) if opened.metadata else None
    its = parsed.iterations
    if its.height == 0 or its.get_column("iteration").null_count() == its.height:
        files = parsed.diagnostics.files
        shown = f"{files[0]}" if len(files) == 1 else f"{len(files)} log files (first: {files[0] if files else '?'})"
        raise InputError(f"{shown}: {parsed.raw.height} log record(s) but no numbered training iteration (a step or "
                         "iteration count on each logged step); give the training log of the run")
    on_step("recomputing FLOPs per window")
    analysis = analyze_run(its, spec, opened.stats_frame, world_size=config.num_gpus,
                           peak_tflops=opened.peak_tflops, conventions=conventions, frozen=frozen_parts,
                           estimate=opened.estimate, log_interval=config.log_interval,
                           global_batch_size=config.global_batch_size, log_segments=parsed.deduplicated,
                           micro_batch_size=config.micro_batch_size, causal=causal)
    analysis.model = model_title(spec.name, spec.source, spec.model_type)  # titles name the model (report/units.py)
    # the report parts (`vlm_perf.report.parts`), each computed once; the regime before the checks (its
    # contradictions are messages the checks see), the balance while the per-microbatch costs exist
    parts = PartContext(opened, analysis, {"peak_tflops": peak_tflops, "recompute": recompute_cli, "causal": causal,
                                           "on_step": on_step, "costs": costs})
    parts.result("regime")
    ignored = parsed.diagnostics.ignored
    events = ("checkpoint", "validation", "traceback", "restart_banner")
    analysis.health["log_events"] = {kind: int(ignored.get(kind, 0)) for kind in events}
    evidence = evidence_checks(opened, analysis, costs=costs,
                               overrides={k: v for k, v in overrides.items() if v is not None},
                               logs_chosen=bool(list(logs)))
    meta_diag = opened.metadata_diagnostics
    analysis.checks = run_checks(analysis, parsed.diagnostics.to_dict(), meta_diag, evidence=evidence)
    parts.result("balance")
    del parts.options["costs"]
    # after the balance analysis (its group-by is the largest transient): one value per microbatch of the
    # iterations the means use (one selection of windows for every figure and number) is all that outlives
    # the per-microbatch FLOPs
    micro_share = microbatch_vision_share(costs.filter(pl.col("iteration").is_in(
        analysis.selection.iterations().implode()))) if costs is not None else None
    del costs
    context = ReportContext(
        run=str(opened.path), gpu=config.gpu, dtype=config.dtype or "bf16", synthetic=bool(config.synthetic),
        inputs={"logs": [str(p) for p in opened.files.logs], "metadata": [str(p) for p in opened.metadata_paths],
                "model": config.model, "model_source": config.sources.get("model"), "causal": causal},
        run_config=config.to_dict(), diagnostics={"log": parsed.diagnostics.to_dict(), "metadata": meta_diag},
        microbatch_vision_share=micro_share, results=compute_parts(parts))
    return LoadedRun(analysis, context, spec, parsed.iterations, parsed.raw, metadata=opened.metadata)


def examine_log_files(parsed, log_facts, merge_logs: bool, run: str):
    """The first step of the evidence place, run by `open_run` as soon as the logs are parsed (before
    the metadata is read): log files of two different runs found together are refused
    (`vlm_perf.analysis.evidence.MixedRunsError`) unless ``merge_logs``. Returns (per-file ranges, the
    pairs judged to be two runs), which `evidence_checks` uses."""
    from .analysis import evidence as ev_mod

    ranges = ev_mod.file_ranges(parsed.raw, {f.path: f.arguments for f in log_facts})
    mixed = ev_mod.mixed_runs(ranges, parsed.raw)
    if mixed and not merge_logs:
        ev_mod.refuse_mixed(mixed, run)
    return ranges, mixed


def evidence_checks(opened: Run, analysis: RunAnalysis, *, costs=None, overrides: dict | None = None,
                    logs_chosen: bool = False):
    """THE place where the opened run's evidence is cross-examined before any number is printed: what the
    inputs say against each other (configuration conflicts, vision that would count as zero, metadata the
    reader noticed, inputs outside the run folder), and the checks of `vlm_perf.analysis.evidence` (two
    runs' logs — refused earlier by `examine_log_files` unless merged —, metadata vs log, parallelism vs DP
    ranks, log vs model, training regime, ignored estimate settings, configuration conflicts, log tokens).
    Each finding becomes a message of the analysis; returns the `Evidence` the checks are built from."""
    from .analysis import evidence as ev_mod

    config, stats_frame = opened.config, opened.stats_frame
    if opened.causal == "full":
        opened.notes.append("exact counts the LM attention core as the full square (as eager/masked attention "
                            "computes it), not the causal half")
    analysis.messages.extend(opened.notes + vision_gaps(opened.spec, opened.estimate, stats_frame,
                                                        stats_frame is None))
    analysis.messages.extend(links_outside([*opened.files.logs, *opened.metadata_paths], opened.files.folder))
    meta_diag = opened.metadata_diagnostics
    if meta_diag:  # what the metadata reader noticed belongs in the report, not only in diagnostics
        skipped = meta_diag.get("rows_skipped_total", 0)
        if skipped:
            analysis.messages.append(f"metadata: {skipped} bad row(s) skipped (skip-bad); first: "
                                     + "; ".join(meta_diag.get("bad_lines", [])[:3]))
        analysis.messages.extend(f"metadata: {note}" for note in meta_diag.get("notes", []))
    # configuration conflicts are the `configuration` check's (each stated once there, not again as a message)
    ranges, mixed = opened.examined if opened.examined is not None else ([], [])
    return ev_mod.gather_evidence(opened.spec, config, ranges, mixed, opened.log_facts, analysis, stats_frame, costs,
                                  overrides or {}, opened.frozen, opened.causal, logs_chosen=logs_chosen,
                                  regime=opened.regime)
