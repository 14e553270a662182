"""Cross-examine a run's evidence before any number is printed: do the log files, the metadata, the
run configuration and the model tell the same story?

Every function here is pure (no I/O) and turns an `Evidence` (facts gathered by `pipeline.load_run`
from the parsed logs, `vlm_perf.ingest.log_facts`, the metadata and the resolved configuration) into
one `Check` of `vlm_perf.analysis.checks` — a line of the report's verdict block that states the size
of any disagreement. They are registered there (``@register_check``) and run only when the pipeline
gathered the evidence (``CheckInputs.evidence``).

* ``log_files`` — two runs' logs in one folder (different run-defining arguments, the same
  iterations logged with different values at the same time, or both covering the same iterations)
  are refused by `mixed_runs` / `MixedRunsError` unless the user chose to merge them;
* ``metadata_vs_log`` — the metadata's iteration range overlaps the log's;
* ``parallelism`` — DP ranks seen in the metadata vs the world size and parallel sizes, and the global
  batch vs micro batch x DP;
* ``log_vs_model`` — what the log states about the model (architecture arguments, model name,
  parameter counts, its TFLOP/s under every convention) against the model used;
* ``training_regime`` — a VLM whose frozen parts nobody stated: what exact would be if the tower
  were frozen;
* ``log_tokens`` — the tokens/s a log prints against the metadata's tokens (global, per GPU, per DP rank);
* ``estimate_inputs`` — estimate-only settings given while metadata was found (ignored);
* ``configuration`` — values two sources state differently (a warning each).
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping, Sequence

import polars as pl

from ..arch.parts import frozen_stages, stage_part_names
from ..arch.trainability import Trainability
from ..errors import ConfigError
from .checks import Check, CheckInputs, register_check
from .crosscheck import plausible_world

#: arguments that define a run: two log files that disagree on one are two runs
RUN_DEFINING = ("world_size", "data_parallel_size", "tensor_model_parallel_size", "pipeline_model_parallel_size",
                "context_parallel_size", "expert_model_parallel_size", "global_batch_size", "micro_batch_size",
                "seq_length", "num_layers", "hidden_size", "ffn_hidden_size", "num_attention_heads",
                "num_query_groups", "num_experts", "hf_model_id", "model_name", "hf_model_name",
                "pretrained_model_name_or_path", "model_name_or_path")
#: share of both files' iteration ranges two files must both cover to be two runs (a restart replays
#: only the iterations since the last checkpoint)
FULL_OVERLAP = 0.5
#: log argument -> (ModelSpec attribute path, label)
ARCH_ARGUMENTS = {
    "num_layers": ("lm.num_layers", "LM layers"),
    "hidden_size": ("lm.hidden_size", "LM hidden size"),
    "num_attention_heads": ("lm.num_heads", "attention heads"),
    "num_query_groups": ("lm.num_kv_heads", "KV heads (query groups)"),
    "kv_channels": ("lm.head_dim", "head dim"),
    "num_experts": ("lm.moe.num_experts", "routed experts"),
    "moe_router_topk": ("lm.moe.top_k", "experts per token"),
    "moe_ffn_hidden_size": ("lm.moe.expert_intermediate_size", "expert MLP width"),
}
MODEL_NAME_ARGUMENTS = ("hf_model_id", "hf_model_name", "model_name", "model_id", "pretrained_model_name_or_path",
                        "model_name_or_path", "hf_model_path")
#: parameter counts the log prints are compared with this relative tolerance
PARAM_TOLERANCE = 0.02
#: estimate-only settings: given while metadata was found, they change nothing
ESTIMATE_ONLY = ("seq_length", "image_size", "image_grid", "images_per_sample")


class MixedRunsError(ConfigError):
    """Log files of two different runs were found together (and merging was not chosen)."""

    def __init__(self, message: str, files: Sequence[str]) -> None:
        self.files = list(files)
        super().__init__(message)


@dataclass
class FileRange:
    """Iterations, timestamps and arguments one log file holds."""

    path: str
    first_iteration: int | None = None
    last_iteration: int | None = None
    first_time: Any = None
    last_time: Any = None
    records: int = 0
    arguments: dict[str, str] = field(default_factory=dict)


@dataclass
class MixedRuns:
    """Two log files judged to belong to different runs, and why."""

    a: str
    b: str
    reasons: list[str]

    def message(self) -> str:
        shown = "; ".join(self.reasons[:4]) + (f"; +{len(self.reasons) - 4} more" if len(self.reasons) > 4 else "")
        return f"{_name(self.a)} and {_name(self.b)} look like two different runs ({shown})"


@dataclass
class Evidence:
    """What `pipeline.load_run` gathered for the evidence checks (all optional: a missing fact skips)."""

    spec: Any  # ModelSpec
    config: Any  # RunConfig
    files: list[FileRange] = field(default_factory=list)
    mixed: list[MixedRuns] = field(default_factory=list)  # found and accepted (merge chosen)
    logs_chosen: bool = False  # the user named the log files
    parameter_counts: list[tuple[str, str, int, int]] = field(default_factory=list)  # (file, kind, count, line)
    metadata_dp_ranks: list[int] | None = None
    metadata_iterations: tuple[int, int, int] | None = None  # (first, last, count)
    log_iterations: tuple[int, int, int] | None = None
    overrides: dict[str, Any] = field(default_factory=dict)  # what the caller passed (RunConfig names)
    estimated: bool = False
    #: exact FLOPs of the run (all iterations) as counted and with other frozen parts: label -> FLOPs
    frozen_alternatives: dict[str, float] = field(default_factory=dict)
    flops_as_counted: float | None = None
    #: the resolved training regime (`vlm_perf.run.regime.Regime`) when a source states one beyond whole parts
    #: or run.yaml's ``frozen`` (trainable selectors, an adapter, the callback's trainability.json)
    regime: Any = None


def _name(path: str) -> str:
    return path.rsplit("/", 1)[-1]


# ---- gathering (`vlm_perf.analysis.examine.evidence_of`) ---------------------------------------------------
def gather_evidence(spec, config, ranges, mixed, log_facts, analysis, stats_frame, costs,
                    overrides: dict, trainability: Trainability, causal: str, logs_chosen: bool = False,
                    regime: Any = None):
    """The `Evidence` of a loaded run (no I/O): the parsed per-file
    ranges and facts, the metadata's iterations and DP ranks (``costs``: per-microbatch FLOPs with
    ``dp_rank``), the overrides passed, and exact's FLOPs over the windows the means use with the vision
    tower (+ projector) frozen, for the training-regime line."""
    from .flops_frame import flops_columns

    ev = Evidence(spec=spec, config=config, files=ranges, mixed=mixed, logs_chosen=logs_chosen,
                  overrides=dict(overrides), estimated=analysis.estimated,
                  regime=regime if regime is not None and getattr(regime, "stated", False) else None)
    ev.parameter_counts = [(f.path, kind, n, line) for f in log_facts for kind, n, line in f.parameter_counts]
    its = analysis.windows["iteration"] if analysis.windows.height else None
    if its is not None:
        ev.log_iterations = (int(its.min()), int(its.max()), int(its.len()))
    if stats_frame is not None and stats_frame.height:
        m = stats_frame["iteration"]
        ev.metadata_iterations = (int(m.min()), int(m.max()), int(m.len()))
    if costs is not None and "dp_rank" in costs.columns:
        ev.metadata_dp_ranks = sorted(int(r) for r in costs["dp_rank"].drop_nulls().unique().to_list())
    per_it = analysis.per_iteration
    # the frozen-tower alternatives answer "which parts are frozen?" for whole-part accounting; a finer stated
    # regime (a Trainability: LoRA, layer ranges) already says what trains
    if spec.vision is not None and "exact_total" in per_it.columns and per_it.height and trainability.stage_level:
        # exact's FLOPs over the windows the means use, as counted and with the tower (+ projector) frozen:
        # the same windows and step times, so the ratio is the ratio of the headline TFLOP/s
        from .windows import window_sums

        alts = {}
        frozen = trainability.frozen_stage_set()
        for parts in (("vision_tower",), ("vision_tower", "projector")):
            if not frozen_stages(parts) <= frozen:
                alt = Trainability.from_frozen(stage_part_names(frozen | frozen_stages(parts)))
                alts[" + ".join(parts).replace("_", " ")] = flops_columns(spec, ["exact"], alt, causal=causal)[0]
        frame = per_it.select("iteration", "exact_total",
                              *(expr.alias(f"_alt{i}") for i, expr in enumerate(alts.values())))
        reliable = analysis.selection.windows.select("segment", "window_start", "iteration")  # the one selection
        if reliable.height:
            sums = window_sums(reliable, frame, [c for c in frame.columns if c != "iteration"])
            ev.flops_as_counted = float(sums["exact_total"].sum())
            for i, label in enumerate(alts):
                ev.frozen_alternatives[label] = float(sums[f"_alt{i}"].sum())
    return ev


# ---- two runs in one folder -------------------------------------------------------------------
def file_ranges(raw: pl.DataFrame, arguments: Mapping[str, Mapping[str, str]] | None = None) -> list[FileRange]:
    """Per log file of the parse's ``raw`` records: iteration and timestamp range (+ its arguments)."""
    arguments = arguments or {}
    out: dict[str, FileRange] = {p: FileRange(p, arguments=dict(a)) for p, a in arguments.items()}
    if raw.height and "file" in raw.columns:
        cols = [pl.col("iteration").min().alias("i0"), pl.col("iteration").max().alias("i1"), pl.len().alias("n")]
        has_time = "timestamp" in raw.columns
        if has_time:
            cols += [pl.col("timestamp").min().alias("t0"), pl.col("timestamp").max().alias("t1")]
        for row in raw.group_by("file", maintain_order=True).agg(cols).iter_rows(named=True):
            entry = out.setdefault(row["file"], FileRange(row["file"]))
            entry.first_iteration = None if row["i0"] is None else int(row["i0"])
            entry.last_iteration = None if row["i1"] is None else int(row["i1"])
            entry.records = int(row["n"])
            if has_time:
                entry.first_time, entry.last_time = row["t0"], row["t1"]
    return list(out.values())


