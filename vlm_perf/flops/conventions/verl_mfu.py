"""veRL's and EasyR1's ``perf/mfu/actor`` (EasyR1: ``perf/mfu_actor``), reproduced from their own formula (pure).

What the log's number is (read in the frameworks' code, pinned below):

* **FLOPs**: ``FlopsCounter.estimate_flops(global_token_num, delta_time)`` — the ``verl`` convention
  (:mod:`vlm_perf.flops.conventions.others`: 6·N_dense·ΣL + 6·ΣL²·d·H·L_layers, the input embedding billed as a
  GEMM, the ViT only from image grids (``images_seqlens``), video not counted, x3 on every GEMM whatever is
  frozen) over ``global_token_num`` = the attention-mask length (prompt + response, visual placeholders
  included) of every response of the batch.
* **time**: the actor update only — the timer around ``update_policy`` (legacy workers) or around each
  ``train_batch`` call (veRL >= 0.8 engine workers), never the step: generation, log-prob passes, reward and
  weight sync are outside it.
* **divided by** ``promised_flops`` (veRL's ``get_device_flops``: its own table by device-name substring, e.g.
  H100 / H800 / H200 -> 989e12, an unknown device -> inf, i.e. MFU 0) and by the world size (all actor GPUs).

Two shapes, by version:

* ``legacy`` — veRL ``fsdp_workers.py`` ``update_actor`` (releases before the engine workers) and EasyR1
  ``fsdp_workers.py``: ``estimated_flops * ppo_epochs / promised_flops / world_size`` for the whole batch and
  the whole update (``delta_time`` covers all epochs; the FLOPs of one pass are multiplied by ``ppo_epochs``).
* ``engine`` — veRL 0.9.0 ``TrainingWorker._postprocess_output`` per ``train_batch`` (one mini-batch of one
  epoch): ``estimated_flops / promised_flops / world_size`` with that mini-batch's tokens and time;
  ``RayPPOTrainer._update_actor`` renames ``actor/mfu`` to ``perf/mfu/actor`` and ``reduce_metrics`` logs the
  MEAN over mini-batches and epochs (a mean of ratios, not total FLOPs / total time).

How it differs from exact: (1) its FLOPs formula (the ``verl`` convention's deviations: embedding GEMM, merger
on P patches, no video, x3 for frozen / LoRA-adapted weights, head_dim rule) against exact update FLOPs of the
training regime, vision included; (2) its time is the update only, so it is not the step's MFU (the step's
FLOPs are every phase's, its time ``timing_s/step``); (3) the engine path's mean of per-mini-batch ratios.
:func:`verl_mfu_actor` returns the logged number's reproduction together with the exact update FLOPs over the
same time (``exact_mfu``), so the difference is a number, not a caveat.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Sequence

from ...arch.spec import ModelSpec
from ...arch.trainability import Trainability
from ...errors import ConfigError
from ...stats.batch import BatchStats
from .base import Pin

VERL_MFU_ENGINE = Pin(
    "veRL", "verl-project/verl",
    "verl/workers/engine_workers.py + verl/trainer/ppo/ray_trainer.py + verl/utils/metric (reduce_metrics)",
    "TrainingWorker.train_batch / _postprocess_output: mfu = estimate_flops(global_token_num, delta_time)[0] / "
    "promised_flops / world_size per train_batch call; RayPPOTrainer._update_actor: actor/mfu -> perf/mfu/actor; "
    "fit: reduce_metrics = mean over mini-batches",
    "v0.9.0 (installed package; main 1dda039b9c63)",
    verified="tests/flops/test_verl_mfu.py: veRL's own FlopsCounter.estimate_flops called on the same batch, and "
             "hand arithmetic from the cited lines")
VERL_MFU_LEGACY = Pin(
    "veRL / EasyR1", "volcengine/verl; hiyouga/EasyR1", "verl/workers/fsdp_workers.py",
    "ActorRolloutRefWorker.update_actor (veRL: perf/mfu/actor) / FSDPWorker.update_actor (EasyR1: "
    "perf/mfu_actor): estimated_flops * ppo_epochs / promised_flops / world_size, delta_time = Timer around "
    "update_policy, global_num_tokens = meta_info['global_token_num']",
    "volcengine/verl b38119fa2482; hiyouga/EasyR1 188f4d40066f",
    verified="tests/flops/test_verl_mfu.py (hand arithmetic from the cited line)")

VARIANTS = ("legacy", "engine")


@dataclass(frozen=True)
class VerlMfu:
    """The reproduced ``perf/mfu/actor`` (``mfu``) with what it divides, and the exact update FLOPs over the same
    time (``exact_flops``, ``exact_mfu``): ``mfu / exact_mfu`` is the formula's over- or under-count."""

    mfu: float
    flops: float  # veRL-counted FLOPs of the whole update (all epochs)
    seconds: float  # the update time the MFU divides by (sum over mini-batches for the engine path)
    num_gpus: int
    peak_flops: float  # per GPU, FLOP/s
    variant: str
    exact_flops: float | None = None
    notes: tuple[str, ...] = field(default=())

    @property
    def exact_mfu(self) -> float | None:
        if self.exact_flops is None:
            return None
        return self.exact_flops / self.seconds / self.num_gpus / self.peak_flops

    @property
    def pin(self) -> Pin:
        return VERL_MFU_ENGINE if self.variant == "engine" else VERL_MFU_LEGACY


