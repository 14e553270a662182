"""Mllama / Llama 3.2 Vision (transformers ``MllamaForConditionalGeneration``) against FlopCounterMode, per part.

Reference: the famverify harness (``tests/verify/families/mllama.py``): a tiny random Mllama (16 px tiles, patch 4:
16 patches + CLS = 17 positions padded to 24 per tile, 4 tiles per image always; 2 local + 1 gated global layer;
Linear(64 -> 64) projector; a 4-layer LM whose layers 1 and 3 cross-attend), eager attention, float64, inputs from
transformers' own ``MllamaProcessor`` (built offline). The library starts from the SAME pixel sizes, derives media
with its own rule (``MllamaMedia``) and counts ``exact``: per part, forward and training, every frozen combination
(frozen LM with a trainable vision part included: the text-only layers before the first cross-attention layer then
run no backward, and that layer's queries need no gradient), one image, two images in one sample, two samples.
"""

from __future__ import annotations

import pytest

pytestmark = pytest.mark.measured
torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from .families import measure_family  # noqa: E402
from .families.common import random_images  # noqa: E402
from .families.mllama import build_model, processor, tiny_config  # noqa: E402

BATCHES = [[[(30, 50)]], [[(70, 20), (16, 16)]], [[(30, 50)], [(100, 30)]]]
FROZEN = [(), ("vision_tower",), ("vision_tower", "projector"), ("language_model",), ("language_model", "projector")]


def _ids(batch):
    return "|".join("+".join(f"{h}x{w}" for h, w in s) for s in batch)


@pytest.fixture(scope="module")
def model():
    return build_model(tiny_config(), 0)


def _spec(model, processor_files=None):
    from vlm_perf.arch import spec_from_config

    return spec_from_config(model.config.to_dict(), name="tiny-mllama", processor=processor_files or {})


def _measure(model, batch, mode="forward", frozen=()):
    kw = dict(image_sizes=batch[0]) if len(batch) == 1 else dict(samples=batch)
    return measure_family("mllama", model=model, mode=mode, frozen=frozen, **kw)


def _library(model, measured, batch, mode="forward", frozen=(), causal="full", per_sample=True):
    from vlm_perf.arch.families import FAMILIES
    from vlm_perf.flops import compute_flops
    from vlm_perf.stats import BatchStats

    spec = _spec(model)
    media = [[FAMILIES["mllama"].media.image(spec, h, w) for h, w in s] for s in batch]
    assert [[m.tiles for m in s] for s in media] == measured.media["tiles"]  # the rule's tiles = the processor's
    assert sum(m.visual_tokens for s in media for m in s) == measured.media["visual_tokens"]
    stats = BatchStats.from_batch(seq_lens=measured.media["seq_lens"], image_grids=[m.grid for s in media for m in s],
                                  spec=spec, images_per_sample=[len(s) for s in batch] if per_sample else None)
    return compute_flops(spec, stats, mode=mode, causal=causal, frozen=frozen)


@pytest.mark.parametrize("batch", BATCHES, ids=_ids)
def test_forward_per_part(model, batch):
    m = _measure(model, batch)
    for causal in ("full", "half"):  # the cross-attention rectangle and the tower square do not depend on it
        assert _library(model, m, batch, causal=causal).parts["vision_tower"] == m.parts("forward")["vision_tower"]
    assert _library(model, m, batch).parts == m.parts("forward")


@pytest.mark.parametrize("frozen", FROZEN, ids=lambda f: "+".join(f) or "all-trainable")
@pytest.mark.parametrize("batch", BATCHES[1:], ids=_ids)
def test_training_per_part(model, batch, frozen):
    m = _measure(model, batch, "training", frozen)
    assert _library(model, m, batch, "training", frozen).parts == m.parts("training")


def test_regime_walk_agrees_on_a_frozen_lm(model):
    """The regime walker (whole parts as a Trainability) counts what compute_flops counts, INPUT_OWN terms included."""
    from vlm_perf.arch.trainability import Trainability
    from vlm_perf.flops.regime import regime_flops
    from vlm_perf.stats import BatchStats

    spec = _spec(model)
    stats = BatchStats.from_batch(seq_lens=[11, 9], image_grids=[(1, 16, 4)] * 3, spec=spec, images_per_sample=[2, 1])
    from vlm_perf.flops import compute_flops

    for frozen in FROZEN:
        for causal in ("full", "half"):
            a = compute_flops(spec, stats, mode="training", causal=causal, frozen=frozen)
            b = regime_flops(spec, stats, Trainability.from_frozen(frozen), causal=causal, mode="training")
            assert a.components == b.breakdown.components, (frozen, causal)


