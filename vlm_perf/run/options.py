"""Every run option, declared once: name, type, bounds, help, the sources that may state it, and the
commands whose result it changes.

Precedence of the sources: **command line > run.yaml (manifest) > log > checkpoint files** (a
``config.json`` in the run folder is the model when nothing else names one). The command-line flags of
`vlm-perf report`, `compare`, `parse`, `metadata` and `trace` are generated from this table
(`vlm_perf.commands._options.run_options`), and so are the flags `flops` and `explain` share with them
(`vlm_perf.commands._options.declared`: the model, tokens per sample, peak, regime, attention core,
convention), so an option has one spelling, one metavar and one help text everywhere (``notes``: what it
means or defaults to in one command, after that help); ``docs/run-config.md``'s option table is generated
from it too (`options_markdown`; a test keeps the two in sync).

The same table generates `RunOptions`, the one typed configuration of a run (a frozen dataclass, one field per
option): ``RunOptions.of(gpus=8, frozen=["vit"])`` checks each value once (library callers),
``RunOptions.from_command(options)`` takes a command's generated flags (checked there, naming the flag), and
``RunOptions.overrides()`` is the command line's layer of the configuration (`vlm_perf.run.core.open_run`).

``field`` is the `vlm_perf.ingest.runconfig.RunConfig` field (and run.yaml key) the option sets, or
None for an option only the command line states. ``per_run`` options of `compare` come as a pair,
``--NAME-a`` / ``--NAME-b``.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field, make_dataclass
from pathlib import PurePath
from typing import Any, Mapping, Optional

from ..errors import ConfigError

__all__ = ["MissingSettings", "RunOption", "RunOptions", "OPTIONS", "YAML_ONLY", "option", "options_for", "check_value",
           "options_markdown", "SOURCES", "COMMANDS"]

SOURCES = ("command line", "run.yaml", "log", "checkpoint")
COMMANDS = ("report", "compare", "parse", "metadata", "trace")


class MissingSettings(ConfigError):
    """Settings a computation needs that no source states; ``fields``: their RunConfig fields / run.yaml keys
    (the command line adds its flags for them, `vlm_perf.commands._options`)."""

    def __init__(self, message: str, fields: tuple[str, ...]) -> None:
        self.fields = tuple(fields)
        super().__init__(message)


@dataclass(frozen=True)
class RunOption:
    name: str  # python parameter name of the generated flag
    flag: str  # the one spelling, e.g. --seq-length
    kind: str  # int | float | str | bool | list (repeatable str) | choice
    help: str
    commands: tuple[str, ...]
    sources: tuple[str, ...] = ("command line",)
    field: str | None = None  # RunConfig field / run.yaml key
    short: str | None = None
    metavar: str | None = None
    minimum: float | None = None  # values must be > minimum when exclusive, else >= minimum
    exclusive: bool = False
    choices: tuple[str, ...] = ()
    default: Any = None
    per_run: bool = False  # compare: one flag per run (--NAME-a / --NAME-b)
    pattern: str | None = None  # a str value must match (case-insensitive, whole value)
    shape: str = ""  # what ``pattern`` accepts, in words
    aliases: tuple[str, ...] = ()  # other spellings every command accepts for it (e.g. --seq-len)
    notes: tuple[tuple[str, str], ...] = ()  # (command, what the option means or defaults to there), after help

    def help_for(self, command: str) -> str:
        """The help text of the option's flag in ``command``: the declared ``help``, then that command's note."""
        note = next((text for name, text in self.notes if name == command), "")
        return f"{self.help} {note}" if note else self.help

    @property
    def maximum(self) -> int | None:
        """The upper bound of an integer option: the manifest's (``ingest.runconfig.INT_MAX``), so that a value
        has one range whichever source states it."""
        from ..ingest.runconfig import INT_MAX  # lazy: the CLI's flags (and --version) load no model family

        return INT_MAX.get(self.field or "", 1 << 31) if self.kind == "int" else None

    def bounds(self) -> str:
        if self.choices:
            return ", ".join(self.choices)
        if self.minimum is None:
            return ""
        low = f"{'>' if self.exclusive else '>='} {self.minimum:g}"
        return low + (f", <= {self.maximum}" if self.maximum is not None else "")


_REPORT_ESTIMATE = ("report",)
_RUN_CMDS = ("report", "compare")
_PEAK_CMDS = ("report", "compare", "trace", "flops")  # the peak: MFU (flops: of a --log-tflops reading)
_REGIME_CMDS = ("report", "compare", "trace")  # what trains: the trace's FLOPs per part are the report's
_ESTIMATE = (("report", "(estimate mode)"),)
#: trace: an option that acts on the run folder's metadata FLOPs (without --run the FLOPs are the trace's shapes)
_WITH_RUN = ("trace", "(with --run)")

OPTIONS: tuple[RunOption, ...] = (
    RunOption("model", "--model", "str", "Model: preset name or its Hugging Face repo id (vlm-perf families "
              "--presets), config.json or checkpoint folder.", ("report", "compare", "metadata", "trace", "flops",
                                                                 "explain"),
              ("command line", "run.yaml", "log", "checkpoint"), "model", "-m", "NAME_OR_CONFIG", per_run=True,
              notes=tuple((c, "(default: run.yaml's model, else a config.json in the run folder)")
                          for c in ("report", "compare", "metadata"))
              + (("trace", "(with --run; default: the run folder's run.yaml model, else its config.json)"),)
              + (("flops", "(a checkpoint folder: config.json and its processor files)"),)),
    RunOption("gpus", "--gpus", "int", "World size: the number of GPUs of the run.", (*_REGIME_CMDS, "flops"),
              ("command line", "run.yaml", "log"), "num_gpus", metavar="N", minimum=1, per_run=True,
              notes=(("flops", "(with --log-tflops: the step's GPUs)"),
                     ("trace", "(with --run: the iteration's FLOPs per GPU)"))),
    RunOption("gpu", "--gpu", "str", "GPU type for the peak, e.g. H100-SXM, GB200, MI300X.", _PEAK_CMDS,
              ("command line", "run.yaml", "log"), "gpu", metavar="TYPE", per_run=True,
              notes=(("flops", "(with --log-tflops: the MFU of each convention's reading)"),)),
    RunOption("peak_tflops", "--peak-tflops", "float", "Dense peak TFLOP/s per GPU (overrides the GPU table).",
              _PEAK_CMDS, metavar="TFLOPS", minimum=0, exclusive=True),
    RunOption("dtype", "--dtype", "str", "Training dtype for the peak (default bf16).", _PEAK_CMDS,
              ("command line", "run.yaml", "log"), "dtype", metavar="DTYPE", per_run=True),
    RunOption("frozen", "--frozen", "list", "Frozen part or selector (repeatable): vision_tower, projector, vision, "
              "language_model (aliases vit, merger, lm, ...), or PART[SLICE][.KIND+KIND], e.g. 'vit[:-4]', "
              "'lm.embeddings'.", (*_REGIME_CMDS, "flops"), ("command line", "run.yaml", "checkpoint"), "frozen",
              metavar="SELECTOR", default=[], per_run=True, notes=(_WITH_RUN,)),
    RunOption("trainable", "--trainable", "list", "What trains (repeatable selector PART[SLICE][.KIND+KIND], e.g. "
              "'vit[-4:]', 'lm.attention+mlp'; default: everything, or nothing of the base with an adapter).",
              (*_REGIME_CMDS, "flops"), ("command line", "run.yaml", "checkpoint"), "trainable", metavar="SELECTOR",
              default=[], per_run=True, notes=(_WITH_RUN,)),
    RunOption("adapter", "--adapter", "str", "LoRA/DoRA adapter: an adapter_config.json or a PEFT checkpoint "
              "folder.", (*_REGIME_CMDS, "flops"), ("command line", "run.yaml", "checkpoint"), "adapter",
              metavar="PATH", per_run=True,
              notes=tuple((c, "(default: trainability.json / adapter_config.json found in the run folder)")
                          for c in _RUN_CMDS) + (("trace", "(with --run; default: trainability.json / "
                                                          "adapter_config.json found in the run folder)"),)),
    RunOption("qlora", "--qlora", "bool", "The adapter's base weights are quantised (QLoRA: base matmuls counted "
              "at the dequantised weights' FLOPs).", (*_REGIME_CMDS, "flops"), ("command line", "run.yaml"), "qlora",
              default=False, per_run=True, notes=(_WITH_RUN,)),
    RunOption("recompute", "--recompute", "str", "Activation recompute for HFU: none, selective, full or full:N "
              "layers (default: what the log / run.yaml state).", _RUN_CMDS, ("command line", "run.yaml", "log"),
              metavar="POLICY", per_run=True, pattern=r"\s*(none|selective|full(:[1-9][0-9]*)?)\s*",
              shape="none, selective, full or full:N (N > 0 layers)"),
    RunOption("causal", "--causal", "choice", "exact's LM attention core: half (causal kernels) or full "
              "(eager/masked).", _PEAK_CMDS, choices=("half", "full"), default="half", metavar="MODE",
              notes=(_WITH_RUN,)),
    RunOption("seq_length", "--seq-length", "int", "LM tokens per sample, visual placeholders included.",
              (*_REPORT_ESTIMATE, "flops", "explain"), ("command line", "run.yaml", "log"), "seq_length",
              metavar="TOKENS", minimum=1, aliases=("--seq-len",),
              notes=_ESTIMATE + (("flops", "(--samples of them; packed documents: --seq-lens)"),)),
    RunOption("global_batch_size", "--global-batch-size", "int", "Samples per iteration: estimate mode, and what "
              "metadata coverage is checked against (default: what the log prints).", _REPORT_ESTIMATE,
              ("command line", "run.yaml", "log"), "global_batch_size", metavar="SAMPLES", minimum=1),
    RunOption("image_size", "--image-size", "str", "Image H,W in pixels, through the family's processor rule.",
              (*_REPORT_ESTIMATE, "flops"), ("command line", "run.yaml"), "image_size", metavar="H,W",
              notes=(("report", "(estimate mode: each sample's image)"),
                     ("flops", "(repeatable; each image a sample of its own unless --multi-image)"))),
    RunOption("image_grid", "--grid", "str", "Image grid T,H,W in patches before merging, as image_grid_thw.",
              (*_REPORT_ESTIMATE, "flops"), ("command line", "run.yaml"), "image_grid", metavar="T,H,W",
              notes=(("report", "(estimate mode: each sample's image)"), ("flops", "(repeatable)"))),
    RunOption("images_per_sample", "--images-per-sample", "int", "Estimate mode: images per sample (default 1).",
              _REPORT_ESTIMATE, ("command line", "run.yaml"), "images_per_sample", metavar="N", minimum=1),
    RunOption("log_interval", "--log-interval", "int", "Iterations per log line (default: inferred from the log).",
              _REPORT_ESTIMATE, ("command line", "run.yaml", "log"), "log_interval", metavar="N", minimum=1),
    RunOption("log_format", "--format", "str", "Log format: auto (detected per line) or one format name.",
              ("report", "parse"), short="-f", metavar="FORMAT", default="auto"),
    RunOption("skip_bad", "--skip-bad", "bool", "Skip (and count) bad metadata lines.",
              ("report", "compare", "metadata"), default=False),
    RunOption("scheduler", "--scheduler", "str", "Read the run on a Dask cluster: local[:N] starts N local worker "
              "processes; tcp://host:8786 or a scheduler file joins a running cluster (dask-jobqueue, Kubernetes). "
              "Same results as without (default: this process).", COMMANDS, metavar="SCHEDULER"),
    RunOption("log", "--log", "list", "Read only these log file(s) of the run (repeatable); the run folder still "
              "gives the metadata and run.yaml.", ("report",), metavar="FILE", default=[]),
    RunOption("merge_logs", "--merge-logs", "bool", "Merge log files that look like two different runs (refused by "
              "default; the checks then say so).", ("report",), default=False),
    RunOption("convention", "--convention", "list", "FLOPs convention by name (vlm-perf conventions lists them).",
              (*_RUN_CMDS, "flops", "explain"), metavar="NAME", default=[],
              notes=tuple((c, "(repeatable; default: every one defined for the family)") for c in _RUN_CMDS)
              + (("flops", "(one, or 'all')"), ("explain", "(the --after number's)"))),
)

#: run.yaml keys no command-line flag sets (type, meaning)
YAML_ONLY: tuple[tuple[str, str, str, str], ...] = (  # (key, type, sources, meaning)
    ("micro_batch_size", "int", "run.yaml, log", "samples per microbatch (metadata coverage counts microbatches x "
     "this)"),
    ("recompute_granularity", "str", "run.yaml, log", "activation recompute as Megatron names it: full, selective or "
     "none (HFU; --recompute overrides)"),
    ("recompute_method", "str", "run.yaml, log", "uniform (every layer, in chunks) or block (the first "
     "recompute_num_layers layers of each pipeline stage)"),
    ("recompute_num_layers", "int", "run.yaml, log", "Megatron's --recompute-num-layers"),
    ("gradient_checkpointing", "bool", "run.yaml, log", "Hugging Face Trainer flag: full recompute of every layer"),
    ("synthetic", "bool", "run.yaml", "synthetic-data run"),
    ("generator", "str", "run.yaml", "provenance of a synthetic run (e.g. vlm_perf.synth)"),
    ("seed", "int", "run.yaml", "seed of a synthetic run"),
    ("notes", "str", "run.yaml", "free text"),
)

_BY_NAME = {o.name: o for o in OPTIONS}
_SPELLINGS = [s for o in OPTIONS for s in (o.flag, *o.aliases)]
if len(_BY_NAME) != len(OPTIONS) or len(set(_SPELLINGS)) != len(_SPELLINGS):
    raise RuntimeError("run options: a name or flag is declared twice")


def option(name: str) -> RunOption:
    return _BY_NAME[name]


def option_for_field(key: str) -> RunOption | None:
    """The option that sets RunConfig field / run.yaml key ``key`` (None: no flag sets it)."""
    return next((o for o in OPTIONS if o.field == key), None)


def options_for(command: str) -> list[RunOption]:
    """The options command ``command`` takes, in declaration order."""
    return [o for o in OPTIONS if command in o.commands]


def check_value(name: str, value: Any) -> Any:
    """``value`` of option ``name`` within its declared bounds (None passes); a `ConfigError` naming the
    option's field (or name) otherwise. Library messages name no flag."""
    if value is None:
        return None
    opt = _BY_NAME[name]
    label = opt.field or opt.name
    if opt.choices and value not in opt.choices:
        names = list(opt.choices)
        either = " or ".join(names) if len(names) <= 2 else ", ".join(names[:-1]) + " or " + names[-1]
        raise ConfigError(f"{label} must be {either}, got {value!r}")
    if opt.pattern and not (isinstance(value, str) and re.fullmatch(opt.pattern, value, flags=re.I)):
        raise ConfigError(f"{label} must be {opt.shape}, got {value!r}")
    if opt.kind in ("int", "float") and opt.minimum is not None:
        bad = isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or (
            value <= opt.minimum if opt.exclusive else value < opt.minimum) or (
            opt.maximum is not None and value > opt.maximum)
        if bad:
            what = "a positive integer" if opt.kind == "int" else "a positive number"
            raise ConfigError(f"{label} must be {what} ({opt.bounds()}), got {value!r}")
    return value