def _norm(value: str) -> str:
    return str(value).strip().strip("'\"").lower()


def _overlap(a0: int, a1: int, b0: int, b1: int) -> int:
    return max(0, min(a1, b1) - max(a0, b0) + 1)


#: relative difference within which two files' values of one iteration are the same value: a console log prints
#: rounded numbers (the HF Trainer's ProgressCallback writes ``f"{v:.4g}"``: 4 significant digits, so up to 5e-4
#: relative off) while trainer_state.json / a W&B export keep the full float
PRINTED_PRECISION = 6e-4


def _values_differ(per_file: Mapping[str, pl.DataFrame], a: str, b: str, lo: int, hi: int) -> tuple[int, int]:
    """(iterations both files log in [lo, hi], of which with a different loss or step time)."""
    if a not in per_file or b not in per_file:
        return 0, 0
    keys = [c for c in ("loss", "elapsed_s") if c in per_file[a].columns]
    if not keys:
        return 0, 0
    window = pl.col("iteration").is_between(lo, hi)
    # every record of an iteration, not only the last: a restarted run's log holds an iteration twice (the first
    # attempt and the replay) and a partial copy of it only one of the two; an iteration differs when no record
    # of one file has the values of a record of the other
    left = per_file[a].filter(window).select("iteration", *keys)
    right = per_file[b].filter(window).select("iteration", *keys)
    both = left.join(right, on="iteration", suffix="_b")
    if not both.height:
        return 0, 0
    differ = pl.lit(False)
    for k in keys:
        x, y = pl.col(k), pl.col(f"{k}_b")
        differ = differ | (x.is_not_null() & y.is_not_null()
                           & ((x - y).abs() > PRINTED_PRECISION * pl.max_horizontal(x.abs(), y.abs()) + 1e-12))
    per_it = both.group_by("iteration").agg(differ.all().alias("_differ"))
    return per_it.height, int(per_it.get_column("_differ").sum())


