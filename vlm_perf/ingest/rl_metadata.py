"""RL metadata (``rl/settings.json`` + ``rl/steps.jsonl``, schema ``vlm-perf-rl/1``): read and validate.

Written by `vlm_perf.capture_rl.GRPORecorder` (or any loop that follows docs/metadata-schema.md, "RL steps").
Every violation is a `SchemaError` naming ``file`` or ``file:line`` and the field; nothing is guessed.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..arch.validate import loads_json, read_json_file
from ..errors import SchemaError
from ..remote import as_path
from ..flops.generation import HEAD_POSITIONS

__all__ = ["RL_SCHEMA", "RL_DIR", "RLSettings", "Shapes", "Rollout", "RLStep", "RLRecord", "read_rl", "find_rl",
           "PHASE_NAMES", "incomplete_rl", "phase_seconds_problem",
           "rollout_groups_problem"]

RL_SCHEMA = "vlm-perf-rl/1"
RL_DIR = "rl"
SETTINGS, STEPS = "settings.json", "steps.jsonl"
ALGORITHMS = ("grpo", "ppo", "rloo", "dapo", "reinforce++")
#: phases a step's ``phases_s`` may name (``other``: the rest of the step: rewards, advantages, data, ...)
PHASE_NAMES = ("generation", "old_log_prob", "ref", "values", "update_actor", "update_critic", "other")
LOG_PROB_ROLES = ("old_log_prob", "ref", "values")


@dataclass(frozen=True)
class RLSettings:
    algorithm: str
    framework: str
    num_generations: int
    beta: float
    reference: bool
    num_iterations: int
    old_log_prob: bool
    critic: bool
    head_positions: str
    head_backward_recompute: bool
    framework_version: str = ""
    generation: str = ""


@dataclass(frozen=True)
class Shapes:
    """Sequences of one forward: prompt + response per row, and the media the call received."""

    prompt_lens: tuple[int, ...]
    response_lens: tuple[int, ...]
    image_grid_thw: tuple[tuple[int, int, int], ...] = ()
    video_grid_thw: tuple[tuple[int, int, int], ...] = ()


@dataclass(frozen=True)
class Rollout(Shapes):
    padded_prompt_len: tuple[int, ...] = ()  # per generate() call
    generated_steps: tuple[int, ...] = ()  # decode steps each generate() call ran


@dataclass(frozen=True)
class RLStep:
    iteration: int
    step_s: float
    phases_s: dict[str, float]
    rollout: Rollout | None
    log_prob_forwards: dict[str, tuple[Shapes, ...]]
    update: tuple[Shapes, ...]
    source: str = ""  # file:line


@dataclass(frozen=True)
class RLRecord:
    settings: RLSettings
    steps: tuple[RLStep, ...]
    folder: Path = field(default=Path("."))


def find_rl(folder: str | Path) -> Path | None:
    """The ``rl/`` folder of a run folder when it holds the settings file."""
    sub = as_path(folder) / RL_DIR
    return sub if (sub / SETTINGS).is_file() else None


def incomplete_rl(folder: str | Path) -> str | None:
    """Why a run folder's ``rl/`` cannot be read although it is there (steps without settings), else None."""
    sub = as_path(folder) / RL_DIR
    if (sub / SETTINGS).is_file() or not (sub / STEPS).exists():
        return None
    return (f"{sub / STEPS} has no {SETTINGS} beside it (algorithm, num_generations, reference, logprob_head: "
            "the RL settings every step needs)")


#: phases may add up to the step time within this (relative) + `PHASE_SLACK_S` (timers rounded, clocks apart)
PHASE_TOLERANCE = 0.01
PHASE_SLACK_S = 1e-3


def phase_seconds_problem(step_s: float, phases: dict[str, Any]) -> str | None:
    """What makes ``phases`` (name -> seconds) impossible as the parts of one step of ``step_s`` seconds: a value
    that is not a finite number >= 0, or phases adding up to more than the step; None when they fit."""
    total = 0.0
    for name, value in phases.items():
        if value is None:
            continue
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not -1e-6 <= value < 1e7:
            return f"phase {name} is {value!r} s (seconds must be a finite number >= 0)"
        total += float(value)
    if total > step_s * (1 + PHASE_TOLERANCE) + PHASE_SLACK_S:
        shown = ", ".join(f"{k} {float(v):g}" for k, v in phases.items() if v is not None)
        return (f"phases add up to {total:g} s, more than the step's {step_s:g} s "
                f"({100 * (total / step_s - 1):+.1f}%: {shown})")
    return None