def options_markdown() -> str:
    """The option table of docs/run-config.md (generated; `tests/report/test_run_options.py` checks the doc)."""
    rows = ["| option | flag | run.yaml key | type | bounds | sources (highest first) | commands | meaning |",
            "|---|---|---|---|---|---|---|---|"]
    for o in OPTIONS:
        flag = f"`{o.flag}`" + "".join(f" / `{s}`" for s in (*o.aliases, *([o.short] if o.short else [])))
        if o.per_run:
            flag += f" (compare: `{o.flag}-a`, `{o.flag}-b`)" if "compare" in o.commands else ""
        key = f"`{o.field}`" if o.field else "—"
        meaning = " ".join([o.help] + [f"*{command}:* {note.strip('()')}." for command, note in o.notes])
        rows.append(f"| {o.name} | {flag} | {key} | {o.kind} | {o.bounds() or '—'} | {', '.join(o.sources)} | "
                    f"{', '.join(o.commands)} | {meaning} |")
    for key, kind, sources, meaning in YAML_ONLY:
        rows.append(f"| {key} | — | `{key}` | {kind} | — | {sources} | report, compare | {meaning} |")
    return "\n".join(rows) + "\n"


# --- the typed configuration: one frozen dataclass generated from OPTIONS --------------------------------------
_KIND_TYPES: dict[str, Any] = {"int": Optional[int], "float": Optional[float], "str": Optional[str], "choice": str,
                               "bool": bool, "list": tuple[str, ...]}


