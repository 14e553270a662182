"""Qwen3.5 / Qwen3.5-MoE (transformers ``Qwen3_5[Moe]ForConditionalGeneration``) against FlopCounterMode, per part.

Reference: the famverify harness (``tests/verify/families/qwen3_5.py``): tiny random models (tower 2 x 32,
merger 128 -> 64; LM hidden 64, layers [linear x3, full], gated delta net Hk 2 x 8, Hv 4 x 8, conv 4; MoE 8
experts top-2 + gated shared expert), eager attention, float64, images through transformers'
``Qwen2VLImageProcessorPil``, videos as patch grids. The library starts from the same pixel sizes, derives
grids with its own media rule (``Qwen3_5Media``, bounds given as a checkpoint directory's
preprocessor_config.json would) and counts ``exact`` with ``causal="full"``.

The torch fallback of the delta rule pads every sequence to a multiple of 64 tokens; vlm-perf counts real
tokens. The per-part comparisons therefore use sequence lengths that are multiples of 64 (where both agree to
the FLOP), and :func:`test_chunk_padding_is_the_only_difference` pins the difference at other lengths to the
padded tokens' delta-rule FLOPs, derived here by hand.
"""

from __future__ import annotations

import pytest

pytestmark = pytest.mark.measured
torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from .families import measure_family, processor_media  # noqa: E402
from .families.qwen3_5 import PIXELS, build_model, tiny_config  # noqa: E402

PROCESSOR = {"preprocessor_config.json": {"min_pixels": PIXELS["min_pixels"], "max_pixels": PIXELS["max_pixels"]}}
CASES = [dict(image_sizes=[(30, 50), (8, 8)]), dict(image_sizes=[(200, 120)]), dict(video_grids=[(2, 4, 6)]),
         dict(image_sizes=[(30, 50)], video_grids=[(3, 8, 10)])]
FAMILIES = ("qwen3_5", "qwen3_5_moe")


def _id(case):
    parts = ["+".join(f"{h}x{w}" for h, w in case.get("image_sizes", ()))]
    parts += ["video" + "+".join("x".join(map(str, g)) for g in case.get("video_grids", ()))]
    return "-".join(p for p in parts if p and p != "video")


@pytest.fixture(scope="module", params=FAMILIES)
def model(request):
    return build_model(tiny_config(moe=request.param == "qwen3_5_moe"), 0)


def _family(model) -> str:
    return model.config.model_type


def aligned(model, case, multiple: int = 64) -> dict:
    """``case`` with text_len chosen so the LM sequence is a multiple of ``multiple`` tokens."""
    media = processor_media(_family(model), model.config, text_len=0, **case)
    return dict(case, text_len=(-media["seq_len"]) % multiple + multiple)


def _library(model, measured, case, mode="forward", frozen=()):
    from vlm_perf.arch import spec_from_config
    from vlm_perf.arch.families import FAMILIES as REG
    from vlm_perf.flops import compute_flops
    from vlm_perf.stats import BatchStats

    spec = spec_from_config(model.config.to_dict(), name="tiny-qwen3_5", processor=PROCESSOR)
    media = [REG[spec.family].media.image(spec, h, w) for h, w in case.get("image_sizes", ())]
    assert [m.grid for m in media] == measured.media["image_grids"]  # the media rule agrees with HF's processor
    video = [tuple(g) for g in case.get("video_grids", ())]
    stats = BatchStats.from_batch(seq_lens=[measured.media["seq_len"]], image_grids=[m.grid for m in media],
                                  video_grids=video, spec=spec)
    return compute_flops(spec, stats, mode=mode, causal="full", frozen=frozen), spec


@pytest.mark.parametrize("case", CASES, ids=_id)
def test_forward_per_part_exact(model, case):
    case = aligned(model, case)
    m = measure_family(_family(model), model=model, **case)
    assert m.media["seq_len"] % 64 == 0
    lib, _ = _library(model, m, case)
    assert lib.parts == m.parts("forward")


