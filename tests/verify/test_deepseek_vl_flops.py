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

from .families import measure_family  # noqa: E402
from .fixed_tile import (FROZEN_CASES, IMAGE_CASES, TRAINING_IMAGES, FixedTileFamily, any_image,  # noqa: E402
                         check_parts, numel)

TINY = FixedTileFamily("deepseek_vl", "tiny-deepseek-vl")


def model(head: bool = True):
    return TINY.model(vision_use_head=head)


@pytest.mark.parametrize("head", [True, False], ids=["pool-head", "no-head"])
@IMAGE_CASES
def test_forward_per_part(head, images):
    m = measure_family("deepseek_vl", model=model(head), image_sizes=images)
    check_parts(m.parts("forward"), TINY.library(model(head), m, images).parts)


@pytest.mark.parametrize("head", [True, False], ids=["pool-head", "no-head"])
@FROZEN_CASES
def test_training_per_part(head, frozen):
    images = TRAINING_IMAGES
    m = measure_family("deepseek_vl", model=model(head), image_sizes=images, mode="training", frozen=frozen)
    check_parts(m.parts("training"), TINY.library(model(head), m, images, mode="training", frozen=frozen).parts)


@pytest.mark.parametrize("head", [True, False])
def test_parameters_per_part(head):
    from vlm_perf.arch.params import count_params

    m = model(head)
    c = count_params(TINY.spec(m))
    assert c.vision_tower == numel(m.model.vision_model)
    assert c.merger == numel(m.model.aligner) == 32 * 64 + 64 + 64 * 64 + 64  # by hand
    assert c.lm == numel(m.model.language_model)  # lm_head tied: stored once
    assert c.total == numel(m)


def test_refusals():
    from vlm_perf.arch.families import FAMILIES
    from vlm_perf.errors import UnsupportedModelError

    TINY.check_one_square_refusals(model())  # a video, num_image_tokens, a non-Llama LM
    with pytest.raises(UnsupportedModelError, match="do_pad"):
        FAMILIES["deepseek_vl"].media.image(TINY.spec(model(), {"preprocessor_config.json": {"do_pad": False}}), 30, 50)


def test_conventions_coverage():
    """hf-trainer / ms-swift: transformers' own ``Trainer.floating_point_ops`` on the same ids; 6nd by hand; no
    framework formula covers DeepSeek-VL (every other convention is not defined)."""
    # 6nd: 2 Llama layers of q/o 64x64, k/v 64x32, SwiGLU 3 x 64x96, tied head 64 x 1000; 160 tokens
    TINY.check_conventions(model(), 80, 6 * (2 * (2 * 64 * 64 + 2 * 64 * 32 + 3 * 64 * 96) + 64 * 1000) * 160)


hyp = pytest.importorskip("hypothesis")


@any_image()
def test_media_rule_equals_hf_processor(h, w):
    """Any image: the processor's output is one size x size tile (resize + pad), as the rule says."""
    TINY.check_square_media_rule(model(), h, w)
