"""THE place where an opened run's evidence is cross-examined before any number is printed (pure functions the
`vlm_perf.analysis.facade.Run` forwards to): log files of two runs found together (`examine_log_files`, run as soon
as the logs are parsed), what the inputs say against each other (`evidence_messages`: notes of the opening, vision
that would count as zero, inputs outside the run folder, what the metadata reader noticed, configuration
conflicts) and the `Evidence` the checks of `vlm_perf.analysis.evidence` are built from (`evidence_of`)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ..arch.spec import ModelSpec
from ..run.core import links_outside
from ..stats import BatchStats
from . import evidence as ev_mod

if TYPE_CHECKING:
    from ..run.core import RunInputs
    from .run import RunAnalysis

__all__ = ["vision_gaps", "examine_log_files", "evidence_messages", "evidence_of"]


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


def examine_log_files(parsed, log_facts, merge_logs: bool, run: str):
    """The first step of the evidence place, run by `open_run` as soon as the logs are parsed (before
    the metadata is read): log files of two different runs found together are refused
    (`vlm_perf.analysis.evidence.MixedRunsError`) unless ``merge_logs``. Returns (per-file ranges, the
    pairs judged to be two runs), which `evidence_of` uses."""
    ranges = ev_mod.file_ranges(parsed.raw, {f.path: f.arguments for f in log_facts})
    mixed = ev_mod.mixed_runs(ranges, parsed.raw)
    if mixed and not merge_logs:
        ev_mod.refuse_mixed(mixed, run)
    return ranges, mixed


def evidence_messages(inputs: "RunInputs") -> list[str]:
    """What the inputs say against each other, as report messages (in this order): the notes of opening the run
    (and the full-square attention core), vision that would count as zero, inputs that are links outside the run
    folder, what the metadata reader noticed. Configuration conflicts are the ``configuration`` check's (each
    stated once there, not again as a message)."""
    out = list(inputs.notes)
    if inputs.causal == "full":
        out.append("exact counts the LM attention core as the full square (as eager/masked attention computes it), "
                   "not the causal half")
    stats_frame = inputs.stats_frame
    out += vision_gaps(inputs.spec, inputs.estimate, stats_frame, stats_frame is None)
    out += links_outside([*inputs.files.logs, *inputs.metadata_paths], inputs.files.folder)
    meta_diag = inputs.metadata_diagnostics
    if meta_diag:  # what the metadata reader noticed belongs in the report, not only in diagnostics
        skipped = meta_diag.get("rows_skipped_total", 0)
        if skipped:
            out.append(f"metadata: {skipped} bad row(s) skipped (skip-bad); first: "
                       + "; ".join(meta_diag.get("bad_lines", [])[:3]))
        out += [f"metadata: {note}" for note in meta_diag.get("notes", [])]
    return out


def evidence_of(inputs: "RunInputs", analysis: "RunAnalysis", costs: Any = None) -> "ev_mod.Evidence":
    """The `Evidence` of the opened run (two runs' logs — refused earlier by `examine_log_files` unless merged —,
    metadata vs log, parallelism vs DP ranks, log vs model, training regime, ignored estimate settings,
    configuration conflicts, log tokens): ``costs``, the per-microbatch FLOPs with ``dp_rank`` while they exist."""
    ranges, mixed = inputs.examined if inputs.examined is not None else ([], [])
    return ev_mod.gather_evidence(inputs.spec, inputs.config, ranges, mixed, inputs.log_facts, analysis,
                                  inputs.stats_frame, costs, inputs.options.overrides(), inputs.trainability,
                                  inputs.causal, logs_chosen=bool(inputs.options.log), regime=inputs.regime)