@pytest.mark.parametrize("frozen", [(), ("vision_tower",), ("language_model",)],
                         ids=["all-trainable", "frozen-tower", "frozen-lm"])
@pytest.mark.parametrize("case", CASES[:1] + CASES[3:], ids=_id)
def test_training_per_part_exact(model, case, frozen):
    """Backward of the chunked delta rule is NOT 2x forward (the triangular solves' gradient, the zero initial
    state, the unused final state): the library's Term.input_grad reproduces it to the FLOP."""
    case = aligned(model, case)
    m = measure_family(_family(model), model=model, mode="training", frozen=frozen, **case)
    lib, _ = _library(model, m, case, mode="training", frozen=frozen)
    assert lib.parts == m.parts("training")  # grouped-conv grad-weight over-count removed (harness default)


def test_two_chunk_lengths(model):
    """192 = 3 chunks: per-sequence terms (first/last chunk) and per-token terms are separated correctly."""
    case = aligned(model, dict(image_sizes=[(30, 50)]), multiple=192)
    m = measure_family(_family(model), model=model, mode="training", **case)
    assert m.media["seq_len"] % 192 == 0
    lib, _ = _library(model, m, case, mode="training")
    assert lib.parts == m.parts("training")


@pytest.mark.parametrize("mode", ["forward", "training"])
def test_chunk_padding_is_the_only_difference(model, mode):
    case = dict(image_sizes=[(30, 50), (8, 8)], text_len=8)
    m = measure_family(_family(model), model=model, mode=mode, **case)
    s = m.media["seq_len"]
    pad = (-s) % 64
    assert pad  # a length that is not a multiple of 64
    lib, _ = _library(model, m, case, mode=mode)
    hv, dk, dv, c, linear_layers = 4, 8, 8, 64, 3
    per_token = hv * (2 * 2 * c * dk + 3 * 2 * dk * dv + 2 * c * dv)  # k_beta kT, q kT; kcum S, q S, kT v; A v
    solve_grad = 2 * hv * c * (dv + dk)  # grad of the two unit-triangular solves, per token
    expected = linear_layers * pad * (per_token if mode == "forward" else 3 * per_token + solve_grad)
    measured, library = m.parts(mode), lib.parts
    assert measured["language_model"] - library["language_model"] == expected
    assert (measured["vision_tower"], measured["projector"]) == (library["vision_tower"], library["projector"])
    assert expected / measured["language_model"] < 0.01  # tiny S = 110: under 1 % even here


def test_parameters_per_part(model):
    from vlm_perf.arch import spec_from_config
    from vlm_perf.arch.params import count_params

    spec = spec_from_config(model.config.to_dict(), name="tiny-qwen3_5")
    numel = lambda mod: sum(p.numel() for p in mod.parameters())
    c = count_params(spec)
    visual = model.model.visual
    assert c.vision_tower == numel(visual) - numel(visual.merger)
    assert c.merger == numel(visual.merger)
    assert c.lm == numel(model.model.language_model) + numel(model.lm_head)
    assert c.total == numel(model)


def test_forward_fuzzed_media_and_lengths(model):
    """Seeded, bounded fuzz: random image sizes and video grids, LM length a random multiple of 64."""
    pytest.importorskip("hypothesis")
    from hypothesis import given, settings, strategies as st

    side = st.integers(4, 120)
    grid = st.tuples(st.integers(1, 3), st.sampled_from([2, 4, 6]), st.sampled_from([2, 4, 8]))

    @settings(derandomize=True, deadline=None, max_examples=6)
    @given(images=st.lists(st.tuples(side, side), max_size=2), videos=st.lists(grid, max_size=1),
           chunks=st.integers(1, 3))
    def check(images, videos, chunks):
        case = aligned(model, dict(image_sizes=images, video_grids=videos), multiple=64 * chunks)
        m = measure_family(_family(model), model=model, **case)
        lib, _ = _library(model, m, case)
        assert lib.parts == m.parts("forward")

    check()