#: up to this many log files every pair is compared; beyond, each file with its neighbour and the first
ALL_PAIRS = 32


def _pairs(n: int) -> list[tuple[int, int]]:
    if n <= ALL_PAIRS:
        return [(i, j) for i in range(n) for j in range(i + 1, n)]
    return sorted({(0, j) for j in range(1, n)} | {(j - 1, j) for j in range(1, n)})


def mixed_runs(files: Sequence[FileRange], raw: pl.DataFrame | None = None) -> list[MixedRuns]:
    """Pairs of log files that belong to different runs, with the evidence.

    Two files are two runs when (1) their arguments blocks state different run-defining values
    (parallel sizes, batch, sequence length, architecture, model name), or (2) both log the same
    iterations with different values (loss / step time) and either ran at the same time (timestamp
    ranges overlap: no restart runs beside the job it replaces) or each covers most of the other's
    iterations (a restart replays only the iterations since its checkpoint). Copies of one log (the
    same values) and resumed jobs are one run.
    """
    out = []
    per_file: dict[str, pl.DataFrame] = {}
    if raw is not None and raw.height and "file" in raw.columns:
        keep = [c for c in ("iteration", "loss", "elapsed_s") if c in raw.columns]
        per_file = {str(k[0]): v.select(keep).filter(pl.col("iteration").is_not_null())
                    for k, v in raw.partition_by("file", as_dict=True).items()}
    for i, j in _pairs(len(files)):
        reasons = _pair_reasons(files[i], files[j], per_file)
        if reasons:
            out.append(MixedRuns(files[i].path, files[j].path, reasons))
    return out


def _pair_reasons(a: FileRange, b: FileRange, per_file: Mapping[str, pl.DataFrame]) -> list[str]:
    """Why files ``a`` and ``b`` are two runs (empty: one run)."""
    reasons = []
    for key in RUN_DEFINING:
        va, vb = a.arguments.get(key), b.arguments.get(key)
        if va is not None and vb is not None and _norm(va) != _norm(vb):
            reasons.append(f"{key} {va} vs {vb}")
    if None in (a.first_iteration, a.last_iteration, b.first_iteration, b.last_iteration):
        return reasons
    a0, a1, b0, b1 = int(a.first_iteration), int(a.last_iteration), int(b.first_iteration), int(b.last_iteration)  # type: ignore[arg-type]
    shared = _overlap(a0, a1, b0, b1)
    if not shared:
        return reasons
    common, differ = _values_differ(per_file, a.path, b.path, max(a0, b0), min(a1, b1))
    if not differ:
        return reasons  # copies of one log (or nothing to compare)
    timed = None not in (a.first_time, a.last_time, b.first_time, b.last_time)
    concurrent = timed and a.first_time < b.last_time and b.first_time < a.last_time
    covers = shared >= FULL_OVERLAP * (a1 - a0 + 1) and shared >= FULL_OVERLAP * (b1 - b0 + 1)
    what = (f"iterations {a0}..{a1} and {b0}..{b1} overlap on {shared}, {differ} of {common} logged in both with a "
            "different loss or step time")
    if concurrent:
        reasons.append(what + f", logged at the same time ({a.first_time}..{a.last_time} and "
                       f"{b.first_time}..{b.last_time})")
    elif covers:
        reasons.append(what)
    return reasons


def refuse_mixed(found: Sequence[MixedRuns], folder: str) -> None:
    """Raise `MixedRunsError` naming the files (the caller offers the choice: name the logs, or merge)."""
    if not found:
        return
    first = found[0]
    more = f" (+{len(found) - 1} more pair(s))" if len(found) > 1 else ""
    files = sorted({f for m in found for f in (m.a, m.b)})
    raise MixedRunsError(f"{folder}: {first.message()}{more}; refusing to merge them: choose the log file(s) of one "
                         "run, or choose to merge them", files)


@register_check("log_files")
def _log_files(inputs: CheckInputs) -> Check | None:
    ev = inputs.evidence
    if ev is None or not ev.files:
        return None
    n = len(ev.files)
    details = {"files": [f.path for f in ev.files], "mixed": [m.__dict__ for m in ev.mixed]}
    if ev.mixed:
        return Check("log_files", "warn", f"log files: {ev.mixed[0].message()}; merged as chosen — numbers mix two "
                     "runs", details)
    chosen = " (chosen)" if ev.logs_chosen else ""
    notes = inputs.log_diagnostics.get("notes", [])
    copies = [note for note in notes if ": a copy of " in note]
    repeats = [note for note in notes if " record(s) repeat " in note]
    details["copies"], details["repeats"] = copies, repeats
    copied = (f"; {len(copies)} read once as copies ({_name(copies[0].split(' (', 1)[0])}"
              + (f", +{len(copies) - 1} more" if len(copies) > 1 else "") + ")") if copies else ""
    copied += (f"; {len(repeats)} repeating another file's records, read once ("
               f"{_name(repeats[0].split(' record(s)', 1)[0])})") if repeats else ""
    if n == 1:
        return Check("log_files", "ok", f"log files: 1 file{chosen}{copied}", details)
    return Check("log_files", "ok", f"log files: {n} files{chosen} of one run (the same arguments; iterations "
                 f"logged twice agree or were replayed by a restart){copied}", details)


