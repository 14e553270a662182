"""Checks shared by every registered family harness (structure of the part split, not FLOP values)."""

from __future__ import annotations

import pytest

pytestmark = pytest.mark.measured
torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from . import PARTS, REGISTRY, harness, measure_family  # noqa: E402
from .common import OPTIONAL_PARTS, FamilyHarness, register  # noqa: E402

harness("internvl")  # loads every family module
FAMILIES = sorted(REGISTRY)

# Parameters that no part owns, by design: they take part in no matmul.
UNOWNED = {"llava_onevision": {"model.image_newline"}, "llava_next": {"model.image_newline"},
           "llava_next_video": {"model.image_newline"}}


def test_duplicate_registration_is_rejected():
    with pytest.raises(ValueError, match="registered twice"):
        register(FamilyHarness("internvl", None, None, None, None))


@pytest.mark.parametrize("family", FAMILIES)
def test_every_parameter_belongs_to_exactly_one_part(family):
    """So that ``frozen=(part,)`` freezes all of that part and nothing else."""
    h = REGISTRY[family]
    model = h.build_model(h.tiny_config(), 0)
    parts = h.part_modules(model)
    names = {id(p): n for n, p in model.named_parameters()}
    owner: dict[str, set] = {}
    for part in PARTS + tuple(p for p in OPTIONAL_PARTS if p in parts):
        params = {id(p) for mod in parts[part] for p in mod.parameters()}
        params |= {id(p) for p in (h.loose_params(model, part) if h.loose_params else [])}
        for pid in params:
            owner.setdefault(names[pid], set()).add(part)
    shared = {n: o for n, o in owner.items() if len(o) > 1}
    assert not shared, shared
    unowned = set(names.values()) - set(owner) - UNOWNED.get(family, set())
    assert not unowned, sorted(unowned)


def test_cases_cover_every_family():
    from . import CASES

    assert sorted(CASES) == FAMILIES


@pytest.mark.parametrize("family", FAMILIES)
def test_every_case_runs_consistently(family):
    """Each representative case: parts sum to Global with nothing unattributed (``check``), forward and
    training with the tower frozen; the frozen tower has no backward FLOPs."""
    from . import CASES

    h = REGISTRY[family]
    model = h.build_model(h.tiny_config(), 0)
    for case in CASES[family]:
        fw = measure_family(family, model=model, **case)
        assert all(fw.forward.get(p, 0) > 0 for p in PARTS), (case, fw.forward)
        tr = measure_family(family, model=model, mode="training", frozen=("vision_tower",), **case)
        assert "vision_tower" not in tr.backward and tr.forward == fw.forward, case
