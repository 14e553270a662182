"""ERNIE-4.5-VL-MoE (transformers ``Ernie4_5_VLMoeForConditionalGeneration``) against FlopCounterMode, per part.

Reference: the famverify harness (``tests/verify/families/ernie4_5_vl.py``): a tiny random ERNIE-4.5-VL (tower patch
4, 2 layers; resampler; LM of a dense layer and two modality-MoE layers whose text and vision experts differ in width,
so a token sent to the wrong pool changes the count), eager attention and experts, float64, images through
transformers' own ``Ernie4_5_VLMoeImageProcessorPil``, ``moe_mm_token_type_ids`` as the processor writes them. The
library starts from the SAME pixel sizes / video grids and counts ``exact`` with ``causal="full"``. Tolerance 0.5 %
per part (all exact to the FLOP).
"""

from __future__ import annotations

import pytest

pytestmark = pytest.mark.measured
torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from .families import harness, measure_family  # noqa: E402
from .families.ernie4_5_vl import BOUNDS, MERGE, PATCH  # noqa: E402
from .fixed_tile import FROZEN_CASES, check_parts, numel  # noqa: E402

FILES = {"preprocessor_config.json": {"patch_size": PATCH, "merge_size": MERGE, "size": BOUNDS}}
CASES = [dict(image_sizes=[(30, 50)]), dict(image_sizes=[(70, 20), (32, 32)]),
         dict(image_sizes=[(30, 50)], video_grids=[(2, 4, 6)]), dict(video_grids=[(4, 6, 4), (2, 4, 4)])]
_MODEL: dict = {}


def model():
    if "m" not in _MODEL:
        h = harness("ernie4_5_vl_moe")
        _MODEL["m"] = h.build_model(h.tiny_config(), 0)
    return _MODEL["m"]


def spec(files=None):
    from vlm_perf.arch import spec_from_config

    return spec_from_config(model().config.to_dict(), name="tiny-ernie", processor=FILES if files is None else files)


