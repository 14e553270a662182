"""LLaVA (transformers ``LlavaForConditionalGeneration``; CLIP and Pixtral towers) against FlopCounterMode, per part.

Reference: the harnesses in ``tests/verify/families/llava.py`` (tiny random LLaVA models, eager attention, float64,
images through transformers' own ``CLIPImageProcessorPil`` / ``PixtralImageProcessorPil``). The library starts from
the SAME pixel sizes, derives grids and tokens with its own rule (``LlavaMedia``, given the processor files a
checkpoint directory would ship) and counts ``exact`` with ``causal="full"`` (eager computes the whole square).
CLIP: several images per forward are separate sequences (batch rows), so the count is exact for any number of
images; Pixtral: one image per forward (several join into one eager sequence, see ``test_mistral3_flops``).
"""

from __future__ import annotations

import pytest

pytestmark = pytest.mark.measured
torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from .families import measure_family  # noqa: E402
from .families.llava import build_model, tiny_config, tiny_pixtral_config  # noqa: E402

CLIP_PROCESSOR = {"preprocessor_config.json": {"size": {"shortest_edge": 32}, "crop_size": {"height": 32, "width": 32},
                                               "do_center_crop": True},
                  "processor_config.json": {"patch_size": 8, "num_additional_image_tokens": 1,
                                            "vision_feature_select_strategy": "default"}}
PIXTRAL_PROCESSOR = {"preprocessor_config.json": {"size": {"longest_edge": 64}, "patch_size": {"height": 4, "width": 4}}}
FROZEN = [(), ("vision_tower",), ("projector",), ("language_model",)]
FROZEN_IDS = ["all-trainable", "frozen-tower", "frozen-projector", "frozen-lm"]


@pytest.fixture(scope="module")
def clip_model():
    return build_model(tiny_config(), 0)


CLIP_FULL_PROCESSOR = {**CLIP_PROCESSOR, "processor_config.json": {**CLIP_PROCESSOR["processor_config.json"],
                                                                   "vision_feature_select_strategy": "full"}}


@pytest.fixture(scope="module")
def clip_full_model():
    """vision_feature_select_strategy "full" on the CLIP tower: the CLS row goes to the projector and the LM."""
    return build_model(tiny_config(vision_feature_select_strategy="full"), 0)


@pytest.fixture(scope="module")
def pixtral_model():
    return build_model(tiny_pixtral_config(), 0)


def _library(model, measured, images, processor, mode="forward", frozen=()):
    from vlm_perf.arch import spec_from_config
    from vlm_perf.arch.families import FAMILIES
    from vlm_perf.flops import compute_flops
    from vlm_perf.stats import BatchStats

    spec = spec_from_config(model.config.to_dict(), name="tiny-llava", processor=processor)
    assert spec.family == "llava"
    media = [FAMILIES["llava"].media.image(spec, h, w) for h, w in images]
    assert [tuple(m.resized) for m in media] == measured.media["resized"]  # the rule agrees with HF's processor
    assert sum(m.visual_tokens for m in media) == measured.media["visual_tokens"]
    seq = measured.media["seq_len"]
    assert seq == 8 + sum(m.visual_tokens + m.detail.get("break_tokens", 0) + 2 for m in media)
    stats = BatchStats.from_batch(seq_lens=[seq], image_grids=[m.grid for m in media], spec=spec)
    return compute_flops(spec, stats, mode=mode, causal="full", frozen=frozen)


@pytest.mark.parametrize("sizes", [[(30, 50)], [(70, 20), (32, 32)], [(300, 9), (5, 5), (64, 64)]],
                         ids=["one", "two", "three"])
def test_clip_forward_per_part(clip_model, sizes):
    m = measure_family("llava", model=clip_model, image_sizes=sizes)
    assert _library(clip_model, m, sizes, CLIP_PROCESSOR).parts == m.parts("forward")  # exact to the FLOP