# ---- metadata vs log vs configuration ---------------------------------------------------------
@register_check("metadata_vs_log")
def _metadata_vs_log(inputs: CheckInputs) -> Check | None:
    ev = inputs.evidence
    if ev is None:
        return None
    if ev.estimated or ev.metadata_iterations is None or ev.log_iterations is None:
        why = "no metadata (ESTIMATE)" if ev.estimated or ev.metadata_iterations is None else "no logged window"
        return Check("metadata_vs_log", "skip", f"metadata vs log iterations not checked: {why}")
    m0, m1, mn = ev.metadata_iterations
    l0, l1, ln = ev.log_iterations
    interval = int(inputs.run.gaps.get("log_interval") or 1)
    start = max(l0 - interval + 1, 1) if l0 > 0 else l0  # the first logged window starts before its line
    shared = _overlap(m0, m1, start, l1)
    span = l1 - start + 1
    details = {"metadata_iterations": [m0, m1, mn], "log_iterations": [start, l1, ln], "overlap": shared}
    if shared == 0:
        return Check("metadata_vs_log", "fail", f"metadata vs log: the metadata's iterations {m0}..{m1} do not "
                     f"overlap the log's {start}..{l1}: another run's metadata (or a different iteration count)",
                     details)
    share = shared / span
    outside = max(0, start - m0) + max(0, m1 - l1)
    if share < 0.5:
        return Check("metadata_vs_log", "fail", f"metadata vs log: the metadata covers only {shared} of the log's "
                     f"{span} iterations ({100 * share:.0f}%; metadata {m0}..{m1}, log {start}..{l1})", details)
    if outside > max(interval, 0.1 * (m1 - m0 + 1)):
        return Check("metadata_vs_log", "warn", f"metadata vs log: {outside} metadata iterations lie outside the "
                     f"log's {start}..{l1} (metadata {m0}..{m1}): a longer run or another run's files?", details)
    return Check("metadata_vs_log", "ok", f"metadata vs log: metadata iterations {m0}..{m1} cover "
                 f"{100 * share:.0f}% of the log's {start}..{l1}", details)


def expected_dp(config) -> tuple[int | None, str]:
    """Data-parallel size the configuration implies, and where it came from."""
    src = getattr(config, "sources", {}) or {}
    if config.data_parallel:
        return int(config.data_parallel), f"data_parallel from {src.get('data_parallel', '?')}"
    model_parallel = [getattr(config, k) for k in ("tensor_parallel", "pipeline_parallel")]
    if config.num_gpus and all(model_parallel):
        mp = model_parallel[0] * model_parallel[1] * (config.context_parallel or 1)
        if config.num_gpus % mp == 0:
            return config.num_gpus // mp, f"{config.num_gpus} GPUs / (tp x pp x cp = {mp})"
    return None, ""


@register_check("parallelism")
def _parallelism(inputs: CheckInputs) -> Check | None:
    ev = inputs.evidence
    if ev is None:
        return None
    cfg = ev.config
    ranks = ev.metadata_dp_ranks
    gpus, gpus_src = cfg.num_gpus, (getattr(cfg, "sources", {}) or {}).get("num_gpus", "?")
    dp, dp_src = expected_dp(cfg)
    problems: list[str] = []
    notes: list[str] = []
    details: dict = {"metadata_dp_ranks": len(ranks) if ranks is not None else None, "expected_dp": dp,
                     "num_gpus": gpus}
    if ranks:
        n, top = len(ranks), max(ranks)
        details["metadata_dp_rank_max"] = top
        if gpus and n > gpus:
            problems.append(f"the metadata comes from {n} DP ranks but the run had {gpus} GPU(s) (num_gpus from "
                            f"{gpus_src}): another run's metadata, or the wrong GPU count")
        elif dp and (n != dp or top >= dp):
            problems.append(f"the metadata comes from {n} DP rank(s) (ids {min(ranks)}..{top}), the configuration "
                            f"says {dp} ({dp_src})")
        else:
            notes.append(f"{n} DP rank{'s' if n > 1 else ''} in the metadata"
                         + (f" = data-parallel size {dp}" if dp else (f", within {gpus} GPU(s)" if gpus else "")))
    sizes = [getattr(cfg, k, None) for k in ("data_parallel", "tensor_parallel", "pipeline_parallel")]
    if gpus and all(sizes):
        product = sizes[0] * sizes[1] * sizes[2] * (cfg.context_parallel or 1)
        if product != gpus:
            problems.append(f"{gpus} GPUs (num_gpus from {gpus_src}) but dp {sizes[0]} x tp {sizes[1]} x pp "
                            f"{sizes[2]} x cp {cfg.context_parallel or 1} = {product} "
                            f"({100 * (gpus / product - 1):+.0f}%)")
    gbs, mbs = cfg.global_batch_size, cfg.micro_batch_size
    if gbs and mbs and dp:
        if gbs % (mbs * dp):
            problems.append(f"global batch {gbs} is not a multiple of micro batch {mbs} x DP {dp} = {mbs * dp}")
        else:
            notes.append(f"global batch {gbs} = micro batch {mbs} x DP {dp} x {gbs // (mbs * dp)} accumulation "
                         "step(s)")
    if problems:
        return Check("parallelism", "fail", "parallelism: " + "; ".join(problems), details)
    if not notes:
        return Check("parallelism", "skip", "parallelism not checked: neither DP ranks in the metadata nor the "
                     "parallel sizes are known", details)
    return Check("parallelism", "ok", "parallelism: " + "; ".join(notes), details)


# ---- log vs model -----------------------------------------------------------------------------
def _attr(obj, path: str):
    for part in path.split("."):
        obj = getattr(obj, part, None)
        if obj is None:
            return None
    return obj


def _as_int(text: str) -> int | None:
    try:
        value = float(str(text).replace(",", ""))
    except ValueError:
        return None
    return int(value) if math.isfinite(value) and value == int(value) else None


#: suffixes that name a release of one architecture (chat / reasoning variants, checkpoint formats, quantised
#: copies), not another model: ``Qwen3-VL-30B-A3B-Thinking-FP8`` is ``qwen3-vl-30b-a3b``
_NAME_NOISE = re.compile(r"(-instruct|-thinking|-chat|-hf|-base|-mcore|-megatron|-it|-fp8|-fp16|-bf16|-fp32|"
                         r"-awq|-gptq|-int4|-int8|-4bit|-8bit|-w4a16|-w8a8|-dynamic|-nvfp4|-mlx|-gguf)$")


