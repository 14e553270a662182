"""Nemotron omni / Nemotron-Nano-VL (transformers ``NemotronH_Omni_Reasoning_V3``: RADIO tower, pixel-shuffle
projector, Nemotron-H LM) against FlopCounterMode, per part.

Reference: the harness ``tests/verify/families/nemotron_h_omni.py``: a tiny random model (RADIO width 32, 2 layers,
patch 4, 2 class + 3 register tokens, 2-frame tubelets; projector 128 -> 48 -> 64; Nemotron-H LM "*-*"), eager
attention, float64; images through the image processor's own grid function, videos through transformers' own
video processor. The library starts from the SAME pixel sizes, derives grids with its own rules and counts
``exact`` with ``causal="full"`` (eager computes the whole square). Every part equal to the FLOP.

With Mamba-2 layers in the LM (pattern "M*-"), the tower and projector stay exact; the LM's reference scan is
transformers' PyTorch fallback, which does more work than the SSD training kernels the count follows (measured and
explained in tests/arch/test_nemotron_h.py), so the LM is not compared there.
"""

from __future__ import annotations

import math

import pytest

pytestmark = pytest.mark.measured
torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from .families import common  # noqa: E402
from .families.nemotron_h_omni import (IMAGE_PROCESSOR, TINY_AUDIO, VIDEO_PROCESSOR, build_model,  # noqa: E402
                                       config_dict, hf_image_functions, make_inputs, part_modules, process_images,
                                       tiny_config)

PROCESSOR = {"preprocessor_config.json": dict(IMAGE_PROCESSOR),
             "video_preprocessor_config.json": dict(VIDEO_PROCESSOR)}
_models: dict = {}


def model(pattern="*-*", **over):
    key = (pattern, repr(sorted(over.items())))
    if key not in _models:
        _models[key] = build_model(tiny_config(pattern, **over), 0)
    return _models[key]


def _spec(m):
    from vlm_perf.arch import spec_from_config

    return spec_from_config(config_dict(m.config), name="tiny-nemotron-omni", processor=PROCESSOR)


def _measure_and_count(m, images=(), videos=(), mode="forward", frozen=(), audio=()):
    from vlm_perf.arch.families import FAMILIES
    from vlm_perf.flops import compute_flops
    from vlm_perf.stats import BatchStats

    inputs, media = make_inputs(m, images, videos, audio_samples=audio)
    measured = common.count(m, inputs, part_modules(m), training=mode == "training", frozen=frozen)
    measured.check()
    spec, rule = _spec(m), FAMILIES["nemotron_h_omni"].media
    derived_images = [rule.image(spec, h, w) for h, w in images]
    derived_videos = [rule.video(spec, *v) for v in videos]
    assert [d.grid for d in derived_images] == media["image_grids"]  # the rules agree with HF's processors
    assert [d.grid for d in derived_videos] == media["video_grids"]
    assert sum(d.visual_tokens for d in derived_images + derived_videos) == media["visual_tokens"]
    clips = [rule.audio(spec, n) for n in audio]
    assert [c.audio_tokens for c in clips] == media.get("audio_tokens", [])  # = the processor's placeholders
    assert [c.mel_frames for c in clips] == media.get("audio_frames", [])  # = the feature extractor's
    stats = BatchStats.from_batch(seq_lens=[media["seq_len"]], image_grids=[d.grid for d in derived_images],
                                  video_grids=[d.grid for d in derived_videos], spec=spec,
                                  audio_frames=[c.mel_frames for c in clips])
    return measured.parts(mode), compute_flops(spec, stats, mode=mode, causal="full", frozen=frozen).parts


MEDIA = [dict(images=[(30, 50)]), dict(images=[(30, 50), (70, 20), (8, 8)]), dict(images=[(400, 90)]),
         dict(videos=[(3, 20, 28)]), dict(videos=[(4, 24, 24), (4, 24, 24)])]
MEDIA_IDS = ["1-image", "3-images", "capped-image", "video-odd-frames", "2-videos"]


@pytest.mark.parametrize("media", MEDIA, ids=MEDIA_IDS)
def test_forward_per_part(media):
    measured, library = _measure_and_count(model(), **media)
    assert {p: library[p] for p in measured} == measured