def _need(obj: dict, key: str, types: type | tuple[type, ...], where: str) -> Any:
    if key not in obj:
        raise SchemaError(f"missing field {key!r}", where)
    value = obj[key]
    if isinstance(value, bool) and bool not in (types if isinstance(types, tuple) else (types,)):
        raise SchemaError(f"field {key!r} must be {_names(types)}, got a bool", where)
    if not isinstance(value, types):
        raise SchemaError(f"field {key!r} must be {_names(types)}, got {type(value).__name__}", where)
    return value


def _names(types: type | tuple[type, ...]) -> str:
    return " or ".join(t.__name__ for t in (types if isinstance(types, tuple) else (types,)))


def _count(value: Any, key: str, where: str, minimum: int = 0) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise SchemaError(f"{key} must hold integers >= {minimum}, got {value!r}", where)
    return value


def _ints(obj: dict, key: str, where: str, minimum: int = 0) -> tuple[int, ...]:
    values = _need(obj, key, list, where)
    return tuple(_count(v, key, where, minimum) for v in values)


def _grids(obj: dict, key: str, where: str) -> tuple[tuple[int, int, int], ...]:
    rows = obj.get(key, [])
    if not isinstance(rows, list):
        raise SchemaError(f"field {key!r} must be a list of [t, h, w], got {type(rows).__name__}", where)
    out = []
    for row in rows:
        if not isinstance(row, list) or len(row) != 3:
            raise SchemaError(f"{key} rows must be [t, h, w], got {row!r}", where)
        t, h, w = (_count(v, key, where, 1) for v in row)
        out.append((t, h, w))
    return tuple(out)


def _shapes(obj: Any, where: str, what: str) -> dict:
    if not isinstance(obj, dict):
        raise SchemaError(f"{what} must be an object, got {type(obj).__name__}", where)
    prompt = _ints(obj, "prompt_lens", f"{where} ({what})", 1)
    response = _ints(obj, "response_lens", f"{where} ({what})", 0)
    if len(prompt) != len(response):
        raise SchemaError(f"{what}: {len(prompt)} prompt_lens but {len(response)} response_lens", where)
    if not prompt:  # a call over no sequence ran nothing: its media and seconds would be counted for nothing
        raise SchemaError(f"{what}: holds no sequence (prompt_lens and response_lens are empty); "
                          + ("a step that generated nothing writes rollout: null" if what == "rollout"
                             else "leave a call that ran nothing out of the record"), where)
    return {"prompt_lens": prompt, "response_lens": response, "image_grid_thw": _grids(obj, "image_grid_thw", where),
            "video_grid_thw": _grids(obj, "video_grid_thw", where)}


def rollout_groups_problem(step: RLStep, settings: RLSettings, num_gpus: int) -> str | None:
    """Why ``step``'s rollout cannot hold whole groups of ``num_generations`` responses per prompt, else None.

    Every GRPO-family trainer samples ``num_generations`` responses per prompt and needs the generation batch of
    all its data-parallel processes to hold whole groups (TRL refuses a global batch not divisible by
    ``num_generations``). The recorded rows are one process's; the processes generate equal batches, so rows x
    processes is a multiple of ``num_generations``. One process (``num_gpus`` 1): the rows alone are; several: the
    data-parallel size divides ``num_gpus``, so rows x ``num_gpus`` is a multiple too (a necessary condition only)."""
    r = step.rollout
    g = settings.num_generations
    if r is None or not r.prompt_lens or g <= 1:
        return None
    rows, gpus = len(r.prompt_lens), max(1, int(num_gpus))
    if (rows * gpus) % g == 0:
        return None
    where = "" if gpus == 1 else f" x {gpus} GPUs = {rows * gpus:,} rows"
    return (f"rollout: {rows:,} generated sequence(s){where} cannot be whole groups of num_generations {g} "
            f"responses per prompt (settings.json); the rollout or num_generations belongs to another run")