@pytest.mark.parametrize("frozen", FROZEN, ids=FROZEN_IDS)
@pytest.mark.parametrize("sizes", [[(30, 50)], [(70, 20), (32, 32)]], ids=["one", "two"])
def test_clip_training_per_part(clip_model, frozen, sizes):
    m = measure_family("llava", model=clip_model, image_sizes=sizes, mode="training", frozen=frozen)
    lib = _library(clip_model, m, sizes, CLIP_PROCESSOR, mode="training", frozen=frozen)
    assert lib.parts == m.parts("training")


@pytest.mark.parametrize("sizes", [[(30, 50)], [(70, 20), (32, 32)], [(300, 9), (5, 5), (64, 64)]],
                         ids=["one", "two", "three"])
def test_clip_full_strategy_forward_per_part(clip_full_model, sizes):
    m = measure_family("llava", model=clip_full_model, image_sizes=sizes)
    assert m.media["visual_tokens"] == 17 * len(sizes)  # 4 x 4 patches + the CLS row, per image
    assert _library(clip_full_model, m, sizes, CLIP_FULL_PROCESSOR).parts == m.parts("forward")


@pytest.mark.parametrize("frozen", FROZEN, ids=FROZEN_IDS)
@pytest.mark.parametrize("sizes", [[(30, 50)], [(70, 20), (32, 32)]], ids=["one", "two"])
def test_clip_full_strategy_training_per_part(clip_full_model, frozen, sizes):
    m = measure_family("llava", model=clip_full_model, image_sizes=sizes, mode="training", frozen=frozen)
    lib = _library(clip_full_model, m, sizes, CLIP_FULL_PROCESSOR, mode="training", frozen=frozen)
    assert lib.parts == m.parts("training")


def test_clip_full_strategy_with_several_feature_layers():
    model = build_model(tiny_config(vision_feature_select_strategy="full", vision_feature_layer=[0, -2]), 0)
    for mode in ("forward", "training"):
        m = measure_family("llava", model=model, image_sizes=[(30, 50), (64, 64)], mode=mode)
        assert _library(model, m, [(30, 50), (64, 64)], CLIP_FULL_PROCESSOR, mode=mode).parts == m.parts(mode)


@pytest.mark.parametrize("layer", [-1, 1, [0, -2], [1, 0, -1]], ids=["last", "first", "two", "three"])
def test_clip_feature_layers(layer):
    """The layers after the deepest selected hidden state run forward but are never back-propagated (with
    -2, LLaVA-1.5's choice, the last layer: measured training FLOPs are 3x the rest of the tower + 1x it)."""
    model = build_model(tiny_config(vision_feature_layer=layer), 0)
    m = measure_family("llava", model=model, image_sizes=[(30, 50)])
    assert _library(model, m, [(30, 50)], CLIP_PROCESSOR).parts == m.parts("forward")
    t = measure_family("llava", model=model, image_sizes=[(30, 50)], mode="training")
    assert _library(model, t, [(30, 50)], CLIP_PROCESSOR, mode="training").parts == t.parts("training")


def test_feature_layer_zero_is_a_transformers_bug():
    """Found here: ``vision_feature_layer=0`` (the embeddings) fails inside transformers 5.x: ``select_hidden_states``
    passes ``output_hidden_states=0``, which is falsy, so no hidden states are captured. The list ``[0]`` works
    (covered above as ``[0, -2]``). Recorded so a fixed transformers shows up here."""
    model = build_model(tiny_config(vision_feature_layer=0), 0)
    with pytest.raises(TypeError, match="not subscriptable"):
        measure_family("llava", model=model, image_sizes=[(30, 50)])