def verl_counted_flops(spec: ModelSpec, seq_lens: Sequence[int], image_grids: Sequence[Sequence[int]] = (),
                       convention: str = "verl") -> float:
    """``FlopsCounter.estimate_flops(seq_lens, 1.0, images_seqlens=...)[0] * 1e12``: veRL's training FLOPs of one
    pass over ``seq_lens`` (one entry per response: prompt + response tokens) with the media of ``image_grids``
    (``image_grid_thw`` rows). ``convention``: ``verl`` (main / v0.9.0) or ``verl@v0.7.1``."""
    from ..breakdown import compute_flops

    if not seq_lens:
        raise ConfigError("veRL's MFU needs the batch's sequence lengths (global_token_num); got none")
    stats = BatchStats.from_batch(seq_lens=list(seq_lens), image_grids=[tuple(g) for g in image_grids], spec=spec)
    return float(compute_flops(spec, stats, convention).total)


def _exact_update(spec: ModelSpec, seq_lens: Sequence[int], image_grids: Sequence[Sequence[int]],
                  trainability: Trainability | None) -> float:
    from ..regime import regime_flops

    stats = BatchStats.from_batch(seq_lens=list(seq_lens), image_grids=[tuple(g) for g in image_grids], spec=spec)
    return float(regime_flops(spec, stats, trainability or Trainability(), causal="half",
                              full_reference=False).breakdown.total)


def _check(num_gpus: int, peak_flops: float, ppo_epochs: int) -> None:
    if int(num_gpus) != num_gpus or num_gpus < 1:
        raise ConfigError(f"num_gpus must be a positive integer, got {num_gpus!r}")
    if not peak_flops > 0:
        raise ConfigError(f"peak_flops (FLOP/s per GPU) must be > 0, got {peak_flops!r}")
    if int(ppo_epochs) != ppo_epochs or ppo_epochs < 1:
        raise ConfigError(f"ppo_epochs must be a positive integer, got {ppo_epochs!r}")


