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
from .analysis.log_reconcile import log_reconcile
from .analysis.memory import peak_memory
from .arch.spec import ModelSpec
from .flops import get_convention
from .hardware import peak_used
from .report import ReportContext
from .report.providers import (balance_provider, hfu_provider, memory_provider, peak_provider, reconcile_provider,
                               regime_provider, straggler_provider, trace_provider)
from .report.providers import SectionProvider
from .report.units import model_title, run_rate_unit
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


def balance_of(costs, spec: ModelSpec, frozen, analysis: RunAnalysis):
    """DP load balance from the per-microbatch exact FLOPs (`vlm_perf.analysis.balance`), over the
    iterations the report's means use; the step-time model comes from the attribution when it was fitted."""
    from .analysis.balance import TimeModel, analyze_balance, ranks_from_microbatches

    unranked = int(costs["dp_rank"].null_count())
    if unranked:  # (a filter copies every column: only when there is something to drop)
        costs = costs.filter(costs["dp_rank"].is_not_null())
    if costs.height == 0:
        return None
    ranks = ranks_from_microbatches(costs)
    att, dp = analysis.attribution, ranks["dp_rank"].n_unique()
    model = (TimeModel(att.lm_tflops_per_gpu, att.vision_tflops_per_gpu, analysis.world_size / dp)
             if att.ok and att.lm_tflops_per_gpu and att.vision_tflops_per_gpu and analysis.world_size else None)
    return analyze_balance(ranks, costs=costs, iterations=analysis.selection.iterations(), time_model=model,
                           rows_without_rank=unranked)


def hfu_of(analysis: RunAnalysis, spec: ModelSpec, config, frozen, override=None, causal: str = "half") -> dict:
    """HFU block: the --recompute override, else what run.yaml / the log state, else no recompute."""
    from .analysis.hfu import Recompute, hfu_summary, recompute_from_config

    sources = {config.sources.get(k) for k in ("recompute_granularity", "gradient_checkpointing")} - {None}
    policy = override or recompute_from_config(
        config.recompute_granularity, config.recompute_method, config.recompute_num_layers,
        config.gradient_checkpointing, config.pipeline_parallel,
        source="/".join(sorted(sources)) or "run configuration") or Recompute()
    return hfu_summary(analysis, spec, policy, frozen, causal)


def stragglers_of(logs, config, balance, analysis: RunAnalysis, timing=None) -> dict:
    """Per-rank timing lines of the logs, correlated with the DP load balance when metadata exists.
    ``timing``: the `RankTiming` the log parse collected (``ParseResult.rank_timing``); the logs are
    read again only without it."""
    from .analysis.stragglers import straggler_summary
    from .analysis.windows import infer_log_interval
    from .ingest.logs.timers import read_rank_timing

    timing = timing if timing is not None else read_rank_timing(logs)
    interval = config.log_interval or infer_log_interval(analysis.windows.select("segment", "iteration"))
    return straggler_summary(timing, ranks=balance.ranks if balance is not None else None,
                             tp=config.tensor_parallel, cp=config.context_parallel, dp=config.data_parallel,
                             interval=interval)


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
    on_step("recomputing FLOPs per window")
    analysis = analyze_run(parsed.iterations, spec, opened.stats_frame, world_size=config.num_gpus,
                           peak_tflops=opened.peak_tflops, conventions=conventions, frozen=frozen_parts,
                           estimate=opened.estimate, log_interval=config.log_interval,
                           global_batch_size=config.global_batch_size, log_segments=parsed.deduplicated,
                           micro_batch_size=config.micro_batch_size, causal=causal)
    analysis.model = model_title(spec.name, spec.source, spec.model_type)  # titles name the model (report/units.py)
    regime_block = regime_summary(opened, analysis)
    ignored = parsed.diagnostics.ignored
    events = ("checkpoint", "validation", "traceback", "restart_banner")
    analysis.health["log_events"] = {kind: int(ignored.get(kind, 0)) for kind in events}
    evidence = evidence_checks(opened, analysis, costs=costs,
                               overrides={k: v for k, v in overrides.items() if v is not None},
                               logs_chosen=bool(list(logs)))
    meta_diag = opened.metadata_diagnostics
    analysis.checks = run_checks(analysis, parsed.diagnostics.to_dict(), meta_diag, evidence=evidence)
    balance = balance_of(costs, spec, frozen_parts, analysis) if costs is not None else None
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
        microbatch_vision_share=micro_share,
        sections=[peak_provider(peak_used(config.gpu, config.dtype or "bf16", peak_tflops)),
                  hfu_provider(hfu_of(analysis, spec, config, frozen_parts, recompute_cli, causal),
                               run_rate_unit({"conventions": analysis.convention_summary()})),
                  balance_provider(balance), regime_provider(regime_block),
                  straggler_provider(stragglers_of(opened.files.logs, config, balance, analysis, parsed.rank_timing)),
                  trace_parts_of(opened, analysis, on_step), reconcile_provider(log_reconcile(analysis, spec)),
                  memory_provider(peak_memory(opened.log_facts, parsed.raw)),
                  SectionProvider("rl", rl_summary(opened, analysis, causal), lambda out: None)])
    return LoadedRun(analysis, context, spec, parsed.iterations, parsed.raw, metadata=opened.metadata)


