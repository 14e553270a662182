"""DeepSeek-VL (transformers ``DeepseekVLForConditionalGeneration``) against FlopCounterMode, per part.

Reference: the famverify harness (``tests/verify/families/deepseek_vl.py``): a tiny random DeepSeek-VL (SigLIP
32 px, patch 4, 2 layers, with and without the pooling head; aligner Linear 32 -> 64 -> GELU -> Linear 64 -> 64;
Llama LM of 2 layers, tied head), eager attention, float64, images through transformers' own
``DeepseekVLImageProcessorPil`` (resize longest side, pad to square). The library starts from the SAME pixel
sizes, derives media with its own rule and counts ``exact`` with ``causal="full"``. Tolerance 0.5 % per part
(all exact).
"""

from __future__ import annotations

import pytest

pytestmark = pytest.mark.measured
torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from .families import harness, measure_family  # noqa: E402

REL_TOL = 0.005
SIZES = [[(30, 50)], [(70, 20), (32, 32), (5, 200)]]
_models: dict = {}


def model(head: bool = True):
    if head not in _models:
        h = harness("deepseek_vl")
        _models[head] = h.build_model(h.tiny_config(vision={"vision_use_head": head}), 0)
    return _models[head]


def _spec(m, processor=None):
    from vlm_perf.arch import spec_from_config

    return spec_from_config(m.config.to_dict(), name="tiny-deepseek-vl", processor=processor or {})


def _library(m, measured, images, mode="forward", frozen=()):
    from vlm_perf.arch.families import FAMILIES
    from vlm_perf.flops import compute_flops
    from vlm_perf.stats import BatchStats

    spec = _spec(m)
    media = [FAMILIES["deepseek_vl"].media.image(spec, h, w) for h, w in images]
    assert len(media) == measured.media["images_in_tower"]  # one square tile per image, as the processor makes
    assert all(d.resized == measured.media["pixel_shape"][1:] for d in media)
    assert sum(d.visual_tokens for d in media) == measured.media["visual_tokens"]
    stats = BatchStats.from_batch(seq_lens=[measured.media["seq_len"]], image_grids=[d.grid for d in media],
                                  spec=spec)
    return compute_flops(spec, stats, mode=mode, causal="full", frozen=frozen)


def _check(measured: dict, library: dict):
    bad = {p: (measured[p], library[p]) for p in measured
           if abs(library[p] - measured[p]) > REL_TOL * max(measured[p], 1)}
    assert not bad, bad


@pytest.mark.parametrize("head", [True, False], ids=["pool-head", "no-head"])
@pytest.mark.parametrize("images", SIZES, ids=lambda s: "+".join(f"{h}x{w}" for h, w in s))
def test_forward_per_part(head, images):
    m = measure_family("deepseek_vl", model=model(head), image_sizes=images)
    _check(m.parts("forward"), _library(model(head), m, images).parts)


@pytest.mark.parametrize("head", [True, False], ids=["pool-head", "no-head"])
@pytest.mark.parametrize("frozen", [(), ("vision_tower",), ("projector",), ("vision_tower", "projector"),
                                    ("language_model",)],
                         ids=["all-trainable", "frozen-tower", "frozen-projector", "frozen-vision", "frozen-lm"])
def test_training_per_part(head, frozen):
    images = [(70, 20), (32, 32)]
    m = measure_family("deepseek_vl", model=model(head), image_sizes=images, mode="training", frozen=frozen)
    _check(m.parts("training"), _library(model(head), m, images, mode="training", frozen=frozen).parts)


@pytest.mark.parametrize("head", [True, False])
def test_parameters_per_part(head):
    from vlm_perf.arch.params import count_params

    m = model(head)
    numel = lambda mod: sum(p.numel() for p in mod.parameters())  # noqa: E731
    c = count_params(_spec(m))
    assert c.vision_tower == numel(m.model.vision_model)
    assert c.merger == numel(m.model.aligner) == 32 * 64 + 64 + 64 * 64 + 64  # by hand
    assert c.lm == numel(m.model.language_model)  # lm_head tied: stored once
    assert c.total == numel(m)


def test_refusals():
    from vlm_perf.arch import spec_from_config
    from vlm_perf.arch.families import FAMILIES
    from vlm_perf.errors import UnsupportedModelError

    cfg = model().config.to_dict()
    spec = _spec(model())
    rule = FAMILIES["deepseek_vl"].media
    with pytest.raises(UnsupportedModelError, match="no video"):
        rule.video(spec, 2, 32, 32)
    with pytest.raises(UnsupportedModelError, match="num_image_tokens"):
        rule.image(_spec(model(), {"processor_config.json": {"num_image_tokens": 576}}), 30, 50)
    with pytest.raises(UnsupportedModelError, match="do_pad"):
        rule.image(_spec(model(), {"preprocessor_config.json": {"do_pad": False}}), 30, 50)
    with pytest.raises(UnsupportedModelError, match="llama"):
        spec_from_config(dict(cfg, text_config=dict(cfg["text_config"], model_type="qwen2")), name="t")


def test_conventions_coverage():
    """hf-trainer / ms-swift: transformers' own ``Trainer.floating_point_ops`` on the same ids; 6nd by hand; no
    framework formula covers DeepSeek-VL (every other convention is not defined)."""
    from types import SimpleNamespace

    import transformers

    from vlm_perf.errors import ConventionNotDefined
    from vlm_perf.flops import compute_flops
    from vlm_perf.flops.conventions import CONVENTIONS
    from vlm_perf.stats import BatchStats

    m = model()
    spec = _spec(m)
    ids = torch.zeros((2, 80), dtype=torch.long)
    stats = BatchStats.from_batch(seq_len=80, samples=2, image_grids=[(1, 8, 8)] * 2, spec=spec)
    trainer = transformers.Trainer.floating_point_ops(SimpleNamespace(model=m), {"input_ids": ids})
    for name in ("hf-trainer", "ms-swift"):
        assert compute_flops(spec, stats, name).total == trainer
    # 6nd: 2 Llama layers of q/o 64x64, k/v 64x32, SwiGLU 3 x 64x96, tied head 64 x 1000; 160 tokens
    assert compute_flops(spec, stats, "6nd").total == 6 * (2 * (2 * 64 * 64 + 2 * 64 * 32 + 3 * 64 * 96)
                                                           + 64 * 1000) * 160
    for name in sorted(set(CONVENTIONS) - {"hf-trainer", "ms-swift", "6nd", "exact"}):
        with pytest.raises(ConventionNotDefined, match="deepseek_vl"):
            compute_flops(spec, stats, name)


hyp = pytest.importorskip("hypothesis")
from hypothesis import given, settings, strategies as st  # noqa: E402


@settings(derandomize=True, deadline=None, max_examples=25)
@given(h=st.integers(1, 500), w=st.integers(1, 500))
def test_media_rule_equals_hf_processor(h, w):
    """Any image: the processor's output is one size x size tile (resize + pad), as the rule says."""
    from vlm_perf.arch.families import FAMILIES

    _, media = harness("deepseek_vl").make_inputs(model(), image_sizes=[(h, w)])
    d = FAMILIES["deepseek_vl"].media.image(_spec(model()), h, w)
    assert (media["images_in_tower"], media["pixel_shape"][1:]) == (d.grid[0], d.resized)
    assert media["visual_tokens"] == d.visual_tokens
