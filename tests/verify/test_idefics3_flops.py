"""Idefics3 and SmolVLM (transformers ``Idefics3ForConditionalGeneration`` / ``SmolVLMForConditionalGeneration``)
against FlopCounterMode, per part.

Reference: the famverify harness (``tests/verify/families/idefics3.py``): tiny random models (32-px tiles, patch 4,
SigLIP-like tower, pixel-shuffle connector with scale 2 (Idefics3) or 4 (SmolVLM), Llama LM), eager attention,
float64, images through transformers' own ``Idefics3ImageProcessorPil`` / ``SmolVLMImageProcessorPil`` (image
splitting on: longest edge 4 tiles, rows x cols tiles + a global image). The library starts from the SAME pixel
sizes, derives the tiles with its own rule (``Idefics3Media``, from the processor settings a checkpoint directory
would ship) and counts ``exact`` with ``causal="full"``. Tolerance 0.5 % per part; in fact exact.
"""

from __future__ import annotations

import pytest

pytestmark = pytest.mark.measured
torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from .families import measure_family  # noqa: E402
from .families.idefics3 import build_model, tiny_config  # noqa: E402

REL_TOL = 0.005
PROCESSOR = {"preprocessor_config.json": {"size": {"longest_edge": 128}, "max_image_size": {"longest_edge": 32},
                                          "do_image_splitting": True}}
SIZES = [[(30, 50)], [(100, 30), (32, 32)], [(10, 10)], [(300, 77)]]


@pytest.fixture(scope="module", params=["idefics3", "smolvlm"])
def family_model(request):
    return request.param, build_model(tiny_config(smolvlm=request.param == "smolvlm"), 0)


def _library(family, model, measured, images, mode="forward", frozen=()):
    from vlm_perf.arch import spec_from_config
    from vlm_perf.arch.families import FAMILIES
    from vlm_perf.flops import compute_flops
    from vlm_perf.stats import BatchStats

    spec = spec_from_config(model.config.to_dict(), name=f"tiny-{family}", processor=PROCESSOR)
    assert spec.family == family
    media = [FAMILIES[family].media.image(spec, h, w) for h, w in images]
    assert [tuple(m.detail["canvas"]) for m in media] == measured.media["grids"]  # = HF processor rows, cols
    assert sum(m.tiles for m in media) == measured.media["images_in_tower"]
    assert sum(m.visual_tokens for m in media) == measured.media["visual_tokens"]
    stats = BatchStats.from_batch(seq_lens=[measured.media["seq_len"]], image_grids=[m.grid for m in media],
                                  spec=spec)
    return compute_flops(spec, stats, mode=mode, causal="full", frozen=frozen), spec


def _check(measured: dict, library: dict):
    bad = {p: (measured[p], library[p]) for p in measured
           if abs(library[p] - measured[p]) > REL_TOL * max(measured[p], 1)}
    assert not bad, bad


@pytest.mark.parametrize("images", SIZES, ids=lambda s: "+".join(f"{h}x{w}" for h, w in s))
def test_forward_per_part(family_model, images):
    family, model = family_model
    m = measure_family(family, model=model, image_sizes=images)
    lib, _ = _library(family, model, m, images)
    _check(m.parts("forward"), lib.parts)
    assert lib.parts == m.parts("forward")


@pytest.mark.parametrize("frozen", [(), ("vision_tower",), ("projector",), ("language_model",)],
                         ids=["all-trainable", "frozen-tower", "frozen-projector", "frozen-lm"])
def test_training_per_part(family_model, frozen):
    family, model = family_model
    images = [(30, 50)]
    m = measure_family(family, model=model, image_sizes=images, mode="training", frozen=frozen)
    lib, _ = _library(family, model, m, images, mode="training", frozen=frozen)
    _check(m.parts("training"), lib.parts)
    assert lib.parts == m.parts("training")


def test_frozen_tower_connector_skips_its_input_gradient(family_model):
    """The connector's first op is its Linear: with the tower frozen, backward = weight gradient only (1x)."""
    family, model = family_model
    m = measure_family(family, model=model, image_sizes=[(30, 50)], mode="training", frozen=("vision_tower",))
    lib, _ = _library(family, model, m, [(30, 50)], mode="training", frozen=("vision_tower",))
    forward, _ = _library(family, model, m, [(30, 50)])
    assert lib.parts["projector"] == 2 * forward.parts["projector"]


def test_unsplit_image_is_one_tile(family_model):
    from vlm_perf.arch import spec_from_config
    from vlm_perf.arch.families import FAMILIES

    family, model = family_model
    processor = {"preprocessor_config.json": dict(PROCESSOR["preprocessor_config.json"], do_image_splitting=False)}
    spec = spec_from_config(model.config.to_dict(), processor=processor)
    m = measure_family(family, model=model, image_sizes=[(300, 77)], do_image_splitting=False)
    media = FAMILIES[family].media.image(spec, 300, 77)
    assert media.tiles == m.media["images_in_tower"] == 1
    assert media.visual_tokens == m.media["visual_tokens"]


