"""Every registered convention on every shipped preset it is defined for: a finite, non-negative number in
both modes with known components, and a one-line ConventionNotDefined (never a crash) where it is not."""

import math

import pytest

from vlm_perf.arch import load_model, preset_names
from vlm_perf.errors import ConventionNotDefined, VlmPerfError
from vlm_perf.flops import COMPONENTS, CONVENTIONS, compute_flops
from vlm_perf.stats import BatchStats


@pytest.mark.parametrize("preset", preset_names())
def test_every_convention_on_every_preset(preset):
    spec = load_model(preset)
    grids = []
    if spec.vision is not None:
        m = spec.vision.spatial_merge_size
        grids = [(spec.vision.temporal_patch_size if spec.vision.temporal_patch_size > 1 else 1, 8 * m, 8 * m)]
    try:
        stats = BatchStats.from_batch(seq_lens=[1500, 548], padded_tokens=4096, samples=2, image_grids=grids,
                                      spec=spec)
    except VlmPerfError:  # a family whose grid rule refuses this grid: a text-only batch
        stats = BatchStats.from_batch(seq_lens=[1500, 548], padded_tokens=4096, samples=2, spec=spec)
    family = spec.family or spec.model_type
    for name, conv in CONVENTIONS.items():
        if not conv.covers(family) or spec.lm.family in conv.unsupported:
            with pytest.raises(ConventionNotDefined):
                compute_flops(spec, stats, name)
            continue
        train = compute_flops(spec, stats, name)
        fwd = compute_flops(spec, stats, name, mode="forward")
        assert set(train.components) <= set(COMPONENTS), name
        assert math.isfinite(train.total) and train.total > 0, (name, train.total)
        assert all(v >= 0 for v in train.components.values()), (name, train.components)
        assert fwd.total <= train.total, name
