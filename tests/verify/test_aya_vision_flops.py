"""Aya Vision and Command A Vision (transformers ``AyaVisionForConditionalGeneration`` /
``Cohere2VisionForConditionalGeneration``) against FlopCounterMode, per part.

Reference: the famverify harness (``tests/verify/families/aya_vision.py``): tiny random models (SigLIP 32-px
tiles, patch 4, 2 layers; pixel shuffle 2 -> [Aya: LayerNorm] -> Linear 128 -> 48 -> SwiGLU -> Linear 24 -> 64;
Cohere2 LM of 4 layers [sliding x3, full] with window 8, parallel attention + MLP, tied head), eager attention,
float64. Aya's tiles come from transformers' ``GotOcr2ImageProcessorPil`` with ``AyaVisionProcessor``'s forced
``crop_to_patches``; Command A Vision's from ``Cohere2VisionImageProcessor``'s own canvas function. The library
starts from the SAME pixel sizes, derives tiles with its own rules and counts ``exact`` with
``causal="full"`` (eager computes the whole square in every layer). Tolerance 0.5 % per part (all exact).
Parameters per part equal the tiny model's; the media rules are fuzzed (seeded, bounded) against the
processors' tile counts.
"""

from __future__ import annotations

import pytest

pytestmark = pytest.mark.measured
torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from .families import harness, measure_family  # noqa: E402

REL_TOL = 0.005
PROCESSOR = {"preprocessor_config.json": {"size": {"height": 32, "width": 32}, "max_patches": 6, "min_patches": 1}}
FAMILIES = ("aya_vision", "cohere2_vision")
SIZES = [[(30, 50)], [(70, 20), (32, 32)], [(100, 100), (7, 300), (64, 31)]]
_models: dict = {}


def model(family, **over):
    key = (family, repr(sorted(over.items())))
    if key not in _models:
        h = harness(family)
        _models[key] = h.build_model(h.tiny_config(**over), 0)
    return _models[key]


def _spec(m, processor=PROCESSOR):
    from vlm_perf.arch import spec_from_config

    return spec_from_config(m.config.to_dict(), name=f"tiny-{m.config.model_type}", processor=processor)


def _library(m, measured, images, mode="forward", frozen=(), causal="full"):
    from vlm_perf.arch.families import FAMILIES as REG
    from vlm_perf.flops import compute_flops
    from vlm_perf.stats import BatchStats

    spec = _spec(m)
    media = [REG[m.config.model_type].media.image(spec, h, w) for h, w in images]
    assert [d.tiles for d in media] == measured.media["tiles"]  # the rule agrees with HF's processor
    assert sum(d.visual_tokens for d in media) == measured.media["visual_tokens"]
    stats = BatchStats.from_batch(seq_lens=[measured.media["seq_len"]], image_grids=[d.grid for d in media],
                                  spec=spec)
    return compute_flops(spec, stats, mode=mode, causal=causal, frozen=frozen)


def _check(measured: dict, library: dict):
    bad = {p: (measured[p], library[p]) for p in measured
           if abs(library[p] - measured[p]) > REL_TOL * max(measured[p], 1)}
    assert not bad, bad


@pytest.mark.parametrize("family", FAMILIES)
@pytest.mark.parametrize("images", SIZES, ids=lambda s: "+".join(f"{h}x{w}" for h, w in s))
def test_forward_per_part(family, images):
    m = measure_family(family, model=model(family), image_sizes=images)
    assert len(m.media["tiles"]) == len(images)
    _check(m.parts("forward"), _library(model(family), m, images).parts)


@pytest.mark.parametrize("family", FAMILIES)
@pytest.mark.parametrize("frozen", [(), ("vision_tower",), ("projector",), ("vision_tower", "projector"),
                                    ("language_model",)],
                         ids=["all-trainable", "frozen-tower", "frozen-projector", "frozen-vision", "frozen-lm"])