def test_parameters_per_part(family_model):
    from vlm_perf.arch import spec_from_config
    from vlm_perf.arch.params import count_params

    family, model = family_model
    spec = spec_from_config(model.config.to_dict())
    numel = lambda mod: sum(p.numel() for p in mod.parameters())
    c = count_params(spec)
    assert c.vision_tower == numel(model.model.vision_model)
    assert c.merger == numel(model.model.connector)
    assert c.lm == numel(model.model.text_model) + numel(model.lm_head)
    assert c.total == numel(model)


@pytest.mark.parametrize("frozen", [(), ("vision_tower",), ("language_model",)], ids=["all", "frozen-tower", "frozen-lm"])
def test_smolvlm_video_per_part(frozen):
    """SmolVLM video (issue 21: the processor accepts videos): T frames, each one square tile through tower and
    connector, 16 placeholders per frame (the timestamp is text). The video processor needs torchvision (not
    installed): the frames are built at the square tile size its resize ends with, placeholders from transformers'
    own ``_prompt_single_image``. Exact per part, forward and training."""
    from vlm_perf.arch import spec_from_config
    from vlm_perf.arch.families import FAMILIES
    from vlm_perf.flops import compute_flops
    from vlm_perf.stats import BatchStats

    model = build_model(tiny_config(smolvlm=True), 0)
    spec = spec_from_config(model.config.to_dict(), name="tiny-smolvlm", processor=PROCESSOR)
    v = FAMILIES["smolvlm"].media.video(spec, 3, 100, 200)
    for mode in ("forward", "training"):
        m = measure_family("smolvlm", model=model, video_sizes=[(3, 100, 200)], mode=mode,
                           frozen=frozen if mode == "training" else ())
        assert v.visual_tokens == m.media["visual_tokens"] and v.grid[0] == m.media["images_in_tower"]
        stats = BatchStats.from_batch(seq_lens=[m.media["seq_len"]], video_grids=[v.grid], spec=spec)
        lib = compute_flops(spec, stats, mode=mode, causal="full", frozen=frozen if mode == "training" else ())
        assert lib.parts == m.parts(mode), mode


BATCHES = {"image+video": [dict(image_sizes=[(30, 50)]), dict(video_sizes=[(4, 90, 40)])],
           "two-videos-padded": [dict(video_sizes=[(2, 100, 200)]), dict(video_sizes=[(5, 64, 64)])]}


@pytest.mark.parametrize("frozen", [(), ("vision_tower",)], ids=["all", "frozen-tower"])
@pytest.mark.parametrize("batch", sorted(BATCHES))
def test_smolvlm_mixed_batch_per_part(batch, frozen):
    """Two samples in one batch (issue 21): an image sample (split into 2 tiles + a global one) beside a 4-frame
    video, and two videos of 2 and 5 frames. ``pixel_values`` is padded to the longest sample with all-zero
    images, which the model drops: only real tiles and frames reach tower and connector. The library counts the
    image grids and the video grids of the batch (B = 2 rows of equal length). Exact per part, forward and
    training."""
    from vlm_perf.arch import spec_from_config
    from vlm_perf.arch.families import FAMILIES
    from vlm_perf.flops import compute_flops
    from vlm_perf.stats import BatchStats

    from .families import common
    from .families.idefics3 import make_batch, part_modules

    model = build_model(tiny_config(smolvlm=True), 0)
    spec = spec_from_config(model.config.to_dict(), name="tiny-smolvlm", processor=PROCESSOR)
    rule = FAMILIES["smolvlm"].media
    samples = BATCHES[batch]
    images = [rule.image(spec, h, w) for s in samples for h, w in s.get("image_sizes", ())]
    videos = [rule.video(spec, *v) for s in samples for v in s.get("video_sizes", ())]
    inputs, media = make_batch(model, samples)
    real = sum(m["images_in_tower"] for m in media["samples"])
    assert sum(i.tiles for i in images) + sum(v.tiles for v in videos) == real
    assert inputs["pixel_values"].shape[1] * 2 > real  # there is padding to drop
    assert sum(i.visual_tokens for i in images) + sum(v.visual_tokens for v in videos) == sum(
        m["visual_tokens"] for m in media["samples"])
    stats = BatchStats.from_batch(seq_len=media["seq_len"], samples=2, image_grids=[i.grid for i in images],
                                  video_grids=[v.grid for v in videos], spec=spec)
    for mode in ("forward", "training"):
        fz = frozen if mode == "training" else ()
        m = common.count(model, inputs, part_modules(model), training=mode == "training", frozen=fz)
        m.check()
        lib = compute_flops(spec, stats, mode=mode, causal="full", frozen=fz)
        assert lib.parts == m.parts(mode), (batch, mode)
