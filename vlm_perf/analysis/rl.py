"""RL step accounting (typed, no rendering): per iteration and per phase, exact FLOPs by part, seconds, rates.

From an `RLRecord` (`vlm_perf.ingest.rl_metadata`): each optimizer step's phases are counted from what that step
recorded, with the formulas of `vlm_perf.flops.generation` (the one place they live):

* ``generation``: the rollout generated in this step (prefill + KV-cache decode per sample, media once per
  sample) — :func:`generation_flops`;
* ``old_log_prob`` / ``ref`` / ``values``: every log-prob forward the step ran, over prompt + response, the head
  on the recorded positions — :func:`logprob_forward_parts`; the policy's own passes (generation and
  ``old_log_prob``) run its adapters when the regime has one (LoRA), the reference and a critic do not;
* ``update_actor``: every training microbatch of the step (forward + backward under the run's regime, the head
  on the recorded positions, its backward recompute) — :func:`actor_update_parts`;
* ``other``: the step's remaining seconds (rewards, advantages, prompt processing), 0 FLOPs.

Seconds come from the recorded ``phases_s`` (or a log's phase timings, when given); rates are FLOPs / seconds /
GPUs. A batched ``generate()`` that ran more decode steps than the longest kept response, or padded prompts,
computed padding that these per-sample FLOPs leave out: the result says so in ``notes``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Mapping

from ..arch.parts import stage_part_names
from ..arch.spec import ModelSpec
from ..arch.trainability import Trainability
from ..flops.generation import LogProbHead, actor_update_parts, generation_flops, logprob_forward_parts
from ..ingest.rl_metadata import PHASE_NAMES, RLRecord, phase_seconds_problem, rollout_groups_problem

__all__ = ["PhaseTotal", "RLIteration", "RLAccounting", "RLResult", "rl_accounting", "rl_part", "log_phase_timings",
           "log_response_check", "PARTS"]

PARTS = ("vision_tower", "projector", "language_model")
ALGORITHM_TITLE = {"grpo": "GRPO", "ppo": "PPO", "rloo": "RLOO", "dapo": "DAPO", "reinforce++": "REINFORCE++"}


def _zero() -> dict[str, int]:
    return {p: 0 for p in PARTS}


def _add(into: dict[str, Any], parts: Mapping[str, Any]) -> None:
    for k, v in parts.items():
        into[k] = into.get(k, 0) + v


@dataclass(frozen=True)
class RLIteration:
    """One optimizer step: per phase, FLOPs by part and seconds (None when not recorded)."""

    iteration: int
    step_s: float
    flops: dict[str, dict[str, int]]  # phase -> part -> FLOPs
    seconds: dict[str, float | None]

    @property
    def total_flops(self) -> int:
        return sum(sum(p.values()) for p in self.flops.values())

    def parts(self) -> dict[str, int]:
        out = _zero()
        for phase in self.flops.values():
            _add(out, phase)
        return out


@dataclass(frozen=True)
class PhaseTotal:
    name: str
    seconds: float | None
    flops: int
    parts: dict[str, int]
    tflops_per_gpu: float | None
    time_share: float | None
    flops_share: float
    mfu: float | None = None  # tflops_per_gpu / the GPU's peak (None: no peak known or no time)


@dataclass(frozen=True)
class RLAccounting:
    algorithm: str
    framework: str
    settings: dict[str, Any]
    iterations: tuple[RLIteration, ...]
    num_gpus: int
    notes: tuple[str, ...] = field(default=())
    peak_tflops: float | None = None  # per GPU, for the utilisation (MFU) of each phase

    @property
    def title(self) -> str:
        return ALGORITHM_TITLE.get(self.algorithm, self.algorithm.upper())

    @property
    def step_seconds(self) -> float:
        return sum(it.step_s for it in self.iterations)

    @property
    def total_flops(self) -> int:
        return sum(it.total_flops for it in self.iterations)

    def phases(self) -> list[PhaseTotal]:
        """Run totals per phase, in `PHASE_NAMES` order (phases with neither FLOPs nor seconds left out)."""
        total_s, total_f = self.step_seconds, self.total_flops
        out = []
        for name in PHASE_NAMES:
            parts, seconds, timed = _zero(), 0.0, False
            for it in self.iterations:
                _add(parts, it.flops.get(name, {}))
                if it.seconds.get(name) is not None:
                    seconds += it.seconds[name] or 0.0
                    timed = True
            flops = sum(parts.values())
            if not flops and not timed:
                continue
            secs = seconds if timed else None
            rate = flops / secs / self.num_gpus / 1e12 if secs and secs > 0 else None
            out.append(PhaseTotal(name, secs, flops, parts, rate,
                                  secs / total_s if secs is not None and total_s > 0 else None,
                                  flops / total_f if total_f else 0.0, self._mfu(rate)))
        return out

    def _mfu(self, tflops_per_gpu: float | None) -> float | None:
        return tflops_per_gpu / self.peak_tflops if tflops_per_gpu is not None and self.peak_tflops else None

    def headline(self) -> str:
        """``GRPO: generation 34.5% of the step time`` (or of the FLOPs when no time was recorded)."""
        gen = next((p for p in self.phases() if p.name == "generation"), None)
        if gen is None:
            return f"{self.title}: no generation recorded"
        if gen.time_share is not None:
            return f"{self.title}: generation {100 * gen.time_share:.1f}% of the step time"
        return f"{self.title}: generation {100 * gen.flops_share:.1f}% of the step FLOPs"

    def to_dict(self, training_only_flops: float | None = None) -> dict[str, Any]:
        total_s, total_f = self.step_seconds, self.total_flops
        rate = total_f / total_s / self.num_gpus / 1e12 if total_s > 0 else None
        update = sum(p.flops for p in self.phases() if p.name == "update_actor")
        return {
            "algorithm": self.algorithm, "framework": self.framework, "headline": self.headline(),
            "settings": dict(self.settings), "iterations": len(self.iterations),
            "step_seconds": total_s, "flops_total": total_f, "tflops_per_gpu": rate, "mfu": self._mfu(rate),
            "parts": self._parts(),
            "phases": {p.name: {"seconds": p.seconds, "flops": p.flops, "parts": dict(p.parts),
                                "tflops_per_gpu": p.tflops_per_gpu, "mfu": p.mfu, "time_share": p.time_share,
                                "flops_share": p.flops_share} for p in self.phases()},
            "per_iteration": [{"iteration": it.iteration, "step_s": it.step_s, "flops": it.total_flops,
                               "parts": it.parts(),
                               "phases": {k: sum(v.values()) for k, v in it.flops.items()},
                               "seconds": dict(it.seconds)} for it in self.iterations],
            "update_flops": update,
            "training_only_flops": training_only_flops,
            "training_only_share": training_only_flops / total_f if training_only_flops and total_f else None,
            "notes": list(self.notes),
        }

    def _parts(self) -> dict[str, int]:
        out = _zero()
        for it in self.iterations:
            _add(out, it.parts())
        return out


def rl_accounting(spec: ModelSpec, record: RLRecord, trainability: Trainability | None = None,
                  causal: str = "half", num_gpus: int = 1,
                  timings_s: Mapping[int, Mapping[str, float]] | None = None,
                  peak_tflops: float | None = None) -> RLAccounting:
    """Per-iteration, per-phase exact FLOPs and seconds of an RL run (see the module docstring).
    ``timings_s``: iteration -> phase -> seconds from a log (veRL ``timing_s/...``), used instead of the
    recorded ``phases_s`` where given."""
    s = record.settings
    head = LogProbHead(s.head_positions, s.head_backward_recompute)
    # the policy's own passes (generation, old log-probs) run its adapters; the reference runs the plain model
    adapters = trainability if trainability is not None and trainability.adapter is not None else None
    policy_roles = ("old_log_prob",)
    notes: list[str] = []
    bad_timers: list[str] = []
    iterations = []
    odd_groups: list[str] = []
    for step in record.steps:
        _media_fit_prompts(spec, step)
        groups = rollout_groups_problem(step, s, num_gpus)
        if groups and num_gpus <= 1:  # one process: its rows are the whole generation batch
            from ..errors import SchemaError
            raise SchemaError(groups, step.source)
        if groups:  # several GPUs: only if every one of them is a data-parallel trainer process
            odd_groups.append(f"{step.source}: {groups}")
        flops: dict[str, dict[str, int]] = {}
        r = step.rollout
        if r is not None and r.prompt_lens:
            g = generation_flops(spec, r.prompt_lens, r.response_lens, r.image_grid_thw, r.video_grid_thw, causal,
                                 adapters)
            flops["generation"] = {k: g.prefill[k] + g.decode[k] for k in g.prefill}
            if r.generated_steps and max(r.generated_steps) > max(r.response_lens):
                notes.append(f"iteration {step.iteration}: generate() ran {max(r.generated_steps)} decode steps for "
                             f"responses of at most {max(r.response_lens)} tokens: the padding steps are not counted")
            if r.padded_prompt_len and max(r.padded_prompt_len) > min(r.prompt_lens):
                notes.append(f"iteration {step.iteration}: prompts were left-padded to {max(r.padded_prompt_len)} "
                             "positions for generate(): the padding is not counted")
        for role, calls in step.log_prob_forwards.items():
            parts: dict[str, int] = _zero()
            for c in calls:
                _add(parts, logprob_forward_parts(spec, c.prompt_lens, c.response_lens, c.image_grid_thw,
                                                  c.video_grid_thw, causal, head,
                                                  adapters if role in policy_roles else None))
            flops[role] = parts
        if step.update:
            parts = _zero()
            for u in step.update:
                _add(parts, actor_update_parts(spec, u.prompt_lens, u.response_lens, u.image_grid_thw,
                                               u.video_grid_thw, trainability, causal, head))
            flops["update_actor"] = parts
        given = (timings_s or {}).get(step.iteration)
        seconds: dict[str, float | None] = dict(step.phases_s)
        problem = phase_seconds_problem(step.step_s, dict(given)) if given else None
        if problem:  # validated like the recorded seconds: impossible timers do not replace them
            bad_timers.append(f"iteration {step.iteration}: {problem}")
            given = None
        if given:  # a log's phase timings replace the recorded ones; the rest of the step stays ``other``
            seconds = dict(given)
            rest = step.step_s - sum(v or 0.0 for v in seconds.values())
            if rest > 0:
                seconds["other"] = (seconds.get("other") or 0.0) + rest
        iterations.append(RLIteration(step.iteration, step.step_s, flops, seconds))
    if bad_timers:
        notes.append(f"the log's phase timers of {len(bad_timers)} iteration(s) are not seconds of the step, the "
                     f"recorded phases_s are used there: {bad_timers[0]}"
                     + (f" (+{len(bad_timers) - 1} more)" if len(bad_timers) > 1 else ""))
    if odd_groups:
        notes.append(f"{len(odd_groups)} rollout(s) cannot be whole groups of num_generations responses on "
                     f"{num_gpus} data-parallel GPUs (unless some GPUs only generate): {odd_groups[0]}")
    settings = {"num_generations": s.num_generations, "beta": s.beta, "reference": s.reference,
                "num_iterations": s.num_iterations, "old_log_prob": s.old_log_prob, "critic": s.critic,
                "logprob_head": {"positions": s.head_positions, "backward_recompute": s.head_backward_recompute},
                "framework_version": s.framework_version, "generation": s.generation}
    return RLAccounting(s.algorithm, s.framework, settings, tuple(iterations), num_gpus, tuple(notes), peak_tflops)


def _media_fit_prompts(spec: ModelSpec, step: Any) -> None:
    """Each call's visual tokens (its grids folded as the model folds them) sit inside its prompts: more visual
    tokens than prompt tokens are shapes of another model or a broken record (named with file:line and field)."""
    from ..errors import SchemaError
    from ..stats import BatchStats

    calls = [("rollout", step.rollout)] if step.rollout is not None else []
    calls += [(f"log_prob_forwards.{role}", c) for role, cs in step.log_prob_forwards.items() for c in cs]
    calls += [("update", u) for u in step.update]
    for what, c in calls:
        if not (c.image_grid_thw or c.video_grid_thw) or spec.vision is None or not c.prompt_lens:
            continue
        stats = BatchStats.from_batch(seq_lens=list(c.prompt_lens), image_grids=[tuple(g) for g in c.image_grid_thw],
                                      video_grids=[tuple(g) for g in c.video_grid_thw], spec=spec)
        visual, prompt = int(stats.vision_merged_tokens), sum(c.prompt_lens)
        if visual > prompt:
            raise SchemaError(f"{what}: its image/video grids make {visual:,} visual tokens for {spec.name}, more "
                              f"than its prompts' {prompt:,} tokens (a prompt holds its visual tokens)", step.source)


def log_phase_timings(iterations: Any) -> dict[int, dict[str, float]]:
    """Phase seconds a log states per iteration (the parsed ``phase_s_<phase>`` columns, veRL / EasyR1
    ``timing_s/...``), in this module's phase names: a phase without FLOPs here (``reward``, ``adv``, weight
    sync, ...) is added to ``other``. Iterations without any phase timing are left out."""
    from ..ingest.logs.vocab import PHASE_PREFIX

    cols = [c for c in iterations.columns if c.startswith(PHASE_PREFIX)]
    if not cols or "iteration" not in iterations.columns:
        return {}
    out: dict[int, dict[str, float]] = {}
    for row in iterations.select(["iteration", *cols]).iter_rows(named=True):
        phases: dict[str, float] = {}
        for col in cols:
            if row[col] is None:
                continue
            name = col[len(PHASE_PREFIX):]
            value = float(row[col])
            if not 0 <= value < 1e7:  # NaN, negative, absurd: kept under its own name for the step's validation
                phases[name] = value
                continue
            name = name if name in PHASE_NAMES else "other"
            phases[name] = phases.get(name, 0.0) + value
        if phases and row["iteration"] is not None:
            out[int(row["iteration"])] = phases
    return out


def log_response_check(record: RLRecord, iterations: Any, rel: float = 5e-4) -> tuple[int, list[str]]:
    """The log's mean response length (``response_len_mean``: TRL ``completions/mean_length``, veRL
    ``response_length/mean``) against the recorded rollout's, per iteration with both: (how many were compared,
    one message per disagreement beyond ``rel``, the log's print precision)."""
    if "response_len_mean" not in iterations.columns or "iteration" not in iterations.columns:
        return 0, []
    logged = {int(i): float(v) for i, v in iterations.select(["iteration", "response_len_mean"]).iter_rows()
              if i is not None and v is not None}
    checked, bad = 0, []
    for step in record.steps:
        r = step.rollout
        if r is None or not r.response_lens or step.iteration not in logged:
            continue
        checked += 1
        mean = sum(r.response_lens) / len(r.response_lens)
        if abs(mean - logged[step.iteration]) > rel * max(1.0, abs(mean)):
            bad.append(f"iteration {step.iteration}: the log's mean response length {logged[step.iteration]:g} "
                       f"differs from the recorded rollout's {mean:g}")
    return checked, bad