def normalise_model_name(text: str) -> str:
    """``Qwen/Qwen2.5-VL-7B-Instruct`` -> ``qwen2.5-vl-7b`` (org, path, suffixes, case dropped)."""
    name = str(text).strip().strip("'\"").rstrip("/").rsplit("/", 1)[-1].lower().replace("_", "-")
    previous = None
    while previous != name:
        previous, name = name, _NAME_NOISE.sub("", name)
    return name


_SIZED_NAME = re.compile(r"(?<![a-z0-9])\d+(?:\.\d+)?[bm](?![a-z0-9])")


def _model_key(text: str) -> str:
    """`normalise_model_name` without separators: ``qwen2_5-vl-7b`` and ``qwen2.5-vl-7b`` are one model
    (equality only: ``7b`` is not part of ``72b``)."""
    return re.sub(r"[._\-\s]", "", normalise_model_name(text))


def _same_model(log_name: str, spec) -> bool:
    names = {_model_key(x.removeprefix("preset:")) for x in (spec.name, spec.source) if x}
    return _model_key(log_name) in names


def _dashed(text: str) -> str:
    return re.sub(r"[._\s]+", "-", normalise_model_name(text))


def named_preset(logged_name: str) -> str | None:
    """The preset a logged model name names: the name itself (``Qwen/Qwen2.5-VL-7B-Instruct``), or the longest
    preset name inside it with word boundaries (a fine-tune's ``acme/qwen2.5-vl-7b-docvqa-sft``; ``7b`` is not
    inside ``72b``); None when it names none."""
    from ..arch.presets_loader import preset_names

    target = _model_key(logged_name)
    exact = next((p for p in preset_names() if _model_key(p) == target), None)
    if exact is not None:
        return exact
    dashed = _dashed(logged_name)
    inside = [p for p in preset_names()
              if re.search(rf"(?<![a-z0-9]){re.escape(_dashed(p))}(?![a-z0-9])", dashed)]
    return max(inside, key=len) if inside else None


def _same_architecture(preset: str, spec) -> tuple[bool, int, int] | None:
    """(same parameter count within `PARAM_TOLERANCE` and LM layers, theirs, ours) of preset vs the model used."""
    from ..arch import load_model

    try:
        theirs_spec = load_model(preset)
        theirs = _param_total(theirs_spec)
    except (ValueError, OSError):
        return None
    ours = _param_total(spec)
    same = (abs(ours / theirs - 1) <= PARAM_TOLERANCE if theirs else False) and \
        getattr(theirs_spec.lm, "num_layers", None) == getattr(spec.lm, "num_layers", None)
    return same, theirs, ours


def _param_total(spec, trainable_only: bool = False, frozen: Sequence[str] = ()) -> int:
    from ..arch.params import count_params

    pc = count_params(spec)
    if not trainable_only:
        return pc.total
    from ..arch.parts import PART_ALIASES

    parts = {p for name in frozen for p in PART_ALIASES.get(name, ())}
    from ..arch.parts import AUDIO, DEEPSTACK_MERGER, LANGUAGE_MODEL, MERGER, VISION_TOWER

    out = 0
    out += 0 if VISION_TOWER in parts else pc.vision_tower
    if not ({MERGER, DEEPSTACK_MERGER} <= parts):
        out += pc.merger  # (a split of main/deepstack mergers is not modelled here)
    out += 0 if LANGUAGE_MODEL in parts else pc.lm
    out += 0 if AUDIO in parts else pc.audio  # an audio encoder (Omni thinkers; 0 otherwise)
    return out


def regime_trainable(spec, regime) -> tuple[int, int] | None:
    """(fewest, most) trainable parameters the regime implies: the adapter's (``RegimeFlops.adapter_params``:
    low-rank pairs, DoRA magnitudes, biases) plus the parts whose weights train, ``modules_to_save`` copies
    included (a part trained only in some layers or kinds: between nothing and all of it). None when the regime
    cannot be walked."""
    from ..arch.params import count_params
    from ..flops.regime import regime_flops
    from ..run.regime import probe_batch

    t = regime.trainability
    try:
        r = regime_flops(spec, probe_batch(spec), t, full_reference=False)
        whole = regime_flops(spec, probe_batch(spec), type(t)(), full_reference=False).by_part
    except Exception:  # noqa: BLE001 - the FLOPs path reports its own error; this check then compares whole parts
        return None
    pc = count_params(spec)
    size = {"vision_tower": pc.vision_tower, "projector": pc.merger, "language_model": pc.lm + pc.audio}
    # PEFT's own count of the adapter's trainable parameters (flops.regime), its modules_to_save copies left to
    # the parts below (a saved module's weights train: its part counts as trained)
    lo = hi = r.adapter_params - r.saved_params
    for part, cats in r.by_part.items():
        grad, full = cats.get("weight_grad", 0), whole.get(part, {}).get("weight_grad", 0)
        if not grad:
            continue
        hi += size.get(part, 0)
        if full and grad >= full:  # every weight of the part trains
            lo += size.get(part, 0)
    return int(lo), int(hi)


def _base_weights_train(spec, regime, part: str) -> bool:
    """Whether any base weight of ``part`` gets a weight gradient under the regime (an adapter's own weights
    on it do not count: ``freeze_vit`` freezes the tower's base weights)."""
    from ..flops.regime import regime_flops
    from ..run.regime import probe_batch

    try:
        r = regime_flops(spec, probe_batch(spec), regime.trainability, full_reference=False)
    except Exception:  # noqa: BLE001 - the FLOPs path reports its own error
        return True
    return bool(r.by_part.get(part, {}).get("weight_grad", 0))