def test_training_per_part(family, frozen):
    images = [(70, 20), (32, 32)]
    m = measure_family(family, model=model(family), image_sizes=images, mode="training", frozen=frozen)
    _check(m.parts("training"), _library(model(family), m, images, mode="training", frozen=frozen).parts)


@pytest.mark.parametrize("mode,frozen", [("forward", ()), ("training", ()), ("training", ("vision_tower",))])
def test_aya_earlier_feature_layer_is_forward_only_after_it(mode, frozen):
    """vision_feature_layer -2: the last tower layer still runs but reaches no loss (no backward for it)."""
    m0 = model("aya_vision", vision_feature_layer=-2)
    images = [(30, 50)]
    m = measure_family("aya_vision", model=m0, image_sizes=images, mode=mode, frozen=frozen)
    _check(m.parts(mode), _library(m0, m, images, mode=mode, frozen=frozen).parts)


@pytest.mark.parametrize("family", FAMILIES)
@pytest.mark.parametrize("over", [{}, {"tie_word_embeddings": False, "text": {"attention_bias": True}},
                                  {"vision": {"vision_use_head": True}}], ids=["default", "untied-bias", "head"])
def test_parameters_per_part(family, over):
    from vlm_perf.arch.params import count_params

    m = harness(family).build_model(harness(family).tiny_config(**over), 0)
    numel = lambda mod: sum(p.numel() for p in mod.parameters())  # noqa: E731
    c = count_params(_spec(m))
    assert c.vision_tower == numel(m.model.vision_tower)
    assert c.merger == numel(m.model.multi_modal_projector)
    assert c.total == numel(m)
    assert c.lm == c.total - c.vision_tower - c.merger


def test_parallel_block_and_one_norm_by_hand():
    """Cohere2 LM of the tiny config, by hand: per layer q 64x64, k/v 64x32, o 64x64, SwiGLU 3 x 64x96, one
    LayerNorm weight (64); final norm 64; tied embedding 1000 x 64."""
    from vlm_perf.arch import spec_from_config
    from vlm_perf.arch.params import count_params

    from .families.aya_vision import tiny_config

    spec = spec_from_config(tiny_config().to_dict(), name="t")
    per_layer = 64 * 64 * 2 + 2 * 64 * 32 + 3 * 64 * 96 + 64
    assert count_params(spec).lm == 4 * per_layer + 64 + 1000 * 64
    # projector by hand: Aya LayerNorm(128) + Linear(128 -> 48, bias) + Linear(24 -> 64, bias)
    assert count_params(spec).merger == 2 * 128 + 128 * 48 + 48 + 24 * 64 + 64


def test_videos_and_unsupported_configs_refused():
    from vlm_perf.arch import spec_from_config
    from vlm_perf.arch.families import FAMILIES as REG
    from vlm_perf.errors import ConfigError, UnsupportedModelError

    from .families.aya_vision import tiny_config

    cfg = tiny_config().to_dict()
    spec = spec_from_config(cfg, name="t")
    with pytest.raises(UnsupportedModelError, match="no video"):
        REG["aya_vision"].media.video(spec, 4, 32, 32)
    bad = dict(cfg, vision_feature_select_strategy="default")
    with pytest.raises(UnsupportedModelError, match="vision_feature_select_strategy"):
        spec_from_config(bad, name="t")
    bad = dict(cfg, alignment_intermediate_size=47)
    with pytest.raises(ConfigError, match="alignment_intermediate_size"):
        spec_from_config(bad, name="t")
    bad = dict(cfg, text_config=dict(cfg["text_config"], model_type="llama"))
    with pytest.raises(UnsupportedModelError, match="cohere2"):
        spec_from_config(bad, name="t")
    with pytest.raises(UnsupportedModelError, match="placeholders per tile"):
        REG["aya_vision"].media.image(spec_from_config(cfg, name="t", processor={
            "processor_config.json": {"img_size": 32, "patch_size": 4}}), 30, 50)


