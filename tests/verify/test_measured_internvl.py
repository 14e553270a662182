"""InternVL (transformers ``InternVLForConditionalGeneration``) against FlopCounterMode, per part.

Reference: the famverify harness (``tests/verify/families/internvl.py``): a tiny random InternVL3-shaped
model (32-px tiles, patch 4, CLS token, q/k norm, pixel shuffle 0.5, Qwen2 or Qwen3 LM), eager attention,
float64, images through transformers' own ``GotOcr2ImageProcessorPil`` with ``InternVLProcessor``'s forced
``crop_to_patches=True``. The library side starts from the SAME pixel sizes, derives tiles with its own media
rule (``InternVLMedia``: processor settings as a checkpoint directory would ship them) and counts
``exact`` with ``causal="full"`` (eager computes the whole square). Tolerance 0.5 % per part.
"""

from __future__ import annotations

import pytest

pytestmark = pytest.mark.measured
torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from .families import measure_family  # noqa: E402
from .families.internvl import build_model, tiny_config  # noqa: E402

REL_TOL = 0.005
PROCESSOR = {"preprocessor_config.json": {"size": {"height": 32, "width": 32}, "min_patches": 1,
                                          "max_patches": 6, "crop_to_patches": False}}
SIZES = [[(48, 80), (32, 32)], [(100, 30)], [(64, 64), (20, 200)]]


@pytest.fixture(scope="module", params=["qwen2", "qwen3"])
def model(request):
    return build_model(tiny_config(request.param), 0)


def _library(model, measured, images, mode="forward", frozen=()):
    from vlm_perf.arch import spec_from_config
    from vlm_perf.flops import compute_flops
    from vlm_perf.stats import BatchStats

    spec = spec_from_config(model.config.to_dict(), name="tiny-internvl", processor=PROCESSOR)
    media = [spec_media(spec, h, w) for h, w in images]
    assert [m.tiles for m in media] == measured.media["tiles"]  # the media rule agrees with HF's processor
    assert sum(m.visual_tokens for m in media) == measured.media["visual_tokens"]
    stats = BatchStats.from_batch(seq_lens=[measured.media["seq_len"]], image_grids=[m.grid for m in media],
                                  spec=spec)
    return compute_flops(spec, stats, mode=mode, causal="full", frozen=frozen), spec


def spec_media(spec, h, w):
    from vlm_perf.arch.families import FAMILIES

    return FAMILIES[spec.family].media.image(spec, h, w)


def _check(measured: dict, library: dict):
    bad = {p: (measured[p], library[p]) for p in measured
           if abs(library[p] - measured[p]) > REL_TOL * max(measured[p], 1)}
    assert not bad, bad


@pytest.mark.parametrize("images", SIZES, ids=lambda s: "+".join(f"{h}x{w}" for h, w in s))
def test_forward_per_part(model, images):
    m = measure_family("internvl", model=model, image_sizes=images)
    m.check()
    lib, _ = _library(model, m, images)
    _check(m.parts("forward"), lib.parts)


@pytest.mark.parametrize("frozen", [(), ("vision_tower",)], ids=["all-trainable", "frozen-tower"])
def test_training_per_part(model, frozen):
    images = [(48, 80), (32, 32)]
    m = measure_family("internvl", model=model, image_sizes=images, mode="training", frozen=frozen)
    m.check()
    lib, _ = _library(model, m, images, mode="training", frozen=frozen)
    _check(m.parts("training"), lib.parts)


def test_parameters_per_part(model):
    from vlm_perf.arch import spec_from_config
    from vlm_perf.arch.params import count_params

    spec = spec_from_config(model.config.to_dict(), name="tiny-internvl")
    numel = lambda mod: sum(p.numel() for p in mod.parameters())
    c = count_params(spec)
    assert c.vision_tower == numel(model.model.vision_tower)
    assert c.merger == numel(model.model.multi_modal_projector)
    assert c.lm == numel(model.model.language_model) + numel(model.lm_head)
    assert c.total == numel(model)


@pytest.mark.parametrize("layer", [-2, 1], ids=["minus2", "first"])
def test_feature_layer_before_the_last(layer):
    """Found by measurement (issue 21): ``vision_feature_layer`` other than -1 bills the unused last tower layers
    a backward pass. Every InternViT layer runs (the encoder loops over all), but the projector reads
    ``hidden_states[layer]``; the layers after it reach no loss, so training does not back-propagate through them.
    Measured on a 3-layer tower, one 48x80 image (3x2 tiles + thumbnail): before the fix the library said 95,528,832 tower FLOPs
    in training for -2 (measured 74,911,872, +27.5 %) and for 1 (measured 54,294,912, +76 %)."""
    model = build_model(tiny_config("qwen2", vision_feature_layer=layer, vision={"num_hidden_layers": 3}), 0)
    images = [(48, 80)]
    for mode, frozen in (("forward", ()), ("training", ()), ("training", ("vision_tower",))):
        m = measure_family("internvl", model=model, image_sizes=images, mode=mode, frozen=frozen)
        lib, _ = _library(model, m, images, mode=mode, frozen=frozen)
        assert lib.parts == m.parts(mode), (mode, frozen)


def test_feature_layer_tower_training_by_hand():
    """Hand arithmetic on the tower alone (a 48x80 image with at most 6 tiles: the 3x2 canvas (3/2 is the closest
    ratio to 80/48 within 6 tiles) + a thumbnail = 7 tiles of 8x8 patches + 1 CLS = 65 rows; width 32, 2 heads of 16, MLP
    48, q/k RMSNorm: no FLOPs): training = 2 x conv (pixels need no gradient) + 3 x (layers up to the selected
    one) + 1 x (the rest)."""
    tiles, rows = 7, 65
    conv = 2 * tiles * 64 * (3 * 4 * 4) * 32
    layer = tiles * (2 * rows * 4 * 32 * 32 + 2 * 2 * rows * rows * 32 + 2 * rows * 2 * 32 * 48)
    model = build_model(tiny_config("qwen2", vision_feature_layer=-2, vision={"num_hidden_layers": 3}), 0)
    m = measure_family("internvl", model=model, image_sizes=[(48, 80)], mode="training")
    assert m.media["tiles"] == [tiles]
    assert m.parts("training")["vision_tower"] == 2 * conv + 3 * 2 * layer + 1 * layer
    lib, _ = _library(model, m, [(48, 80)], mode="training")
    assert lib.parts["vision_tower"] == 2 * conv + 3 * 2 * layer + layer


def test_feature_layer_list_refused():
    from vlm_perf.arch import spec_from_config
    from vlm_perf.errors import UnsupportedModelError

    cfg = tiny_config("qwen2").to_dict()
    cfg["vision_feature_layer"] = [-2, -1]
    with pytest.raises(UnsupportedModelError, match="vision_feature_layer"):
        spec_from_config(cfg)