def _settings(path: Path) -> RLSettings:
    where = str(path)
    if not path.exists():
        raise SchemaError(f"no {SETTINGS} (the RL settings every {STEPS} needs)", where)
    obj = read_json_file(path, "RL settings file", SchemaError)  # the shared limits: depth, size, NaN, duplicates
    if not isinstance(obj, dict):
        raise SchemaError("must be a JSON object", where)
    if obj.get("schema") != RL_SCHEMA:
        raise SchemaError(f"schema must be {RL_SCHEMA!r}, got {obj.get('schema')!r}", where)
    algorithm = _need(obj, "algorithm", str, where)
    if algorithm not in ALGORITHMS:
        raise SchemaError(f"algorithm must be one of {', '.join(ALGORITHMS)}, got {algorithm!r}", where)
    head = _need(obj, "logprob_head", dict, where)
    positions = _need(head, "positions", str, f"{where} (logprob_head)")
    if positions not in HEAD_POSITIONS:
        raise SchemaError(f"logprob_head.positions must be one of {', '.join(HEAD_POSITIONS)}, got {positions!r}",
                          where)
    generations = _need(obj, "num_generations", int, where)
    iterations = _need(obj, "num_iterations", int, where)
    if not (1 <= generations <= 1 << 20 and 1 <= iterations <= 1 << 20):
        raise SchemaError(f"num_generations and num_iterations must be from 1 to {1 << 20}, got {str(generations)[:24]} "
                          f"and {str(iterations)[:24]}", where)
    beta = _need(obj, "beta", (int, float), where)
    if not 0 <= beta < 1e6:  # finite (the reader refuses NaN / Infinity) and a KL weight, not a huge number
        raise SchemaError(f"beta must be a KL weight >= 0 (and < 1e6), got {beta!r}", where)
    return RLSettings(algorithm=algorithm, framework=_need(obj, "framework", str, where),
                      num_generations=generations, beta=float(beta),
                      reference=_need(obj, "reference", bool, where), num_iterations=iterations,
                      old_log_prob=_need(obj, "old_log_prob", bool, where), critic=_need(obj, "critic", bool, where),
                      head_positions=positions,
                      head_backward_recompute=_need(head, "backward_recompute", bool, f"{where} (logprob_head)"),
                      framework_version=str(obj.get("framework_version", "")), generation=str(obj.get("generation", "")))


def _step(obj: Any, where: str) -> RLStep:
    if not isinstance(obj, dict):
        raise SchemaError(f"a step must be a JSON object, got {type(obj).__name__}", where)
    iteration = _need(obj, "iteration", int, where)
    if iteration < 1:
        raise SchemaError(f"iteration must be >= 1, got {iteration}", where)
    step_s = float(_need(obj, "step_s", (int, float), where))
    if not 0 < step_s < 1e7:  # finite (the reader refuses NaN / Infinity), positive, under ~4 months
        raise SchemaError(f"step_s must be seconds > 0 (and < 1e7), got {obj['step_s']!r}", where)
    phases = _need(obj, "phases_s", dict, where)
    for name, value in phases.items():
        if name not in PHASE_NAMES:
            raise SchemaError(f"phases_s: unknown phase {name!r} (known: {', '.join(PHASE_NAMES)})", where)
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not -1e-6 <= value < 1e7:
            raise SchemaError(f"phases_s.{name} must be seconds >= 0 (and < 1e7), got {value!r}", where)
    problem = phase_seconds_problem(step_s, phases)
    if problem:
        raise SchemaError(f"phases_s: {problem}", where)
    raw = obj.get("rollout")
    rollout = None
    if raw is not None:
        shapes = _shapes(raw, where, "rollout")
        if shapes["response_lens"] and not any(shapes["response_lens"]):
            raise SchemaError(f"rollout: every one of its {len(shapes['response_lens'])} response_lens is 0 (no "
                              "completion generated; generate() makes at least one token per sample)", where)
        rollout = Rollout(**shapes, padded_prompt_len=_ints(raw, "padded_prompt_len", where, 1)
                          if "padded_prompt_len" in raw else (),
                          generated_steps=_ints(raw, "generated_steps", where) if "generated_steps" in raw else ())
    forwards_raw = obj.get("log_prob_forwards", {})
    if not isinstance(forwards_raw, dict):
        raise SchemaError("log_prob_forwards must be an object (role -> list of forwards)", where)
    forwards: dict[str, tuple[Shapes, ...]] = {}
    for role, calls in forwards_raw.items():
        if role not in LOG_PROB_ROLES:
            raise SchemaError(f"log_prob_forwards: unknown role {role!r} (known: {', '.join(LOG_PROB_ROLES)})", where)
        if not isinstance(calls, list):
            raise SchemaError(f"log_prob_forwards.{role} must be a list", where)
        forwards[role] = tuple(Shapes(**_shapes(c, where, f"log_prob_forwards.{role}")) for c in calls)
    update = obj.get("update", [])
    if not isinstance(update, list):
        raise SchemaError("update must be a list of microbatches", where)
    return RLStep(iteration, step_s, {k: float(v) for k, v in phases.items()}, rollout, forwards,
                  tuple(Shapes(**_shapes(u, where, "update")) for u in update), where)


