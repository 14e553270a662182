"""LLaVA-NeXT (transformers ``LlavaNextForConditionalGeneration``) against FlopCounterMode, per part.

Reference: the famverify harness (``tests/verify/families/llava_next.py``): a tiny random LLaVA-NeXT (CLIP 24 px,
patch 4: 36 patches + CLS per tile, 2 layers, ``vision_feature_layer`` -2, "default"; 2-layer GELU projector; llama
or mistral LM; the released pinpoints scaled to 24 px), eager attention, float64, inputs from transformers' own
``LlavaNextProcessor`` (built offline): HF's own tile split and placeholder count. The library starts from the SAME
pixel sizes, derives tiles and tokens with its own rule (``LlavaNextMedia``) and counts ``exact`` with
``causal="full"``. Exact to the FLOP per part, forward and training, frozen parts, one to three images per sample
(a multi-image batch is zero-padded to the most tiles by the processor; the model slices the padding off).
"""

from __future__ import annotations

import pytest

pytestmark = pytest.mark.measured
torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from .families import measure_family  # noqa: E402
from .families.llava_next import PINPOINTS, build_model, tiny_config  # noqa: E402

PROCESSOR = {"preprocessor_config.json": {"size": {"shortest_edge": 24}, "crop_size": {"height": 24, "width": 24},
                                          "image_grid_pinpoints": PINPOINTS},
             "processor_config.json": {"patch_size": 4, "num_additional_image_tokens": 1,
                                       "vision_feature_select_strategy": "default"}}
SIZES = [[(30, 50)], [(70, 20), (32, 32)], [(24, 24), (10, 200), (100, 90)], [(50, 30)], [(1, 300)]]
FROZEN = [(), ("vision_tower",), ("vision_tower", "projector"), ("language_model",)]


@pytest.fixture(scope="module", params=["llama", "mistral"])
def model(request):
    return build_model(tiny_config(request.param), 0)


def _spec(model):
    from vlm_perf.arch import spec_from_config

    return spec_from_config(model.config.to_dict(), name="tiny-llava-next", processor=PROCESSOR)


def _library(model, measured, images, mode="forward", frozen=()):
    from vlm_perf.arch.families import FAMILIES
    from vlm_perf.flops import compute_flops
    from vlm_perf.stats import BatchStats

    spec = _spec(model)
    media = [FAMILIES["llava_next"].media.image(spec, h, w) for h, w in images]
    assert [m.tiles for m in media] == measured.media["tiles"]  # the rule agrees with HF's processor
    assert sum(m.visual_tokens for m in media) == measured.media["visual_tokens"]
    stats = BatchStats.from_batch(seq_lens=[measured.media["seq_len"]], image_grids=[m.grid for m in media],
                                  spec=spec)
    return compute_flops(spec, stats, mode=mode, causal="full", frozen=frozen)


@pytest.mark.parametrize("images", SIZES, ids=lambda s: "+".join(f"{h}x{w}" for h, w in s))
def test_forward_per_part(model, images):
    m = measure_family("llava_next", model=model, image_sizes=images)
    m.check()
    assert _library(model, m, images).parts == m.parts("forward")


@pytest.mark.parametrize("frozen", FROZEN, ids=lambda f: "+".join(f) or "all-trainable")
def test_training_per_part(model, frozen):
    images = [(70, 20), (32, 32)]
    m = measure_family("llava_next", model=model, image_sizes=images, mode="training", frozen=frozen)
    m.check()
    assert _library(model, m, images, "training", frozen).parts == m.parts("training")


@pytest.mark.parametrize("layer", [-1, 1, [0, -2]], ids=["last", "first", "list"])
def test_feature_layers(layer):
    """The tower layers after the deepest selected hidden state run forward but are never back-propagated."""
    model = build_model(tiny_config(vision_feature_layer=layer, vision={"num_hidden_layers": 3}), 0)
    for mode in ("forward", "training"):
        m = measure_family("llava_next", model=model, image_sizes=[(30, 50)], mode=mode)
        assert _library(model, m, [(30, 50)], mode).parts == m.parts(mode), mode


def test_tower_training_by_hand():
    """One 30x50 image: best pinpoint 48x48 (2 x 2 tiles: it keeps 48x28 = 1344 of the 1500 pixels, 24x48 only
    40x24 = 960) + base = 5 tiles of 36 patches + CLS (37 rows). Tower
    training with -2 of 3 layers = 2 x conv + 3 x (layers 1-2) + 1 x layer 3; the projector runs on 5 x 36 rows."""
    model = build_model(tiny_config(vision={"num_hidden_layers": 3}), 0)
    tiles, rows = 5, 37
    conv = 2 * tiles * 36 * 48 * 32
    layer = tiles * (2 * rows * 4 * 32 * 32 + 2 * 2 * rows * rows * 32 + 2 * rows * 2 * 32 * 48)
    m = measure_family("llava_next", model=model, image_sizes=[(30, 50)], mode="training")
    assert m.media["tiles"] == [tiles]
    assert m.parts("training")["vision_tower"] == 2 * conv + 3 * 2 * layer + layer
    proj_fwd = 2 * tiles * 36 * (32 * 64 + 64 * 64)
    assert m.parts("training")["projector"] == 3 * proj_fwd
    assert _library(model, m, [(30, 50)], "training").parts == m.parts("training")


def test_parameters_per_part(model):
    from vlm_perf.arch.params import count_params

    numel = lambda mod: sum(p.numel() for p in mod.parameters())
    c = count_params(_spec(model))
    assert c.vision_tower == numel(model.model.vision_tower)
    assert c.merger == numel(model.model.multi_modal_projector) + model.model.image_newline.numel()
    assert c.lm == numel(model.model.language_model) + numel(model.lm_head)
    assert c.total == numel(model)


hyp = pytest.importorskip("hypothesis")
from hypothesis import given, settings, strategies as st  # noqa: E402

_MODEL: dict = {}


@settings(derandomize=True, deadline=None, max_examples=25)
@given(sizes=st.lists(st.tuples(st.integers(1, 400), st.integers(1, 400)), min_size=1, max_size=3))
def test_media_rule_fuzzed_against_the_processor(sizes):
    """Tiles and placeholder tokens against transformers' own processor on random sizes (no model run)."""
    from transformers.models.llava_next.modeling_llava_next import image_size_to_num_patches

    from vlm_perf.arch.families import FAMILIES

    from .families.common import random_images
    from .families.llava_next import IMAGE_TOKEN, processor

    if "m" not in _MODEL:
        _MODEL["m"] = build_model(tiny_config(), 0)
    model = _MODEL["m"]
    proc = processor(model.config)
    out = proc(images=random_images(sizes, 0), text=[" ".join("<image>" for _ in sizes)], return_tensors="pt",
               input_data_format="channels_last")
    spec = _spec(model)
    media = [FAMILIES["llava_next"].media.image(spec, h, w) for h, w in sizes]
    assert sum(m.visual_tokens for m in media) == int((out["input_ids"] == IMAGE_TOKEN).sum())
    assert [m.tiles for m in media] == [image_size_to_num_patches((h, w), PINPOINTS, 24) for h, w in sizes]
    assert out["pixel_values"].shape[1] == max(m.tiles for m in media)  # padded to the most tiles in the batch
