"""Presets (config.json-shaped) for popular checkpoints: transformers' own parameter count vs the published total.

Each ``presets/<name>.json`` is instantiated with transformers (``<architectures[0]>`` on the meta device, no
weights) and its parameters counted. ``presets/presets.json`` records, per preset, the published total and its
source, and transformers' count; this test re-derives the count (so the recorded number cannot drift from the
file) and checks it against the published figure within half a unit of its last published digit. Presets
whose size is known only from the model name carry ``published_total: null``; their recorded transformers
count is the target an independent parameter counter (the families' inventory) must reproduce.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

PRESETS = Path(__file__).parent / "presets"
SIDECAR = json.loads((PRESETS / "presets.json").read_text())
NAMES = sorted(k for k in SIDECAR if not k.startswith("_"))


def build_on_meta(name: str):
    cfg_dict = json.loads((PRESETS / f"{name}.json").read_text())
    config = transformers.AutoConfig.for_model(**cfg_dict)
    with torch.device("meta"):
        return getattr(transformers, cfg_dict["architectures"][0])(config)


def test_every_preset_file_has_a_sidecar_entry():
    files = sorted(p.stem for p in PRESETS.glob("*.json") if p.name != "presets.json")
    assert files == NAMES


@pytest.mark.parametrize("name", NAMES)
def test_transformers_count_matches_record_and_published_total(name):
    model = build_on_meta(name)
    params = dict(model.named_parameters())
    n_params = sum(p.numel() for p in params.values())
    state = model.state_dict()
    n_tensors = n_params + sum(b.numel() for k, b in model.named_buffers() if k in state)
    entry = SIDECAR[name]
    assert n_params == entry["transformers_parameters"]
    assert n_tensors == entry["transformers_checkpoint_tensors"]
    if entry["published_total"] is not None:
        assert abs(n_tensors - entry["published_total"]) <= entry["published_tolerance"], (
            name, n_tensors, entry["published_label"])
    if entry.get("reference_analytic") is not None:  # the reference's hand count from the listed shapes
        assert n_tensors == entry["reference_analytic"], (name, n_tensors, entry["reference_analytic"])