@pytest.mark.parametrize("frozen", [(), ("vision_tower",), ("projector",), ("vision_tower", "projector"),
                                    ("language_model",)],
                         ids=["all-trainable", "frozen-tower", "frozen-projector", "frozen-vision", "frozen-lm"])
@pytest.mark.parametrize("media", [MEDIA[1], MEDIA[3]], ids=["3-images", "video"])
def test_training_per_part(media, frozen):
    measured, library = _measure_and_count(model(), **media, mode="training", frozen=frozen)
    assert {p: library[p] for p in measured} == measured


@pytest.mark.parametrize("mode,frozen", [("forward", ()), ("training", ()), ("training", ("vision_tower",))])
def test_swiglu_tower_without_qkv_bias(mode, frozen):
    """``use_swiglu_ffn``: gate/up/down of width round_up_8(int(int(32·4)·2/3)) = 88; q/k/v without bias."""
    m = model(vision={"use_swiglu_ffn": True, "qkv_bias": False})
    measured, library = _measure_and_count(m, images=[(30, 50), (16, 16)], mode=mode, frozen=frozen)
    assert {p: library[p] for p in measured} == measured


@pytest.mark.parametrize("mode,frozen", [("forward", ()), ("training", ()), ("training", ("vision_tower",))])
def test_moe_lm_every_part_exact(mode, frozen):
    """A Nemotron 3 style LM (MoE layers: router, top-2 of 6 plain experts, shared MLP) under the omni model."""
    measured, library = _measure_and_count(model("*E-E"), images=[(30, 50), (16, 40)], mode=mode, frozen=frozen)
    assert {p: library[p] for p in measured} == measured


@pytest.mark.parametrize("mode", ["forward", "training"])
def test_mamba_lm_tower_and_projector_exact(mode):
    measured, library = _measure_and_count(model("M*-"), images=[(30, 50)], mode=mode)
    for part in ("vision_tower", "projector"):
        assert library[part] == measured[part], part


AUDIO_MODEL = dict(audio_config=TINY_AUDIO, audio_token_id=993)


@pytest.mark.parametrize("audio,images", [([16000, 5000, 123], [(30, 50)]), ([7777], []), ([40000, 40000], [])],
                         ids=["3-clips+image", "1-clip", "2-equal-clips"])
def test_audio_forward_per_part(audio, images):
    measured, library = _measure_and_count(model(**AUDIO_MODEL), images=images, audio=audio)
    assert measured["audio"] > 0 and {p: library[p] for p in measured} == measured


@pytest.mark.parametrize("frozen", [(), ("audio",), ("vision_tower", "projector"), ("language_model",)],
                         ids=["all-trainable", "frozen-audio", "frozen-vision", "frozen-lm"])
def test_audio_training_per_part(frozen):
    measured, library = _measure_and_count(model(**AUDIO_MODEL), images=[(30, 50)], audio=[16000, 5000, 123],
                                           mode="training", frozen=frozen)
    assert {p: library[p] for p in measured} == measured


@pytest.mark.parametrize("mode", ["forward", "training"])
def test_audio_variant_gqa_biases(mode):
    """GQA (4 heads, 2 kv), attention biases on, convolution biases off, projector biases on."""
    m = model(audio_config=dict(TINY_AUDIO, num_attention_heads=4, num_key_value_heads=2, attention_bias=True,
                                convolution_bias=False, projection_bias=True), audio_token_id=993)
    measured, library = _measure_and_count(m, audio=[9000, 3000], mode=mode)
    assert {p: library[p] for p in measured} == measured


