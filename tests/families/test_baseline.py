"""The family-inventory refactor changes no number: every preset x convention x mode x causal x frozen x
media case, and every parameter count, equals what the pre-refactor code (commit 60f2c9a) recorded in
baseline.json (make_baseline.py), bit for bit -- the vectorised polars path included.

Deliberate changes, excluded here and tested where they are made:
* training with every part frozen (``language_model`` on a text-only model) is now an error.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.families import make_baseline as mb

BASELINE = json.loads(Path(mb.__file__).with_name("baseline.json").read_text())
CASES = list(mb.cases(sorted(BASELINE["params"])))  # the presets that existed before the refactor


def _deliberate_change(preset: str, mode: str, frozen: tuple) -> bool:
    from vlm_perf.arch import load_model

    return mode == "training" and "language_model" in frozen and load_model(preset).vision is None


def test_every_case_is_recorded():
    assert {key for key, *_ in CASES} == set(BASELINE["flops"])


@pytest.mark.parametrize("preset", sorted(BASELINE["params"]))
def test_flops_bit_identical(preset):
    mismatches = []
    for key, p, conv, mode, causal, frozen, media in CASES:
        if p != preset or _deliberate_change(p, mode, frozen):
            continue
        got = mb.compute(p, conv, mode, causal, frozen, media)
        if got != BASELINE["flops"][key]:
            mismatches.append((key, BASELINE["flops"][key], got))
    assert not mismatches, mismatches[:5]


@pytest.mark.parametrize("preset", sorted(BASELINE["params"]))
def test_params_identical(preset):
    assert mb.params(preset) == BASELINE["params"][preset]


@pytest.mark.parametrize("preset", sorted(BASELINE["params"]))
def test_polars_frame_bit_identical(preset):
    assert mb.digest(mb.frame_flops(preset)) == BASELINE["frames"][preset]
