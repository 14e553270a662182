"""`load_run`: a finished run on disk -> `RunAnalysis` + report context (the CLI and notebooks use it).

This is the top layer: it wires ingest (logs, metadata, run configuration) to analysis.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterable, Sequence

from .analysis import DEFAULT_CONVENTIONS, RunAnalysis, analyze_run
from .analysis.balance import costs_from_row_values, microbatch_cost_columns, microbatch_vision_share
from .analysis.checks import run_checks
from .arch import load_model
from .arch.spec import ModelSpec
from .flops import get_convention
from .hardware import device_peak, peak_used
from .report import ReportContext
from .report.units import model_title
from .analysis.memory import peak_memory
from .report.providers import balance_provider, hfu_provider, memory_provider, peak_provider, straggler_provider
from .stats import BatchStats

LOG_NAME = re.compile(r"(\.log(\.gz|\.zst)?|^progress\.txt|^trainer_state\.json|^trainer_log\.jsonl|^logging\.jsonl"
                      r"|events\.out\.tfevents.*)$")
METADATA_NAME = re.compile(r"^metadata.*(\.(jsonl|ndjson)(\.gz|\.zst)?|\.parquet)$")


@dataclass
class LoadedRun:
    analysis: RunAnalysis
    context: ReportContext
    spec: ModelSpec
    iterations: object  # pl.DataFrame: deduplicated iteration table from the log
    raw: object  # pl.DataFrame: every parsed record
    metadata: object = None  # MetadataSource (already read) when the run has metadata, else None


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


ESTIMATE_HELP = ("set seq_length and global_batch_size in run.yaml (or pass --seq-length N --global-batch-size B), "
                 "with the media of each sample as image_grid: [t, h, w] / --grid T,H,W or image_size: [h, w] / "
                 "--image-size H,W (images_per_sample for several); or pass --metadata PATH for exact numbers")


def estimate_from_config(config, spec: ModelSpec, run: str | Path = "") -> BatchStats:
    """Per-iteration statistics from seq_length x global_batch_size (+ the stated media of each sample)."""
    seq = config.seq_length
    batch = getattr(config, "global_batch_size", None)
    missing = [name for name, value in (("seq_length", seq), ("global_batch_size", batch)) if not value]
    if missing:
        raise ValueError(f"{run}: no metadata, and neither the log nor run.yaml states {' and '.join(missing)} to "
                         f"estimate from: {ESTIMATE_HELP}")
    grid = getattr(config, "image_grid", None)
    size = getattr(config, "image_size", None)
    if grid and size:
        raise ValueError(f"{run}: both image_grid {list(grid)} and image_size {list(size)} are set; keep one")
    if size and spec.vision is not None:
        # the family's own processor rule (smart resize with its pixel bounds, tiling, fixed size, ...)
        from .arch.families import family_for

        rule = family_for(spec.model_type, spec.source).media
        if rule is None:
            raise ValueError(f"{run}: {spec.name} has no pixel rule for image_size; state image_grid instead")
        grid = rule.image(spec, int(size[0]), int(size[1])).grid
    per_sample = getattr(config, "images_per_sample", None) or 1
    grids = [tuple(grid)] * (int(batch) * per_sample) if grid and spec.vision is not None else []
    return BatchStats.from_batch(seq_len=int(seq), samples=int(batch), image_grids=grids, spec=spec)


def logged_global_batch_size(iterations) -> int | None:
    """The global batch size the log's iteration lines print (their most common value)."""
    if "global_batch_size" not in iterations.columns:
        return None
    values = iterations["global_batch_size"].drop_nulls()
    return int(values.mode().sort()[0]) if values.len() else None


