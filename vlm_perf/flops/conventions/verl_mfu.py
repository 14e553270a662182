"""veRL's and EasyR1's ``perf/mfu/actor`` (EasyR1: ``perf/mfu_actor``), reproduced from their own formula (pure).

What the log's number is (read in the frameworks' code, pinned below):

* **FLOPs**: ``FlopsCounter.estimate_flops(global_token_num, delta_time)`` — the ``verl`` convention
  (:mod:`vlm_perf.flops.conventions.others`: 6·N_dense·ΣL + 6·ΣL²·d·H·L_layers, the input embedding billed as a
  GEMM, the ViT only from image grids (``images_seqlens``), video not counted, x3 on every GEMM whatever is
  frozen) over ``global_token_num`` = the attention-mask length (prompt + response, visual placeholders
  included) of every response of the batch.
* **time**: the actor update only — the timer around ``update_policy`` (legacy workers) or around each
  ``train_batch`` call (veRL 0.9.0 engine workers), never the step: generation, log-prob passes, reward and
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
  MEAN over mini-batches and epochs (``fit``: ``reduce_metrics`` — ``np.mean`` for a key without "max" / "min";
  a mean of ratios, not total FLOPs / total time).

EasyR1 ships its own copy of the counter (``EASYR1_FLOPS``; ``convention="easyr1"``): text only for every VLM,
attention ``12 * sum(L^2) * d * H * L`` (no causal half), ``d = hidden // heads`` in the dense formula, and a
device table in which an H200 matches its "H20" entry (148e12: the MFU it logs on H200s is 989/148 = 6.7x what
the same run would log with an H200's dense BF16 peak).

Other worker variants exist (the code index shows a Megatron actor dividing by the tensor-parallel size only);
they are not pinned here.

How it differs from exact: (1) its FLOPs formula (the ``verl`` convention's deviations: embedding GEMM, merger
on P patches, no video, x3 for frozen / LoRA-adapted weights, head_dim rule) against exact update FLOPs of the
training regime, vision included; (2) its time is the update only, so it is not the step's MFU (the step's
FLOPs are every phase's, its time ``timing_s/step``); (3) the engine path's mean of per-mini-batch ratios.
:func:`verl_mfu_actor` returns the logged number's reproduction together with the exact update FLOPs over the
same time (``exact_mfu``), so the difference is a number, not a caveat.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Sequence

from ...arch.spec import ModelSpec
from ...arch.trainability import Trainability
from ...errors import ConfigError
from ...stats.batch import BatchStats
from .base import Pin

if TYPE_CHECKING:
    import polars as pl

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

EASYR1_FLOPS = Pin(
    "EasyR1", "hiyouga/EasyR1", "verl/utils/flops_counter.py",
    "FlopsCounter._estimate_llama_flops / _estimate_qwen2_moe_flops + get_device_flops", "13e956285434",
    verified="tests/flops/test_verl_mfu.py: hand arithmetic from the cited lines")
#: families EasyR1's ``_ESTIMATE_FUNC`` routes to its dense (llama) and MoE formulas; anything else logs MFU 0
EASYR1_DENSE = ("llama", "qwen2", "qwen2_vl", "qwen2_5_vl", "qwen3", "qwen3_vl")
EASYR1_MOE = ("qwen2_moe", "qwen3_moe", "qwen3_vl_moe")
#: EasyR1's ``get_device_flops``, in its order: the first substring of the device name that matches wins
#: (so "NVIDIA H200" matches "H20": 148e12, not an H200's dense BF16 peak); no match -> inf (MFU 0)
EASYR1_DEVICE_FLOPS: tuple[tuple[tuple[str, ...], float], ...] = (
    (("H100", "H800"), 989e12), (("A100", "A800"), 312e12), (("L40",), 181.05e12), (("L20",), 119.5e12),
    (("H20",), 148e12), (("910B",), 354e12))


def easyr1_promised_flops(device_name: str) -> float:
    """FLOP/s per GPU that EasyR1's ``get_device_flops`` promises for ``torch.cuda.get_device_name()``."""
    for names, flops in EASYR1_DEVICE_FLOPS:
        if any(n in device_name for n in names):
            return flops
    return float("inf")


