"""Janus (transformers ``JanusForConditionalGeneration``, understanding path) against FlopCounterMode, per part.

Reference: the famverify harness (``tests/verify/families/janus.py``): a tiny random Janus (ViT 32 px, patch 4,
2 layers, MLP ratio 1.5; aligner 32 -> 64 -> GELU -> 64; Llama LM of 2 layers, tied head; a small VQ-VAE and
generation aligner / head that an understanding forward never runs), eager attention, float64, images through
transformers' own ``JanusImageProcessorPil``. The library starts from the SAME pixel sizes, derives media with
its own rule and counts ``exact`` with ``causal="full"``. The generation modules are hooked as part of the
vision tower: FlopCounterMode sees no FLOPs in them (they do not run), and their parameters are in the tower's
count. Tolerance 0.5 % per part (all exact to the FLOP).
"""

from __future__ import annotations

import pytest

pytestmark = pytest.mark.measured
torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from .families import harness, measure_family  # noqa: E402
from .fixed_tile import (FROZEN_CASES, IMAGE_CASES, TRAINING_IMAGES, FixedTileFamily, any_image,  # noqa: E402
                         check_parts, meta_default, numel)

FAMILY = "janus"
TINY = FixedTileFamily(FAMILY, "tiny-janus")


def model(bias: bool = True):
    return TINY.model(attention_bias=bias)


@pytest.mark.parametrize("bias", [True, False], ids=["qkv-bias", "no-qkv-bias"])
@IMAGE_CASES
def test_forward_per_part(bias, images):
    m = measure_family(FAMILY, model=model(bias), image_sizes=images)
    check_parts(m.parts("forward"), TINY.library(model(bias), m, images).parts)


@FROZEN_CASES
def test_training_per_part(frozen):
    images = TRAINING_IMAGES
    m = measure_family(FAMILY, model=model(), image_sizes=images, mode="training", frozen=frozen)
    check_parts(m.parts("training"), TINY.library(model(), m, images, mode="training", frozen=frozen).parts)


def test_generation_modules_never_run():
    """On an understanding batch FlopCounterMode sees no op in the VQ-VAE or the generation modules, forward and
    training (the parts above include them; this pins it per module)."""
    from .families.common import count

    m = model()
    inner = m.model
    inputs, _ = harness(FAMILY).make_inputs(m, image_sizes=[(30, 50)])
    parts = {"vision_tower": [inner.vision_model], "projector": [inner.aligner],
             "language_model": [inner.language_model, m.lm_head],
             "vq": [inner.vqmodel, inner.generation_embeddings, inner.generation_aligner, inner.generation_head]}
    measured = count(m, inputs, parts, training=True)
    assert measured.forward.get("vq", 0) == 0 and measured.backward.get("vq", 0) == 0


@pytest.mark.parametrize("bias", [True, False])
def test_parameters_per_part(bias):
    from vlm_perf.arch.params import count_params

    m = model(bias)
    inner = m.model
    c = count_params(TINY.spec(m))
    generation = sum(numel(x) for x in (inner.vqmodel, inner.generation_embeddings, inner.generation_aligner,
                                        inner.generation_head))
    assert c.vision_tower == numel(inner.vision_model) + generation
    assert c.merger == numel(inner.aligner) == 32 * 64 + 64 + 64 * 64 + 64  # by hand
    assert c.lm == numel(inner.language_model)  # lm_head tied: stored once
    assert c.total == numel(m)


def test_meta_device_count_default_config():
    """transformers' class defaults (Janus-Pro-1B-shaped tower and VQ-VAE: 5 resolutions, 2 res blocks, 16384
    codes; Llama-7B-shaped LM with projection_dim set to its width): the inventory, VQ-VAE formula included,
    equals the meta-device count of ``JanusForConditionalGeneration``."""
    from vlm_perf.arch.families.janus import vq_params

    c, m = meta_default("JanusConfig", "JanusForConditionalGeneration", "janus-default",
                        vision_config={"projection_dim": 4096},
                        vq_config={"projection_dim": 4096, "image_token_embed_dim": 4096})
    vq = vq_params(m.config.vq_config.to_dict())
    assert vq["vq_encoder_decoder"] + vq["codebook"] == numel(m.model.vqmodel)
    assert vq["generation_head"] == numel(m.model.generation_head)
    assert c.total == numel(m)


def test_refusals():
    from vlm_perf.arch import spec_from_config
    from vlm_perf.errors import ConfigError, UnsupportedModelError

    TINY.check_one_square_refusals(model())  # a video, num_image_tokens, a non-Llama LM
    cfg = model().config.to_dict()
    with pytest.raises(UnsupportedModelError, match="use_qk_norm"):
        spec_from_config(dict(cfg, vision_config=dict(cfg["vision_config"], use_qk_norm=True)), name="t")
    with pytest.raises(ConfigError, match="projection_dim"):
        spec_from_config(dict(cfg, vision_config=dict(cfg["vision_config"], projection_dim=48)), name="t")


def test_conventions_coverage():
    """hf-trainer / ms-swift: transformers' own ``Trainer.floating_point_ops`` on the same ids (it bills every
    stored non-embedding parameter, the never-run VQ-VAE and generation aligner / head included, and drops the
    codebook and generation embeddings: nn.Embedding); 6nd by hand (LM only); every other convention not defined."""
    TINY.check_conventions(model(), 80, 6 * (2 * (2 * 64 * 64 + 2 * 64 * 32 + 3 * 64 * 96) + 64 * 1000) * 160)


hyp = pytest.importorskip("hypothesis")


@any_image()
def test_media_rule_equals_hf_processor(h, w):
    """Any image: JanusImageProcessorPil's output is one size x size square (resize + pad), as the rule says."""
    TINY.check_square_media_rule(model(), h, w)


@pytest.mark.parametrize("vq", [dict(double_latent=True), dict(num_res_blocks=3, channel_multiplier=[1, 1, 2]),
                                dict(channel_multiplier=[2], num_hidden_layers=1)],
                         ids=["double-latent", "3-levels-3-blocks", "1-level"])
def test_vq_params_equal_meta_count(vq):
    """The VQ-VAE / generation parameter formula on other vq_config shapes equals transformers' meta count."""
    import transformers

    from vlm_perf.arch import spec_from_config
    from vlm_perf.arch.params import count_params

    from .families.janus import tiny_config

    cfg = tiny_config(vq=vq)
    with torch.device("meta"):
        m = transformers.JanusForConditionalGeneration(cfg)
    assert count_params(spec_from_config(cfg.to_dict(), name="t")).total == sum(p.numel() for p in m.parameters())
