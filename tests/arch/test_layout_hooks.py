"""One description, one engine: each block kind lays itself out per Linear through a hook filed beside the kind,
and the walker in arch/layout.py knows no block kind. A kind without a hook still works for whole-part regimes."""

from __future__ import annotations

import inspect
from dataclasses import dataclass, replace
from typing import ClassVar

import pytest

from vlm_perf.arch import layout as layout_module
from vlm_perf.arch import load_model
from vlm_perf.arch import params as P
from vlm_perf.arch.adapters import AdapterConfig
from vlm_perf.arch.blocks import Block, MlpProjector, VisionLayers
from vlm_perf.arch.blocks.laid import BLOCK_LAYOUT, LayoutContext, Lin, Opaque, Placed, block_layout
from vlm_perf.arch.layout import layout
from vlm_perf.arch.parts import DEEPSTACK_MERGER, MERGER, VISION_TOWER
from vlm_perf.arch.trainability import MLP, Trainability
from vlm_perf.errors import UnsupportedModelError
from vlm_perf.flops.blocks import BLOCK_FLOPS, block_flops
from vlm_perf.flops.regime import regime_flops
from vlm_perf.flops.terms import Term, matmul
from vlm_perf.stats import BatchStats


def test_every_layout_hook_is_filed_in_the_module_of_its_kind():
    assert BLOCK_LAYOUT, "no layout hook registered"
    for kind, (fn, _) in BLOCK_LAYOUT.items():
        assert fn.__module__ == kind.__module__, (kind.__name__, fn.__module__)


def test_the_walker_names_no_block_kind():
    kinds = [name for name, value in vars(layout_module).items()
             if inspect.isclass(value) and issubclass(value, Block) and value is not Block]
    assert kinds == []


def test_a_second_layout_registration_is_rejected():
    with pytest.raises(ValueError, match="already registered"):
        block_layout(VisionLayers)(lambda b, ctx: None)


@dataclass(frozen=True)
class _Probe(Block):
    """A late block kind in the tower: one Linear width -> width on every patch."""

    kind: ClassVar[str] = "layout_probe"
    width: int

    def params(self) -> int:
        return self.width * self.width

    def describe(self) -> str:
        return "probe"


@pytest.fixture
def probe_kind():
    @block_flops(_Probe)
    def _flops(b, s, ctx):
        return [Term("vision.mlp", b.count * matmul(s.vision_patches, b.width, b.width), b.part)]

    try:
        yield
    finally:
        BLOCK_FLOPS.pop(_Probe)
        BLOCK_LAYOUT.pop(_Probe, None)


def _with_probe(name: str, part: str) -> tuple:
    spec = load_model(name)
    width = spec.vision.hidden_size if part == VISION_TOWER else spec.lm.hidden_size
    spec = replace(spec, blocks=spec.blocks + (_Probe(part=part, count=1, width=width),))
    grid = (1, 16, 16)
    return spec, BatchStats.from_batch(seq_lens=[400], image_grids=[grid], spec=spec), width


def test_a_kind_without_a_hook_is_laid_out_whole(probe_kind):
    """In the tower: an Opaque block after the layers (the layers keep their per-Linear layout); in a projector
    stage: the whole stage is laid out whole (no per-Linear layout can be claimed)."""
    spec, _, _ = _with_probe("qwen2-vl-7b", VISION_TOWER)
    tower = layout(spec)[0]
    assert tower.expanded and tower.layers and isinstance(tower.tail[-1], Opaque)
    assert isinstance(tower.tail[-1].block, _Probe)
    spec, _, _ = _with_probe("qwen2-vl-7b", MERGER)
    merger = next(s for s in layout(spec) if s.stage == MERGER)
    assert not merger.expanded and [type(op.block) for op in merger.tail] == [MlpProjector, _Probe]


def test_a_kind_with_a_hook_is_adapted_and_counted_like_any_linear(probe_kind):
    @block_layout(_Probe, stages=(VISION_TOWER,))
    def _probe_layout(b: _Probe, ctx: LayoutContext) -> Placed:
        return Placed(tail=(Lin("model.visual.probe", MLP, ("vision_patches",), b.width, b.width, "vision.mlp"),))

    spec, stats, width = _with_probe("qwen2-vl-7b", VISION_TOWER)
    r = 4
    got = regime_flops(spec, stats, Trainability(trainable=(), adapter=AdapterConfig(r=r, target_modules=("probe",))))
    assert [m.name for m in got.adapted] == ["model.visual.probe"]
    rows = 16 * 16  # one 16 x 16 patch grid
    assert got.by_part["vision_tower"]["adapter_forward"] == 2 * rows * r * (width + width)


def test_qwen2_5_vl_tower_layers_sit_where_the_inventory_says():
    """Qwen2.5-VL: full attention in layers 7, 15, 23, 31 (fullatt_block_indexes), windows elsewhere; the blocks
    carry the indexes, the layout reads them there."""
    spec = load_model("qwen2.5-vl-7b")
    full = next(b for b in spec.blocks if isinstance(b, VisionLayers) and b.attention == "frame")
    assert full.layer_indexes == (7, 15, 23, 31)
    tower = layout(spec)[0]
    attention = {layer.index: layer.subs[0].core.attention for layer in tower.layers}
    assert [i for i, kind in attention.items() if kind == "frame"] == [7, 15, 23, 31]
    assert len(attention) == 32


def test_deepstack_mergers_read_the_layers_their_block_names():
    spec = load_model("qwen3-vl-8b")
    block = next(b for b in spec.blocks if b.part == DEEPSTACK_MERGER)
    deepstack = next(s for s in layout(spec) if s.stage == DEEPSTACK_MERGER)
    assert deepstack.taps == block.taps == (8, 16, 24)
    untapped = replace(spec, blocks=tuple(replace(b, taps=()) if b is block else b for b in spec.blocks))
    assert not next(s for s in layout(untapped) if s.stage == DEEPSTACK_MERGER).expanded


def test_per_module_parameter_helpers_read_the_inventory():
    """A Qwen-VL VisionSpec describes its tower completely: the helpers agree with the ModelSpec's inventory. Any
    other family's VisionSpec is a summary: refused (it used to be counted as a Qwen tower), its ModelSpec read."""
    for name in ("qwen2.5-vl-7b", "qwen3-vl-8b"):
        spec = load_model(name)
        for helper in (P.vision_patch_embed_params, P.vision_block_params, P.main_merger_params,
                       P.vision_tower_params, P.merger_params):
            assert helper(spec) == helper(spec.vision), (name, helper.__name__)
        assert P.lm_layer_params(spec, False) == P.lm_layer_params(spec.lm, False)
    spec = load_model("internvl3-8b")
    with pytest.raises(UnsupportedModelError, match="pass the ModelSpec"):
        P.vision_block_params(spec.vision)
    layers = next(b for b in spec.blocks if isinstance(b, VisionLayers))
    assert P.vision_block_params(spec) == layers.params()
    deepseek = load_model("deepseek-v3")
    assert P.mtp_checkpoint_params(deepseek) == P.mtp_checkpoint_params(deepseek.lm)