def test_causal_half_counts_cohere2_mask_entries():
    """--causal half = the continuous count of what transformers' Cohere2 masks keep (FlopCounterMode cannot see
    a windowed kernel): full layers s^2/2, sliding layers s^2/2 - (s-W)^2/2. The discrete masks keep the diagonal
    too (+ s/2 full, + W/2 sliding with s > W); both are checked against that arithmetic here."""
    from transformers.masking_utils import create_causal_mask, create_sliding_window_causal_mask

    from vlm_perf.flops.blocks import FlopsContext, inventory_terms
    from vlm_perf.stats import BatchStats

    m0 = model("aya_vision")
    s, window = 50, 8
    lm = m0.model.language_model
    embeds = torch.zeros(1, s, 64, dtype=torch.float64)
    kw = dict(config=lm.config, inputs_embeds=embeds, attention_mask=torch.ones(1, s, dtype=torch.long), cache=None,
              position_ids=torch.arange(s)[None])
    entries = {}
    for kind, fn in (("full", create_causal_mask), ("sliding", create_sliding_window_causal_mask)):
        mask = fn(**kw)
        entries[kind] = int((mask if mask.dtype == torch.bool else mask == 0).sum())
    assert entries["full"] == s * s / 2 + s / 2
    assert entries["sliding"] == s * window - window * window / 2 + window / 2
    spec = _spec(m0)
    core = sum(t.forward for t in inventory_terms(spec.blocks, BatchStats.from_batch(seq_lens=[s], spec=spec),
                                                  FlopsContext("half")) if t.component == "lm.attn_core")
    per_entry = 2 * 4 * 2 * 16  # 2 FLOPs x heads x (QK^T + AV) x head_dim
    assert core == per_entry * ((entries["full"] - s / 2) + 3 * (entries["sliding"] - window / 2))


@pytest.mark.parametrize("family", FAMILIES)
def test_conventions_coverage(family):
    """hf-trainer (and ms-swift, which reports it) define a number for every family: transformers' own
    ``Trainer.floating_point_ops`` (6 x non-embedding parameters x input ids) on the same ids. No framework
    formula covers Aya Vision / Command A Vision: every other convention is not defined (a clear refusal)."""
    from types import SimpleNamespace

    import transformers

    from vlm_perf.errors import ConventionNotDefined
    from vlm_perf.flops import compute_flops
    from vlm_perf.flops.conventions import CONVENTIONS
    from vlm_perf.stats import BatchStats

    m = model(family)
    spec = _spec(m)
    ids = torch.zeros((2, 40), dtype=torch.long)
    stats = BatchStats.from_batch(seq_len=40, samples=2, image_grids=[(2, 8, 8)] * 2, spec=spec)
    trainer = transformers.Trainer.floating_point_ops(SimpleNamespace(model=m), {"input_ids": ids})
    for name in ("hf-trainer", "ms-swift"):
        assert compute_flops(spec, stats, name).total == trainer
    # 6nd bills the LM's matmul weights: 4 layers of q/o 64x64, k/v 64x32, SwiGLU 3 x 64x96, tied head 64 x 1000
    assert compute_flops(spec, stats, "6nd").total == 6 * (4 * (2 * 64 * 64 + 2 * 64 * 32 + 3 * 64 * 96)
                                                           + 64 * 1000) * 80
    defined = {"hf-trainer", "ms-swift", "6nd", "exact"}
    for name in sorted(set(CONVENTIONS) - defined):
        with pytest.raises(ConventionNotDefined, match=family):
            compute_flops(spec, stats, name)


hyp = pytest.importorskip("hypothesis")
from hypothesis import given, settings, strategies as st  # noqa: E402

FUZZ = settings(derandomize=True, deadline=None, max_examples=25)