def _frozen_parts(spec, regime) -> list[str]:
    """The parts (``tower``, ``projector``, ``LM``) whose base weights get no gradient and carry no adapter under
    the regime: what a ``frozen`` list would have to name."""
    from ..flops.regime import regime_flops
    from ..run.regime import probe_batch

    try:
        r = regime_flops(spec, probe_batch(spec), regime.trainability, full_reference=False)
    except Exception:  # noqa: BLE001 - the FLOPs path reports its own error
        return []
    adapted = {{"vision_tower": "vision_tower", "language_model": "language_model"}.get(m.stage, "projector")
               for m in r.adapted}
    short = {"vision_tower": "tower", "projector": "projector", "language_model": "LM"}
    return [short.get(p, p) for p, c in r.by_part.items() if not c.get("weight_grad", 0) and p not in adapted]


def _fmt_params(n: float) -> str:
    return f"{n / 1e9:.2f}B" if n >= 1e9 else f"{n / 1e6:.1f}M" if n >= 1e6 else f"{n:,.0f}"


@dataclass
class _Findings:
    """What one comparison of the log with the model found: disagreements, agreements, recorded details."""

    problems: list[str] = field(default_factory=list)
    agreed: list[str] = field(default_factory=list)
    details: dict = field(default_factory=dict)


def _logged_arguments(ev: Evidence) -> dict[str, tuple[str, str]]:
    """argument -> (value, file) over the log's files, the first file that states it winning."""
    args: dict[str, tuple[str, str]] = {}
    for f in ev.files:
        for k, v in f.arguments.items():
            args.setdefault(k, (v, f.path))
    return args


def _architecture_arguments(spec, args: Mapping[str, tuple[str, str]], out: _Findings) -> None:
    """The log's architecture arguments (layers, widths, heads, experts) against the model's."""
    for key, (path, label) in ARCH_ARGUMENTS.items():
        if key not in args:
            continue
        logged, ours = _as_int(args[key][0]), _attr(spec, path)
        if key == "num_experts" and logged and ours is None:  # the log trained an MoE, the model is dense
            out.problems.append(f"{label}: the log's {key} is {logged}, {spec.name} has no experts (dense)")
            continue
        if logged is None or ours is None:
            continue
        if key == "num_query_groups" and _norm(args.get("group_query_attention", ("true", ""))[0]) == "false":
            continue
        if logged != int(ours):
            out.problems.append(f"{label}: the log's {key} is {logged}, {spec.name} has {ours}")
        else:
            out.agreed.append(key)


def _model_name_argument(spec, args: Mapping[str, tuple[str, str]], out: _Findings) -> None:
    """The model the log names (the first of `MODEL_NAME_ARGUMENTS` it states) against the model used."""
    key = next((k for k in MODEL_NAME_ARGUMENTS if k in args and _norm(args[k][0]) not in ("", "none", "null")), None)
    if key is None:
        return
    logged_name = args[key][0]
    out.details["log_model_name"] = logged_name
    if _same_model(logged_name, spec):
        out.agreed.append(key)
        return
    preset = named_preset(logged_name)
    arch = _same_architecture(preset, spec) if preset else None
    if arch is not None and arch[0]:
        # another name of the same architecture (a fine-tune, a quantised copy, --model config.json):
        # identity is the architecture, judged by its parameter count and depth
        out.agreed.append(f"{key} ({preset}'s architecture, {_fmt_params(arch[1])} parameters)")
        return
    size = _named_model_size(preset or logged_name, spec)
    # a name that is a preset or carries a size ("…-7B") names a model; anything else (a class name, a recipe)
    # is recorded, not judged
    if size or _SIZED_NAME.search(normalise_model_name(logged_name)):
        out.problems.append(f"the log's {key} is {logged_name!r}, the model used is {spec.name}" + size)
    else:
        out.details["log_model_name_unjudged"] = logged_name


def _printed_parameter_count(ev: Evidence, frozen: tuple[str, ...], out: _Findings) -> None:
    """The first total or trainable parameter count the log prints against the model's (under the stated regime
    when there is one; a trainable count that fits a frozen vision tower says so)."""
    spec = ev.spec
    file, kind, count, line = next(((f, k, c, ln) for f, k, c, ln in ev.parameter_counts
                                    if not k.startswith("megatron:")), (None, None, None, None))
    if kind is None:
        return
    ours = _param_total(spec, trainable_only=kind == "trainable", frozen=frozen)
    what = "trainable" if kind == "trainable" else "total"
    label = f"{what} parameters: {_name(file)}:{line} prints {count:,}, {spec.name}"
    label += f" with frozen {', '.join(frozen)}" if frozen and kind == "trainable" else ""
    span = regime_trainable(spec, ev.regime) if kind == "trainable" and ev.regime is not None else None
    if span is not None:  # the stated regime (adapter, selectors, trainability.json) says what trains
        lo, hi = span
        ours = lo if count < lo else hi if count > hi else count
        label = f"{what} parameters: {_name(file)}:{line} prints {count:,}, {spec.name} under " \
                f"{ev.regime.description or ev.regime.source} trains " + (f"{lo:,}" if lo == hi else f"{lo:,}..{hi:,}")
    rel = count / ours - 1 if ours else (0.0 if count == 0 else math.inf)
    if abs(rel) <= PARAM_TOLERANCE:
        out.agreed.append(f"{what} parameters" + (" under the stated regime" if span is not None else ""))
    elif span is not None:
        out.problems.append(f"{label} ({100 * rel:+.1f}%)")
    else:
        hint = ""
        if kind == "trainable" and spec.vision is not None and "vision_tower" not in frozen:
            alt = _param_total(spec, trainable_only=True, frozen=frozen + ("vision_tower",))
            if alt and abs(count / alt - 1) <= PARAM_TOLERANCE:
                hint = " (it matches a frozen vision tower: state frozen: [vision_tower])"
        out.problems.append(f"{label} has {ours:,} ({100 * rel:+.1f}%){hint}")


