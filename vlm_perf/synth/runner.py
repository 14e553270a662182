"""`generate_run`: simulate one synthetic run; write train.log, metadata.jsonl.gz, run.yaml, synthetic.yaml.

run.yaml holds only the run-manifest keys (plus the synthetic label: ``synthetic``, ``generator``, ``seed``);
synthetic.yaml holds the generator details, parallel layout and the expected headline numbers.

Simulation order (each concern has its own seeded random stream, so changing e.g. the timing
model never changes the data):

1. data: samples -> first-fit packs -> per iteration ``global_batch_size`` packs, assigned to
   (dp_rank, microbatch) in order; metadata rows and `BatchStats` per DP rank and per iteration;
2. FLOPs per iteration: ``megatron-lm`` (what the log reports), ``mbridge-pr2575`` and ``exact``;
3. time: the job runs attempt by attempt; iteration times from `steptime.iteration_seconds`;
   after a crash the job restarts from the last checkpoint and replays the same data;
4. the log: per window of ``log_interval`` iterations, the logged TFLOP/s/GPU is
   sum(megatron-lm FLOPs of the window's iterations) / (window elapsed s x world size x 1e12),
   as Megatron-Bridge computes it from ``floating_point_operations_so_far`` deltas.
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from pathlib import Path

import numpy as np
import yaml

from .. import __version__ as PACKAGE_VERSION
from ..arch import load_model
from ..flops import compute_flops
from ..stats import BatchStats
from .data import SampleStream
from .logwriter import GPUS_PER_NODE, PREFIX_STYLES, LogWriter
from .metadata import metadata_row, write_jsonl_gz
from .packing import FirstFitPacker
from .spec import RunSpec
from .steptime import iteration_seconds

GENERATOR = "vlm_perf.synth"
GENERATOR_VERSION = "1.0"
LOG_NAME, METADATA_NAME, MANIFEST_NAME = "train.log", "metadata.jsonl.gz", "run.yaml"
SIDECAR_NAME = "synthetic.yaml"
# independent random streams
_DATA, _TIME, _LOSS, _NOISE = 1, 2, 3, 4


def _rng(seed: int, stream: int) -> np.random.Generator:
    return np.random.default_rng(np.random.SeedSequence([seed, stream]))


@dataclass
class Iteration:
    """Data and FLOPs of one iteration (the same on every replay)."""

    rows: list[dict]
    rank_stats: list[BatchStats]
    stats: BatchStats
    flops_logged: float  # megatron-lm
    flops_pr2575: float
    flops_exact: float
    loss: float
    aux_loss: float
    grad_norm: float


@dataclass
class Window:
    attempt: int
    last_iteration: int
    iterations: list[int]
    elapsed_s: float
    first_of_attempt: bool
    logged_tflops: float = 0.0
    pr2575_tflops: float = 0.0
    exact_tflops: float = 0.0


@dataclass
class Simulation:
    run: RunSpec
    iterations: dict[int, Iteration] = field(default_factory=dict)
    windows: list[Window] = field(default_factory=list)
    log_text: str = ""
    dropped_samples: int = 0


def _lr(run: RunSpec, it: int) -> float:
    if it <= run.lr_warmup:
        return run.lr * it / run.lr_warmup
    progress = (it - run.lr_warmup) / max(1, run.iterations - run.lr_warmup)
    return run.lr * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * progress)))


def _build_iterations(run: RunSpec, spec) -> tuple[dict[int, Iteration], int]:
    vision = spec.vision
    patch = vision.patch_size if vision else 14
    merge = vision.spatial_merge_size if vision else 2
    if vision is None and any(m.image or m.video for m in (run.data, *(mix for _, mix in run.phases))):
        raise ValueError(f"{run.model} has no vision tower but the data mix has media")
    stream = SampleStream(run.data, _rng(run.seed, _DATA), run.seq_length, patch, merge)
    packer = FirstFitPacker(stream, run.seq_length)
    loss_rng = _rng(run.seed, _LOSS)
    mbs, nmb, dp = run.micro_batch_size, run.num_microbatches, run.parallel.dp
    out: dict[int, Iteration] = {}
    tau = max(1.0, run.iterations / 3)
    phases = dict(run.phases)
    for it in range(1, run.iterations + 1):
        if it in phases:
            stream.set_mix(phases[it])
        rows, rank_stats = [], []
        for rank in range(dp):
            total = BatchStats()
            for mb in range(nmb):
                packs = packer.take(mbs)
                row = metadata_row(it, mb, rank, packs, run.seq_length, with_media=vision is not None)
                rows.append(row)
                total = total + BatchStats.from_batch(
                    seq_lens=row["seq_lens"], image_grids=row.get("image_grid_thw", ()),
                    video_grids=row.get("video_grid_thw", ()), samples=len(packs),
                    padded_tokens=row["padded_tokens"], spec=spec)
            rank_stats.append(total)
        stats = sum(rank_stats[1:], rank_stats[0])
        loss = run.loss_end + (run.loss_start - run.loss_end) * math.exp(-it / tau) + loss_rng.normal(0, 0.03)
        aux = 1.0 + 0.06 * math.exp(-it / tau) + abs(loss_rng.normal(0, 0.004))
        out[it] = Iteration(
            rows=rows, rank_stats=rank_stats, stats=stats,
            flops_logged=compute_flops(spec, stats, "megatron-lm").total,
            flops_pr2575=compute_flops(spec, stats, "mbridge-pr2575").total,
            flops_exact=compute_flops(spec, stats, "exact", frozen=run.frozen).total,
            loss=loss, aux_loss=aux, grad_norm=abs(0.35 + 0.5 * math.exp(-it / tau) + loss_rng.normal(0, 0.05)))
    return out, stream.dropped


def _arguments(run: RunSpec, attempt_start: int) -> dict:
    par = run.parallel
    return {
        "world_size": par.world_size, "data_parallel_size": par.dp, "tensor_model_parallel_size": par.tp,
        "pipeline_model_parallel_size": par.pp, "context_parallel_size": par.cp,
        "expert_model_parallel_size": par.ep,
        "virtual_pipeline_model_parallel_size": par.vpp if par.vpp > 1 else None,
        "seq_length": run.seq_length, "micro_batch_size": run.micro_batch_size,
        "global_batch_size": run.global_batch_size, "train_iters": run.iterations, "log_interval": run.log_interval,
        "save_interval": run.quirks.save_interval, "lr": run.lr, "lr_warmup_iters": run.lr_warmup,
        "bf16": run.dtype == "bf16", "log_throughput": True, "packed_sequence": True,
        "sequence_parallel": par.tp > 1, "use_distributed_optimizer": True, "seed": 1234,
        "hf_model_id": run.model, "iteration": attempt_start,
    }


def simulate(run: RunSpec) -> Simulation:
    spec = load_model(run.model)
    q, par = run.quirks, run.parallel
    for style in q.prefixes:
        if style not in PREFIX_STYLES:
            raise ValueError(f"unknown prefix style {style!r}; use one of {PREFIX_STYLES}")
    if run.iterations % run.log_interval or q.save_interval % run.log_interval:
        raise ValueError("iterations and save_interval must be multiples of log_interval")
    if q.crash_after and not (q.save_interval <= q.crash_after < run.iterations):
        raise ValueError("crash_after must lie between the first checkpoint and the last iteration")
    sim = Simulation(run)
    sim.iterations, sim.dropped_samples = _build_iterations(run, spec)

    time_rng, noise_rng = _rng(run.seed, _TIME), _rng(run.seed, _NOISE)
    log = LogWriter(par.world_size)
    log.banner(GENERATOR, GENERATOR_VERSION, run.name, run.seed, run.model)
    now = datetime.strptime(run.start_time, "%Y-%m-%d %H:%M:%S")
    ckpt = f"/lustre/checkpoints/{run.name}"
    nodes = max(1, par.world_size // GPUS_PER_NODE)
    gbs, world = run.global_batch_size, par.world_size
    # attempts: (first iteration, last iteration reached, crashed?)
    attempts = [(1, q.crash_after, True), ((q.crash_after // q.save_interval) * q.save_interval + 1,
                                           run.iterations, False)] if q.crash_after else [(1, run.iterations, False)]
    job_id = 4_710_000 + run.seed % 10_000
    for n, (start, stop, crashed) in enumerate(attempts, 1):
        log.style = "none"
        if n > 1:
            now += timedelta(seconds=q.restart_gap_s)
        log.job_start(now, job_id, n, nodes)
        log.style = q.prefixes[min(n - 1, len(q.prefixes) - 1)]
        log.world_line(par)
        log.arguments(_arguments(run, start - 1))
        now += timedelta(seconds=95 + 10 * noise_rng.random())
        if start == 1:
            log.first(f"> loading pretrained weights from /lustre/models/{run.model}-mcore "
                      f"(finetune: iteration counter starts at 0)")
        else:
            log.checkpoint_loaded(start - 1, ckpt, par.tp, par.pp)
        now += timedelta(seconds=40 + 10 * noise_rng.random())
        log.datetime_marker("after model, optimizer, and learning rate scheduler are built", now)
        log.first("> building train, validation, and test datasets ...")
        log.first(f"    train: packed sequences of {run.seq_length} tokens, {gbs} per global batch")
        log.first("training ...")
        log.datetime_marker("before the start of training step", now)
        log.rank(int(noise_rng.integers(0, world)), "/opt/TransformerEngine/transformer_engine/pytorch/attention.py:"
                 "4107: UserWarning: cu_seqlens padding detected; falling back to the THD varlen kernel")
        window_its: list[int] = []
        window_s = 0.0
        first_window = True
        for it in range(start, stop + 1):
            seconds = iteration_seconds(spec, run, sim.iterations[it].rank_stats, time_rng)
            if first_window and not window_its:
                seconds += run.timing.warmup_s
            window_its.append(it)
            window_s += seconds
            now += timedelta(seconds=seconds)
            if it % run.log_interval:
                continue
            w = Window(n, it, window_its, window_s, first_window)
            denom = window_s * world * 1e12
            w.logged_tflops = sum(sim.iterations[i].flops_logged for i in window_its) / denom
            w.pr2575_tflops = sum(sim.iterations[i].flops_pr2575 for i in window_its) / denom
            w.exact_tflops = sum(sim.iterations[i].flops_exact for i in window_its) / denom
            sim.windows.append(w)
            is_nan = q.nan_iteration in window_its
            losses = [("lm loss", float("nan") if is_nan
                       else statistics.fmean(sim.iterations[i].loss for i in window_its))]
            if run.moe_aux_loss:
                losses.append(("load_balancing_loss", statistics.fmean(sim.iterations[i].aux_loss for i in window_its)))
            grad = None if is_nan else sim.iterations[it].grad_norm
            log.window(now, it, run.iterations, it * gbs, window_s / len(window_its), w.logged_tflops, _lr(run, it),
                       gbs, losses, grad, 1 if is_nan else 0)
            per_iter_ms = window_s / len(window_its) * 1e3
            if first_window:
                log.memory(it, [0, par.gpus_per_replica], 38.0 + 6 * noise_rng.random(), 52.0 + 8 * noise_rng.random())
            fb = per_iter_ms - run.timing.overhead_ms
            opt = run.timing.overhead_ms * (0.5 + 0.1 * noise_rng.random())
            log.timers([("forward-backward", fb * (0.98 + 0.01 * noise_rng.random()), fb * 1.002),
                        ("optimizer", opt, opt * (1.05 + 0.1 * noise_rng.random())),
                        ("batch-generator", 0.9 + noise_rng.random(), 2.5 + 3 * noise_rng.random())])
            if it % q.save_interval == 0:
                log.checkpoint_saved(it, ckpt, par.tp, par.pp)
                now += timedelta(seconds=25 + 5 * noise_rng.random())
            if noise_rng.random() < 0.08:
                log.rank(int(noise_rng.integers(0, world)),
                         "/opt/megatron-bridge/src/megatron/bridge/data/vlm_datasets/collate.py:211: UserWarning: "
                         "a sample exceeded seq_length after tokenization and was skipped")
            window_its, window_s, first_window = [], 0.0, False
        if crashed:
            now += timedelta(seconds=600)
            rank = int(noise_rng.integers(1, world))
            log.crash(now, rank, 40_000 + int(noise_rng.integers(0, 9_999)), f"nid{1000 + rank // GPUS_PER_NODE:06d}")
        else:
            log.datetime_marker("after training is done", now)
    sim.log_text = log.text()
    return sim


def _summary(sim: Simulation) -> dict:
    run = sim.run
    steady = [w for w in sim.windows if not w.first_of_attempt]
    its = [sim.iterations[i] for i in range(1, run.iterations + 1)]
    stats = sum((x.stats for x in its[1:]), its[0].stats)
    med = lambda key: round(statistics.median(getattr(w, key) for w in steady), 1)  # noqa: E731
    return {
        "logged_tflops_per_gpu_median": med("logged_tflops"),
        "mbridge_pr2575_tflops_per_gpu_median": med("pr2575_tflops"),
        "exact_tflops_per_gpu_median": med("exact_tflops"),
        "exact_mfu_median": round(med("exact_tflops") / run.timing.peak_tflops, 3),
        "visual_tokens_per_lm_token": round(stats.vision_merged_tokens / stats.lm_tokens, 4),
        "vision_patches_per_lm_token": round(stats.vision_patches / stats.lm_tokens, 4),
        "padding_fraction": round(1 - stats.lm_tokens / stats.lm_padded_tokens, 4),
        "mean_documents_per_pack": round(stats.lm_sequences / stats.lm_samples, 2),
        "note": "medians over logging windows, first window of each job attempt excluded",
    }


def manifest(sim: Simulation) -> dict:
    """run.yaml: the run-manifest keys vlm-perf reads, plus the synthetic label (generator, seed)."""
    run, par = sim.run, sim.run.parallel
    expected = _summary(sim)
    return {
        "model": run.model,
        "num_gpus": par.world_size,
        "gpu": run.gpu,
        "dtype": run.dtype,
        "frozen": list(run.frozen),
        "log_interval": run.log_interval,
        "seq_length": run.seq_length,
        "synthetic": True,
        "generator": GENERATOR,
        "seed": run.seed,
        "notes": (f"SYNTHETIC run generated by {GENERATOR} {GENERATOR_VERSION} (run preset {run.name}, seed "
                  f"{run.seed}); not a real training run. {run.description} Expected medians (TFLOP/s/GPU): "
                  f"logged megatron-lm {expected['logged_tflops_per_gpu_median']}, mbridge-pr2575 "
                  f"{expected['mbridge_pr2575_tflops_per_gpu_median']}, exact "
                  f"{expected['exact_tflops_per_gpu_median']}; details in {SIDECAR_NAME}. {run.notes}").strip(),
    }


def sidecar(sim: Simulation) -> dict:
    """synthetic.yaml: generator details, the layout and the numbers the run was built to show."""
    run, par = sim.run, sim.run.parallel
    return {
        "synthetic": True,
        "generator": GENERATOR,
        "generator_version": GENERATOR_VERSION,
        "vlm_perf_version": PACKAGE_VERSION,
        "seed": run.seed,
        "run_preset": run.name,
        "description": run.description,
        "peak_tflops": run.timing.peak_tflops,
        "micro_batch_size": run.micro_batch_size,
        "num_microbatches": run.num_microbatches,
        "global_batch_size": run.global_batch_size,
        "train_iters": run.iterations,
        "parallel": {"tp": par.tp, "pp": par.pp, "cp": par.cp, "ep": par.ep, "dp": par.dp, "vpp": par.vpp},
        "logged_tflops_convention": "megatron-lm",
        "step_time_model": {k: v for k, v in run.timing.__dict__.items()},
        "files": {"log": LOG_NAME, "metadata": METADATA_NAME, "manifest": MANIFEST_NAME},
        "samples_dropped_as_too_long": sim.dropped_samples,
        "expected": _summary(sim),
    }


def generate_run(spec: RunSpec, out_dir: str | Path) -> Path:
    """Simulate ``spec``; write train.log, metadata.jsonl.gz, run.yaml and synthetic.yaml into ``out_dir``."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    sim = simulate(spec)
    (out / LOG_NAME).write_text(sim.log_text, encoding="utf-8", newline="\n")
    write_jsonl_gz(out / METADATA_NAME, (row for i in sorted(sim.iterations) for row in sim.iterations[i].rows))
    label = f"# SYNTHETIC: written by {GENERATOR} {GENERATOR_VERSION} (run preset {spec.name}, seed {spec.seed})\n"
    for name, content in ((MANIFEST_NAME, manifest(sim)), (SIDECAR_NAME, sidecar(sim))):
        text = label + yaml.safe_dump(content, sort_keys=False, default_flow_style=False, width=100)
        (out / name).write_text(text, encoding="utf-8", newline="\n")
    return out