def test_clip_last_layer_backward_by_hand(clip_model):
    """Hand arithmetic: with -2 of 2 layers, tower training = 3 x (conv + layer 1) + 1 x layer 2."""
    seq = 17
    conv = 2 * 16 * 192 * 32
    layer = 2 * seq * 4 * 32 * 32 + 2 * 2 * seq * seq * 32 + 2 * seq * 2 * 32 * 48
    core = 2 * 2 * seq * seq * 32  # no weights: its backward is 2 x forward too (both inputs need gradients)
    conv_train = 2 * conv  # pixels need no gradient
    t = measure_family("llava", model=clip_model, image_sizes=[(30, 50)], mode="training")
    assert t.parts("training")["vision_tower"] == conv_train + 3 * layer + layer
    assert core  # the attention core follows the 3x rule like the GEMMs (2 input gradients, no weights)


@pytest.mark.parametrize("size", [(30, 50), (200, 100), (64, 64), (17, 90)], ids=lambda s: f"{s[0]}x{s[1]}")
def test_pixtral_forward_per_part(pixtral_model, size):
    m = measure_family("llava_pixtral", model=pixtral_model, image_sizes=[size])
    assert _library(pixtral_model, m, [size], PIXTRAL_PROCESSOR).parts == m.parts("forward")


def test_pixtral_second_to_last_layer():
    model = build_model(tiny_pixtral_config(vision_feature_layer=-2), 0)
    t = measure_family("llava_pixtral", model=model, image_sizes=[(30, 50)], mode="training")
    assert _library(model, t, [(30, 50)], PIXTRAL_PROCESSOR, mode="training").parts == t.parts("training")


@pytest.mark.parametrize("frozen", FROZEN, ids=FROZEN_IDS)
def test_pixtral_training_per_part(pixtral_model, frozen):
    m = measure_family("llava_pixtral", model=pixtral_model, image_sizes=[(30, 50)], mode="training", frozen=frozen)
    lib = _library(pixtral_model, m, [(30, 50)], PIXTRAL_PROCESSOR, mode="training", frozen=frozen)
    assert lib.parts == m.parts("training")


@pytest.mark.parametrize("which", ["clip", "pixtral"])
def test_parameters_per_part(clip_model, pixtral_model, which):
    from vlm_perf.arch import spec_from_config
    from vlm_perf.arch.params import count_params

    model = clip_model if which == "clip" else pixtral_model
    c = count_params(spec_from_config(model.config.to_dict(), name="tiny-llava"))
    numel = lambda mod: sum(p.numel() for p in mod.parameters())
    assert c.vision_tower == numel(model.model.vision_tower)
    assert c.merger == numel(model.model.multi_modal_projector)
    assert c.lm == numel(model.model.language_model) + numel(model.lm_head)
    assert c.total == numel(model)


def test_pixtral_several_images_eager_excess_by_hand(pixtral_model):
    """Two images in one forward: transformers' Pixtral pads the conv input to the largest H and W and joins the
    images into one attention sequence, so eager measures the per-image count plus exactly that excess."""
    images = [(30, 50), (70, 20)]
    m = measure_family("llava_pixtral", model=pixtral_model, image_sizes=images)
    from vlm_perf.arch import spec_from_config
    from vlm_perf.arch.families import FAMILIES

    spec = spec_from_config(pixtral_model.config.to_dict(), name="tiny-llava", processor=PIXTRAL_PROCESSOR)
    grids = [FAMILIES["llava"].media.image(spec, h, w).grid for h, w in images]
    lib = _library(pixtral_model, m, images, PIXTRAL_PROCESSOR)
    n = [g[1] * g[2] for g in grids]
    ph, pw = max(g[1] for g in grids), max(g[2] for g in grids)
    conv_excess = 2 * (len(n) * ph * pw - sum(n)) * 48 * 32
    core_excess = 2 * 4 * 32 * (sum(n) ** 2 - sum(x * x for x in n))
    measured = m.parts("forward")
    assert measured["vision_tower"] == lib.parts["vision_tower"] + conv_excess + core_excess
    assert measured["projector"] == lib.parts["projector"]
    assert measured["language_model"] == lib.parts["language_model"]
