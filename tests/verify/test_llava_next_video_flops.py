"""LLaVA-NeXT-Video (transformers ``LlavaNextVideoForConditionalGeneration``) against FlopCounterMode, per part.

Reference: the famverify harness (``tests/verify/families/llava_next_video.py``): the tiny LLaVA-NeXT plus the 2 x 2
average-pool resampler, eager attention, float64; image placeholders from transformers' own
``LlavaNextVideoProcessor._get_number_of_features``, video placeholders from its ``replace_video_token``. The library
derives media with its own rule (``LlavaNextVideoMedia``) and counts ``exact`` with ``causal="full"``. Exact to the
FLOP per part, forward and training, frozen parts, images, videos and both in one sample.
"""

from __future__ import annotations

import pytest

pytestmark = pytest.mark.measured
torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from .families import measure_family  # noqa: E402
from .families.llava_next_video import build_model, tiny_config  # noqa: E402

CASES = [dict(image_sizes=[(30, 50)]), dict(video_sizes=[(3, 24, 24)]),
         dict(image_sizes=[(70, 20), (10, 200)], video_sizes=[(2, 24, 24), (2, 24, 24)])]
FROZEN = [(), ("vision_tower",), ("vision_tower", "projector"), ("language_model",)]


@pytest.fixture(scope="module")
def model():
    return build_model(tiny_config(), 0)


def _library(model, measured, case, mode="forward", frozen=()):
    from vlm_perf.arch import spec_from_config
    from vlm_perf.arch.families import FAMILIES
    from vlm_perf.flops import compute_flops
    from vlm_perf.stats import BatchStats

    spec = spec_from_config(model.config.to_dict(), name="tiny-llava-next-video")
    rule = FAMILIES["llava_next_video"].media
    images = [rule.image(spec, h, w) for h, w in case.get("image_sizes", [])]
    videos = [rule.video(spec, *v) for v in case.get("video_sizes", [])]
    assert [m.tiles for m in images] == measured.media["tiles"]
    assert sum(m.visual_tokens for m in images + videos) == measured.media["visual_tokens"]
    stats = BatchStats.from_batch(seq_lens=[measured.media["seq_len"]], image_grids=[m.grid for m in images],
                                  video_grids=[m.grid for m in videos], spec=spec)
    return compute_flops(spec, stats, mode=mode, causal="full", frozen=frozen)


@pytest.mark.parametrize("case", CASES, ids=["image", "video", "images+videos"])
def test_forward_per_part(model, case):
    m = measure_family("llava_next_video", model=model, **case)
    assert _library(model, m, case).parts == m.parts("forward")


@pytest.mark.parametrize("frozen", FROZEN, ids=lambda f: "+".join(f) or "all-trainable")
def test_training_per_part(model, frozen):
    case = CASES[2]
    m = measure_family("llava_next_video", model=model, mode="training", frozen=frozen, **case)
    assert _library(model, m, case, "training", frozen).parts == m.parts("training")


def test_video_projector_runs_on_pooled_rows_by_hand(model):
    """3 frames of 6 x 6 patches: the pool leaves 3 x 3 rows per frame, so the projector runs on 27 rows:
    2·27·(32·64 + 64·64); the LM sees 36 // 4 = 9 tokens per frame."""
    m = measure_family("llava_next_video", model=model, video_sizes=[(3, 24, 24)])
    assert m.parts("forward")["projector"] == 2 * 27 * (32 * 64 + 64 * 64)
    assert m.media["visual_tokens"] == 27


def test_parameters_per_part(model):
    from vlm_perf.arch import spec_from_config
    from vlm_perf.arch.params import count_params

    numel = lambda mod: sum(p.numel() for p in mod.parameters())
    c = count_params(spec_from_config(model.config.to_dict(), name="tiny"))
    assert c.vision_tower == numel(model.model.vision_tower)
    assert c.merger == numel(model.model.multi_modal_projector) + model.model.image_newline.numel()
    assert numel(model.model.vision_resampler) == 0
    assert c.total == numel(model)
