"""Seeded generator of SYNTHETIC training runs (log + per-microbatch metadata + manifest).

    >>> from vlm_perf.synth import RUN_PRESETS, generate_run
    >>> generate_run(RUN_PRESETS["tiny"], "out/tiny")        # train.log, metadata.jsonl.gz, run.yaml, synthetic.yaml

or ``python -m vlm_perf.synth --preset qwen3-vl-30b-a3b-sft --out sample_logs/qwen3-vl-30b-a3b-sft``.

Modules: ``spec`` (RunSpec and its parts), ``data`` (sample distributions, smart-resize),
``packing`` (first-fit packing), ``steptime`` (per-component step-time model), ``logwriter``
(Megatron-Bridge log text), ``metadata`` (schema v1 JSONL.gz), ``runner`` (simulation,
``generate_run``), ``presets`` (the bundled sample runs). Output is byte-identical for the same
spec and seed (same Python/numpy/zlib versions).
"""

from .presets import RUN_PRESETS, SAMPLE_RUNS, get_preset
from .runner import GENERATOR, GENERATOR_VERSION, Simulation, generate_run, simulate
from .spec import (DataMix, ImageDist, Parallelism, Quirks, ResolutionMode, RunSpec, StepTimeModel, TextDist,
                   VideoDist)

__all__ = ["DataMix", "GENERATOR", "GENERATOR_VERSION", "ImageDist", "Parallelism", "Quirks", "RUN_PRESETS",
           "ResolutionMode", "RunSpec", "SAMPLE_RUNS", "Simulation", "StepTimeModel", "TextDist", "VideoDist",
           "generate_run", "get_preset", "simulate"]