def verl_mfu_actor(spec: ModelSpec, seq_lens: Sequence[int], update_seconds: float, num_gpus: int,
                   peak_flops: float, image_grids: Sequence[Sequence[int]] = (), ppo_epochs: int = 1,
                   trainability: Trainability | None = None, convention: str = "verl",
                   exact: bool = True) -> VerlMfu:
    """The ``legacy`` formula: veRL's FLOPs of one pass over the whole batch x ``ppo_epochs`` / ``update_seconds``
    / ``peak_flops`` / ``num_gpus``. ``seq_lens``: prompt + response tokens of every response of the step;
    ``update_seconds``: the update's time (``timing_s/update_actor`` is this timer plus the driver's dispatch and
    transfer, so the log's own MFU is slightly higher than this with the phase timer); ``peak_flops``: what
    veRL promised for the device (``get_device_flops``), per GPU, FLOP/s. With ``exact``, also the exact update
    FLOPs under ``trainability`` (default: full training), vision included, x ``ppo_epochs``.

    For veRL's engine workers (>= 0.8) this is the logged mean only when every mini-batch has the same FLOPs
    per second; :func:`verl_mfu_actor_engine` takes the mini-batches."""
    _check(num_gpus, peak_flops, ppo_epochs)
    if not update_seconds > 0:
        raise ConfigError(f"update_seconds must be > 0, got {update_seconds!r}")
    flops = verl_counted_flops(spec, seq_lens, image_grids, convention) * ppo_epochs
    mfu = flops / update_seconds / peak_flops / num_gpus
    ex = _exact_update(spec, seq_lens, image_grids, trainability) * ppo_epochs if exact else None
    notes = (f"veRL/EasyR1 legacy formula ({VERL_MFU_LEGACY.describe()}): FLOPs of the {convention!r} convention, "
             "time = the actor update only (not the step)",)
    return VerlMfu(mfu, flops, float(update_seconds), int(num_gpus), float(peak_flops), "legacy", ex, notes)


def verl_mfu_actor_engine(spec: ModelSpec, minibatches: Sequence[tuple[Sequence[int], float]], num_gpus: int,
                          peak_flops: float, image_grids: Sequence[Sequence[Sequence[int]]] = (),
                          trainability: Trainability | None = None, convention: str = "verl",
                          exact: bool = True) -> VerlMfu:
    """The ``engine`` formula (veRL 0.9.0): ``minibatches`` = one ``(seq_lens, seconds)`` per ``train_batch`` call
    (every mini-batch of every epoch, tokens gathered over the data-parallel group, seconds of that call);
    ``image_grids[i]``: the grids of mini-batch ``i`` (optional). The result's ``mfu`` is the MEAN of the
    per-mini-batch MFUs, as logged; ``flops`` and ``seconds`` are the totals (``flops / seconds`` is NOT what
    veRL divides)."""
    _check(num_gpus, peak_flops, 1)
    if not minibatches:
        raise ConfigError("veRL's engine MFU needs at least one mini-batch")
    if image_grids and len(image_grids) != len(minibatches):
        raise ConfigError(f"{len(image_grids)} image-grid lists for {len(minibatches)} mini-batches")
    ratios, total_f, total_t, total_ex = [], 0.0, 0.0, 0.0
    for i, (lens, seconds) in enumerate(minibatches):
        if not seconds > 0:
            raise ConfigError(f"mini-batch {i}: seconds must be > 0, got {seconds!r}")
        grids = image_grids[i] if image_grids else ()
        f = verl_counted_flops(spec, lens, grids, convention)
        ratios.append(f / seconds / peak_flops / num_gpus)
        total_f, total_t = total_f + f, total_t + seconds
        if exact:
            total_ex += _exact_update(spec, lens, grids, trainability)
    notes = (f"veRL engine formula ({VERL_MFU_ENGINE.describe()}): mean over {len(ratios)} mini-batch MFUs, each "
             "over its own train_batch time",)
    return VerlMfu(sum(ratios) / len(ratios), total_f, total_t, int(num_gpus), float(peak_flops), "engine",
                   total_ex if exact else None, notes)


__all__ = ["VARIANTS", "VERL_MFU_ENGINE", "VERL_MFU_LEGACY", "VerlMfu", "verl_counted_flops", "verl_mfu_actor",
           "verl_mfu_actor_engine"]