def test_audio_encoder_by_hand():
    """Two clips of 101 and 32 mel frames in one call: padded to 101 -> 51 -> 26 -> 13 frames, mel 16 -> 8 -> 4 -> 2;
    2 x 13 encoder rows, each clip attending over 13 positions and 2·13 − 1 relative positions."""
    from vlm_perf.flops import compute_flops
    from vlm_perf.stats import BatchStats

    spec = _spec(model(**AUDIO_MODEL))
    stats = BatchStats.from_batch(seq_lens=[40], audio_frames=[101, 32], spec=spec)
    assert (stats.audio_conv_frames_s2, stats.audio_conv_frames_s4, stats.audio_conv_frames_s8) == (102, 52, 26)
    assert (stats.audio_tokens, stats.audio_tokens_sq, stats.audio_out_tokens) == (26, 2 * 169, 13 + 4)
    got = compute_flops(spec, stats, mode="forward", causal="full").components
    c, d = 8, 32
    conv = (2 * 102 * 8 * 9 * c + 2 * 52 * 4 * (9 * c + c * c) + 2 * 26 * 2 * (9 * c + c * c) + 2 * 26 * (c * 2) * d
            + 2 * 2 * 26 * (d * 2 * d + 5 * d + d * d))  # subsampling + 2 layers' conv modules
    assert got["audio.conv"] == conv
    assert got["audio.attn_proj"] == 2 * (2 * 26 * d * 4 * d + 2 * (2 * 26 - 2) * d * d)
    assert got["audio.attn_core"] == 2 * (4 * d * 2 * 169 + 2 * d * (2 * 2 * 169 - 26))
    assert got["audio.mlp"] == 2 * 2 * 2 * 2 * 26 * d * 48
    assert got["audio.proj"] == 2 * 26 * (d * 40 + 40 * 64)


def test_patch_embed_and_prefix_tokens_by_hand():
    """One 6x10-patch image and one video of 2 tubelets of 4x6 patches, by hand: image patches through the
    48 -> 32 projection, tubelet patches through 96 -> 32; every layer sees patches + 5 prefix tokens per
    image / tubelet."""
    from vlm_perf.flops import compute_flops
    from vlm_perf.stats import BatchStats

    spec = _spec(model())
    stats = BatchStats.from_batch(seq_lens=[40], image_grids=[(1, 6, 10)], video_grids=[(2, 4, 6)], spec=spec)
    got = compute_flops(spec, stats, mode="forward", causal="full").components
    assert got["vision.patch_embed"] == 2 * 60 * 48 * 32 + 2 * 48 * 96 * 32
    rows = 60 + 5 + 2 * (24 + 5)
    assert got["vision.attn_proj"] == 2 * 2 * rows * 32 * 32 * 4  # 2 layers, q/k/v/o 32 x 32
    assert got["vision.attn_core"] == 2 * 4 * 32 * (65 ** 2 + 2 * 29 ** 2)  # QKᵀ and AV per sequence
    assert got["vision.mlp"] == 2 * 2 * rows * 2 * 32 * 128
    merged = 15 + 2 * 6  # prefix dropped, 2x2 pixel shuffle
    assert got["vision.merger"] == 2 * merged * (128 * 48 + 48 * 64)


@pytest.mark.parametrize("over", [{}, {"vision": {"use_swiglu_ffn": True, "qkv_bias": False}},
                                  {"vision": {"video_temporal_patch_size": 3}, "video_temporal_patch_size": 3},
                                  {"vision": {"mlp_ratio": 2.5, "num_registers": 0}}],
                         ids=["default", "swiglu-no-qkv-bias", "3-frame-tubelets", "ratio-no-registers"])
@pytest.mark.parametrize("audio", [None, TINY_AUDIO, dict(TINY_AUDIO, num_key_value_heads=1, attention_bias=True,
                                                          convolution_bias=False, projection_bias=True)],
                         ids=["no-audio", "audio", "audio-gqa-biases"])
def test_parameters_per_part(over, audio):
    from transformers.models.nemotron_h_omni.modeling_nemotron_h_omni import NemotronH_Omni_Reasoning_V3

    from vlm_perf.arch import spec_from_config
    from vlm_perf.arch.params import count_params

    cfg = tiny_config(**over, **({"audio_config": audio} if audio else {}))
    with torch.device("meta"):
        m = NemotronH_Omni_Reasoning_V3(cfg)
    numel = lambda mod: sum(p.numel() for p in mod.parameters())  # noqa: E731
    c = count_params(spec_from_config(config_dict(cfg)))
    assert (c.vision_tower, c.merger, c.total) == (numel(m.vision_model), numel(m.multi_modal_projector), numel(m))
    assert c.audio == (numel(m.audio_tower) + numel(m.embed_audio) if audio else 0)


