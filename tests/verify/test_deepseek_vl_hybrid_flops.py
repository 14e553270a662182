"""DeepSeek-VL hybrid (transformers ``DeepseekVLHybridForConditionalGeneration``) against FlopCounterMode, per part.

Reference: the famverify harness (``tests/verify/families/deepseek_vl_hybrid.py``): a tiny random model (SigLIP
32 px, patch 4, 2 layers, with and without the pooling head; SAM 64 px, patch 4 -> 16 x 16 grid, 3 layers: two
in 3 x 3 windows on the grid padded to 18 x 18, one global read by the second neck; necks to 8 channels;
high_res_vision_proj resize 32, convs 8 -> 16 -> 32, run on both the neck outputs; aligner 32 ‖ 32 -> 64;
Llama LM of 2 layers, tied head), eager attention, float64, images through transformers' own
``DeepseekVLHybridImageProcessorPil``. The library starts from the SAME pixel sizes, derives media with its own
rule and counts ``exact`` with ``causal="full"``. Parts: vision_tower = SigLIP + SAM + both necks +
high_res_vision_proj + alpha; projector = aligner. Tolerance 0.5 % per part (all exact to the FLOP).
"""

from __future__ import annotations

import pytest

pytestmark = pytest.mark.measured
torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from .families import measure_family  # noqa: E402
from .fixed_tile import (FROZEN_CASES, IMAGE_CASES, TRAINING_IMAGES, FixedTileFamily, any_image,  # noqa: E402
                         check_parts, meta_default, numel, one_square_per_image)

FAMILY = "deepseek_vl_hybrid"
TINY = FixedTileFamily(FAMILY, "tiny-deepseek-vl-hybrid")


def model(head: bool = True):
    return TINY.model(vision_use_head=head)


def _one_siglip_and_one_sam_square(media, got):
    """One SigLIP and one SAM square per image."""
    one_square_per_image(media, got)
    assert got["high_res_shape"][2:] == (64, 64)


def _library(m, measured, images, mode="forward", frozen=()):
    return TINY.library(m, measured, images, mode, frozen, check_media=_one_siglip_and_one_sam_square)


@pytest.mark.parametrize("head", [True, False], ids=["pool-head", "no-head"])
@IMAGE_CASES
def test_forward_per_part(head, images):
    m = measure_family(FAMILY, model=model(head), image_sizes=images)
    check_parts(m.parts("forward"), _library(model(head), m, images).parts)


@FROZEN_CASES
def test_training_per_part(frozen):
    images = TRAINING_IMAGES
    m = measure_family(FAMILY, model=model(), image_sizes=images, mode="training", frozen=frozen)
    check_parts(m.parts("training"), _library(model(), m, images, mode="training", frozen=frozen).parts)


def test_high_res_branch_by_hand():
    """The SAM branch's forward FLOPs per image written out by hand (16 x 16 grid, width 32, 2 heads of 16, MLP
    128; windows 3 x 3 on the grid padded to 18 x 18 = 36 windows, 324 rows): windowed layer qkv+proj
    2·324·32·128, core 4·32·36·81, relative positions 2·2·324·32·3, MLP 2·2·256·32·128; global layer: 256 rows,
    core 4·32·256², rel. 2·2·256·32·16; embed 2·256·48·32; two necks 2·2·256·(32·8 + 9·8·8);
    high_res_vision_proj twice on a 32 x 32 resize: 2·(2·16²·9·8·16 + 2·8²·9·16·32)."""
    from vlm_perf.arch.blocks import SamEmbed, SamNeck, SamVisionLayers, StridedConvs
    from vlm_perf.flops.blocks import FlopsContext, inventory_terms
    from vlm_perf.stats import BatchStats

    spec = TINY.spec(model())
    stats = BatchStats.from_batch(seq_lens=[70], image_grids=[(1, 8, 8)], spec=spec)
    sam = [b for b in spec.blocks if isinstance(b, (SamEmbed, SamVisionLayers, SamNeck, StridedConvs))]
    got = sum(t.forward for t in inventory_terms(sam, stats, FlopsContext("full")))
    windowed = 2 * 324 * 32 * 128 + 4 * 32 * 36 * 81 + 2 * 2 * 324 * 32 * 3 + 2 * 2 * 256 * 32 * 128
    global_ = 2 * 256 * 32 * 128 + 4 * 32 * 256 * 256 + 2 * 2 * 256 * 32 * 16 + 2 * 2 * 256 * 32 * 128
    necks = 2 * 2 * 256 * (32 * 8 + 9 * 8 * 8)
    proj = 2 * (2 * 16 * 16 * 9 * 8 * 16 + 2 * 8 * 8 * 9 * 16 * 32)
    assert got == 2 * windowed + global_ + 2 * 256 * 48 * 32 + necks + proj


