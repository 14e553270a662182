"""GOT-OCR2 (transformers ``GotOcr2ForConditionalGeneration``) against FlopCounterMode, per part.

Reference: the famverify harness (``tests/verify/families/got_ocr2.py``): a tiny random GOT-OCR2 (SAM tower
32 px, patch 4 -> 8 x 8 grid, 3 layers: two in 3 x 3 windows on the grid padded to 9 x 9, one global;
relative positions; neck to 16 channels; projector convs 16 -> 32 -> 64 and Linear 64 -> 64: 4 tokens per
tile; Qwen2 LM of 2 layers, tied head), eager attention, float64, images through transformers' own
``GotOcr2ImageProcessorPil`` with ``GotOcr2Processor``'s forced kwargs (one tile per image) or with
``crop_to_patches=True`` passed at call time (tiles + thumbnail). The library starts from the SAME pixel sizes,
derives media with its own rule and counts ``exact`` with ``causal="full"``. Tolerance 0.5 % per part (all
exact to the FLOP).
"""

from __future__ import annotations

import pytest

pytestmark = pytest.mark.measured
torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from .families import harness, measure_family  # noqa: E402
from .fixed_tile import FROZEN_CASES, TRAINING_IMAGES, FixedTileFamily, check_parts, meta_default, numel  # noqa: E402

PROC = {"processor_config.json": {"num_image_tokens": 4}}  # the tiny projector's 4 tokens per tile
TINY = FixedTileFamily("got_ocr2", "tiny-got-ocr2", PROC)
model = TINY.model


def _tiles_per_image(media, got):
    assert [d.tiles for d in media] == got["tiles"]  # tiles per image, as the processor makes


def _library(m, measured, images, crop=False, mode="forward", frozen=()):
    from vlm_perf.arch.families.got_ocr2 import GotOcr2Media

    rule = GotOcr2Media(crop_to_patches=True, min_patches=1, max_patches=6) if crop else GotOcr2Media()
    return TINY.library(m, measured, images, mode, frozen, rule=rule, check_media=_tiles_per_image)


CASES = [([(30, 50)], False), ([(70, 20), (32, 32)], True), ([(100, 33), (20, 20)], False)]


@pytest.mark.parametrize("images,crop", CASES, ids=["one-tile", "crop-to-patches", "two-images"])
def test_forward_per_part(images, crop):
    m = measure_family("got_ocr2", model=model(), image_sizes=images, crop_to_patches=crop)
    check_parts(m.parts("forward"), _library(model(), m, images, crop).parts)


@FROZEN_CASES
def test_training_per_part(frozen):
    images = TRAINING_IMAGES
    m = measure_family("got_ocr2", model=model(), image_sizes=images, mode="training", frozen=frozen,
                       crop_to_patches=True)
    check_parts(m.parts("training"), _library(model(), m, images, True, mode="training", frozen=frozen).parts)


@pytest.mark.parametrize("vision", [dict(window_size=4, global_attn_indexes=[0, 2], use_rel_pos=False),
                                    dict(global_attn_indexes=[0, 1, 2], qkv_bias=False, use_abs_pos=False),
                                    dict(window_size=10, global_attn_indexes=[2])],
                         ids=["no-padding-no-relpos", "all-global", "window-wider-than-grid"])
def test_tower_variants(vision):
    """Windows that divide the grid (no padding), no relative positions; every layer global, no qkv
    bias, no absolute positions; a 10 x 10 window on the 8 x 8 grid (one window, padded): forward and training."""
    m0 = model(**vision)
    for mode in ("forward", "training"):
        m = measure_family("got_ocr2", model=m0, image_sizes=[(30, 50)], mode=mode)
        check_parts(m.parts(mode), _library(m0, m, [(30, 50)], mode=mode).parts)


def test_sam_layer_by_hand():
    """The tiny tower's forward FLOPs written out by hand (8 x 8 grid, width 32, 2 heads of 16, MLP 48):
    windowed layer: 9 windows of 3 x 3 (grid padded to 9 x 9 = 81 rows): qkv+proj 2·81·32·128, core
    4·32·9·81, relative positions 2·2·81·32·3, MLP 2·2·64·32·48; global layer: 64 rows, core 4·32·64², rel.
    2·2·64·32·8; embed 2·64·48·32; neck 2·64·(32·16 + 9·16·16)."""
    from vlm_perf.flops.blocks import FlopsContext, inventory_terms
    from vlm_perf.stats import BatchStats

    spec = TINY.spec(model())
    stats = BatchStats.from_batch(seq_lens=[10], image_grids=[(1, 8, 8)], spec=spec)
    tower = sum(t.forward for t in inventory_terms(spec.blocks, stats, FlopsContext("full"))
                if t.stage == "vision_tower")
    windowed = 2 * 81 * 32 * 128 + 4 * 32 * 9 * 81 + 2 * 2 * 81 * 32 * 3 + 2 * 2 * 64 * 32 * 48
    global_ = 2 * 64 * 32 * 128 + 4 * 32 * 64 * 64 + 2 * 2 * 64 * 32 * 8 + 2 * 2 * 64 * 32 * 48
    assert tower == 2 * windowed + global_ + 2 * 64 * 48 * 32 + 2 * 64 * (32 * 16 + 9 * 16 * 16)