@pytest.mark.parametrize("with_audio", [False, True], ids=["vision", "vision+audio"])
def test_hf_trainer_convention_equals_floating_point_ops(with_audio):
    from types import SimpleNamespace

    import transformers

    from vlm_perf.flops import compute_flops
    from vlm_perf.stats import BatchStats

    m = model(**AUDIO_MODEL) if with_audio else model()
    stats = BatchStats.from_batch(seq_len=12, samples=2, image_grids=[(1, 4, 4)], spec=_spec(m))
    trainer = transformers.Trainer.floating_point_ops(SimpleNamespace(model=m),
                                                      {"input_ids": torch.zeros((2, 12), dtype=torch.long)})
    assert compute_flops(_spec(m), stats, "hf-trainer").total == trainer


def test_refusals():
    from vlm_perf.arch import spec_from_config
    from vlm_perf.arch.families import FAMILIES
    from vlm_perf.errors import ConfigError, UnsupportedModelError

    base = config_dict(tiny_config())
    with pytest.raises(UnsupportedModelError, match="layerdrop"):
        spec_from_config(dict(base, audio_config={"hidden_size": 32, "num_attention_heads": 2, "num_mel_bins": 16}))
    with pytest.raises(UnsupportedModelError, match="subsampling_factor"):
        spec_from_config(dict(base, audio_config=dict(TINY_AUDIO, subsampling_factor=4)))
    with pytest.raises(ConfigError, match="multiple of 8"):
        spec_from_config(dict(base, audio_config=dict(TINY_AUDIO, num_mel_bins=20)))
    with pytest.raises(UnsupportedModelError, match="no audio_config"):
        FAMILIES["nemotron_h_omni"].media.audio(spec_from_config(base), 16000)
    with pytest.raises(ConfigError, match="vision_hidden_size"):
        spec_from_config(dict(base, vision_hidden_size=64))
    with pytest.raises(UnsupportedModelError, match="multi-token"):
        spec_from_config(dict(base, text_config=dict(base["text_config"], num_nextn_predict_layers=1)))
    rule = FAMILIES["nemotron_h_omni"].media
    with pytest.raises(UnsupportedModelError, match="EVS"):
        rule.video(spec_from_config(dict(base, video_pruning_rate=0.5), processor=PROCESSOR), 4, 24, 24)
    with pytest.raises(ConfigError, match="differs from video_temporal_patch_size"):
        spec_from_config(dict(base, vision_config=dict(base["vision_config"], video_temporal_patch_size=3)))
    small_context = {"preprocessor_config.json": dict(IMAGE_PROCESSOR, max_model_len=10)}
    with pytest.raises(UnsupportedModelError, match="number of images"):
        rule.image(spec_from_config(base, processor=small_context), 30, 50)
    with pytest.raises(UnsupportedModelError, match="patch_size"):
        rule.image(spec_from_config(base, processor={"preprocessor_config.json": {"patch_size": 16}}), 30, 50)


# --------------------------------------------------------------------------- media rules fuzzed
hyp = pytest.importorskip("hypothesis")
from hypothesis import given, settings, strategies as st  # noqa: E402


_specs: dict = {}


def _fuzz_spec(patch, files):
    from vlm_perf.arch import spec_from_config

    key = (patch, repr(files))
    if key not in _specs:
        audio = {"audio_config": TINY_AUDIO} if "audio" in files else {}
        _specs[key] = spec_from_config(config_dict(tiny_config(vision={"patch_size": patch}, **audio)),
                                       processor={k: v for k, v in files.items() if k != "audio"})
    return _specs[key]


@settings(derandomize=True, deadline=None, max_examples=200)
@given(size=st.tuples(st.integers(1, 5000), st.integers(1, 5000)), patch=st.sampled_from([14, 16]),
       bounds=st.sampled_from([(1024, 13312), (256, 4096), (16, 64), (64, 64), (4, 16)]))
