"""Mistral 3 (transformers ``Mistral3ForConditionalGeneration``, Pixtral tower) against FlopCounterMode, per part.

Reference: the famverify harness (``tests/verify/families/mistral3.py``): a tiny random Mistral3 model (patch 4,
merge 2, gated SiLU tower, RMSNorm + patch merger + MLP projector, Mistral LM), eager attention, float64, images
through transformers' own ``PixtralImageProcessorPil`` with ``PixtralProcessor``'s patch-size override. The
library starts from the SAME pixel sizes, derives grids with its own rule (``Mistral3Media``: the processor
settings a checkpoint directory would ship) and counts ``exact`` with ``causal="full"`` (eager computes the
whole square). One image per forward: then transformers' padded batch and joined sequence equal the
per-image count. Several images in one forward are checked against the hand-computed eager excess.
"""

from __future__ import annotations

import pytest

pytestmark = pytest.mark.measured
torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from .families import measure_family  # noqa: E402
from .families.mistral3 import build_model, tiny_config  # noqa: E402

REL_TOL = 0.005
PROCESSOR = {"preprocessor_config.json": {"size": {"longest_edge": 64}, "patch_size": {"height": 4, "width": 4}}}
SIZES = [(30, 50), (200, 100), (64, 64), (17, 90)]


@pytest.fixture(scope="module", params=[None, 16], ids=["no-window", "window16"])
def model(request):
    return build_model(tiny_config(text={"sliding_window": request.param}), 0)


def _library(model, measured, images, mode="forward", frozen=(), causal="full"):
    from vlm_perf.arch import spec_from_config
    from vlm_perf.arch.families import FAMILIES
    from vlm_perf.flops import compute_flops
    from vlm_perf.stats import BatchStats

    spec = spec_from_config(model.config.to_dict(), name="tiny-mistral3", processor=PROCESSOR)
    media = [FAMILIES["mistral3"].media.image(spec, h, w) for h, w in images]
    assert [tuple(m.resized) for m in media] == measured.media["resized"]  # the rule agrees with HF's processor
    assert sum(m.visual_tokens for m in media) == measured.media["visual_tokens"]
    seq = measured.media["seq_len"]
    assert seq == 8 + sum(m.visual_tokens + m.detail["break_tokens"] + 2 for m in media)
    stats = BatchStats.from_batch(seq_lens=[seq], image_grids=[m.grid for m in media], spec=spec)
    return compute_flops(spec, stats, mode=mode, causal=causal, frozen=frozen), spec, media


def _check(measured: dict, library: dict):
    bad = {p: (measured[p], library[p]) for p in measured
           if abs(library[p] - measured[p]) > REL_TOL * max(measured[p], 1)}
    assert not bad, bad


@pytest.mark.parametrize("size", SIZES, ids=lambda s: f"{s[0]}x{s[1]}")
def test_forward_per_part(model, size):
    m = measure_family("mistral3", model=model, image_sizes=[size])
    lib, _, _ = _library(model, m, [size])
    _check(m.parts("forward"), lib.parts)
    assert lib.parts == m.parts("forward")  # exact to the FLOP


@pytest.mark.parametrize("frozen", [(), ("vision_tower",), ("projector",), ("language_model",)],
                         ids=["all-trainable", "frozen-tower", "frozen-projector", "frozen-lm"])
@pytest.mark.parametrize("size", [(30, 50), (200, 100)], ids=lambda s: f"{s[0]}x{s[1]}")
def test_training_per_part(model, frozen, size):
    m = measure_family("mistral3", model=model, image_sizes=[size], mode="training", frozen=frozen)
    lib, _, _ = _library(model, m, [size], mode="training", frozen=frozen)
    _check(m.parts("training"), lib.parts)
    assert lib.parts == m.parts("training")


def test_several_images_eager_excess_by_hand(model):
    """Two images in one forward: transformers pads the conv input to the largest H and W and joins the images
    into one sequence, so eager measures the per-image count plus exactly that excess, written out here."""
    images = [(30, 50), (70, 20)]
    m = measure_family("mistral3", model=model, image_sizes=images)
    lib, spec, media = _library(model, m, images)
    v = spec.vision
    n = [g.grid[1] * g.grid[2] for g in media]
    ph = max(g.grid[1] for g in media)
    pw = max(g.grid[2] for g in media)
    conv_excess = 2 * (len(media) * ph * pw - sum(n)) * v.patch_volume * v.hidden_size
    core_excess = v.depth * 4 * v.attn_width * (sum(n) ** 2 - sum(x * x for x in n))
    measured = m.parts("forward")
    assert measured["vision_tower"] == lib.parts["vision_tower"] + conv_excess + core_excess
    assert measured["projector"] == lib.parts["projector"]
    assert measured["language_model"] == lib.parts["language_model"]