@pytest.mark.parametrize("vision", [{}, dict(global_attn_indexes=[0, 1, 2], qkv_bias=False, use_abs_pos=False)])
def test_parameters_per_part(vision):
    from vlm_perf.arch.params import count_params

    m = model(**vision)
    c = count_params(TINY.spec(m))
    assert c.vision_tower == numel(m.model.vision_tower)
    assert c.merger == numel(m.model.multi_modal_projector) == 9 * 16 * 32 + 9 * 32 * 64 + 64 * 64 + 64  # by hand
    assert c.lm == numel(m.model.language_model)  # lm_head tied: stored once
    assert c.total == numel(m)


def test_meta_device_count_default_config():
    """transformers' class defaults (SAM ViT-B 1024 px, Qwen2 0.5B-like LM): the inventory equals the
    meta-device parameter count of ``GotOcr2ForConditionalGeneration(GotOcr2Config())``."""
    c, m = meta_default("GotOcr2Config", "GotOcr2ForConditionalGeneration", "got-default")
    assert c.vision_tower == numel(m.model.vision_tower)
    assert c.total == numel(m)


def test_refusals():
    from vlm_perf.arch import spec_from_config
    from vlm_perf.arch.families import FAMILIES
    from vlm_perf.arch.families.got_ocr2 import GotOcr2Media
    from vlm_perf.errors import ConfigError, UnsupportedModelError

    cfg = model().config.to_dict()
    rule = FAMILIES["got_ocr2"].media
    with pytest.raises(UnsupportedModelError, match="no video"):
        rule.video(TINY.spec(model()), 2, 32, 32)
    with pytest.raises(UnsupportedModelError, match="placeholders"):  # the class default 256 vs 4 tokens per tile
        rule.image(TINY.spec(model(), {}), 30, 50)
    with pytest.raises(UnsupportedModelError, match="image_size"):
        rule.image(TINY.spec(model(), {**PROC, "preprocessor_config.json": {"size": {"height": 64, "width": 64}}}),
                   30, 50)
    with pytest.raises(ConfigError, match="unknown"):
        GotOcr2Media(do_pan_and_scan=True)
    with pytest.raises(UnsupportedModelError, match="qwen2"):
        spec_from_config(dict(cfg, text_config=dict(cfg["text_config"], model_type="llama")), name="t")
    with pytest.raises(ConfigError, match="hidden_size"):
        spec_from_config(dict(cfg, vision_config=dict(cfg["vision_config"], hidden_size=33)), name="t")
    from vlm_perf.errors import InputError
    from vlm_perf.stats import BatchStats

    with pytest.raises(InputError, match="fixed 8x8-patch tiles"):  # the SAM patch embed takes 32-px tiles only
        BatchStats.from_batch(seq_lens=[40], image_grids=[(1, 4, 4)], spec=TINY.spec(model()))


def test_conventions_coverage():
    """hf-trainer / ms-swift: transformers' own ``Trainer.floating_point_ops`` on the same ids; 6nd by hand; no
    framework formula covers GOT-OCR2 (every other convention is not defined)."""
    # 6nd: 2 Qwen2 layers of q/o 64x64, k/v 64x32, SwiGLU 3 x 64x96, tied head 64 x 1000; 80 tokens
    TINY.check_conventions(model(), 40, 6 * (2 * (2 * 64 * 64 + 2 * 64 * 32 + 3 * 64 * 96) + 64 * 1000) * 80)


hyp = pytest.importorskip("hypothesis")
from hypothesis import given, settings, strategies as st  # noqa: E402


@settings(derandomize=True, deadline=None, max_examples=30)
@given(h=st.integers(1, 400), w=st.integers(1, 400), crop=st.booleans(), lo=st.integers(1, 3),
       hi=st.integers(3, 12))
def test_media_rule_equals_hf_processor(h, w, crop, lo, hi):
    """Any image, with and without crop_to_patches (any min / max patches): tiles and placeholders equal what
    transformers' GotOcr2ImageProcessorPil and GotOcr2Processor's token rule give."""
    from vlm_perf.arch.families.got_ocr2 import GotOcr2Media

    _, media = harness("got_ocr2").make_inputs(model(), image_sizes=[(h, w)], crop_to_patches=crop,
                                               min_patches=lo, max_patches=hi)
    rule = GotOcr2Media(crop_to_patches=True, min_patches=lo, max_patches=hi) if crop else GotOcr2Media()
    d = rule.image(TINY.spec(model()), h, w)
    assert [d.tiles] == media["tiles"] and d.visual_tokens == media["visual_tokens"]
    assert (d.tiles, 3) + d.resized == media["pixel_shape"]


def test_pre_aggregated_rows_count_every_tile():
    """A metadata row that states only vision_patches / merged tokens (no grids, no vision_frames) counts the same
    tower and projector FLOPs as the grids: the tiles are vision_patches // patches per tile (fixed tiles)."""
    from dataclasses import replace

    from vlm_perf.flops import compute_flops
    from vlm_perf.stats import BatchStats

    spec = TINY.spec(model())
    grids = BatchStats.from_batch(seq_lens=[40], image_grids=[(3, 8, 8), (1, 8, 8)], spec=spec)
    assert grids.vision_frames == 4
    row = replace(grids, vision_frames=0)  # what a pre-aggregated row without vision_frames gives
    for mode in ("forward", "training"):
        a = compute_flops(spec, grids, mode=mode, causal="full").parts
        b = compute_flops(spec, row, mode=mode, causal="full").parts
        assert a == b and a["vision_tower"] > 0
