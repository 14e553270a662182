"""FLOPs of autoregressive generation with a KV cache, and of the phases of one RL (GRPO / PPO) step (pure).

Generation of ``N`` new tokens after a prompt of ``P`` LM positions (visual placeholders included), per
sample, as Hugging Face ``generate()`` with a KV cache runs it:

* **prefill**: the vision tower and projector over the sample's media, then the LM over the ``P`` prompt
  positions (attention causal square, ``causal`` as for training: eager ``full`` or fused ``half``), with the
  output head on the LAST position only (``logits_to_keep=1``): ``2·h·V`` instead of ``P·2·h·V``;
* **decode**: ``N - 1`` further forwards of one token each (the last token needs none); step ``j`` (1-based)
  runs every per-token matmul once and attends to ``P + j`` cached positions (itself included):
  attention core ``2·H·(d_qk + d_v)·(P + j)`` per layer; its head ``2·h·V``.

So decode FLOPs per sample = ``(N - 1)·(per-token matmuls + head) + core_per_position·Σ_{j=1}^{N-1} (P + j)``.
A batched ``generate()`` keeps finished rows in the batch until the longest stops (padding work): that waste
is not counted (these are the FLOPs each sample needs). A sliding-window layer's cache keeps the last ``W``
positions: its decode step attends to ``min(P + j, W)``. Recurrent layers (gated delta nets) are refused.

:func:`rl_step_flops` counts the phases of one RL step (veRL / EasyR1 / TRL GRPO / OpenRLHF structure):
generation, old-policy and reference log-prob forwards over prompt + response, the actor update (forward +
backward under a training regime, times PPO epochs), and a critic when present (same model shape as the actor
here, a value head's FLOPs not counted).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Sequence

from ..arch.spec import ModelSpec
from ..arch.trainability import Trainability
from ..errors import ConfigError, UnsupportedModelError
from ..stats.batch import BatchStats
from .blocks import FlopsContext, inventory_terms
from .regime import regime_flops


@dataclass(frozen=True)
class GenerationFlops:
    """FLOPs of generating responses: ``prefill`` (tower + projector + LM prompt pass) and ``decode``, by part."""

    prefill: dict[str, Any]
    decode: dict[str, Any]
    new_tokens: int

    @property
    def total(self) -> Any:
        return sum(self.prefill.values()) + sum(self.decode.values())

    def to_dict(self) -> dict[str, Any]:
        return {"prefill": dict(self.prefill), "decode": dict(self.decode), "new_tokens": self.new_tokens,
                "total": self.total}


def _lm_head_per_token(spec: ModelSpec) -> int:
    return 2 * spec.lm.hidden_size * spec.lm.vocab_size


def _forward(spec: ModelSpec, stats: BatchStats, causal: str, adapters: Trainability | None = None):
    """One forward under ``adapters`` (a regime whose adapters run in this forward: a LoRA policy's generation and
    old-policy pass; None: the plain model, e.g. the reference)."""
    return regime_flops(spec, stats, adapters or Trainability(), causal=causal, mode="forward", full_reference=False)


def _forward_parts(spec: ModelSpec, stats: BatchStats, causal: str,
                   adapters: Trainability | None = None) -> dict[str, Any]:
    return _forward(spec, stats, causal, adapters).parts


def _head_passes(spec: ModelSpec, logits: Any, positions: int) -> int:
    """How many ``2·h·V`` passes per position the output-head component ``logits`` holds (1: forward only; 3: forward
    and both gradients); an adapter on the head makes it no whole number, which is refused."""
    if not positions:
        return 0
    passes, rest = divmod(logits, _lm_head_per_token(spec) * positions)
    if rest:
        raise UnsupportedModelError(f"{spec.name}: the output head's FLOPs are not whole passes over the positions "
                                    "(an adapter on the head is not modelled in RL phases)")
    return int(passes)


#: The most tokens one sample may generate (prompt excluded): the manifest's bound on a sequence length
#: (``ingest.runconfig.INT_MAX["seq_length"]``, 2^26; a test keeps the two equal: this layer does not import ingest).
MAX_NEW_TOKENS = 1 << 26


def generation_flops(spec: ModelSpec, prompt_lens: Sequence[int], response_lens: Sequence[int],
                     image_grids: Sequence[Sequence[int]] = (), video_grids: Sequence[Sequence[int]] = (),
                     causal: str = "half", adapters: Trainability | None = None,
                     image_merged_tokens: Sequence[int | None] = ()) -> GenerationFlops:
    """Generation FLOPs of samples with ``prompt_lens[i]`` prompt positions (visual tokens included) and
    ``response_lens[i]`` generated tokens; the media of all samples (``image_grids`` / ``video_grids``) pass the
    tower once, in prefill. ``adapters``: the policy's regime when its adapters run during generation (LoRA: their
    forward on every prefill and decode token; DoRA's and target_parameters' per-call terms are refused). ``image_merged_tokens``: per image
    grid, the family's projector rows where they are not the grid's fold (``BatchStats.from_batch``). See the
    module docstring."""
    if spec.extra.get("encoder_decoder"):
        raise UnsupportedModelError(f"{spec.name}: generation with an encoder-decoder LM (the encoder once, then the "
                                    "decoder's self- and cross-attention KV caches per step) is not modelled; count "
                                    "training or forward passes with decoder_lens instead")
    if adapters is not None and adapters.adapter is not None and adapters.adapter.use_dora:
        raise UnsupportedModelError("generation under DoRA (a weight-norm term per forward call) is not modelled")
    if adapters is not None and adapters.adapter is not None and adapters.adapter.target_parameters:
        raise UnsupportedModelError("generation under an adapter on parameters (target_parameters: PEFT recomputes "
                                    "the low-rank delta over every expert once per forward call, i.e. per decode "
                                    "step) is not modelled")
    if len(prompt_lens) != len(response_lens):
        raise ConfigError(f"{len(prompt_lens)} prompt lengths but {len(response_lens)} response lengths")
    if any(p <= 0 for p in prompt_lens) or any(n < 0 for n in response_lens):
        raise ConfigError("prompt lengths must be > 0 and response lengths >= 0")
    if any(n > MAX_NEW_TOKENS for n in response_lens):
        raise ConfigError(f"a response length of {max(response_lens)} tokens is over the bound of {MAX_NEW_TOKENS}")
    samples = [(p, n) for p, n in zip(prompt_lens, response_lens) if n > 0]
    if prompt_lens and not samples:
        raise ConfigError(f"no completion: every one of the {len(response_lens)} response lengths is 0 (generate() "
                          "makes at least one token per sample)")
    head = _lm_head_per_token(spec)
    # prefill: one forward over every prompt, the head on the last position of each sample only
    prompt = BatchStats.from_batch(seq_lens=[p for p, _ in samples], image_grids=[tuple(g) for g in image_grids],
                                   video_grids=[tuple(g) for g in video_grids], spec=spec,
                                   image_merged_tokens=list(image_merged_tokens))
    prefill = _forward_parts(spec, prompt, causal, adapters)
    prefill["language_model"] -= head * (sum(p for p, _ in samples) - len(samples))
    # decode: N-1 one-token forwards per sample; per-token matmuls from a "sequence" of that many tokens with
    # no attention, plus the core against the cache, counted from the LM's own core per position
    steps = sum(n - 1 for _, n in samples)
    attended = sum((n - 1) * p + (n - 1) * n // 2 for p, n in samples)  # sum over j=1..n-1 of (p + j)
    decode = {"vision_tower": 0, "projector": 0, "language_model": 0}
    if steps:
        lm_only = BatchStats(lm_tokens=steps, lm_tokens_sq=0, lm_sequences=steps, lm_samples=steps,
                             lm_padded_tokens=steps)
        decode["language_model"] = _forward_parts(spec, lm_only, "full", adapters)["language_model"]
        ctx = FlopsContext(causal="full")
        for block in spec.blocks:
            if block.kind not in _ATTENTION_KINDS:
                if any(not t.weights and t.component == "lm.attn_core"
                       for t in inventory_terms((block,), BatchStats(lm_tokens_sq=1, vision_frames=1), ctx)):
                    raise UnsupportedModelError(f"{spec.name}: decode of block kind {block.kind} is not modelled")
                continue
            # a sliding-window layer's cache keeps the last ``window`` positions: it attends to min(P + j, W)
            span = attended if not getattr(block, "window", None) else sum(
                _windowed(p, n, block.window) for p, n in samples)
            decode["language_model"] += sum(t.forward for t in inventory_terms((block,), BatchStats(lm_tokens_sq=span),
                                                                              ctx) if not t.weights)
    return GenerationFlops(prefill, decode, sum(n for _, n in samples))


_ATTENTION_KINDS = ("decoder_attention", "mla_attention", "gated_decoder_attention")


def _windowed(p: int, n: int, window: int) -> int:
    """Σ_{j=1}^{n-1} min(p + j, window), in closed form: the first ``k = clamp(window - p, 0, n - 1)`` steps attend
    to ``p + j`` positions, the rest to ``window``."""
    if n <= 1:
        return 0
    k = min(max(window - p, 0), n - 1)
    return k * p + k * (k + 1) // 2 + (n - 1 - k) * window


HEAD_POSITIONS = ("all", "all_but_last", "response")


@dataclass(frozen=True)
class LogProbHead:
    """Where a log-prob forward projects through the output head, and whether its backward recomputes it.

    ``positions``: ``all`` (logits at every position, a plain ``model(...)`` call), ``all_but_last`` (every
    position but the last, whose next token is not in the sequence: TRL's fused log-prob head on devices without
    Triton), ``response`` (the scored response tokens only: TRL's fused head with Triton, ``logits_to_keep``).
    ``backward_recompute``: the head's backward recomputes its logits tile by tile before the gradient GEMMs
    (TRL's chunked log-prob function): one more ``2·h·V`` per position when a backward runs."""

    positions: str = "all"
    backward_recompute: bool = False

    def __post_init__(self) -> None:
        if self.positions not in HEAD_POSITIONS:
            raise ConfigError(f"log-prob head positions must be one of {', '.join(HEAD_POSITIONS)}, "
                              f"got {self.positions!r}")

    def count(self, prompt_lens: Sequence[int], response_lens: Sequence[int]) -> int:
        """Head positions over the sequences ``prompt_lens[i] + response_lens[i]``."""
        if self.positions == "response":
            return sum(response_lens)
        drop = 1 if self.positions == "all_but_last" else 0
        return sum(p + n - drop for p, n in zip(prompt_lens, response_lens))


def _sequences(spec: ModelSpec, prompt_lens: Sequence[int], response_lens: Sequence[int],
               image_grids: Sequence[Sequence[int]], video_grids: Sequence[Sequence[int]]) -> BatchStats:
    if len(prompt_lens) != len(response_lens):
        raise ConfigError(f"{len(prompt_lens)} prompt lengths but {len(response_lens)} response lengths")
    return BatchStats.from_batch(seq_lens=[p + n for p, n in zip(prompt_lens, response_lens)],
                                 image_grids=[tuple(g) for g in image_grids],
                                 video_grids=[tuple(g) for g in video_grids], spec=spec)


def logprob_forward_parts(spec: ModelSpec, prompt_lens: Sequence[int], response_lens: Sequence[int],
                          image_grids: Sequence[Sequence[int]] = (), video_grids: Sequence[Sequence[int]] = (),
                          causal: str = "half", head: LogProbHead | None = None,
                          adapters: Trainability | None = None) -> dict[str, Any]:
    """FLOPs by part of one log-prob forward (reference or old policy) over prompt + response sequences: the
    model's forward with the output head on ``head``'s positions (default: every position). ``adapters``: the
    regime whose adapters run in this forward (a LoRA policy's old-policy pass; None: the plain model, as the
    reference runs)."""
    head = head or LogProbHead()
    full = _sequences(spec, prompt_lens, response_lens, image_grids, video_grids)
    result = _forward(spec, full, causal, adapters)
    parts = dict(result.parts)
    logits = result.breakdown.components["lm.logits"]
    passes = _head_passes(spec, logits, full.lm_tokens)
    parts["language_model"] += passes * _lm_head_per_token(spec) * head.count(prompt_lens, response_lens) - logits
    return parts


def actor_update_parts(spec: ModelSpec, prompt_lens: Sequence[int], response_lens: Sequence[int],
                       image_grids: Sequence[Sequence[int]] = (), video_grids: Sequence[Sequence[int]] = (),
                       trainability: Trainability | None = None, causal: str = "half",
                       head: LogProbHead | None = None) -> dict[str, Any]:
    """FLOPs by part of one actor update pass (forward + backward) over prompt + response sequences under
    ``trainability`` (default: full training): :func:`regime_flops`, with the output head counted on ``head``'s
    positions (forward, plus the backward's input and weight gradients where the regime runs them, plus the
    recomputed logits of a ``backward_recompute`` head)."""
    head = head or LogProbHead()
    full = _sequences(spec, prompt_lens, response_lens, image_grids, video_grids)
    regime = regime_flops(spec, full, trainability or Trainability(), causal=causal, full_reference=False)
    parts = dict(regime.parts)
    per_position = _lm_head_per_token(spec)
    logits = regime.breakdown.components["lm.logits"]
    passes = _head_passes(spec, logits, full.lm_tokens)
    positions = head.count(prompt_lens, response_lens)
    recompute = per_position * positions if head.backward_recompute and passes > 1 else 0
    parts["language_model"] += passes * per_position * positions + recompute - logits
    return parts


@dataclass(frozen=True)
class RLStepFlops:
    """FLOPs of one RL step by phase (``generation``, ``old_log_prob``, ``ref``, ``values``, ``update_actor``,
    ``update_critic``), each a part -> FLOPs dict, plus the generation detail."""

    phases: dict[str, dict[str, Any]]
    generation: GenerationFlops
    notes: tuple[str, ...] = field(default=())

    @property
    def total(self) -> Any:
        return sum(sum(p.values()) for p in self.phases.values())

    def phase_totals(self) -> dict[str, Any]:
        return {name: sum(p.values()) for name, p in self.phases.items()}

    def shares(self) -> dict[str, float]:
        total = self.total or 1
        return {name: value / total for name, value in self.phase_totals().items()}


def rl_step_flops(spec: ModelSpec, prompt_lens: Sequence[int], response_lens: Sequence[int],
                  image_grids: Sequence[Sequence[int]] = (), video_grids: Sequence[Sequence[int]] = (),
                  trainability: Trainability | None = None, ppo_epochs: int = 1, old_log_prob: bool = True,
                  reference: bool = True, critic: bool = False, causal: str = "half",
                  head: LogProbHead | None = None) -> RLStepFlops:
    """Phases of one RL step over the rollout's samples (one entry per response: a GRPO group of ``n`` responses
    to one prompt is ``n`` samples; their media are listed once per sample, as the actor update sees them).

    Log-prob forwards and the update run over prompt + response (``causal`` attention, the output head on
    ``head``'s positions, default every position: :func:`logprob_forward_parts`, :func:`actor_update_parts`);
    the actor update uses ``trainability`` (default: full training), ``ppo_epochs`` times; the critic (PPO) is
    counted as a forward (values) and a full-training update of the same shape."""
    if ppo_epochs < 1:
        raise ConfigError(f"ppo_epochs must be >= 1, got {ppo_epochs}")
    adapters = trainability if trainability is not None and trainability.adapter is not None else None
    gen = generation_flops(spec, prompt_lens, response_lens, image_grids, video_grids, causal, adapters)
    shape = (spec, prompt_lens, response_lens, image_grids, video_grids)
    forward = logprob_forward_parts(*shape, causal=causal, head=head)  # the reference: the plain model
    policy = logprob_forward_parts(*shape, causal=causal, head=head, adapters=adapters)  # old policy: its adapters
    update = actor_update_parts(*shape, trainability=trainability, causal=causal, head=head)
    phases: dict[str, dict[str, Any]] = {"generation": {k: gen.prefill[k] + gen.decode[k] for k in gen.prefill}}
    if old_log_prob:
        phases["old_log_prob"] = dict(policy)
    if reference:
        phases["ref"] = dict(forward)
    if critic:
        phases["values"] = dict(forward)
        critic_update = actor_update_parts(*shape, causal=causal, head=head)
        phases["update_critic"] = {k: ppo_epochs * v for k, v in critic_update.items()}
    phases["update_actor"] = {k: ppo_epochs * v for k, v in update.items()}
    regime = trainability or Trainability()
    notes = (f"actor update: {regime.describe()}, {ppo_epochs} PPO epoch(s)",
             "generation counts each sample's own work (no padding of finished rows); log-prob forwards compute "
             f"logits at {(head or LogProbHead()).positions.replace('_', ' ')} positions")
    return RLStepFlops(phases, gen, notes)


#: The phases of one RL step that do no model FLOPs here (their timers still count toward the step's time).
NON_FLOPS_PHASES: tuple[str, ...] = ("reward", "adv", "update_weights", "save_checkpoint", "testing")
#: Every canonical phase, FLOPs phases first (``RLStepFlops.phases`` names, then ``NON_FLOPS_PHASES``).
#: Phases one timer spans in frameworks that time coarser steps (OpenRLHF's ``PPOTrainer``: ``make_experience``
#: runs the reward, reference, old-policy and value passes and the advantages; ``ppo_train`` the actor and critic
#: updates): phase -> the phases inside it (its FLOPs are theirs).
COMPOSITE_PHASES: dict[str, tuple[str, ...]] = {
    "make_experience": ("old_log_prob", "ref", "values", "reward", "adv"),
    "ppo_train": ("update_actor", "update_critic"),
    # NeMo-RL's ``policy_and_reference_logprobs`` timer: the old-policy and reference log-prob passes together
    "logprobs": ("old_log_prob", "ref"),
    # DeepSpeed-Chat step 3's ``generate_experience`` (its ``Generation => Latency``): the rollout and the
    # actor / reference / critic / reward forward passes on it
    "generate_experience": ("generation", "old_log_prob", "ref", "values", "reward"),
    # ROLL's ``time/ref_log_probs_values``: the reference log-prob and the critic value passes together
    "ref_values": ("ref", "values"),
}
#: Every canonical phase, FLOPs phases first (``RLStepFlops.phases`` names, then ``NON_FLOPS_PHASES``, then
#: ``COMPOSITE_PHASES``).
PHASES: tuple[str, ...] = ("generation", "old_log_prob", "ref", "values", "update_critic", "update_actor",
                           *NON_FLOPS_PHASES, *COMPOSITE_PHASES)

# The one table of the frameworks' RL-step timer names (veRL / EasyR1 ``timing_s/<name>``, read in the
# trainers' ``fit`` loops: veRL 0.9.0 verl/trainer/ppo/ray_trainer.py ``marked_timer(...)`` inside
# ``marked_timer("step")``; EasyR1 verl/trainer/ray_trainer.py, which names the old-policy pass ``old``):
#: timer name -> canonical phase, for the timers that run directly inside the step (their sum is the
#: step's accounted time)
PHASE_TIMERS: dict[str, str] = {"gen": "generation", "old_log_prob": "old_log_prob",
                                "old": "old_log_prob", "ref": "ref", "values": "values",
                                "update_critic": "update_critic", "update_actor": "update_actor",
                                "reward": "reward", "adv": "adv", "update_weights": "update_weights",
                                "save_checkpoint": "save_checkpoint", "testing": "testing",
                                # OpenRLHF PPOTrainer.fit / train_step (``timing/<name>``, seconds)
                                "generation": "generation", "make_experience": "make_experience",
                                "ppo_train": "ppo_train", "broadcast": "update_weights"}
#: OpenRLHF's timer names: only these are timers under its generic-looking ``timing/`` prefix
OPENRLHF_TIMERS: frozenset[str] = frozenset({"generation", "make_experience", "ppo_train", "broadcast"})
#: siiRL (a veRL derivative running the step as a DAG of nodes) renames ``timing_s/<name>`` to
#: ``perf/delta_time/<name>`` and names its node timers (sii-research/siiRL docs, the quick-start step line):
#: node timer -> phase; ``step`` is the step; every other name (``graph_execution``, the data-buffer and
#: intern-data timers, ``reference``: the same pass as ``ref``) is kept, not summed
SIIRL_TIMERS: dict[str, str] = {"rollout": "generation", "actor_log_prob": "old_log_prob", "ref": "ref",
                                "reward": "reward", "advantage": "adv", "actor": "update_actor",
                                "critic": "update_critic"}
#: slime (THUDM/slime ``slime/utils/train_metric_utils.py``: ``perf/{timer}_time``) timer -> phase;
#: ``step`` (= ``train_wait`` + ``train``) is the step; ``train`` (log-prob passes + actor update),
#: ``train_wait``, ``update_weights`` (outside ``step_time``), ``save_model``, ``data_preprocess``, ``sleep`` and
#: ``wake_up`` are kept, not summed
SLIME_TIMERS: dict[str, str] = {"rollout": "generation", "log_probs": "old_log_prob", "ref_log_probs": "ref",
                                "actor_train": "update_actor"}
#: ROLL (alibaba/ROLL ``roll/pipeline/rlvr/rlvr_pipeline.py``: ``metrics_mgr.add_metric("time/<name>", timer.last)``)
#: step timer -> phase; ``step_total`` is the step; ``time/<a>/<b>/...`` keys (per-worker statistics) and other
#: names are not phases
ROLL_TIMERS: dict[str, str] = {"step_generate": "generation", "old_log_probs": "old_log_prob",
                               "ref_log_probs_values": "ref_values", "step_train": "ppo_train",
                               "step_model_update": "update_weights", "val_step": "testing"}
#: AReaL (``areal.utils.stats_tracker.record_timing(name)`` -> ``timeperf/<name>``, seconds) timer -> phase;
#: ``e2e`` (ReaLHF / AReaL 0.2 master worker) is the step
AREAL_TIMERS: dict[str, str] = {"rollout": "generation", "recompute_logp": "old_log_prob", "ref_logp": "ref",
                                "critic_values": "values", "compute_advantage": "adv", "train_step": "update_actor",
                                "update_weights": "update_weights", "save": "save_checkpoint", "eval": "testing"}
#: ReaLHF / AReaL 0.1-0.2 model function calls (RPC names of its PPO/GRPO experiment configs) -> phase: the master
#: worker logs ``Model rpc <name> finished. Request-reply time <s>s.`` per call (realhf/system/model_function_call.py)
#: before the step's ``#End to end#`` line; another RPC name is kept as a timer, not summed
AREAL_RPCS: dict[str, str] = {"actor_gen": "generation", "actor_inf": "old_log_prob", "ref_inf": "ref",
                              "critic_inf": "values", "rew_inf": "reward", "actor_train": "update_actor",
                              "critic_train": "update_critic"}
SLIME_KEPT_TIMERS: frozenset[str] = frozenset({"train", "train_wait", "update_weights", "save_model",
                                               "data_preprocess", "sleep", "wake_up"})


def phase_flops(totals: dict[str, Any], phase: str) -> Any:
    """FLOPs of ``phase`` from a step's phase totals: a composite phase sums the phases inside it."""
    if phase in COMPOSITE_PHASES:
        return sum(totals.get(p, 0) for p in COMPOSITE_PHASES[phase])
    return totals.get(phase, 0)
#: timer name -> the phase it runs inside (never added to the step's sum: it is part of that phase's time).
#: veRL's rollout reports ``generate_sequences`` and ``reshard`` from inside ``gen``
NESTED_TIMERS: dict[str, str] = {"generate_sequences": "generation", "reshard": "generation"}
#: timers outside veRL's ``step`` timer (profiler start/stop): neither a phase nor part of the step
OUTSIDE_STEP_TIMERS: frozenset[str] = frozenset({"start_profile", "stop_profile", "step"})


def phase_rates(step: RLStepFlops, timings_s: dict[str, float], num_gpus: int) -> dict[str, dict[str, Any]]:
    """Per phase: seconds, FLOPs, TFLOP/s per GPU, from one step's FLOPs and the log's phase timings (keys: the
    phase names or the frameworks' timer names, with or without ``timing_s/``). Phases without a timing get
    ``None`` rates; a timing with no FLOPs phase (``reward``, ``adv``, ``update_weights``, ...) is kept with 0
    FLOPs, so the step's time is fully accounted for."""
    if num_gpus <= 0:
        raise ConfigError(f"num_gpus must be > 0, got {num_gpus}")
    flops = step.phase_totals()
    out: dict[str, dict[str, Any]] = {}
    names = {key: key.removeprefix("timing_s/") for key in timings_s}
    timed = {PHASE_TIMERS.get(n, n) for n in names.values() if n not in NESTED_TIMERS}
    for key, seconds in timings_s.items():
        name = names[key]
        if name in OUTSIDE_STEP_TIMERS:
            continue
        if name in NESTED_TIMERS:  # inside a phase: that phase's own timer, when logged, is its time
            if NESTED_TIMERS[name] in timed:
                continue
            phase = NESTED_TIMERS[name]
        else:
            phase = PHASE_TIMERS.get(name, name)
        work = phase_flops(flops, phase)
        rate = work / seconds / num_gpus / 1e12 if seconds and seconds > 0 else None
        out[phase] = {"seconds": seconds, "flops": work, "tflops_per_gpu": rate}
    inside = {p for c in out if c in COMPOSITE_PHASES for p in COMPOSITE_PHASES[c]}
    for phase, work in flops.items():
        if phase not in inside:  # a phase inside a timed composite is that composite's time
            out.setdefault(phase, {"seconds": None, "flops": work, "tflops_per_gpu": None})
    return out
