"""LLaVA-OneVision (transformers ``LlavaOnevisionForConditionalGeneration``) against FlopCounterMode, per part.

Reference: the famverify harness (``tests/verify/families/llava_onevision.py``): a tiny random LLaVA-OV
(SigLIP 24-px tiles, patch 4: 36 patches, 2 layers; projector 32 -> 64 -> 64 with bias; Qwen2 LM;
pinpoints 24 x {1,2,3} squared, ``anyres_max_4``), eager attention, float64, images through transformers' own
``LlavaOnevisionImageProcessorPil``, LM tokens by ``LlavaOnevisionProcessor._get_number_of_features`` (and
validated by the model's own placeholder check). The library starts from the SAME pixel sizes, derives
tiles / visual tokens with its own rule (``LlavaOnevisionMedia``) and counts ``exact`` with
``causal="full"`` (eager). Tolerance 0.5 % per part (all exact).
"""

from __future__ import annotations

import pytest

pytestmark = pytest.mark.measured
torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from .families import measure_family  # noqa: E402
from .families.llava_onevision import build_model, tiny_config  # noqa: E402

REL_TOL = 0.005
# as a checkpoint directory would ship them (the tiny analogue of the -hf checkpoints' files)
PROCESSOR = {"preprocessor_config.json": {"size": {"height": 24, "width": 24},
                                          "image_grid_pinpoints": [[24 * a, 24 * b] for a in (1, 2, 3)
                                                                   for b in (1, 2, 3)]},
             "processor_config.json": {"num_image_tokens": 36, "vision_aspect_ratio": "anyres_max_4",
                                       "vision_feature_select_strategy": "full"}}
SIZES = [[(30, 50)], [(70, 20)], [(72, 72)], [(10, 70)]]  # one image per sample (the harness's batch rows)


@pytest.fixture(scope="module")
def model():
    return build_model(tiny_config(), 0)


def _spec(model, processor=PROCESSOR):
    from vlm_perf.arch import spec_from_config

    return spec_from_config(model.config.to_dict(), name="tiny-llava-ov", processor=processor)


def _library(model, measured, images=(), videos=(), mode="forward", frozen=(), multi_image=False):
    from vlm_perf.arch.families import FAMILIES
    from vlm_perf.flops import compute_flops
    from vlm_perf.stats import BatchStats

    spec = _spec(model)
    rule = FAMILIES["llava_onevision"].media
    media = [rule.image(spec, h, w, multi_image=multi_image) for h, w in images]
    vids = [rule.video(spec, t, h, w) for t, h, w in videos]
    assert [m.tiles for m in media] == measured.media["tiles"]  # the rule agrees with HF's processor + model
    assert sum(m.visual_tokens for m in media + vids) == measured.media["visual_tokens"]
    stats = BatchStats.from_batch(seq_lens=[measured.media["seq_len"]], image_grids=[m.grid for m in media],
                                  video_grids=[m.grid for m in vids], spec=spec)
    return compute_flops(spec, stats, mode=mode, causal="full", frozen=frozen)


def _check(measured: dict, library: dict):
    bad = {p: (measured[p], library[p]) for p in measured
           if abs(library[p] - measured[p]) > REL_TOL * max(measured[p], 1)}
    assert not bad, bad


@pytest.mark.parametrize("images", SIZES, ids=lambda s: "+".join(f"{h}x{w}" for h, w in s))
def test_forward_per_part_anyres(model, images):
    m = measure_family("llava_onevision", model=model, image_sizes=images)
    _check(m.parts("forward"), _library(model, m, images).parts)


def test_forward_multi_image_sample(model):
    images = [(30, 50), (70, 20), (24, 24)]
    m = measure_family("llava_onevision", model=model, image_sizes=images, multi_image=True)
    _check(m.parts("forward"), _library(model, m, images, multi_image=True).parts)


@pytest.mark.parametrize("videos", [[(3, 24, 24)], [(2, 100, 60), (2, 30, 30)]], ids=["1 video", "2 videos"])
def test_forward_video(model, videos):
    m = measure_family("llava_onevision", model=model, video_sizes=videos)
    _check(m.parts("forward"), _library(model, m, videos=videos).parts)


@pytest.mark.parametrize("frozen", [(), ("vision_tower",), ("projector",), ("language_model",)],
                         ids=["all-trainable", "frozen-tower", "frozen-projector", "frozen-lm"])
def test_training_per_part(model, frozen):
    """Frozen tower: the projector starts with a Linear, so its first GEMM's input gradient is skipped."""
    images = [(70, 20)]
    m = measure_family("llava_onevision", model=model, image_sizes=images, mode="training", frozen=frozen)
    _check(m.parts("training"), _library(model, m, images, mode="training", frozen=frozen).parts)


def test_training_video_frozen_tower(model):
    videos = [(3, 24, 24)]
    m = measure_family("llava_onevision", model=model, video_sizes=videos, mode="training", frozen=("vision_tower",))
    _check(m.parts("training"), _library(model, m, videos=videos, mode="training", frozen=("vision_tower",)).parts)


def test_parameters_per_part(model):
    from vlm_perf.arch.params import count_params

    numel = lambda mod: sum(p.numel() for p in mod.parameters())  # noqa: E731
    c = count_params(_spec(model))
    assert c.vision_tower == numel(model.model.vision_tower)
    assert c.merger == numel(model.model.multi_modal_projector) + model.model.image_newline.numel()
    assert c.lm == numel(model.model.language_model) + numel(model.lm_head)
    assert c.total == numel(model)


def test_feature_layer_list_widens_the_projector():
    """``vision_feature_layer`` as a list concatenates hidden states: projector input h_v x n, whole tower."""
    cfg = tiny_config(vision_feature_layer=[-2, -1])
    model = build_model(cfg, 0)
    images = [(30, 50)]
    m = measure_family("llava_onevision", model=model, image_sizes=images)
    _check(m.parts("forward"), _library(model, m, images).parts)


@pytest.mark.parametrize("mode,frozen", [("forward", ()), ("training", ()), ("training", ("vision_tower",))],
                         ids=["forward", "training", "training-frozen-tower"])
def test_siglip_pooling_head(mode, frozen):
    """vision_use_head=True (SigLIP's class default): the head runs on every image, its output is discarded, so
    training adds no backward for it."""
    head_model = build_model(tiny_config(vision={"vision_use_head": True}), 0)
    images = [(30, 50), (64, 64)]
    m = measure_family("llava_onevision", model=head_model, image_sizes=images, mode=mode, frozen=frozen)
    _check(m.parts(mode), _library(head_model, m, images, mode=mode, frozen=frozen).parts)
    from vlm_perf.arch.params import count_params

    tower = head_model.model.vision_tower
    assert count_params(_spec(head_model)).vision_tower == sum(p.numel() for p in tower.parameters())


@pytest.mark.parametrize("layer", [-2, [0, -2], 1], ids=["minus2", "two", "first"])
def test_feature_layer_before_the_last(layer):
    """``vision_feature_layer`` other than -1 (int or list): every SigLIP layer runs, the layers after the deepest
    selected hidden state are never back-propagated (measured per part, forward and training)."""
    model = build_model(tiny_config(vision_feature_layer=layer), 0)
    for mode in ("forward", "training"):
        m = measure_family("llava_onevision", model=model, image_sizes=[(30, 50)], mode=mode)
        assert _library(model, m, [(30, 50)], mode=mode).parts == m.parts(mode)
