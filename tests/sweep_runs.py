"""The sweep fixture: the bundled sample runs plus SYNTHETIC variants of the ``tiny`` run preset written by the
project's own generator (`vlm_perf.synth.generate_run`: each run.yaml says ``synthetic: true`` with the generator
and the seed). The variants are what a sweep varies: the image resolution (the smart-resize pixel bound), the
packed sequence length, the data-parallel width (GPUs) and the seed.

``sweep_runs(folder, n)`` -> the first ``n`` run paths: the samples first, then the variants, generated into
``folder`` (a few hundredths of a second each)."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from vlm_perf.synth import RUN_PRESETS, generate_run

from tests.support import SAMPLE_LOGS

#: every bundled sample run (each opens without flags)
SAMPLES = ("qwen3-30b-a3b-text", "qwen3-vl-30b-a3b-sft", "qwen2.5-vl-7b-video", "qwen2-vl-tiny-real",
           "qwen2-vl-tiny-lora-real", "qwen2-vl-tiny-grpo-real", "qwen2-vl-tiny-trace")


def variants():
    """(name, RunSpec) of the synthetic variants, in sweep order."""
    tiny = RUN_PRESETS["tiny"]
    images = tiny.data.images
    out = []
    for side in (256, 384, 512, 640, 768, 896):  # a resolution sweep: max_pixels = side^2
        data = replace(tiny.data, images=replace(images, max_pixels=side * side))
        out.append((f"tiny-res{side}", tiny.with_(name=f"tiny-res{side}", data=data)))
    for seq in (2048, 8192):  # a packing sweep: the packed sequence length
        out.append((f"tiny-seq{seq}", tiny.with_(name=f"tiny-seq{seq}", seq_length=seq)))
    for dp in (1, 4):  # GPUs: data-parallel width (TP 2 x EP 2 as the preset)
        out.append((f"tiny-dp{dp}", tiny.with_(name=f"tiny-dp{dp}", parallel=replace(tiny.parallel, dp=dp))))
    for seed in (11, 12, 13):  # the same run, other data and timing draws
        out.append((f"tiny-seed{seed}", tiny.with_(name=f"tiny-seed{seed}", seed=seed)))
    return out


def sweep_runs(folder: Path, n: int = 20) -> list[Path]:
    """The first ``n`` runs of the fixture (samples, then synthetic variants generated into ``folder``)."""
    runs = [SAMPLE_LOGS / name for name in SAMPLES][:n]
    for name, spec in variants()[: max(0, n - len(runs))]:
        runs.append(generate_run(spec, folder / name))
    if len(runs) < n:
        raise ValueError(f"the sweep fixture has {len(runs)} runs, {n} asked for")
    return runs

