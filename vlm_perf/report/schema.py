"""The summary.json schema: every key declared once, with its unit, type and the module that computes it.

The keys `document.build_summary` writes itself are `CORE`; every other key is declared by the report part
that writes it (`vlm_perf.report.parts.ReportPart.keys`), and `summary_keys()` / ``SUMMARY`` are derived
from both. `check_summary(summary)` lists every difference between a written summary and this declaration
(a key missing or undeclared, a value of the wrong type); `tests/report/test_one_truth.py` runs it on every
bundled sample and perturbed run, so a key added to `build_summary` without a declaration fails there.
Units: ``TFLOP/s/GPU``; ``fraction`` (0..1, shown as a percentage); ``FLOPs``; ``s``; ``count``;
``ratio`` (dimensionless); ``bytes``; ``text``; ``bool``; ``block`` (a nested object documented by its producer).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

__all__ = ["Key", "key", "CORE", "summary_keys", "check_summary", "schema_markdown"]

NUMBER = (int, float)  # the types a numeric summary key accepts (check_summary refuses a bool for it)


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


def key(name: str, unit: str, types, meaning: str, producer: str, **kw) -> Key:
    """A `Key`; ``types`` is one type or a tuple of them (a report part declares its keys with this)."""
    return Key(name, unit, types if isinstance(types, tuple) else (types,), meaning, producer, **kw)


_k = key


_CONVENTION = (
    _k("tflops_per_gpu_mean", "TFLOP/s/GPU", NUMBER, "time-weighted mean over the windows the means use",
       "analysis.run", nullable=True),
    _k("mfu_mean", "fraction", NUMBER, "tflops_per_gpu_mean / peak_tflops", "analysis.run", nullable=True),
    _k("flops_total", "FLOPs", NUMBER, "training FLOPs of every iteration with statistics", "analysis.run"),
)
_STEP = tuple(_k(n, u, NUMBER, m, "analysis.compare.step_facts", nullable=True) for n, u, m in (
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
_INPUTS = (
    _k("logs", "text", list, "log files and TensorBoard folders read", "run.discover"),
    _k("metadata", "text", list, "metadata files / shard folders read", "run.discover"),
    _k("model", "text", str, "the model as stated (preset name or config path)", "run.core"),
    _k("model_source", "text", str, "which source named the model (cli, manifest, log, checkpoint:config.json)",
       "run.core", nullable=True),
    _k("causal", "text", str, "how exact counts the LM attention core (half | full)", "pipeline"),
)

#: the keys `document.build_summary` writes itself; every report part adds its own (`parts.ReportPart.keys`);
#: ``SUMMARY`` (module attribute) is `summary_keys()`
CORE: tuple[Key, ...] = (
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
    _k("peak_tflops", "TFLOP/s/GPU", NUMBER, "dense peak per GPU the MFUs divide by", "hardware", nullable=True),
    _k("vision_share_mean", "fraction", NUMBER, "Σ exact vision FLOPs / Σ exact training FLOPs over the windows the "
       "means use (analysis.selection.VISION_SHARE)", "analysis.selection", nullable=True),
    _k("conventions", "block", dict, "per convention: rates over the windows the means use", "analysis.run",
       each=_CONVENTION),
    _k("convention_differences", "block", dict, "per convention: component differences vs exact",
       "analysis.differences"),
    _k("logged_tflops_per_gpu_mean", "TFLOP/s/GPU", NUMBER, "the log's own number, time-weighted over the same "
       "windows", "report.document", nullable=True),
    _k("step", "block", dict, "per-iteration facts over the windows the means use", "analysis.compare",
       fields=_STEP),
    _k("log_crosscheck", "block", dict, "the log's number vs the recomputed conventions", "analysis.crosscheck"),
    _k("metadata_coverage", "block", dict, "samples per iteration vs the global batch size", "analysis.run"),
    _k("health", "block", dict, "wall clock, goodput, lost time, step-time percentiles", "analysis.health"),
    _k("attribution", "block", dict, "step time fitted to LM and vision FLOPs", "analysis.attribution"),
    _k("gaps", "block", dict, "log vs metadata iteration gaps", "analysis.run"),
    _k("messages", "text", list, "warnings and notes of the analysis", "analysis.facade.Run.messages"),
    _k("run_config", "block", dict, "the resolved run configuration with sources and conflicts",
       "ingest.runconfig"),
    _k("inputs", "block", dict, "files and model read", "run.core", fields=_INPUTS),
    _k("diagnostics", "block", dict, "log parser and metadata reader diagnostics", "ingest"),
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


def summary_keys() -> tuple[Key, ...]:
    """Every summary.json key: `CORE`, then each registered report part's keys in report order
    (`vlm_perf.report.parts`; a part registered late is included)."""
    from .parts import all_parts

    return CORE + tuple(k for part in all_parts() for k in part.keys)


def __getattr__(name: str) -> Any:  # ``SUMMARY``: derived on each access, so late registrations count
    if name == "SUMMARY":
        return summary_keys()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def check_summary(summary: dict) -> list[str]:
    """Differences between a written summary and `summary_keys()` (empty when it conforms)."""
    out: list[str] = []
    _check_object(summary, summary_keys(), "summary", out)
    return out


def schema_markdown() -> str:
    """The schema as a Markdown table (top-level keys and the declared nested ones)."""
    rows = ["| key | unit | meaning | computed in |", "|---|---|---|---|"]

    def add(keys: tuple[Key, ...], prefix: str) -> None:
        for k in keys:
            rows.append(f"| `{prefix}{k.name}` | {k.unit} | {k.meaning} | `{k.producer}` |")
            add(k.fields, f"{prefix}{k.name}.")
            add(k.each, f"{prefix}{k.name}.<name>.")
    add(summary_keys(), "")
    return "\n".join(rows) + "\n"