@FUZZ
@given(h=st.integers(1, 400), w=st.integers(1, 400), hi=st.integers(1, 12))
def test_aya_tiles_equal_got_ocr2_processor(h, w, hi):
    from vlm_perf.arch.families import FAMILIES as REG

    m0 = model("aya_vision")
    _, media = harness("aya_vision").make_inputs(m0, image_sizes=[(h, w)], max_patches=hi)
    spec = _spec(m0, {"preprocessor_config.json": {"size": {"height": 32, "width": 32}, "max_patches": hi}})
    d = REG["aya_vision"].media.image(spec, h, w)
    assert [d.tiles] == media["tiles"] and d.visual_tokens == media["visual_tokens"]


@FUZZ
@given(h=st.integers(1, 3000), w=st.integers(1, 3000), hi=st.integers(1, 12))
def test_cohere2_vision_tiles_equal_hf_canvas(h, w, hi):
    from vlm_perf.arch.families import FAMILIES as REG

    from .families.aya_vision import cohere2_vision_tiles

    spec = _spec(model("cohere2_vision"), {"preprocessor_config.json": {"size": {"height": 32, "width": 32},
                                                                       "max_patches": hi}})
    assert REG["cohere2_vision"].media.image(spec, h, w).tiles == cohere2_vision_tiles(h, w, 32, hi)


def _released_spec(model_type: str, tile: int, patch: int, hi: int):
    """A spec with the released towers' tile geometry (Aya 364 px / patch 14, Command A Vision 512 / 16)."""
    from vlm_perf.arch import spec_from_config

    from .families.aya_vision import tiny_config

    cfg = tiny_config(model_type, vision={"image_size": tile, "patch_size": patch}).to_dict()
    pre = {"size": {"height": tile, "width": tile}, "max_patches": hi}
    return spec_from_config(cfg, name="released-geometry", processor={"preprocessor_config.json": pre})


@settings(derandomize=True, deadline=None, max_examples=30)
@given(h=st.integers(1, 6000), w=st.integers(1, 6000), hi=st.integers(1, 12))
def test_cohere2_vision_released_tiles_and_tokens(h, w, hi):
    """512-px tiles, patch 16, shuffle 2: the canvas of transformers' own function and 256 placeholders per tile
    (``Cohere2VisionProcessor``: patch_size^2 with the processor's patch_size 16)."""
    from vlm_perf.arch.families import FAMILIES as REG

    from .families.aya_vision import cohere2_vision_tiles

    d = REG["cohere2_vision"].media.image(_released_spec("cohere2_vision", 512, 16, hi), h, w)
    assert d.tiles == cohere2_vision_tiles(h, w, 512, hi) and d.visual_tokens == 16 ** 2 * d.tiles


@settings(derandomize=True, deadline=None, max_examples=10)
@given(h=st.integers(1, 1500), w=st.integers(1, 1500))
def test_aya_released_tiles_and_tokens(h, w):
    """364-px tiles, patch 14, shuffle 2, max 12 tiles: GotOcr2's processor with AyaVisionProcessor's forced
    ``crop_to_patches``, and (364 // 28)^2 = 169 placeholders per tile (AyaVisionProcessor's img_size / patch)."""
    from transformers import AyaVisionProcessor
    from transformers.models.got_ocr2.image_processing_pil_got_ocr2 import GotOcr2ImageProcessorPil

    from vlm_perf.arch.families import FAMILIES as REG

    from .families.common import processor_images_kwargs, random_images

    proc = GotOcr2ImageProcessorPil(size={"height": 364, "width": 364}, min_patches=1, max_patches=12,
                                    crop_to_patches=False)
    out = proc(random_images([(h, w)], 0), input_data_format="channels_last",
               **processor_images_kwargs(AyaVisionProcessor))
    d = REG["aya_vision"].media.image(_released_spec("aya_vision", 364, 14, 12), h, w)
    assert d.tiles == int(out["num_patches"][0]) and d.visual_tokens == (364 // 28) ** 2 * d.tiles
