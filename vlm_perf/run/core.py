"""`RunInputs`: a run on disk opened once — its files, the parsed logs, the resolved configuration, the
model, the peak, the regime and the per-iteration statistics (metadata, read in one pass, or an estimate from the
configuration). Every analysis and every output starts from one `vlm_perf.analysis.facade.Run` built on it.

Precedence of the configuration (`vlm_perf.run.options`): command line > run.yaml > log > checkpoint
files (a ``config.json`` in the run folder is the model when no other source names one).
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Callable, Iterable, Sequence

from ..arch import load_model
from ..arch.spec import ModelSpec
from ..errors import ConfigError, UnsupportedModelError
from ..hardware import device_peak
from ..stats import BatchStats
from ..remote import as_path
from ..arch.trainability import Trainability
from .discover import RunFiles, discover_run
from .options import MissingSettings, RunOptions
from .regime import Regime, resolve_regime

__all__ = ["RunInputs", "open_run", "read_rl_of", "rank_timing_of", "read_trace_inputs", "estimate_from_config", "logged_global_batch_size", "links_outside", "ESTIMATE_HELP"]

ESTIMATE_HELP = ("state seq_length and global_batch_size in run.yaml, with the media of each sample as "
                 "image_grid: [t, h, w] or image_size: [h, w] (images_per_sample for several); or give the "
                 "per-microbatch metadata for exact numbers")


@dataclass
class RunInputs:
    """What a run folder holds, read once: its files, the parsed logs, the resolved configuration, the model, the
    peak, the training regime and the per-iteration statistics (``metadata``: the `MetadataSource`, already read,
    or None; ``estimate``: the statistics of one iteration from the configuration when there is no metadata).
    The analyses of a run are the `vlm_perf.analysis.facade.Run` built on it."""

    path: Path
    files: RunFiles
    metadata_paths: list[Path]
    parsed: Any  # vlm_perf.ingest.logs.ParseResult
    config: Any  # vlm_perf.ingest.runconfig.RunConfig
    spec: ModelSpec
    peak_tflops: float | None
    options: RunOptions
    regime: Regime  # what trains, from which source (`vlm_perf.run.regime`)
    metadata: Any = None
    estimate: BatchStats | None = None
    notes: list[str] = field(default_factory=list)  # what opening the run noticed (for the report's messages)
    log_facts: list = field(default_factory=list)  # what each log file states besides its iterations (ingest.log_facts)
    examined: Any = None  # what ``examine_logs`` returned (the evidence place's first step)

    @property
    def causal(self) -> str:
        return self.options.causal

    @property
    def trainability(self) -> Trainability:
        """What trains: the one type every FLOPs count takes (whole parts are counted as the frozen parts are)."""
        return self.regime.trainability

    @property
    def stats_frame(self):
        """Per-iteration statistics from the metadata (None in estimate mode)."""
        return self.metadata.per_iteration if self.metadata is not None else None

    @property
    def metadata_diagnostics(self) -> dict:
        return self.metadata.diagnostics.to_dict() if self.metadata is not None else {}


def estimate_from_config(config, spec: ModelSpec, run: str | Path = "") -> BatchStats:
    """Per-iteration statistics from seq_length x global_batch_size (+ the stated media of each sample)."""
    seq = config.seq_length
    batch = getattr(config, "global_batch_size", None)
    missing = [name for name, value in (("seq_length", seq), ("global_batch_size", batch)) if not value]
    if missing:
        raise MissingSettings(f"{run}: no metadata, and neither the log nor run.yaml states {' and '.join(missing)} "
                              f"to estimate from: {ESTIMATE_HELP}",
                              ("seq_length", "global_batch_size", "image_grid", "image_size", "images_per_sample"))
    grid = getattr(config, "image_grid", None)
    size = getattr(config, "image_size", None)
    if grid and size:
        raise ConfigError(f"{run}: both image_grid {list(grid)} and image_size {list(size)} are set; keep one")
    per_sample = getattr(config, "images_per_sample", None) or 1
    images = int(batch) * per_sample
    item_grids: list = []
    rows: list = []
    if size and spec.vision is not None:
        # the family's own processor rule (smart resize with its pixel bounds, tiling, fixed size, ...): every
        # grid of the item (MiniCPM-V: overview + slices) and its own projector rows (Phi-4-multimodal)
        from ..arch.families import family_for

        rule = family_for(spec.model_type, spec.source).media
        if rule is None:
            raise UnsupportedModelError(f"{run}: {spec.name} has no pixel rule for image_size; state image_grid "
                                        "instead")
        item = rule.image(spec, int(size[0]), int(size[1]))
        item_grids = [tuple(g) for g in item.grids]
        if item.merged_tokens is not None:
            if len(item_grids) > 1:
                item.single_grid(f"{run}: image_size")  # refuses: no per-grid projector rows
            rows = [item.merged_tokens] * images
    elif grid and spec.vision is not None:
        from ..ingest.metadata_source import grids_exact

        if not grids_exact(spec):  # the metadata path's code 36: per-image grids do not give the projector rows
            raise UnsupportedModelError(f"{run}: image_grid {list(grid)}: {spec.name}'s image tokens and tower crops "
                                        "are not derivable from per-image grids; state image_size in pixels instead")
        item_grids = [tuple(grid)]
    return BatchStats.from_batch(seq_len=int(seq), samples=int(batch), image_grids=item_grids * images, spec=spec,
                                 image_merged_tokens=rows)


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


def open_run(path: str | Path, options: RunOptions | None = None, *, metadata: Sequence[str | Path] = (),
             on_step: Callable[[str], None] = lambda text: None,
             metadata_progress: Callable[[int, int], None] | None = None, per_rank: bool = False,
             row_columns: Callable[[ModelSpec, Trainability, str], dict] | None = None,
             examine_logs: Callable[[Any, list], Any] | None = None, need_log: bool = True,
             stats: bool = True, client: Any = None) -> RunInputs:
    """Open a run: discover its files (`discover_run`), parse the logs, resolve the configuration (``options``:
    the typed run options, `RunOptions`; the ones set override run.yaml, the log and the checkpoint files), load
    the model, look up the peak, resolve the regime and read the metadata once (or build the estimate).
    ``row_columns(spec, trainability, causal)``: per-microbatch columns the metadata pass computes as it reads.
    ``options.log``: the log files to read instead of the folder's (the folder still gives metadata and manifest).
    ``examine_logs(parsed, log_facts)`` is called as soon as the logs are parsed, before anything else is
    read (the caller's evidence checks may refuse the logs there); its result is ``RunInputs.examined``.
    ``options.scheduler`` (``local[:N]``, an address or a scheduler file; `vlm_perf.scale.cluster.scheduled`): the
    logs and the metadata are read on that Dask cluster, map + combine with the same per-partition code (same
    results). ``need_log=False``: a folder without a training log opens too (its configuration from run.yaml and
    the checkpoint files); ``stats=False``: no estimate is built when there is no metadata (a caller that only
    needs the resolved model, regime, peak and metadata, as ``vlm-perf trace --run``). ``client``: a Dask client
    the caller already connected (instead of ``options.scheduler``), so one cluster serves the run and the
    caller's own reads."""
    options = options if options is not None else RunOptions()
    how = _How(metadata, on_step, metadata_progress, per_rank, row_columns, examine_logs, need_log, stats)
    if client is not None or not options.scheduler:
        return _open_run(path, options, how, client)
    from ..scale.cluster import scheduled

    with scheduled(options.scheduler, before=lambda: discover_run(path, need_log)) as cluster:
        return _open_run(path, options, how, cluster)


@dataclass(frozen=True)
class _How:
    """How `open_run` reads (everything that is not a run option)."""

    metadata: Sequence[str | Path]
    on_step: Callable[[str], None]
    metadata_progress: Callable[[int, int], None] | None
    per_rank: bool
    row_columns: Callable[[ModelSpec, Trainability, str], dict] | None
    examine_logs: Callable[[Any, list], Any] | None
    need_log: bool
    stats: bool


def _open_run(path: str | Path, options: RunOptions, how: _How, client: Any) -> RunInputs:
    from ..ingest.log_facts import read_log_facts
    from ..ingest.logs import parse_logs
    from ..ingest.metadata_source import MetadataSource
    from ..ingest.runconfig import resolve_run_config

    path = as_path(path)  # a URL stays one (vlm_perf.remote)
    files = discover_run(path, how.need_log)
    if options.log:
        files = replace(files, logs=[as_path(p) for p in options.log])
    meta_paths = [as_path(p) for p in how.metadata] or list(files.metadata)
    how.on_step(f"parsing {len(files.logs)} log file(s)")
    if client is not None and files.logs:
        from ..scale.cluster import parse_logs_on

        parsed = parse_logs_on(client, files.logs, format=options.log_format)
    else:
        parsed = parse_logs(files.logs, format=options.log_format, empty_ok=not files.logs)
    log_facts = read_log_facts(files.logs)
    examined = how.examine_logs(parsed, log_facts) if how.examine_logs is not None else None
    config = resolve_run_config(parsed.run_config, files.manifest, options.overrides())
    if not config.model and files.checkpoint_config is not None:  # lowest precedence: the checkpoint files
        config.model = str(files.checkpoint_config)
        config.sources["model"] = "checkpoint:config.json"
    if not config.model:
        raise MissingSettings("model unknown: set 'model' in run.yaml (a preset name or a config.json), or put the "
                              "checkpoint's config.json in the run folder", ("model",))
    if not config.global_batch_size:  # the iteration lines may print it where the arguments block did not
        config.global_batch_size = logged_global_batch_size(parsed.iterations)
        if config.global_batch_size:
            config.sources["global_batch_size"] = "log:iteration lines"
    spec = load_model(config.model)
    peak, notes = options.peak_tflops, [f"model config: {n}" for n in spec.extra.get("notes", ())]
    if peak is None and config.gpu:
        try:
            peak = device_peak(config.gpu).flops(config.dtype or "bf16") / 1e12
        except ValueError as exc:  # partial results beat none: MFU stays empty, the gap is stated
            notes.append(f"{exc}; MFU left empty")
    regime = resolve_regime(config, files, spec)
    opened = RunInputs(path, files, meta_paths, parsed, config, spec, peak, options, regime, notes=notes,
                       log_facts=log_facts, examined=examined)
    if meta_paths:
        how.on_step(f"aggregating metadata ({len(meta_paths)} path(s))" + (" on the cluster" if client else ""))
        columns = how.row_columns(spec, regime.trainability, options.causal) if how.row_columns else None
        if client is not None:
            from ..scale.cluster import read_metadata

            opened.metadata = read_metadata(client, meta_paths, spec, skip_bad=options.skip_bad,
                                            per_rank=how.per_rank, row_columns=columns,
                                            progress=how.metadata_progress)
            return opened
        opened.metadata = MetadataSource(meta_paths, spec, skip_bad=options.skip_bad, progress=how.metadata_progress,
                                         per_rank=how.per_rank, row_columns=columns).read()
    elif how.stats:
        opened.estimate = estimate_from_config(config, spec, path)
    return opened


def read_rl_of(folder: Path) -> tuple[Any, str | None]:
    """(the `RLRecord` of the run folder's ``rl/``, or None; why an ``rl/`` found there is left out, or None)."""
    from ..ingest.rl_metadata import find_rl, incomplete_rl, read_rl

    found = find_rl(folder)
    if found is None:
        return None, incomplete_rl(folder)
    return read_rl(found), None


def rank_timing_of(inputs: RunInputs) -> Any:
    """The logs' per-rank timing lines (`RankTiming`): what the log parse collected, else read from the logs."""
    from ..ingest.logs.timers import read_rank_timing

    timing = inputs.parsed.rank_timing
    return timing if timing is not None else read_rank_timing(inputs.files.logs)


def read_trace_inputs(inputs: RunInputs) -> tuple[Any, Any]:
    """(the run folder's profiler traces read and merged, `TracePartial`; its metadata as the trace join needs it,
    `TraceMetadata`, or None without metadata)."""
    from ..ingest.traces import read_traces, trace_metadata

    partial = read_traces(inputs.files.traces)
    paths = inputs.metadata_paths
    return partial, trace_metadata(paths, inputs.spec) if paths else None