#: a log-prob role's forwards need this setting true (settings.json field)
_ROLE_SETTING = {"ref": "reference", "old_log_prob": "old_log_prob", "values": "critic"}


def _agrees_with_settings(step: RLStep, settings: RLSettings, settings_path: Path, where: str) -> None:
    """A step's records against the run's settings: forwards of a role the settings switch off are refused (a
    ``reference: false`` run that ran reference forwards: which one is true is the user's to say)."""
    for role, calls in step.log_prob_forwards.items():
        key = _ROLE_SETTING[role]
        if calls and not getattr(settings, key):
            raise SchemaError(f"log_prob_forwards.{role} holds {len(calls)} forward(s) but {settings_path} says "
                              f"{key}: false", where)


def _settings_used(settings: RLSettings, steps: list[RLStep], settings_path: Path, steps_path: Path) -> None:
    """The other direction of `_agrees_with_settings`, over the whole run: a role the settings switch on
    (``reference`` / ``old_log_prob`` / ``critic`` true) whose forwards no step records at all — while some step
    generated a rollout for them to score — is refused (its FLOPs would be silently missing)."""
    if not any(step.rollout is not None for step in steps):
        return
    for role, key in _ROLE_SETTING.items():
        if getattr(settings, key) and not any(step.log_prob_forwards.get(role) for step in steps):
            raise SchemaError(f"says {key}: true but no step of {steps_path.name} records a log_prob_forwards.{role} "
                              f"forward ({len(steps)} steps, rollouts in "
                              f"{sum(step.rollout is not None for step in steps)}); set {key}: false or record them",
                              str(settings_path))


def read_rl(folder: str | Path) -> RLRecord:
    """Read ``folder/settings.json`` and ``folder/steps.jsonl`` (``folder``: the run's ``rl/``)."""
    folder = as_path(folder)
    settings = _settings(folder / SETTINGS)
    path = folder / STEPS
    if not path.is_file():
        raise SchemaError(f"no {STEPS} beside {SETTINGS}", str(folder))
    steps: list[RLStep] = []
    seen: set[int] = set()
    with path.open("r", encoding="utf-8", errors="replace") as fh:
        for number, line in enumerate(fh, 1):
            if not line.strip():
                continue
            where = f"{path}:{number}"
            obj = loads_json(line, str(path), "RL step record", error=SchemaError, line=number)
            step = _step(obj, where)
            _agrees_with_settings(step, settings, folder / SETTINGS, where)
            if step.iteration in seen:
                raise SchemaError(f"iteration {step.iteration} appears twice", where)
            seen.add(step.iteration)
            steps.append(step)
    if not steps:
        raise SchemaError("no steps", str(path))
    _settings_used(settings, steps, folder / SETTINGS, path)
    return RLRecord(settings, tuple(sorted(steps, key=lambda s: s.iteration)), folder)