def test_parameters_per_part(model):
    from vlm_perf.arch.params import count_params

    numel = lambda mod: sum(p.numel() for p in mod.parameters())
    c = count_params(_spec(model))
    assert c.vision_tower == numel(model.model.vision_model)
    assert c.merger == numel(model.model.multi_modal_projector)
    assert c.lm == numel(model.model.language_model) + numel(model.lm_head)
    assert c.total == numel(model)


def test_forward_by_hand(model):
    """Hand arithmetic, one image of 30x50 px, text 'a'x8: S = 1 <|image|> + <|begin_of_text|> + 8 = 10.

    Tower: 4 tiles x 16 patches; per tile 17 positions padded to 24, one sequence of L = 96 per image. Patch embed
    2·64·48·32; 3 layers of 2·96·(4·32·32 + 2·32·48) + 4·32·96²; mask outer product 2·96². Projector 2·(4·17)·64·64.
    LM (h 64, 4 x 16 heads, 2 KV heads, MLP 96): 2 self layers 2·S·(64·64 + 2·64·32 + 64·64) + 4·64·S²; 2 cross
    layers q/o 2·S·2·64·64, k/v 2·68·2·64·32, core 4·64·S·68; 4 MLPs 2·S·3·64·96; head 2·S·64·1000."""
    m = _measure(model, [[(30, 50)]])
    s, v, L = 10, 68, 96
    assert m.media["seq_len"] == s
    tower = 2 * 64 * 48 * 32 + 3 * (2 * L * (4 * 32 * 32 + 2 * 32 * 48) + 4 * 32 * L * L) + 2 * L * L
    projector = 2 * v * 64 * 64
    lm = (2 * (2 * s * (64 * 64 + 2 * 64 * 32 + 64 * 64) + 4 * 64 * s * s)
          + 2 * (2 * s * 2 * 64 * 64 + 2 * v * 2 * 64 * 32 + 4 * 64 * s * v) + 4 * 2 * s * 3 * 64 * 96 + 2 * s * 64 * 1000)
    assert m.parts("forward") == {"vision_tower": tower, "projector": projector, "language_model": lm}


def test_without_the_sample_association_it_is_an_upper_bound(model):
    """Two samples of different lengths and image counts, no images_per_sample: the longest sample's length x every
    image's vision tokens bounds the cross-attention core from above."""
    batch = [[(30, 50)], [(70, 20), (16, 16)]]
    from vlm_perf.arch.families import FAMILIES
    from vlm_perf.flops import compute_flops
    from vlm_perf.stats import BatchStats

    spec = _spec(model)
    grids = [FAMILIES["mllama"].media.image(spec, h, w).grid for s in batch for h, w in s]
    known = BatchStats.from_batch(seq_lens=[10, 13], image_grids=grids, spec=spec, images_per_sample=[1, 2])
    bound = BatchStats.from_batch(seq_lens=[10, 13], image_grids=grids, spec=spec)
    assert (known.lm_x_vision_patches, known.lm_x_vision_frames) == (10 * 64 + 13 * 128, 10 * 1 + 13 * 2)
    assert (bound.lm_x_vision_patches, bound.lm_x_vision_frames) == (13 * 192, 13 * 3)
    assert (compute_flops(spec, bound, mode="forward").language
            > compute_flops(spec, known, mode="forward").language)


def test_padding_images_of_unequal_samples_are_what_hf_adds(model):
    """HF pads every sample to the microbatch's largest image count (a zero image, all tiles run): measured minus
    counted is exactly one more image through tower and projector, and the shorter sample's cross-attention over it."""
    batch = [[(30, 50)], [(70, 20), (16, 16)]]
    m = measure_family("mllama", model=model, samples=batch, text_lens=[9, 8])  # equal rows: no text padding
    got = _library(model, m, batch).parts
    measured = m.parts("forward")
    s0 = m.media["seq_lens"][0]
    per_image_tower = 2 * 64 * 48 * 32 + 3 * (2 * 96 * (4 * 32 * 32 + 2 * 32 * 48) + 4 * 32 * 96 * 96) + 2 * 96 * 96
    assert measured["vision_tower"] - got["vision_tower"] == per_image_tower
    assert measured["projector"] - got["projector"] == 2 * 68 * 64 * 64
    assert measured["language_model"] - got["language_model"] == 2 * (2 * 68 * 2 * 64 * 32 + 4 * 64 * s0 * 68)


def _media_rule(sizes, spec):
    from vlm_perf.arch.families import FAMILIES

    return [FAMILIES["mllama"].media.image(spec, h, w) for h, w in sizes]