def trace_parts_of(opened: Run, analysis: RunAnalysis, on_step: Callable[[str], None] = lambda text: None):
    """The report's per-part block when the run folder holds profiler traces (`vlm_perf.run.discover`): the
    traces attributed to parts and joined with the exact FLOPs of the run's metadata (its model, frozen parts,
    causal setting, peak and world size); a trace that cannot be read becomes a message, not a failed report."""
    from .analysis.trace_parts import analyze_traces
    from .analysis.trace_summary import trace_summary
    from .errors import VlmPerfError

    files = opened.files.traces
    if not files:
        return trace_provider(None)
    on_step(f"attributing {len(files)} profiler trace(s) to parts")
    config = opened.config
    try:
        result = analyze_traces(files, spec=opened.spec, metadata=opened.metadata_paths or None, causal=opened.causal,
                                frozen=opened.frozen, world_size=config.num_gpus,
                                peak_flops=opened.peak_tflops * 1e12 if opened.peak_tflops else None)
    except VlmPerfError as exc:
        analysis.messages.append(f"profiler trace not analysed: {exc}")
        return trace_provider(None)
    summary = trace_summary(result, files, analysis.per_iteration, config.num_gpus)
    if summary["flops_match_report"] is False:
        analysis.messages.append(f"trace FLOPs per part sum to {summary['flops_total']:.6e}, the report's exact FLOPs "
                                 f"of the profiled iterations are {summary['report_exact_flops']:.6e}")
    return trace_provider(summary, result)


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
    for conflict in config.conflict_messages():
        analysis.messages.append(f"configuration conflict: {conflict}")
    ranges, mixed = opened.examined if opened.examined is not None else ([], [])
    return ev_mod.gather_evidence(opened.spec, config, ranges, mixed, opened.log_facts, analysis, stats_frame, costs,
                                  overrides or {}, opened.frozen, opened.causal, logs_chosen=logs_chosen,
                                  regime=opened.regime)