def test_sliding_window_half_is_windowed(model):
    """``--causal half`` counts a Mistral sliding window as a windowed flash kernel: per layer
    4*q*(keys attended), keys = sum_i min(i+1, w) in the project's continuous "causal half" convention
    (full causal S^2/2 = S(S+1)/2 - S/2; windowed: the discrete band minus w/2), instead of S^2/2."""
    m = measure_family("mistral3", model=model, image_sizes=[(200, 100)])
    half, spec, _ = _library(model, m, [(200, 100)], causal="half")
    full, _, _ = _library(model, m, [(200, 100)], causal="full")
    lm, seq = spec.lm, m.media["seq_len"]
    core_full = lm.num_layers * 4 * lm.q_width * seq * seq
    assert full.components["lm.attn_core"] == core_full
    if lm.sliding_window:
        w = lm.sliding_window
        band = sum(min(i + 1, w) for i in range(seq))  # keys each query attends, itself included
        assert seq > w
        assert half.components["lm.attn_core"] == lm.num_layers * 4 * lm.q_width * (band - w / 2)
    else:
        assert half.components["lm.attn_core"] == core_full / 2


def test_parameters_per_part(model):
    from vlm_perf.arch import spec_from_config
    from vlm_perf.arch.params import count_params

    spec = spec_from_config(model.config.to_dict(), name="tiny-mistral3")
    numel = lambda mod: sum(p.numel() for p in mod.parameters())
    c = count_params(spec)
    assert c.vision_tower == numel(model.model.vision_tower)
    assert c.merger == numel(model.model.multi_modal_projector)
    assert c.lm == numel(model.model.language_model) + numel(model.lm_head)
    assert c.total == numel(model)


@pytest.mark.parametrize("layer", [-2, -3, 1], ids=["minus2", "embeddings", "first"])
def test_feature_layer_before_the_last(layer):
    """``vision_feature_layer`` other than -1: every tower layer still runs (Pixtral's transformer loops over all),
    but the layers after the selected hidden state never reach the loss, so training does not back-propagate
    through them (measured: 3x the layers up to it, 1x the rest)."""
    model = build_model(tiny_config(vision_feature_layer=layer), 0)
    for mode in ("forward", "training"):
        m = measure_family("mistral3", model=model, image_sizes=[(30, 50)], mode=mode)
        lib, _, _ = _library(model, m, [(30, 50)], mode=mode)
        assert lib.parts == m.parts(mode)


def test_several_images_training_excess_and_padded_two_sample_batch(model):
    """Issue 21 asked for the cause of the Mistral 3 multi-image training difference. Measured: with several images
    in a forward -- in one sample, or one image in each of two samples of a padded batch (the Pixtral tower joins
    every image of the microbatch, across samples) -- the tower exceeds the per-image count by the eager excess
    only: the conv over the zero padding to the batch's largest H x W and the joined (sum n)^2 attention. In
    training that excess takes the usual multipliers (conv 2x: pixels need no gradient; attention core 3x), so the
    training difference is the forward one under the backward rule, nothing else; projector and LM are exact. The
    library keeps the per-image count (what a varlen / block-skipping kernel computes)."""
    from .families import common, harness
    from .families.common import random_images, text_ids
    from .families.mistral3 import IMAGE_TOKEN, IMG_BREAK, IMG_END, image_processor

    images = [(30, 50), (70, 20)]
    cfg = model.config
    out = image_processor(cfg, 64)(random_images(images, 1), return_tensors="pt", input_data_format="channels_last")
    step = cfg.vision_config.patch_size * cfg.spatial_merge_size
    gen = torch.Generator().manual_seed(3)
    rows = []
    for h, w in [tuple(int(x) for x in s) for s in out["image_sizes"]]:
        run = ([IMAGE_TOKEN] * (w // step) + [IMG_BREAK]) * (h // step)
        run[-1] = IMG_END
        rows.append(text_ids(8, gen) + run + text_ids(2, gen))
    width = max(map(len, rows))
    inputs = dict(input_ids=torch.tensor([r + [0] * (width - len(r)) for r in rows]),
                  attention_mask=torch.tensor([[1] * len(r) + [0] * (width - len(r)) for r in rows]),
                  pixel_values=out["pixel_values"].to(torch.float64), image_sizes=out["image_sizes"], use_cache=False)
    h = harness("mistral3")
    one = measure_family("mistral3", model=model, image_sizes=images)
    _, spec, media = _library(model, one, images)
    v = spec.vision
    n = [g.grid[1] * g.grid[2] for g in media]
    conv_excess = 2 * (len(media) * max(g.grid[1] for g in media) * max(g.grid[2] for g in media) - sum(n)) \
        * v.patch_volume * v.hidden_size
    core_excess = v.depth * 4 * v.attn_width * (sum(n) ** 2 - sum(x * x for x in n))
    from vlm_perf.flops import compute_flops
    from vlm_perf.stats import BatchStats

    stats = BatchStats.from_batch(seq_lens=[len(r) for r in rows], image_grids=[m.grid for m in media], spec=spec)
    for mode, frozen, mult in (("forward", (), (1, 1)), ("training", (), (2, 3)), ("training", ("vision_tower",), (1, 1))):
        measured = common.count(model, inputs, h.part_modules(model), training=mode == "training", frozen=frozen,
                                run=h.run, loose_params=h.loose_params).parts(mode)
        lib = compute_flops(spec, stats, mode=mode, causal="full", frozen=frozen).parts
        assert measured["vision_tower"] == lib["vision_tower"] + mult[0] * conv_excess + mult[1] * core_excess, mode
        assert (measured["projector"], measured["language_model"]) == (lib["projector"], lib["language_model"]), mode
