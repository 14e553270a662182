"""Measured checks of Qwen-VL index lists and deepstack freezing on transformers' own classes (FlopCounterMode).

* ``fullatt_block_indexes`` / ``deepstack_visual_indexes`` with duplicates and entries >= depth:
  transformers tests ``layer_num in indexes`` per tower layer, so only distinct existing indexes change
  the computation -- but one deepstack merger module is stored per configured entry;
* freezing the deepstack mergers separately from the main merger (the recipe that freezes
  ``visual`` and unfreezes ``visual.merger`` only).
"""

from __future__ import annotations

import pytest

from .measure import build_model, library_flops, library_parts, make_batch, measure, rel_err

pytestmark = pytest.mark.measured
torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

GRIDS = ([(1, 10, 14), (1, 4, 4)], [(2, 4, 6)])


def _assert_parts(measured: dict, config: dict, batch, mode="forward", frozen=(), phase="forward", base=None):
    lib = library_parts(library_flops(config, batch, mode=mode, frozen=frozen))
    for part in ("tower", "merger", "lm"):
        got = measured.get(part, 0) + (base.get(part, 0) if base else 0)
        assert rel_err(got, lib[part]) <= 0.005, (phase, part, got, lib[part])


def test_fullatt_indexes_duplicates_and_out_of_range():
    model = build_model("qwen2_5_vl", vision={"fullatt_block_indexes": [1, 1, 3, 9]})
    batch = make_batch(model, *GRIDS)
    m = measure(model, batch)
    _assert_parts(m.forward, model.config.to_dict(), batch)
    from vlm_perf.arch import spec_from_config

    v = spec_from_config(model.config.to_dict()).vision
    assert (v.num_full_layers, v.num_window_layers) == (2, 2)


def test_deepstack_indexes_duplicates_and_out_of_range():
    model = build_model("qwen3_vl", vision={"deepstack_visual_indexes": [0, 0, 7]})
    batch = make_batch(model, *GRIDS)
    m = measure(model, batch)
    _assert_parts(m.forward, model.config.to_dict(), batch)
    from vlm_perf.arch import spec_from_config
    from vlm_perf.arch.params import merger_params

    spec = spec_from_config(model.config.to_dict())
    assert spec.vision.num_deepstack == 1
    stored = sum(p.numel() for mod in (model.model.visual.merger, *model.model.visual.deepstack_merger_list)
                 for p in mod.parameters())
    assert merger_params(spec) == stored  # three merger modules stored, one runs


@pytest.mark.parametrize("frozen", [("vision_tower", "deepstack_merger"), ("deepstack_merger",)])
def test_frozen_deepstack_mergers_separately(frozen):
    model = build_model("qwen3_vl")
    batch = make_batch(model, *GRIDS)
    deepstack = [p for mod in model.model.visual.deepstack_merger_list for p in mod.parameters()]
    tower = tuple(f for f in frozen if f == "vision_tower")
    m = measure(model, batch, training=True, frozen=tower, also_frozen=deepstack)
    lib = library_parts(library_flops(model.config.to_dict(), batch, mode="training", frozen=frozen))
    for part in ("tower", "merger", "lm"):
        got = m.forward.get(part, 0) + m.backward.get(part, 0)
        assert rel_err(got, lib[part]) <= 0.005, (frozen, part, got, lib[part])
    # and it differs from freezing the whole projector (the old --frozen merger), so the flag matters
    whole = library_parts(library_flops(model.config.to_dict(), batch, mode="training",
                                        frozen=tower + ("merger",)))
    assert whole["merger"] < lib["merger"]