def _model_parallel_shards(ev: Evidence, out: _Findings) -> None:
    """Megatron's per-shard parameter counts (one per tensor x pipeline rank, no expert parallelism) summed
    against the model's total (a pipeline with tied embeddings stores the embedding twice)."""
    spec, cfg = ev.spec, ev.config
    shards: dict[str, int] = {}
    for _, kind, count, _line in ev.parameter_counts:
        if kind.startswith("megatron:"):
            shards.setdefault(kind, count)
    tp, pp = getattr(cfg, "tensor_parallel", None), getattr(cfg, "pipeline_parallel", None)
    if not shards or (getattr(cfg, "expert_parallel", None) or 1) != 1 or not (tp and pp and len(shards) == tp * pp):
        return
    total, ours = sum(shards.values()), _param_total(spec)
    embed = spec.lm.hidden_size * spec.lm.vocab_size
    low, high = ours * (1 - PARAM_TOLERANCE), (ours + (embed if pp > 1 else 0)) * (1 + PARAM_TOLERANCE)
    if low <= total <= high:
        out.agreed.append("parameters per shard")
    else:
        out.problems.append(f"parameters: the log's {len(shards)} model-parallel shards hold {total:,} together, "
                            f"{spec.name} has {ours:,} ({100 * (total / ours - 1):+.1f}%)")


def _logged_rate(ev: Evidence, cc: Mapping[str, Any], out: _Findings) -> None:
    """The log's own TFLOP/s against every convention of this model: a mismatch no convention explains blames the
    model, unless a GPU count explains it (not the model) or the run is an estimate (its tokens and media set the
    recomputed rate as much as the model does)."""
    candidates = cc.get("candidates") or {}
    world_explains = bool(cc.get("world_size") and cc.get("implied_world_size")
                          and plausible_world(cc["implied_world_size"], cc["world_size"]))
    if cc.get("status") != "mismatch" or not candidates or world_explains:
        return
    best = min(candidates, key=lambda n: abs(math.log(candidates[n])) if candidates[n] > 0 else math.inf)
    ratio = candidates[best]
    if abs(ratio - 1) <= 0.02:
        return
    if ev.estimated:
        out.details["rate_not_judged"] = (f"estimate mode: closest {best} {ratio:.3f} (the estimate's tokens and "
                                          "media, not only the model, set the recomputed rate)")
        return
    listed = ", ".join(f"{n} {r:.3f}" for n, r in candidates.items())
    out.problems.append(f"the log's TFLOP/s/GPU matches no convention for {ev.spec.name} (logged / recomputed: "
                        f"{listed}; closest {best}, {100 * (ratio - 1):+.1f}%)")


def log_vs_model(ev: Evidence, crosscheck: Mapping[str, Any] | None = None) -> Check:
    """What the log states about the model vs the model used (see the module doc): architecture arguments, the
    model it names, the parameter counts it prints (whole and per model-parallel shard) and its own TFLOP/s."""
    spec = ev.spec
    out = _Findings(details={"model": spec.name})
    args = _logged_arguments(ev)
    _architecture_arguments(spec, args, out)
    _model_name_argument(spec, args, out)
    _printed_parameter_count(ev, tuple(getattr(ev.config, "frozen", ()) or ()), out)
    _model_parallel_shards(ev, out)
    _logged_rate(ev, crosscheck or {}, out)
    problems, agreed = out.problems, out.agreed
    details = {**out.details, "problems": problems, "agreed": agreed}
    if problems:
        return Check("log_vs_model", "fail", "log vs model: " + "; ".join(problems[:3])
                     + (f" (+{len(problems) - 3} more)" if len(problems) > 3 else ""), details)
    if agreed:
        return Check("log_vs_model", "ok", f"log vs model: the log agrees with {spec.name} "
                     f"({', '.join(agreed)})", details)
    return Check("log_vs_model", "skip", "log vs model not checked: the log states no architecture, model name or "
                 "parameter count", details)


def _named_model_size(logged_name: str, spec) -> str:
    """`` (it has 31.07B parameters, the model used 8.77B: -71.8%)`` when the log's name is a preset."""
    from ..arch import load_model
    from ..arch.presets_loader import preset_names

    target = _model_key(logged_name)
    match = next((p for p in preset_names() if _model_key(p) == target), None)
    if match is None:
        return ""
    try:
        theirs = _param_total(load_model(match))
    except (ValueError, OSError):
        return ""
    ours = _param_total(spec)
    return (f" (preset {match} has {_fmt_params(theirs)} parameters, {spec.name} {_fmt_params(ours)}: "
            f"{100 * (ours / theirs - 1):+.1f}%)")


@register_check("log_vs_model")
def _log_vs_model(inputs: CheckInputs) -> Check | None:
    ev = inputs.evidence
    if ev is None:
        return None
    return log_vs_model(ev, inputs.run.crosscheck)


# ---- training regime --------------------------------------------------------------------------
_FREEZE_KEY = re.compile(r"(?i)^freeze[_-]?(vit|vision|visual|vision[_-]?model|vision[_-]?tower|aligner|projector|"
                         r"llm|lm|language[_-]?model)$")


def _logged_freezes(ev: Evidence) -> dict[str, bool]:
    out = {}
    for f in ev.files:
        for key, value in f.arguments.items():
            m = _FREEZE_KEY.match(key)
            if m and _norm(value) in ("true", "false", "1", "0"):
                out.setdefault(key, _norm(value) in ("true", "1"))
    return out