def easyr1_counted_flops(spec: ModelSpec, seq_lens: Sequence[int]) -> float:
    """EasyR1's training FLOPs of one pass over ``seq_lens`` (``estimate_flops(seq_lens, 1.0)[0] * 1e12``):
    text only (no vision term for any VLM), ``6 * N * sum(L)`` with N = L_layers * (MLP + attention projections)
    + 2 * V * h, and the attention core ``12 * sum(L^2) * d * H * L_layers`` (no causal half); the dense formula
    takes ``d = hidden // heads``, the MoE formula the config's head_dim, routed experts ``top_k * 3 * h *
    moe_intermediate`` plus the router ``h * E`` (no shared experts)."""
    family = spec.family or spec.model_type
    if family not in EASYR1_DENSE + EASYR1_MOE:
        raise ConfigError(f"EasyR1's FlopsCounter has no formula for {family} ({spec.name}): it logs MFU 0")
    if not seq_lens:
        raise ConfigError("EasyR1's MFU needs the batch's sequence lengths (global_token_num); got none")
    lm = spec.lm
    h, heads, kv = lm.hidden_size, lm.num_heads, lm.num_kv_heads
    if family in EASYR1_DENSE:
        d = h // heads
        mlp = h * lm.intermediate_size * 3
    else:
        if lm.moe is None:
            raise ConfigError(f"{spec.name}: EasyR1's MoE formula needs an MoE language model")
        d = lm.head_dim
        mlp = h * lm.moe.top_k * lm.moe.expert_intermediate_size * 3 + h * lm.moe.num_experts
    attn = h * (heads * d + 2 * kv * d + heads * d)
    dense_n = (mlp + attn) * lm.num_layers + lm.vocab_size * h * 2
    return float(6 * dense_n * sum(seq_lens) + 12 * sum(x * x for x in seq_lens) * d * heads * lm.num_layers)


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
    (``image_grid_thw`` rows). ``convention``: ``verl`` (main / v0.9.0), ``verl@v0.7.1``, or ``easyr1`` (EasyR1's
    own copy of the counter: :func:`easyr1_counted_flops`, images ignored)."""
    from ..breakdown import compute_flops

    if convention == "easyr1":
        return easyr1_counted_flops(spec, seq_lens)
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

    For veRL's engine workers (0.9.0) this is the logged mean only when every mini-batch has the same FLOPs
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


def verl_mfu_actor_log_frame(spec: ModelSpec, iterations: "pl.DataFrame", num_gpus: int, peak_flops: float,
                             image_grids_per_sample: Sequence[Sequence[int]] = (), ppo_epochs: int = 1,
                             samples: int | None = None, convention: str = "verl") -> "pl.DataFrame":
    """Per iteration of a parsed log: the logged ``mfu_logged`` (veRL ``perf/mfu/actor`` / EasyR1
    ``perf/mfu_actor``) beside its reproduction by the ``legacy`` formula as an ESTIMATE from the log alone —
    every response given the mean prompt + mean response length (``round``), ``rl_samples`` responses (the
    column, else ``step_tokens / (mean_P + mean_N)``, else ``samples``), the time ``phase_s_update_actor``.

    Columns: ``iteration``, ``mfu_logged``, ``mfu_verl_estimate``, ``ratio`` (logged / estimate), ``samples``,
    ``seq_len`` (rounded mean prompt + response), ``update_s``. Expect ``ratio`` >= 1 when lengths vary (veRL
    sums L^2 per response; the mean's square is smaller) and when the engine path's per-mini-batch timers
    exclude the dispatch that ``timing_s/update_actor`` includes. With per-response lengths use
    :func:`verl_mfu_actor` instead. veRL's FLOPs of one response are ``c0 + c1 L + c2 L^2`` (``L`` its length;
    ``c0`` its media's ViT term): solved exactly from three evaluations of the convention, checked at a
    fourth, applied to every row in one polars expression."""
    import polars as pl
    from fractions import Fraction

    from ..rl_step import step_samples

    _check(num_gpus, peak_flops, ppo_epochs)
    need = {"iteration", "prompt_len_mean", "response_len_mean", "phase_s_update_actor"}
    missing = need - set(iterations.columns)
    if missing:
        raise ConfigError(f"reproducing perf/mfu/actor from a log needs columns {', '.join(sorted(need))}; missing "
                          f"{', '.join(sorted(missing))}")
    n_expr = step_samples(iterations, samples)
    length = (pl.col("prompt_len_mean").cast(pl.Float64).round(0) + pl.col("response_len_mean").cast(pl.Float64)
              .round(0)).cast(pl.Int64)
    grids = [tuple(g) for g in image_grids_per_sample]

    def one(n: int) -> Fraction:
        return Fraction(verl_counted_flops(spec, [n], grids, convention))

    pts = [1024, 2048, 4096]
    f = [one(x) for x in pts]
    # f(L) = c0 + c1 L + c2 L^2 through three points (exact divided differences)
    d1 = (f[1] - f[0]) / (pts[1] - pts[0])
    d2 = ((f[2] - f[1]) / (pts[2] - pts[1]) - d1) / (pts[2] - pts[0])
    c2 = d2
    c1 = d1 - d2 * (pts[0] + pts[1])
    c0 = f[0] - c1 * pts[0] - c2 * pts[0] ** 2
    probe = 3000
    want = one(probe)
    if abs(float(c0 + c1 * probe + c2 * probe ** 2 - want)) > 1e-9 * float(abs(want)):
        raise ConfigError(f"{spec.name}: the {convention!r} FLOPs of one response are not quadratic in its length")
    L = pl.col("seq_len").cast(pl.Float64)
    counted = pl.col("samples").cast(pl.Float64) * (float(c0) + float(c1) * L + float(c2) * L * L) * ppo_epochs
    est = (counted / pl.col("update_s") / peak_flops / num_gpus)
    logged = pl.col("mfu_logged").cast(pl.Float64) if "mfu_logged" in iterations.columns else pl.lit(None, pl.Float64)
    out = iterations.select(pl.col("iteration").cast(pl.Int64), logged.alias("mfu_logged"), n_expr.alias("samples"),
                            length.alias("seq_len"), pl.col("phase_s_update_actor").cast(pl.Float64).alias("update_s"))
    ok = (pl.col("samples") > 0) & (pl.col("seq_len") > 0) & (pl.col("update_s") > 0)
    out = out.with_columns(pl.when(ok).then(est).otherwise(None).alias("mfu_verl_estimate"))
    return out.with_columns(
        pl.when(pl.col("mfu_verl_estimate") > 0).then(pl.col("mfu_logged") / pl.col("mfu_verl_estimate"))
        .otherwise(None).alias("ratio")).select("iteration", "mfu_logged", "mfu_verl_estimate", "ratio", "samples",
                                                "seq_len", "update_s")


__all__ = ["EASYR1_DEVICE_FLOPS", "EASYR1_FLOPS", "VARIANTS", "easyr1_counted_flops", "easyr1_promised_flops", "VERL_MFU_ENGINE", "VERL_MFU_LEGACY", "VerlMfu", "verl_counted_flops", "verl_mfu_actor",
           "verl_mfu_actor_engine", "verl_mfu_actor_log_frame"]