def library(measured, case: dict, mode: str = "forward", frozen=()):
    """The library's parts for the case's pixel sizes (its own media rule, checked against the processor's grids and
    the placeholder runs) and video grids."""
    from vlm_perf.arch.families import FAMILIES
    from vlm_perf.flops import compute_flops
    from vlm_perf.stats import BatchStats

    s = spec()
    media = [FAMILIES["ernie4_5_vl_moe"].media.image(s, h, w) for h, w in case.get("image_sizes", ())]
    assert [d.grid for d in media] == measured.media["image_grids"]
    videos = list(case.get("video_grids", ()))
    tokens = sum(d.visual_tokens for d in media) + sum(t * h * w // 8 + 2 for t, h, w in videos)
    assert tokens == measured.media["visual_tokens"]
    stats = BatchStats.from_batch(seq_lens=[measured.media["seq_len"]], image_grids=[d.grid for d in media],
                                  video_grids=videos, spec=s)
    return compute_flops(s, stats, mode=mode, causal="full", frozen=frozen).parts


@pytest.mark.parametrize("case", CASES, ids=["one-image", "two-images", "image+video", "two-videos"])
def test_forward_per_part(case):
    measured = measure_family("ernie4_5_vl_moe", model=model(), **case)
    check_parts(measured.parts("forward"), library(measured, case))


@FROZEN_CASES
def test_training_per_part(frozen):
    case = CASES[2]
    measured = measure_family("ernie4_5_vl_moe", model=model(), mode="training", frozen=frozen, **case)
    check_parts(measured.parts("training"), library(measured, case, "training", frozen))


def test_modality_experts_by_hand():
    """One 30x50 image -> a 32x48 px grid of 8x12 patches -> 24 folded tokens + start / end = 26 vision tokens of 36.
    LM forward by hand: 3 layers of q/o 64x64, k/v 64x32 on 36 tokens, core 4·64·36² (eager, full square); layer 0
    dense 3·64·96; layers 1-2: shared 3·64·64 and both routers 64x4 on every token, top-2 experts 3·64·32 on the 10
    text tokens and 3·64·16 on the 26 vision tokens; tied head 64x1000."""
    measured = measure_family("ernie4_5_vl_moe", model=model(), image_sizes=[(30, 50)])
    assert measured.media["seq_len"] == 36 and measured.media["visual_tokens"] == 26
    s, text, vision = 36, 10, 26
    attention = 3 * (2 * s * (2 * 64 * 64 + 2 * 64 * 32) + 4 * 64 * s * s)
    dense = 2 * s * 3 * 64 * 96
    moe = 2 * (2 * s * 3 * 64 * 64 + 2 * s * 64 * 4 + 2 * 2 * 3 * 64 * (text * 32 + vision * 16))
    assert measured.parts("forward")["language_model"] == attention + dense + moe + 2 * s * 64 * 1000
    # resampler: 24 folded tokens (D = 4·32 = 128) through spatial 2 x 128², then 24 pairs through 256x128, 128²,
    # 128x64
    assert measured.parts("forward")["projector"] == 2 * 24 * (2 * 128 * 128 + 256 * 128 + 128 * 128 + 128 * 64)


def test_parameters_per_part():
    from vlm_perf.arch.params import count_params

    m = model()
    c = count_params(spec())
    assert c.vision_tower == numel(m.model.vision_tower)
    assert c.merger == numel(m.model.resampler_model)
    assert c.lm_embedding + c.lm_layers + c.lm_final_norm == numel(m.model.language_model)  # lm_head tied
    assert c.total == numel(m)


def test_conventions_coverage():
    """hf-trainer / ms-swift: transformers' own ``Trainer.floating_point_ops``; 6nd: a TEXT token's active matmul
    parameters (attention, the dense layer, then per MoE layer the shared MLP, the top-2 text experts and the text
    router), by hand."""
    from types import SimpleNamespace

    import transformers

    from vlm_perf.flops import compute_flops
    from vlm_perf.stats import BatchStats

    s = spec()
    ids = torch.zeros((2, 80), dtype=torch.long)
    stats = BatchStats.from_batch(seq_len=80, samples=2, image_grids=[(1, 8, 8)] * 2, spec=s)
    trainer = transformers.Trainer.floating_point_ops(SimpleNamespace(model=model()), {"input_ids": ids})
    for name in ("hf-trainer", "ms-swift"):
        assert compute_flops(s, stats, name).total == trainer
    per_token = (3 * (2 * 64 * 64 + 2 * 64 * 32) + 3 * 64 * 96
                 + 2 * (3 * 64 * 64 + 2 * 3 * 64 * 32 + 64 * 4) + 64 * 1000)
    assert compute_flops(s, stats, "6nd").total == 6 * per_token * 160


def test_refusals_and_video_rule():
    from vlm_perf.arch import spec_from_config
    from vlm_perf.arch.families import FAMILIES
    from vlm_perf.errors import UnsupportedModelError

    cfg, rule = model().config.to_dict(), FAMILIES["ernie4_5_vl_moe"].media
    with pytest.raises(UnsupportedModelError, match="use_bias"):
        spec_from_config(dict(cfg, text_config=dict(cfg["text_config"], use_bias=True)), name="t")
    with pytest.raises(UnsupportedModelError, match="temporal_merge_size"):
        spec_from_config(dict(cfg, vision_config=dict(cfg["vision_config"], temporal_merge_size=3)), name="t")
    with pytest.raises(UnsupportedModelError, match="merge_size"):
        rule.image(spec({"preprocessor_config.json": {"merge_size": 4}}), 30, 50)
    # a 3-frame video is padded to 4 frames (the processor copies the last); each frame resized as an image
    # (factor 8: 30x50 px -> 32x48 px = 8 x 12 patches); 2 frame pairs x 4 x 6 folded tokens + start / end
    d = rule.video(spec({**FILES, "video_preprocessor_config.json": {"size": BOUNDS}}), 3, 30, 50)
    assert d.grid == (4, 8, 12) and d.visual_tokens == 2 * 4 * 6 + 2
    # the class-default frame bounds (299 .. 1196 x 28² pixels) with the released factor 28 apply without a file
    assert rule.settings(spec(FILES))["video"] == {"min_pixels": 299 * 784, "max_pixels": 1196 * 784,
                                                    "source": "Ernie4_5_VLMoe image / video processor class "
                                                              "defaults (transformers 5.24)"}


hyp = pytest.importorskip("hypothesis")
st = hyp.strategies


@hyp.settings(derandomize=True, deadline=None, max_examples=60)
@hyp.given(h=st.integers(1, 600), w=st.integers(1, 600))
def test_image_rule_equals_hf_processor(h, w):
    """Any image (aspect <= 200): the processor's image_grid_thw equals the rule's grid."""
    from transformers.models.ernie4_5_vl_moe.image_processing_pil_ernie4_5_vl_moe import (
        Ernie4_5_VLMoeImageProcessorPil)

    from vlm_perf.arch.families import FAMILIES
    from vlm_perf.errors import ConfigError

    hyp.assume(max(h, w) / min(h, w) <= 200)
    proc = Ernie4_5_VLMoeImageProcessorPil(patch_size=PATCH, merge_size=MERGE, size=BOUNDS)
    import numpy as np

    try:
        d = FAMILIES["ernie4_5_vl_moe"].media.image(spec(), h, w)
    except ConfigError:
        return
    out = proc([np.zeros((h, w, 3), dtype=np.uint8)], return_tensors="pt", input_data_format="channels_last")
    assert tuple(out["image_grid_thw"][0].tolist()) == d.grid


def test_last_tower_layer_only_regime(monkeypatch):
    """``--trainable 'vit[-1:]'``: only the tower's last layer trains (its norms included); the frozen resampler and
    LM still run their input gradients back to it. Measured by freezing everything else."""
    from vlm_perf.arch.families import FAMILIES
    from vlm_perf.arch.trainability import Trainability
    from vlm_perf.flops.regime import regime_flops
    from vlm_perf.stats import BatchStats

    from .families import common

    m, h, case = model(), harness("ernie4_5_vl_moe"), CASES[2]
    last = m.model.vision_tower.blocks[-1]

    def only_last(model_, parts, frozen, loose_params=None):
        model_.requires_grad_(False)
        last.requires_grad_(True)

    monkeypatch.setattr(common, "freeze_parts", only_last)
    inputs, media = h.make_inputs(m, **case)
    measured = common.count(m, inputs, h.part_modules(m), training=True)
    s = spec()
    grids = [FAMILIES["ernie4_5_vl_moe"].media.image(s, a, b).grid for a, b in case["image_sizes"]]
    stats = BatchStats.from_batch(seq_lens=[media["seq_len"]], image_grids=grids, video_grids=case["video_grids"],
                                  spec=s)
    library = regime_flops(s, stats, Trainability.build(trainable=["vit[-1:]"]), causal="full").parts
    check_parts(measured.parts("training"), library)


def test_class_default_parameters_equal_transformers_meta_model():
    """``Ernie4_5_VLMoeConfig()`` (its class defaults: the docstring's baidu/ERNIE-4.5-VL-28B-A3B-PT dims) built on
    the meta device: the inventory's count equals transformers' to the parameter, per part and in total."""
    from .fixed_tile import meta_default

    counts, meta = meta_default("Ernie4_5_VLMoeConfig", "Ernie4_5_VLMoeForConditionalGeneration", "ernie-defaults")
    assert counts.vision_tower == numel(meta.model.vision_tower)
    assert counts.merger == numel(meta.model.resampler_model)
    assert counts.total == numel(meta) == 29_399_294_336


def test_generate_with_kv_cache_per_part():
    """Greedy ``generate(max_new_tokens=5)`` with a KV cache after an image and a video: the tower and the resampler
    run once, the LM prefills (vision tokens to the vision experts) then decodes 4 text tokens (text experts);
    ``generation_flops`` to the FLOP per part."""
    from vlm_perf.arch.families import FAMILIES
    from vlm_perf.flops.generation import generation_flops

    from .measure import measure_generate

    m, h, case = model(), harness("ernie4_5_vl_moe"), CASES[2]
    inputs, media = h.make_inputs(m, **case)
    measured = measure_generate(m, inputs, h.part_modules(m), 5, media["seq_len"])
    s = spec()
    grids = [FAMILIES["ernie4_5_vl_moe"].media.image(s, a, b).grid for a, b in case["image_sizes"]]
    lib = generation_flops(s, [media["seq_len"]], [5], image_grids=grids, video_grids=case["video_grids"],
                           causal="full")
    assert {k: lib.prefill[k] + lib.decode[k] for k in lib.prefill} == {
        p: measured.get(p, 0) for p in ("vision_tower", "projector", "language_model")}


def test_grids_the_resampler_cannot_pair_are_refused():
    """The resampler pairs an image's one frame with itself and a video's frames two by two (transformers'
    ``_temporal_slicing`` drops an odd last frame; the processor never makes one): other grids are one-line errors."""
    from vlm_perf.errors import InputError
    from vlm_perf.stats import BatchStats

    with pytest.raises(InputError, match=r"image grid #1: .*t = 1\), got 2,8,12"):
        BatchStats.from_batch(seq_len=200, image_grids=[(2, 8, 12)], spec=spec())
    with pytest.raises(InputError, match=r"video grid #2: .*even frame count.*got 3,4,4"):
        BatchStats.from_batch(seq_len=200, video_grids=[(2, 4, 4), (3, 4, 4)], spec=spec())
    assert BatchStats.from_batch(seq_len=200, image_grids=[(1, 8, 12)], video_grids=[(4, 4, 4)],
                                 spec=spec()).vision_merged_tokens == 24 + 2 * 4