@pytest.mark.parametrize("sizes", [[(30, 50)], [(1, 300)], [(300, 1)], [(16, 16), (17, 33), (64, 64)], [(48, 16)]])
def test_media_rule_against_the_processor(model, sizes):
    proc = processor(model.config)
    out = proc(images=[random_images(sizes, 0)], text=["<|image|>" * len(sizes) + "a"], return_tensors="np",
               input_data_format="channels_last")
    media = _media_rule(sizes, _spec(model))
    assert [m.tiles for m in media] == [int(x) for x in out["aspect_ratio_mask"][0].sum(1)]
    assert out["pixel_values"].shape[2] == 4 and all(m.grid == (1, 16, 4) for m in media)  # 4 tiles always run
    assert sum(m.visual_tokens for m in media) == int((out["input_ids"] == proc.image_token_id).sum())


def test_processor_files_must_match_the_tower(model):
    from vlm_perf.errors import ConfigError

    spec = _spec(model, {"preprocessor_config.json": {"size": {"height": 16, "width": 16}, "max_image_tiles": 2}})
    with pytest.raises(ConfigError, match="max_image_tiles 2"):
        _media_rule([(30, 50)], spec)


hyp = pytest.importorskip("hypothesis")
from hypothesis import given, settings, strategies as st  # noqa: E402

_CACHE: dict = {}


@settings(derandomize=True, deadline=None, max_examples=25)
@given(sizes=st.lists(st.tuples(st.integers(1, 200), st.integers(1, 200)), min_size=1, max_size=3))
def test_media_rule_fuzzed_against_the_processor(sizes):
    if "m" not in _CACHE:
        _CACHE["m"] = build_model(tiny_config(), 0)
    model = _CACHE["m"]
    proc = processor(model.config)
    out = proc(images=[random_images(sizes, 0)], text=["<|image|>" * len(sizes) + "a b"], return_tensors="np",
               input_data_format="channels_last")
    media = _media_rule(sizes, _spec(model))
    ids = out["aspect_ratio_ids"][0]
    assert [m.tiles for m in media] == [int(x) for x in out["aspect_ratio_mask"][0].sum(1)]
    # the arrangement itself: the processor's aspect-ratio id is 1 + its index among the supported arrangements
    from vlm_perf.arch.families.mllama import aspect_ratios

    assert [aspect_ratios(4).index((m.detail["tile_rows"], m.detail["tile_cols"])) + 1 for m in media] == list(ids)
    assert sum(m.visual_tokens for m in media) == len(sizes)


def test_conventions_coverage(model):
    """Conventions that define a number for every family (hf-trainer: transformers' own ``floating_point_ops`` on the
    same input ids; the tile tables are nn.Embedding lookups and drop out, the gated position table is an
    nn.Parameter and stays); AutoModel's fallback refuses (its composite config has no top-level LM fields); the
    framework formulas without an Mllama path are not defined."""
    from vlm_perf.errors import ConventionNotDefined
    from vlm_perf.flops import compute_flops
    from vlm_perf.stats import BatchStats

    spec = _spec(model)
    ids = torch.zeros((2, 10), dtype=torch.long)
    stats = BatchStats.from_batch(seq_len=10, samples=2, image_grids=[(1, 16, 4)] * 2, spec=spec)
    from types import SimpleNamespace

    import transformers

    trainer = transformers.Trainer.floating_point_ops(SimpleNamespace(model=model), {"input_ids": ids})
    assert compute_flops(spec, stats, "hf-trainer").total == trainer
    with pytest.raises(ConventionNotDefined, match="AutoModel|not computed|transformer_flops"):
        compute_flops(spec, stats, "automodel")
    for name in ("megatron-lm", "megatron-bridge", "mbridge-pr2575", "maxtext", "torchtitan", "verl", "veomni"):
        with pytest.raises(ConventionNotDefined, match="mllama"):
            compute_flops(spec, stats, name)


def test_six_nd_bills_every_lm_matmul_weight():
    """6nd on Llama-3.2-11B-Vision: 6 x (LM matmul weights: 32 self-attention layers 4096·(4096 + 2·1024 + 4096), 8
    cross-attention layers the same shapes, 40 MLPs 3·4096·14336, lm_head 4096·128256) x tokens."""
    from vlm_perf.arch import load_model
    from vlm_perf.flops import compute_flops
    from vlm_perf.stats import BatchStats

    spec = load_model("llama3.2-11b-vision")
    n = 40 * 4096 * (4096 + 2 * 1024 + 4096) + 40 * 3 * 4096 * 14336 + 4096 * 128256
    assert compute_flops(spec, BatchStats.from_batch(seq_len=1000, spec=spec), "6nd").total == 6 * n * 1000