@pytest.mark.parametrize("head", [True, False])
def test_parameters_per_part(head):
    from vlm_perf.arch.params import count_params

    m = model(head)
    inner = m.model
    c = count_params(TINY.spec(m))
    assert c.vision_tower == sum(numel(x) for x in (inner.vision_model, inner.high_res_vision_model,
                                                    inner.high_res_vision_neck, inner.high_res_vision_proj)) + 1
    assert c.merger == numel(inner.aligner) == 32 * 32 + 32 + 32 * 32 + 32 + 64 * 64 + 64  # by hand
    assert c.lm == numel(inner.language_model)  # lm_head tied: stored once
    assert c.total == numel(m)


def test_meta_device_count_default_config():
    """transformers' class defaults (SigLIP base, SAM ViT-B 1024 px, Llama-7B-shaped LM): the inventory equals the
    meta-device parameter count of ``DeepseekVLHybridForConditionalGeneration(DeepseekVLHybridConfig())``."""
    c, m = meta_default("DeepseekVLHybridConfig", "DeepseekVLHybridForConditionalGeneration", "hybrid-default")
    assert c.merger == numel(m.model.aligner)
    assert c.total == numel(m)


def test_refusals():
    from vlm_perf.arch import spec_from_config
    from vlm_perf.arch.families import FAMILIES
    from vlm_perf.errors import ConfigError, UnsupportedModelError

    TINY.check_one_square_refusals(model())  # a video, num_image_tokens, a non-Llama LM
    cfg = model().config.to_dict()
    rule = FAMILIES[FAMILY].media
    with pytest.raises(UnsupportedModelError, match="high_res_size"):
        rule.image(TINY.spec(model(), {"preprocessor_config.json": {"high_res_size": {"height": 1024, "width": 1024}}}),
                   30, 50)
    with pytest.raises(UnsupportedModelError, match="do_pad"):
        rule.image(TINY.spec(model(), {"preprocessor_config.json": {"do_pad": False}}), 30, 50)
    high = cfg["high_res_vision_config"]
    with pytest.raises(ConfigError, match="global_attn_indexes"):
        spec_from_config(dict(cfg, high_res_vision_config=dict(high, global_attn_indexes=[])), name="t")
    with pytest.raises(ConfigError, match="high_res_vision_config"):
        spec_from_config({k: v for k, v in cfg.items() if k != "high_res_vision_config"}, name="t")


def test_conventions_coverage():
    """hf-trainer / ms-swift: transformers' own ``Trainer.floating_point_ops`` on the same ids; 6nd by hand; no
    framework formula covers DeepSeek-VL hybrid (every other convention is not defined)."""
    # 6nd: 2 Llama layers of q/o 64x64, k/v 64x32, SwiGLU 3 x 64x96, tied head 64 x 1000; 160 tokens
    TINY.check_conventions(model(), 80, 6 * (2 * (2 * 64 * 64 + 2 * 64 * 32 + 3 * 64 * 96) + 64 * 1000) * 160)


hyp = pytest.importorskip("hypothesis")


@any_image()
def test_media_rule_equals_hf_processor(h, w):
    """Any image: the processor's output is one size x size and one high_res_size x high_res_size square."""
    media = TINY.check_square_media_rule(model(), h, w)
    assert media["high_res_shape"] == (1, 3, 64, 64)


def test_pre_aggregated_rows_count_every_image():
    """A metadata row that states only vision_patches / merged tokens (no grids, no vision_frames) counts the same
    FLOPs as the grids: the SAM branch's images are vision_patches // SigLIP patches per image (fixed tiles).
    Without the SigLIP pooling head: that shared block bills its one probe per image from vision_frames, which
    such a row leaves at 0 (its forward-only head, 2 x 1 probe row per image, would be missing)."""
    from dataclasses import replace

    from vlm_perf.flops import compute_flops
    from vlm_perf.stats import BatchStats

    spec = TINY.spec(model(False))
    grids = BatchStats.from_batch(seq_lens=[200], image_grids=[(1, 8, 8)] * 3, spec=spec)
    row = replace(grids, vision_frames=0)
    for mode in ("forward", "training"):
        a = compute_flops(spec, grids, mode=mode, causal="full").parts
        assert a == compute_flops(spec, row, mode=mode, causal="full").parts and a["vision_tower"] > 0