def _default(o: RunOption) -> Any:
    if o.kind == "list":
        return tuple(o.default or ())
    if o.kind == "bool":
        return bool(o.default)
    return o.default


def _of(cls: type, **values: Any) -> Any:
    """``RunOptions`` from option name -> value (library callers: ``load_run(run, gpus=8)``): unknown names are
    refused, lists become tuples, every value is checked against its declaration (`check_value`) — the one
    validation of a library call."""
    unknown = sorted(set(values) - set(_BY_NAME))
    if unknown:
        raise ConfigError(f"unknown run option(s) {', '.join(unknown)}; the options are: {', '.join(_BY_NAME)}")
    return cls(**{name: check_value(name, _normal(_BY_NAME[name], value)) for name, value in values.items()})


def _from_command(cls: type, options: Mapping[str, Any], suffix: str = "") -> Any:
    """``RunOptions`` from a command's generated flags (`vlm_perf.commands._options.run_options`, which checked each
    value and names the flag in its message): ``suffix`` ``_a`` / ``_b`` picks one run of `compare`."""
    out: dict[str, Any] = {}
    for name, value in options.items():
        if suffix and name.endswith(("_a", "_b")):
            if not name.endswith(suffix):
                continue
            name = name[: -len(suffix)]
        if name in _BY_NAME:
            out[name] = _normal(_BY_NAME[name], value)
    return cls(**out)