def test_image_rule_fuzzed_against_transformers(size, patch, bounds):
    from vlm_perf.arch.families import FAMILIES
    from vlm_perf.errors import UnsupportedModelError

    lo, hi = bounds
    spec = _fuzz_spec(patch, {"preprocessor_config.json": {"patch_size": patch, "min_num_patches": lo,
                                                           "max_num_patches": hi}})
    rule = FAMILIES["nemotron_h_omni"].media
    try:
        rows, cols = hf_image_functions()["get_patch_grid_size"](size[0], size[1], patch, 2, lo, hi)
    except ZeroDivisionError:  # a grid scaled to 0 rows / columns: transformers fails, the rule refuses
        rows = cols = 0
    if not rows * cols:
        with pytest.raises(UnsupportedModelError, match="too elongated"):
            rule.image(spec, *size)
        return
    media = rule.image(spec, *size)
    assert media.grid == (1, rows, cols) and media.visual_tokens == rows * cols // 4


def test_image_budget_is_per_call_maximum_with_shipped_defaults():
    """Several images in one call: with (max_model_len − 4)·4 >= max_num_patches each gets max_num_patches."""
    import numpy as np

    images = [np.zeros((h, w, 3), dtype=np.uint8) for h, w in [(300, 500), (90, 40), (2000, 30)]]
    _, grids = process_images(images, patch=16, min_patches=1024, max_patches=13312)
    from vlm_perf.arch import spec_from_config
    from vlm_perf.arch.families import FAMILIES

    spec = spec_from_config(config_dict(tiny_config(vision={"patch_size": 16})))  # the class defaults
    got = [FAMILIES["nemotron_h_omni"].media.image(spec, im.shape[0], im.shape[1]).grid[1:] for im in images]
    assert got == [tuple(g) for g in grids.tolist()]


@settings(derandomize=True, deadline=None, max_examples=200)
@given(size=st.tuples(st.integers(1, 4000), st.integers(1, 4000)), target=st.sampled_from([1024, 256, 36, 7]),
       keep=st.booleans(), frames=st.integers(1, 9))
def test_video_rule_fuzzed_against_transformers(size, target, keep, frames):
    from transformers.models.nemotron_h_omni.video_processing_nemotron_h_omni import \
        NemotronH_Omni_Reasoning_V3VideoProcessor

    from vlm_perf.arch.families import FAMILIES

    proc = NemotronH_Omni_Reasoning_V3VideoProcessor(patch_size=16, video_target_num_patches=target,
                                                     video_maintain_aspect_ratio=keep)
    cols, rows = proc._compute_target_patches(*size)  # (w_patches, h_patches)
    spec = _fuzz_spec(16, {"video_preprocessor_config.json": {"patch_size": 16, "video_target_num_patches": target,
                                                              "video_maintain_aspect_ratio": keep}})
    media = FAMILIES["nemotron_h_omni"].media.video(spec, frames, *size)
    assert media.grid == (math.ceil(frames / 2), rows, cols)
    assert media.visual_tokens == math.ceil(frames / 2) * rows * cols // 4


@settings(derandomize=True, deadline=None, max_examples=40)
@given(samples=st.lists(st.integers(1, 60000), min_size=1, max_size=3))
def test_audio_rule_fuzzed_against_transformers(samples):
    """Mel frames = the frames ParakeetFeatureExtractor marks + 1 (what the model reads); LM tokens = the processor's
    own ``_estimate_audio_num_embeddings``; both per clip, whatever the other clips of the call."""
    from types import SimpleNamespace

    import numpy as np
    from transformers import ParakeetFeatureExtractor
    from transformers.models.nemotron_h_omni.processing_nemotron_h_omni import NemotronH_Omni_Reasoning_V3Processor

    from vlm_perf.arch.families import FAMILIES

    spec = _fuzz_spec(4, {"audio": repr(TINY_AUDIO)})
    out = ParakeetFeatureExtractor(feature_size=16)([np.zeros(n, dtype=np.float32) for n in samples],
                                                    sampling_rate=16000, return_attention_mask=True)
    stub = SimpleNamespace(audio_hop_length=160, audio_subsampling_factor=8)
    for n, mask in zip(samples, out["attention_mask"]):
        clip = FAMILIES["nemotron_h_omni"].media.audio(spec, n)
        assert clip.mel_frames == int(np.asarray(mask).sum()) + 1
        assert clip.audio_tokens == max(1, NemotronH_Omni_Reasoning_V3Processor._estimate_audio_num_embeddings(stub, n))