@dataclass(frozen=True)
class RLResult:
    """The report's RL block: the accounting, and what the training metadata counts beside it."""

    accounting: RLAccounting
    training_only_flops: float | None  # what the training metadata counts (the update as plain training steps)
    log_response_lengths_checked: int = 0  # iterations whose logged mean response length was compared

    def to_dict(self) -> dict[str, Any]:
        return {**self.accounting.to_dict(self.training_only_flops),
                "log_response_lengths_checked": self.log_response_lengths_checked}


def rl_part(spec: ModelSpec, record: RLRecord, trainability: Trainability, causal: str, *, num_gpus: int,
            peak_tflops: float | None, iterations: Any, per_iteration: Any) -> tuple[RLResult, list[str]]:
    """The RL block of a run (``record``: its ``rl/`` records; ``iterations``: the log's iteration table, for its
    phase timers and response lengths; ``per_iteration``: the analysis' per-iteration FLOPs, the training-only
    accounting) and the messages it has for the report."""
    messages: list[str] = []
    whole = trainability.stage_level
    regime = None if whole and not trainability.frozen_stage_set() else (
        Trainability.from_frozen(stage_part_names(trainability.frozen_stage_set())) if whole else trainability)
    timings = log_phase_timings(iterations)  # a log's phase timers, where it has them
    accounting = rl_accounting(spec, record, regime, causal, num_gpus=num_gpus, timings_s=timings,
                               peak_tflops=peak_tflops)
    if timings:
        messages.append(f"RL phase seconds of {len(timings)} iteration(s) from the log's phase timers")
    checked, disagreements = log_response_check(record, iterations)
    messages += [f"RL metadata vs log: {text}" for text in disagreements]
    training_only = float(per_iteration["exact_total"].sum()) if "exact_total" in per_iteration.columns and \
        per_iteration.height else None
    rl_iterations = {it.iteration for it in accounting.iterations}
    meta_iterations = set(per_iteration["iteration"].to_list()) if "iteration" in per_iteration.columns else set()
    if meta_iterations and rl_iterations != meta_iterations:
        messages.append(f"RL metadata covers {len(rl_iterations)} iterations, the training metadata "
                        f"{len(meta_iterations)}: the training-only accounting beside the RL phases is over "
                        "different steps")
    return RLResult(accounting, training_only, checked), messages