@register_check("training_regime")
def _training_regime(inputs: CheckInputs) -> Check | None:
    ev = inputs.evidence
    if ev is None or ev.spec.vision is None:
        return None
    cfg = ev.config
    frozen = tuple(cfg.frozen or ())
    stated = "frozen" in (getattr(cfg, "sources", {}) or {})
    logged = _logged_freezes(ev)
    details = {"frozen": list(frozen), "stated_by": (cfg.sources or {}).get("frozen"), "log_freeze_arguments": logged,
               "alternatives": {}}
    exact = inputs.run.convention_summary().get("exact", {}).get("tflops_per_gpu_mean")
    counted = ev.flops_as_counted
    lines = []
    for label, flops in ev.frozen_alternatives.items():
        if not counted:
            continue
        ratio = flops / counted
        details["alternatives"][label] = ratio
        at = f"{exact * ratio:,.1f} TFLOP/s/GPU " if exact else ""
        lines.append(f"with {label} frozen, exact would be {at}({100 * (ratio - 1):+.1f}%)")
    vision_logged = {k: v for k, v in logged.items() if re.search(r"(?i)vit|vision|visual", k)}
    counted_trained = not any(p in frozen for p in ("vision_tower", "vision", "vit", "visual"))
    if ev.regime is not None:  # selectors, an adapter or trainability.json say what trains, not ``frozen`` alone
        counted_trained = _base_weights_train(ev.spec, ev.regime, "vision_tower")
    if vision_logged and any(vision_logged.values()) and counted_trained:
        key = next(k for k, v in vision_logged.items() if v)
        return Check("training_regime", "fail", f"training regime: the log says {key} true but the vision tower is "
                     "counted as trained" + (f"; {lines[0]}" if lines else ""), details)
    said_nothing_frozen = stated and not frozen and (cfg.sources or {}).get("frozen") != "default"
    whole_frozen = _frozen_parts(ev.spec, ev.regime) if ev.regime is not None and said_nothing_frozen else []
    if whole_frozen:  # ``frozen: []`` states nothing frozen, the regime counted freezes whole parts: they disagree
        details["regime"] = ev.regime.description
        who = {"manifest": Path(cfg.manifest_path).name if cfg.manifest_path else "run.yaml",
               "cli": "the command line"}.get((cfg.sources or {}).get("frozen", ""), "the configuration")
        return Check("training_regime", "warn", f"training regime: {who} says frozen: [] (nothing frozen) but "
                     f"{ev.regime.source} says {' and '.join(whole_frozen)} frozen; counted as the latter "
                     f"({ev.regime.description}): drop the empty list or name the frozen parts", details)
    if ev.regime is not None and (not ev.regime.stage_level or not stated):  # LoRA, layer ranges, trainability.json
        details["regime"] = ev.regime.description
        return Check("training_regime", "ok", f"training regime stated: {ev.regime.description} "
                     f"({ev.regime.source})", details)
    if stated or logged:
        what = ", ".join(frozen) if frozen else "nothing"
        return Check("training_regime", "ok", f"training regime stated: frozen {what} "
                     f"({(cfg.sources or {}).get('frozen', 'log arguments')})", details)
    if not lines:
        return Check("training_regime", "warn", "training regime not stated (frozen parts unknown): every part is "
                     "counted as trained", details)
    return Check("training_regime", "warn", "training regime not stated: every part counted as trained; "
                 + "; ".join(lines) + " — state frozen: [...] in run.yaml (or [] when all is trained)", details)


# ---- estimate inputs and configuration conflicts ---------------------------------------------
@register_check("estimate_inputs")
def _estimate_inputs(inputs: CheckInputs) -> Check | None:
    ev = inputs.evidence
    if ev is None:
        return None
    given = [k for k in ESTIMATE_ONLY if ev.overrides.get(k) is not None]
    if not given or ev.estimated:
        return None
    return Check("estimate_inputs", "warn", f"estimate settings ignored: {', '.join(given)} given, but metadata was "
                 "found and every number comes from it (these settings only shape an estimate without metadata)",
                 {"ignored": given})


@register_check("configuration")
def _configuration(inputs: CheckInputs) -> Check | None:
    ev = inputs.evidence
    if ev is None:
        return None
    conflicts = list(getattr(ev.config, "conflicts", []) or [])
    if not conflicts:
        return Check("configuration", "ok", "configuration: command line, run.yaml and log agree where they overlap")
    messages = ev.config.conflict_messages()
    return Check("configuration", "warn", f"configuration: {len(conflicts)} conflict(s): " + "; ".join(messages),
                 {"conflicts": conflicts})


# ---- tokens per second the log prints ---------------------------------------------------------
#: a logged tokens/s within this of one of the readings agrees
TOKENS_TOLERANCE = 0.03


def tokens_readings(windows: pl.DataFrame, world_size: int | None, dp: int | None) -> dict[str, float] | None:
    """logged tokens/s / the metadata's real tokens per second, per reading of the log's number
    (``global``, ``per GPU``, ``per DP rank``), as the median over usable windows; None without both."""
    if "tokens_per_s" not in windows.columns or "lm_tokens" not in windows.columns:
        return None
    good = pl.col("reliable") if "reliable" in windows.columns else pl.lit(True)
    w = windows.filter(good & pl.col("tokens_per_s").is_not_null() & (pl.col("tokens_per_s") > 0)
                       & (pl.col("lm_tokens") > 0) & (pl.col("window_seconds") > 0))
    if not w.height:
        return None
    ratio = float((w["tokens_per_s"] / (w["lm_tokens"] / w["window_seconds"])).median())
    out = {"global": ratio}
    if world_size:
        out["per GPU"] = ratio * world_size
    if dp:
        out["per DP rank"] = ratio * dp
    return out


@register_check("log_tokens")
def _log_tokens(inputs: CheckInputs) -> Check | None:
    ev = inputs.evidence
    if ev is None or ev.estimated:
        return None
    dp, _ = expected_dp(ev.config)
    readings = tokens_readings(inputs.run.windows, inputs.run.world_size, dp)
    if readings is None:
        return None  # the log prints no tokens/s: nothing to examine, no line
    details = {"logged_over_metadata": readings}
    match = [name for name, r in readings.items() if abs(r - 1) <= TOKENS_TOLERANCE]
    if match:
        return Check("log_tokens", "ok", f"log tokens/s agrees with the metadata's real tokens ({match[0]}: "
                     f"logged / metadata {readings[match[0]]:.3f})",
                     details)
    listed = ", ".join(f"{n} {r:.3f}" for n, r in readings.items())
    return Check("log_tokens", "warn", f"log tokens/s disagrees with the metadata's real tokens under every reading "
                 f"(logged / metadata: {listed}): the log counts padded tokens, or the metadata is another run's",
                 details)