def regime_summary(opened: Run, analysis: RunAnalysis) -> dict | None:
    """The regime block (summary.json ``regime``): what trains, from which source, and full-training accounting
    beside the run's exact numbers over the windows the means use; contradictions between sources become
    messages naming the size of the FLOPs difference. None when no source states a regime."""
    from .flops.regime import exact_flops
    from .arch.trainability import Trainability

    regime = opened.regime
    if regime is None or not regime.stated:
        return None
    frame = analysis.per_iteration.filter(pl.col("iteration").is_in(analysis.selection.iterations().implode()))
    if frame.height == 0:
        frame = analysis.per_iteration
    cols = BatchStats.columns()
    used = float(frame["exact_total"].sum())

    def total(t) -> float:
        value = exact_flops(opened.spec, cols, t, causal=opened.causal).total
        expr = value if isinstance(value, pl.Expr) else pl.lit(float(value))
        return float(frame.select(expr.cast(pl.Float64)).to_series().sum())

    full = total(Trainability())
    ratio = full / used if used else None
    exact = analysis.convention_summary().get("exact", {})
    rate, mfu = exact.get("tflops_per_gpu_mean"), exact.get("mfu_mean")
    contradictions = []
    for source, alternative in regime.alternatives:
        try:
            other = total(alternative)
        except Exception as exc:  # noqa: BLE001 - a source that cannot be counted is named, not fatal
            contradictions.append(f"{source} could not be counted ({exc})")
            continue
        if used and abs(other - used) > 1e-9 * used:
            contradictions.append(f"{source} says {alternative.describe()}: {100 * (other / used - 1):+.1f}% FLOPs "
                                  f"({other / max(frame.height, 1):.4g} vs {used / max(frame.height, 1):.4g} per "
                                  f"iteration); using {regime.source}")
    for text in contradictions:
        analysis.messages.append(f"training regime contradiction: {text}")
    return {"description": regime.description, "source": regime.source, "whole_parts": regime.stage_level,
            "trainability": regime.trainability.describe(),
            "flops_per_iteration": used / frame.height if frame.height else None,
            "full_training_flops_per_iteration": full / frame.height if frame.height else None,
            "full_training_over_regime": ratio,
            "full_training_tflops_per_gpu_mean": rate * ratio if rate is not None and ratio else None,
            "full_training_mfu_mean": mfu * ratio if mfu is not None and ratio else None,
            "contradictions": contradictions}


def rl_summary(opened: Run, analysis: RunAnalysis, causal: str = "half") -> dict | None:
    """The RL block (summary.json ``rl``): per-phase FLOPs, seconds and rates of every RL step, from the run's
    ``rl/`` metadata (`vlm_perf.ingest.rl_metadata`, `vlm_perf.analysis.rl`), with the training-only accounting
    (the exact FLOPs the update's microbatches count as training steps) beside it. None without ``rl/``."""
    from .analysis.rl import log_phase_timings, log_response_check, rl_accounting
    from .arch.trainability import Trainability
    from .ingest.rl_metadata import find_rl, read_rl

    folder = find_rl(opened.files.folder)
    if folder is None:
        return None
    record = read_rl(folder)
    frozen = opened.frozen
    trainability = frozen if isinstance(frozen, Trainability) else (Trainability.from_frozen(tuple(frozen))
                                                                   if frozen else None)
    timings = log_phase_timings(opened.parsed.iterations)
    accounting = rl_accounting(opened.spec, record, trainability, causal, num_gpus=opened.config.num_gpus or 1,
                               timings_s=timings)
    if timings:
        analysis.messages.append(f"RL phase seconds of {len(timings)} iteration(s) from the log's phase timers")
    checked, disagreements = log_response_check(record, opened.parsed.iterations)
    analysis.messages.extend(f"RL metadata vs log: {text}" for text in disagreements)
    per_it = analysis.per_iteration
    training_only = float(per_it["exact_total"].sum()) if "exact_total" in per_it.columns and per_it.height else None
    rl_iterations = {it.iteration for it in accounting.iterations}
    meta_iterations = set(per_it["iteration"].to_list()) if "iteration" in per_it.columns else set()
    if meta_iterations and rl_iterations != meta_iterations:
        analysis.messages.append(f"RL metadata covers {len(rl_iterations)} iterations, the training metadata "
                                 f"{len(meta_iterations)}: the training-only accounting beside the RL phases is "
                                 "over different steps")
    block = accounting.to_dict(training_only)
    block["log_response_lengths_checked"] = checked
    return block
