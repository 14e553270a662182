"""The summary.json schema: every key declared once, with its unit, type and the module that computes it.

`check_summary(summary)` lists every difference between a written summary and this declaration (a key
missing or undeclared, a value of the wrong type); `tests/report/test_one_truth.py` runs it on every
bundled sample and perturbed run, so a key added to `build_summary` without a declaration fails there.
Units: ``TFLOP/s/GPU``; ``fraction`` (0..1, shown as a percentage); ``FLOPs``; ``s``; ``count``;
``ratio`` (dimensionless); ``bytes``; ``text``; ``bool``; ``block`` (a nested object documented by its producer).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

__all__ = ["Key", "SUMMARY", "check_summary", "schema_markdown"]

_NUM = (int, float)


@dataclass(frozen=True)
class Key:
    name: str
    unit: str
    types: tuple[type, ...]
    meaning: str
    producer: str
    nullable: bool = False
    required: bool = True  # nested keys: False when the producer leaves it out in some runs
    fields: tuple["Key", ...] = ()  # keys of a nested object (checked when declared)
    each: tuple["Key", ...] = ()  # keys of every entry of a nested mapping (e.g. per convention) or list


def _k(name, unit, types, meaning, producer, **kw) -> Key:
    return Key(name, unit, types if isinstance(types, tuple) else (types,), meaning, producer, **kw)


_CONVENTION = (
    _k("tflops_per_gpu_mean", "TFLOP/s/GPU", _NUM, "time-weighted mean over the windows the means use",
       "analysis.run", nullable=True),
    _k("mfu_mean", "fraction", _NUM, "tflops_per_gpu_mean / peak_tflops", "analysis.run", nullable=True),
    _k("flops_total", "FLOPs", _NUM, "training FLOPs of every iteration with statistics", "analysis.run"),
)
_STEP = tuple(_k(n, u, _NUM, m, "analysis.compare.step_facts", nullable=True) for n, u, m in (
    ("iterations", "count", "iterations of the windows the means use"),
    ("seconds_per_iteration", "s", "Σ window seconds / Σ window iterations"),
    ("exact_flops_per_iteration", "FLOPs", "exact training FLOPs per iteration"),
    ("exact_vision_flops_per_iteration", "FLOPs", "exact vision FLOPs per iteration"),
    ("vision_share", "fraction", "the run's vision share (= vision_share_mean)"),
    ("lm_tokens_per_iteration", "count", "LM tokens per iteration"),
    ("padded_tokens_per_iteration", "count", "padded LM tokens per iteration"),
    ("visual_token_share", "fraction", "merged visual tokens / LM tokens"),
    ("images_and_videos_per_iteration", "count", "media items per iteration"),
    ("patches_per_frame", "count", "vision patches per frame"),
))
_HFU = (
    _k("recompute", "text", str, "recompute policy label (none, selective, full, full:N)", "analysis.hfu"),
    _k("source", "text", str, "where the policy came from", "analysis.hfu"),
    _k("rule", "text", str, "what is recomputed, in words", "analysis.hfu"),
    _k("policy", "block", dict, "the policy's fields", "analysis.hfu"),
    _k("model_tflops_per_gpu_mean", "TFLOP/s/GPU", _NUM, "= conventions.exact.tflops_per_gpu_mean", "analysis.hfu",
       nullable=True),
    _k("hardware_tflops_per_gpu_mean", "TFLOP/s/GPU", _NUM, "model x hardware_over_model", "analysis.hfu",
       nullable=True),
    _k("mfu_mean", "fraction", _NUM, "= conventions.exact.mfu_mean", "analysis.hfu", nullable=True),
    _k("hfu_mean", "fraction", _NUM, "mfu_mean x hardware_over_model", "analysis.hfu", nullable=True),
    _k("hardware_over_model", "ratio", _NUM, "(model + recomputed FLOPs) / model FLOPs", "analysis.hfu",
       nullable=True),
    _k("recompute_flops_share_of_model", "fraction", _NUM, "recomputed FLOPs / model FLOPs", "analysis.hfu",
       nullable=True, required=False),
)
_TRACE = tuple(_k(n, u, t, m, "analysis.trace_summary", **kw) for n, u, t, m, kw in (
    ("files", "text", list, "profiler trace files of the run folder (run.discover.traces_of)", {}),
    ("flops_source", "text", str, "metadata (exact per part), trace shapes (recorded matmuls only) or null",
     {"nullable": True}),
    ("ranks", "count", int, "ranks the traces hold", {}),
    ("iterations", "count", list, "training iterations of the profiled steps", {}),
    ("steps", "block", list, "per profiled step: rank, step, iteration, step_s (the ProfilerStep range, s)", {}),
    ("step_time_s", "s", _NUM, "Σ profiled step time over ranks and steps", {}),
    ("max_sum_gap", "fraction", _NUM, "largest |Σ parts - step| / step over the steps", {}),
    ("parts", "block", list, "per part: time_s, time_share, forward_s, backward_s (s, fraction); flops, flops_share "
     "(FLOPs, fraction); flops_per_s (FLOP/s); mfu (fraction); rate_vs_lm (ratio); excess_vs_lm_s (s)", {}),
    ("unattributed_s", "s", _NUM, "time in no known range (shown, never hidden)", {}),
    ("unattributed_share", "fraction", _NUM, "unattributed_s / step_time_s", {"nullable": True}),
    ("flops_total", "FLOPs", _NUM, "Σ FLOPs of the parts over the profiled rank-steps", {"nullable": True}),
    ("report_exact_flops", "FLOPs", _NUM, "the report's exact FLOPs (analysis.run per_iteration exact_total) of the "
     "profiled iterations, per rank-step / world size", {"nullable": True}),
    ("flops_match_report", "bool", bool, "flops_total = report_exact_flops (null when not comparable: not every "
     "rank traced, or no metadata)", {"nullable": True}),
    ("peak_tflops", "TFLOP/s/GPU", _NUM, "the peak the per-part MFU divides by", {"nullable": True}),
    ("top", "block", list, "top ops / kernels by time: name, part, time_s, count", {}),
    ("notes", "text", list, "what the attribution assumed or could not do", {}),
))
_RECONCILE = tuple(_k(n, u, t, m, "analysis.log_reconcile", required=False, **kw) for n, u, t, m, kw in (
    ("status", "text", str, "ok | no_logged_value | no_world_size | no_windows", {}),
    ("message", "text", str, "why there is nothing to reconcile", {}),
    ("windows", "count", int, "windows the means use with a logged TFLOP/s/GPU", {}),
    ("printed_decimals", "count", int, "print precision inferred from the logged values", {}),
    ("printed_median", "TFLOP/s/GPU", _NUM, "median logged value over those windows", {}),
    ("conventions", "block", list, "every registered convention computed for the run, closest first: convention, "
     "tflops_per_gpu_mean (TFLOP/s/GPU), mfu_mean (fraction; both as conventions.<name>), rel_diff_median (fraction), windows_matched (count), matches (bool: "
     "within print precision in at least half of the windows)", {}),
    ("not_defined", "block", dict, "convention -> why it is not defined for this model", {}),
    ("matches", "text", list, "conventions that match the log's number", {}),
    ("closest", "text", str, "the convention with the smallest median relative difference", {}),
    ("closest_minus_exact", "block", list, "closest minus exact per component, run totals: component, delta_flops "
     "(FLOPs), delta_of_exact_total (fraction)", {}),
))
_MEMORY_RANK = (
    _k("rank", "count", int, "the rank the memory report names (0: the rank that logs)", "analysis.memory"),
    _k("max_allocated_bytes", "bytes", _NUM, "largest max-allocated value of the rank's reports", "analysis.memory",
       nullable=True),
    _k("max_reserved_bytes", "bytes", _NUM, "largest max-reserved value of the rank's reports", "analysis.memory",
       nullable=True),
    _k("reports", "count", int, "memory reports of the rank", "analysis.memory"),
    _k("last_iteration", "count", int, "iteration of the rank's last report", "analysis.memory", nullable=True),
    _k("first", "text", str, "file:line of the rank's first report", "analysis.memory"),
)
_MEMORY = (
    _k("ranks", "block", list, "one entry per rank", "analysis.memory", each=_MEMORY_RANK),
    _k("ranks_reported", "count", int, "ranks that print memory reports", "analysis.memory"),
    _k("units_in_log", "text", list, "units the log prints (MB = MiB for Megatron-LM, GB = 1e9 for "
       "Megatron-Bridge, ...)", "analysis.memory"),
    _k("max_allocated_bytes", "bytes", _NUM, "highest max-allocated over the ranks", "analysis.memory",
       nullable=True),
    _k("max_reserved_bytes", "bytes", _NUM, "highest max-reserved over the ranks", "analysis.memory", nullable=True),
    _k("min_max_allocated_bytes", "bytes", _NUM, "lowest max-allocated over the ranks", "analysis.memory",
       nullable=True),
    _k("peak_rank", "count", int, "the rank with the highest peak", "analysis.memory"),
)
_RL_PHASE = (
    _k("seconds", "s", _NUM, "recorded seconds of the phase over the RL steps (null: not timed)", "analysis.rl",
       nullable=True),
    _k("flops", "FLOPs", _NUM, "exact FLOPs of the phase over the RL steps", "analysis.rl"),
    _k("parts", "block", dict, "FLOPs by part (vision_tower, projector, language_model)", "analysis.rl"),
    _k("tflops_per_gpu", "TFLOP/s/GPU", _NUM, "flops / seconds / GPUs", "analysis.rl", nullable=True),
    _k("time_share", "fraction", _NUM, "seconds / the steps' seconds", "analysis.rl", nullable=True),
    _k("flops_share", "fraction", _NUM, "flops / the steps' FLOPs", "analysis.rl"),
)
_RL = (
    _k("algorithm", "text", str, "RL algorithm (grpo, ppo, ...)", "ingest.rl_metadata"),
    _k("framework", "text", str, "the RL framework that ran it (trl, verl, ...)", "ingest.rl_metadata"),
    _k("headline", "text", str, "the regime in one line ('GRPO: generation N% of the step time')", "analysis.rl"),
    _k("settings", "block", dict, "num_generations, beta, reference, num_iterations, old_log_prob, critic, "
       "logprob_head", "analysis.rl"),
    _k("iterations", "count", int, "RL steps recorded", "analysis.rl"),
    _k("step_seconds", "s", _NUM, "Σ recorded step seconds", "analysis.rl"),
    _k("flops_total", "FLOPs", _NUM, "exact FLOPs of every phase of every RL step", "analysis.rl"),
    _k("tflops_per_gpu", "TFLOP/s/GPU", _NUM, "flops_total / step_seconds / GPUs", "analysis.rl", nullable=True),
    _k("parts", "block", dict, "flops_total by part", "analysis.rl"),
    _k("phases", "block", dict, "per phase (generation, old_log_prob, ref, values, update_actor, update_critic, "
       "other)", "analysis.rl", each=_RL_PHASE),
    _k("per_iteration", "block", list, "per RL step: iteration, step_s, flops, parts, phases (FLOPs), seconds",
       "analysis.rl"),
    _k("update_flops", "FLOPs", _NUM, "the actor update's FLOPs (forward + backward, as the RL step ran it)",
       "analysis.rl"),
    _k("training_only_flops", "FLOPs", _NUM, "exact FLOPs the training metadata counts (the update's microbatches "
       "as plain training steps: no generation, no log-prob forwards)", "pipeline.rl_summary", nullable=True),
    _k("training_only_share", "fraction", _NUM, "training_only_flops / flops_total", "pipeline.rl_summary",
       nullable=True),
    _k("notes", "text", list, "what the per-sample counting leaves out (padding of batched generation)",
       "analysis.rl"),
    _k("log_response_lengths_checked", "count", int, "iterations whose logged mean response length was compared "
       "with the recorded rollout's (a disagreement is a message)", "analysis.rl.log_response_check"),
)
_REGIME = (
    _k("description", "text", str, "the regime in words (e.g. LoRA r=16 on LM attention + MLP, tower and projector "
       "frozen)", "run.regime"),
    _k("source", "text", str, "which source stated it (command line > run.yaml > files in the run folder)",
       "run.regime"),
    _k("whole_parts", "bool", bool, "only whole parts are frozen (counted exactly as without a regime)", "run.regime"),
    _k("trainability", "text", str, "the trainability's selectors, adapter and hooks", "arch.trainability"),
    _k("flops_per_iteration", "FLOPs", _NUM, "exact FLOPs per iteration under the regime (windows the means use)",
       "pipeline.regime_summary", nullable=True),
    _k("full_training_flops_per_iteration", "FLOPs", _NUM, "exact FLOPs per iteration if every weight trained",
       "pipeline.regime_summary", nullable=True),
    _k("full_training_over_regime", "ratio", _NUM, "full-training FLOPs / regime FLOPs (the overstatement of a tool "
       "that ignores the regime)", "pipeline.regime_summary", nullable=True),
    _k("full_training_tflops_per_gpu_mean", "TFLOP/s/GPU", _NUM, "conventions.exact.tflops_per_gpu_mean x "
       "full_training_over_regime", "pipeline.regime_summary", nullable=True),
    _k("full_training_mfu_mean", "fraction", _NUM, "conventions.exact.mfu_mean x full_training_over_regime",
       "pipeline.regime_summary", nullable=True),
    _k("contradictions", "text", list, "sources that state another regime, with the size of the FLOPs difference",
       "pipeline.regime_summary"),
)
_INPUTS = (
    _k("logs", "text", list, "log files and TensorBoard folders read", "run.discover"),
    _k("metadata", "text", list, "metadata files / shard folders read", "run.discover"),
    _k("model", "text", str, "the model as stated (preset name or config path)", "run.core"),
    _k("model_source", "text", str, "which source named the model (cli, manifest, log, checkpoint:config.json)",
       "run.core", nullable=True),
    _k("causal", "text", str, "how exact counts the LM attention core (half | full)", "pipeline"),
)

SUMMARY: tuple[Key, ...] = (
    _k("checks_status", "text", str, "fail | warn | ok: the most severe check", "report.document"),
    _k("checks_failed", "text", list, "names of the failed checks", "report.document"),
    _k("checks", "block", list, "every check: name, status, summary, detail", "analysis.checks"),
    _k("run", "text", str, "the run as given (log file or folder)", "pipeline"),
    _k("model", "text", str, "the model's name", "analysis.run"),
    _k("synthetic", "bool", bool, "generated data, not a real training job", "run configuration"),
    _k("estimated", "bool", bool, "statistics estimated from the run configuration (no metadata)", "analysis.run"),
    _k("iterations", "count", int, "iterations with statistics", "analysis.run"),
    _k("logged_windows", "count", int, "logging windows with a step time", "analysis.windows"),
    _k("windows_used", "count", int, "windows the means use (analysis.selection)", "analysis.selection"),
    _k("world_size", "count", int, "GPUs of the run", "run configuration", nullable=True),
    _k("gpu", "text", str, "GPU type", "run configuration", nullable=True),
    _k("dtype", "text", str, "dtype of the peak", "run configuration"),
    _k("peak_tflops", "TFLOP/s/GPU", _NUM, "dense peak per GPU the MFUs divide by", "hardware", nullable=True),
    _k("vision_share_mean", "fraction", _NUM, "Σ exact vision FLOPs / Σ exact training FLOPs over the windows the "
       "means use (analysis.selection.VISION_SHARE)", "analysis.selection", nullable=True),
    _k("conventions", "block", dict, "per convention: rates over the windows the means use", "analysis.run",
       each=_CONVENTION),
    _k("convention_differences", "block", dict, "per convention: component differences vs exact",
       "analysis.differences"),
    _k("logged_tflops_per_gpu_mean", "TFLOP/s/GPU", _NUM, "the log's own number, time-weighted over the same "
       "windows", "report.document", nullable=True),
    _k("step", "block", dict, "per-iteration facts over the windows the means use", "analysis.compare",
       fields=_STEP),
    _k("log_crosscheck", "block", dict, "the log's number vs the recomputed conventions", "analysis.crosscheck"),
    _k("metadata_coverage", "block", dict, "samples per iteration vs the global batch size", "analysis.run"),
    _k("health", "block", dict, "wall clock, goodput, lost time, step-time percentiles", "analysis.health"),
    _k("attribution", "block", dict, "step time fitted to LM and vision FLOPs", "analysis.attribution"),
    _k("gaps", "block", dict, "log vs metadata iteration gaps", "analysis.run"),
    _k("messages", "text", list, "warnings and notes of the analysis", "pipeline.evidence_checks"),
    _k("run_config", "block", dict, "the resolved run configuration with sources and conflicts",
       "ingest.runconfig"),
    _k("inputs", "block", dict, "files and model read", "run.core", fields=_INPUTS),
    _k("diagnostics", "block", dict, "log parser and metadata reader diagnostics", "ingest"),
    _k("peak", "block", dict, "the peak used for MFU and its provenance", "hardware", nullable=True),
    _k("hfu", "block", dict, "HFU next to MFU under activation recompute", "analysis.hfu", nullable=True,
       fields=_HFU),
    _k("balance", "block", dict, "DP load balance from per-microbatch FLOPs", "analysis.balance", nullable=True),
    _k("regime", "block", dict, "the training regime (what trains, its source) and full-training accounting beside "
       "it; null when no source states one", "pipeline.regime_summary", nullable=True, fields=_REGIME),
    _k("stragglers", "block", dict, "per-rank timing lines of the logs", "analysis.stragglers", nullable=True),
    _k("log_reconcile", "block", dict, "every registered convention (variants included) against the log's printed "
       "TFLOP/s/GPU, within its print precision (flops.conventions.reconcile)", "analysis.log_reconcile",
       fields=_RECONCILE),
    _k("trace_parts", "block", dict, "where the profiled step time went, per part, joined with exact FLOPs (null "
       "when the run folder holds no profiler trace)", "analysis.trace_summary", nullable=True, fields=_TRACE),
    _k("memory", "block", dict, "peak GPU memory per rank from the log's memory reports", "analysis.memory",
       nullable=True, fields=_MEMORY),
    _k("rl", "block", dict, "RL steps (run folder rl/): per phase exact FLOPs, seconds, rates and shares, the "
       "training-only accounting beside them; null without RL metadata", "pipeline.rl_summary", nullable=True,
       fields=_RL),
    _k("figures", "block", dict, "figure file -> drawn, or skipped: reason", "report.figures"),
)


def _check(value: Any, key: Key, where: str, out: list[str]) -> None:
    if value is None:
        if not key.nullable:
            out.append(f"{where}: null, declared not nullable")
        return
    if isinstance(value, bool) and bool not in key.types:
        out.append(f"{where}: bool, declared {key.unit}")
        return
    if not isinstance(value, key.types):
        out.append(f"{where}: {type(value).__name__}, declared {'/'.join(t.__name__ for t in key.types)}")
        return
    if key.fields:
        _check_object(value, key.fields, where, out)
    if key.each:
        entries = value.items() if isinstance(value, dict) else enumerate(value)  # a mapping or a list
        for name, entry in entries:
            _check_object(entry, key.each, f"{where}.{name}", out)


def _check_object(obj: dict, keys: tuple[Key, ...], where: str, out: list[str]) -> None:
    declared = {k.name: k for k in keys}
    for name in obj:
        if name not in declared:
            out.append(f"{where}.{name}: not declared")
    for key in keys:
        if key.name in obj:
            _check(obj[key.name], key, f"{where}.{key.name}", out)
        elif key.required:
            out.append(f"{where}.{key.name}: declared, missing")


def check_summary(summary: dict) -> list[str]:
    """Differences between a written summary and `SUMMARY` (empty when it conforms)."""
    out: list[str] = []
    _check_object(summary, SUMMARY, "summary", out)
    return out


def schema_markdown() -> str:
    """The schema as a Markdown table (top-level keys and the declared nested ones)."""
    rows = ["| key | unit | meaning | computed in |", "|---|---|---|---|"]

    def add(keys: tuple[Key, ...], prefix: str) -> None:
        for k in keys:
            rows.append(f"| `{prefix}{k.name}` | {k.unit} | {k.meaning} | `{k.producer}` |")
            add(k.fields, f"{prefix}{k.name}.")
            add(k.each, f"{prefix}{k.name}.<name>.")
    add(SUMMARY, "")
    return "\n".join(rows) + "\n"