def _normal(o: RunOption, value: Any) -> Any:
    if value is None:
        return _default(o) if o.kind in ("list", "bool", "choice") else None
    if o.kind == "list":
        return tuple(str(v) for v in value)
    if o.kind == "str" and isinstance(value, PurePath):
        return str(value)
    return value


def _overrides(self: Any) -> dict[str, Any]:
    """RunConfig field -> value of the options this run was given: the command line's layer of the configuration
    (`vlm_perf.ingest.runconfig.resolve_run_config`). Options left unset (None, (), False) state nothing, so
    run.yaml, the log and the checkpoint files still decide them; lists are handed over as lists."""
    out: dict[str, Any] = {}
    for o in OPTIONS:
        value = getattr(self, o.name)
        if o.field is None or value is None or value is False or (o.kind == "list" and not value):
            continue
        out[o.field] = list(value) if o.kind == "list" else value
    return out


#: every run option as one typed, frozen configuration: a field per declaration of `OPTIONS` (its ``name``, the
#: type of its ``kind``, its ``default``). Built once per run — ``RunOptions.of(**values)`` (validated here) or
#: ``RunOptions.from_command(options)`` (validated by the command's flags) — and read everywhere after that.
RunOptions = make_dataclass(
    "RunOptions", [(o.name, _KIND_TYPES[o.kind], field(default=_default(o))) for o in OPTIONS], frozen=True,
    namespace={"of": classmethod(_of), "from_command": classmethod(_from_command), "overrides": _overrides,
               "__module__": __name__,
               "__doc__": "Every run option of `OPTIONS`, typed and validated once (see `vlm_perf.run.options`)."})