def links_outside(paths: Iterable[Path], run_dir: Path) -> list[str]:
    """Messages for inputs that are symlinks leading outside the run folder (read, but noted)."""
    root = run_dir.resolve()
    out = []
    for path in paths:
        if path.is_symlink():
            target = path.resolve()
            if root != target and root not in target.parents:
                out.append(f"input {path.name} is a symlink to {target}, outside the run folder {run_dir}")
    return out


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
    from .analysis.balance import TimeModel, analyze_balance, ranks_from_microbatches, reliable_iterations

    unranked = int(costs["dp_rank"].null_count())
    if unranked:  # (a filter copies every column: only when there is something to drop)
        costs = costs.filter(costs["dp_rank"].is_not_null())
    if costs.height == 0:
        return None
    ranks = ranks_from_microbatches(costs)
    att, dp = analysis.attribution, ranks["dp_rank"].n_unique()
    model = (TimeModel(att.lm_tflops_per_gpu, att.vision_tflops_per_gpu, analysis.world_size / dp)
             if att.ok and att.lm_tflops_per_gpu and att.vision_tflops_per_gpu and analysis.world_size else None)
    return analyze_balance(ranks, costs=costs, iterations=reliable_iterations(analysis.windows), time_model=model,
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
             recompute: str | None = None,
             metadata_progress: Callable[[int, int], None] | None = None,
             per_rank: bool = False, logs: Sequence[str | Path] = (), merge_logs: bool = False) -> LoadedRun:
    """Parse, resolve the configuration, aggregate metadata and analyse one run.

    Arguments override the manifest (run.yaml / run.json), which overrides what the log states.
    Without metadata every number is an estimate from the run configuration (and labelled so).
    ``causal``: how ``exact`` counts the LM attention core, ``half`` (flash-style causal kernels,
    the default) or ``full`` (the whole square, as eager/masked attention computes it).
    ``recompute`` (none|selective|full[:N]) overrides the recompute settings the log / run.yaml state (HFU).
    The metadata is read once (`MetadataSource`); ``metadata_progress(done_bytes, total_bytes)``
    is called as it is read; ``per_rank=True`` also keeps the per-(iteration, dp_rank) statistics
    (``loaded.metadata.per_rank``, for the load-balance analysis) from the same pass.
    ``logs``: the log files to read (instead of every log of the run folder); log files of two
    different runs found together are refused (`analysis.evidence.MixedRunsError`) unless
    ``merge_logs`` (then merged, and the checks say so).
    """
    from .ingest.logs import parse_logs
    from .ingest.metadata_source import MetadataSource
    from .ingest.runconfig import find_manifest, resolve_run_config

    from .analysis.hfu import parse_recompute

    if causal not in ("half", "full"):
        raise ValueError(f"--causal must be half or full, got {causal!r}")
    conventions = list(conventions)
    defaults = not conventions
    conventions = conventions or list(DEFAULT_CONVENTIONS)
    recompute_cli = parse_recompute(recompute) if recompute is not None else None  # fail fast on a typo
    for name in conventions:
        get_convention(name)  # fail fast on a typo
    run = Path(run)
    logs_chosen = list(logs)
    logs, found_metadata, run_dir = discover(run)
    logs = [Path(p) for p in logs_chosen] if logs_chosen else logs
    meta_paths = [Path(p) for p in metadata] or found_metadata
    on_step(f"parsing {len(logs)} log file(s)")
    parsed = parse_logs(logs, format=log_format)
    # ---- evidence (vlm_perf.analysis.evidence): two runs' logs together are refused -------------
    from .analysis import evidence as ev_mod
    from .ingest.log_facts import read_log_facts

    log_facts = read_log_facts(logs)
    ranges = ev_mod.file_ranges(parsed.raw, {f.path: f.arguments for f in log_facts})
    mixed = ev_mod.mixed_runs(ranges, parsed.raw)
    if mixed and not merge_logs:
        ev_mod.refuse_mixed(mixed, str(run))
    # ---- end evidence ----------------------------------------------------------------------------
    overrides = {k: v for k, v in {"model": model, "num_gpus": gpus, "gpu": gpu, "dtype": dtype,
                                   "seq_length": seq_length, "global_batch_size": global_batch_size,
                                   "image_size": image_size, "image_grid": image_grid,
                                   "images_per_sample": images_per_sample}.items() if v is not None}
    config = resolve_run_config(parsed.run_config, find_manifest(run), overrides)
    if not config.model:
        raise ValueError("model unknown: pass --model NAME_OR_CONFIG or set 'model' in run.yaml")
    if not config.global_batch_size:  # the iteration lines may print it where the arguments block did not
        config.global_batch_size = logged_global_batch_size(parsed.iterations)
        if config.global_batch_size:
            config.sources["global_batch_size"] = "log:iteration lines"
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
    stats_frame, micro_share, meta_diag, estimate, costs, source = None, None, {}, None, None, None
    if meta_paths:
        on_step(f"aggregating metadata ({len(meta_paths)} path(s))")
        # one pass: per-iteration statistics, diagnostics and exact FLOPs per microbatch (the vision-share
        # figure and the DP load balance)
        source = MetadataSource(meta_paths, spec, skip_bad=skip_bad, progress=metadata_progress, per_rank=per_rank,
                                row_columns=microbatch_cost_columns(spec, frozen, causal)).read()
        stats_frame, meta_diag = source.per_iteration, source.diagnostics.to_dict()
        # 24 bytes per microbatch (iteration, dp_rank, lm and vision FLOPs), handed over by the source so
        # that they are freed once the balance analysis has used them; the total is never materialised here
        costs = costs_from_row_values(source.take_row_values(), total=False)
    else:
        estimate = estimate_from_config(config, spec, run)
    on_step("recomputing FLOPs per window")
    analysis = analyze_run(parsed.iterations, spec, stats_frame, world_size=config.num_gpus, peak_tflops=peak,
                           conventions=conventions, frozen=frozen, estimate=estimate,
                           log_interval=config.log_interval, global_batch_size=config.global_batch_size,
                           log_segments=parsed.deduplicated, micro_batch_size=config.micro_batch_size, causal=causal)
    analysis.model = model_title(spec.name, spec.source, spec.model_type)  # titles name the model (report/units.py)
    if causal == "full":
        notes.append("exact counts the LM attention core as the full square (--causal full, as eager/masked "
                     "attention computes it), not the causal half")
    analysis.messages.extend(notes + vision_gaps(spec, estimate, stats_frame, stats_frame is None))
    analysis.messages.extend(links_outside([*logs, *meta_paths], run_dir))
    if meta_diag:  # what the metadata reader noticed belongs in the report, not only in diagnostics
        skipped = meta_diag.get("rows_skipped_total", 0)
        if skipped:
            analysis.messages.append(f"metadata: {skipped} bad row(s) skipped (--skip-bad); first: "
                                     + "; ".join(meta_diag.get("bad_lines", [])[:3]))
        analysis.messages.extend(f"metadata: {note}" for note in meta_diag.get("notes", []))
    for conflict in config.conflict_messages():
        analysis.messages.append(f"configuration conflict: {conflict}")
    ignored = parsed.diagnostics.ignored
    events = ("checkpoint", "validation", "traceback", "restart_banner")
    analysis.health["log_events"] = {kind: int(ignored.get(kind, 0)) for kind in events}
    # ---- evidence (vlm_perf.analysis.evidence): cross-examined before any number is printed -----
    evidence = ev_mod.gather_evidence(spec, config, ranges, mixed, log_facts, analysis, stats_frame, costs, overrides,
                                      frozen, causal, logs_chosen=bool(logs_chosen))
    analysis.checks = run_checks(analysis, parsed.diagnostics.to_dict(), meta_diag, evidence=evidence)
    # ---- end evidence ----------------------------------------------------------------------------
    balance = balance_of(costs, spec, frozen, analysis) if costs is not None else None
    # after the balance analysis (its group-by is the largest transient): one value per microbatch for the
    # vision-share figure is all that outlives the per-microbatch FLOPs
    micro_share = microbatch_vision_share(costs) if costs is not None else None
    del costs
    context = ReportContext(
        run=str(run), gpu=config.gpu, dtype=config.dtype or "bf16", synthetic=bool(config.synthetic),
        inputs={"logs": [str(p) for p in logs], "metadata": [str(p) for p in meta_paths], "model": config.model,
                "causal": causal},
        run_config=config.to_dict(), diagnostics={"log": parsed.diagnostics.to_dict(), "metadata": meta_diag},
        microbatch_vision_share=micro_share, sections=[peak_provider(peak_used(config.gpu, config.dtype or "bf16", peak_tflops)),
                  hfu_provider(hfu_of(analysis, spec, config, frozen, recompute_cli, causal)), balance_provider(balance),
                  straggler_provider(stragglers_of(logs, config, balance, analysis, parsed.rank_timing)),
                  memory_provider(peak_memory(log_facts, parsed.raw))])
    return LoadedRun(analysis, context, spec, parsed.iterations, parsed.raw, metadata=source)
