"""Qwen2.5-Omni / Qwen3-Omni thinkers (transformers ``*ThinkerForConditionalGeneration``) against FlopCounterMode,
per part: ``vision_tower``, ``projector``, ``audio``, ``language_model``.

Reference: the harness ``tests/verify/families/qwen_omni.py`` (tiny random thinkers, eager attention and experts,
float64; images through ``Qwen2VLImageProcessorPil``, audio through ``WhisperFeatureExtractor`` with the processor
classes' ``audio_kwargs``). The library starts from the same pixel sizes and audio lengths in samples, derives
grids, mel frames and LM tokens with its own media rule (``OmniMedia``), builds the batch statistics with
``BatchStats.from_batch(audio_frames=...)`` (one audio-encoder call) and counts ``exact`` with ``causal="full"``.
Only the thinker is measured: the talker and the speech decoder are not part of training FLOPs here.
"""

from __future__ import annotations

import pytest

pytestmark = pytest.mark.measured
torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from .families import measure_family  # noqa: E402
from .families.qwen_omni import PIXELS, build_model, tiny_config  # noqa: E402

PROCESSOR = {"preprocessor_config.json": {"min_pixels": PIXELS["min_pixels"], "max_pixels": PIXELS["max_pixels"]}}
SR = 16000
# several media per case: clips shorter than one chunk, several chunks with a short tail, exact chunk multiples,
# images with and without audio (Qwen2.5 tiny chunk: 16 mel frames = 2560 samples; Qwen3: 100 frames = 16000)
CASES = [dict(image_sizes=[(30, 50)], audio_samples=[3 * SR + 77, 9000]),
         dict(audio_samples=[2000]),
         dict(image_sizes=[(30, 50), (8, 8)], audio_samples=[SR, 2 * SR, 700]),
         dict(image_sizes=[(64, 40)]),
         dict(video_grids=[(2, 8, 12)], audio_samples=[5000]),  # a video (windows span frames) with its audio
         dict(image_sizes=[(30, 50)], video_grids=[(3, 4, 6), (1, 8, 8)])]
FAMILIES = ("qwen2_5_omni", "qwen3_omni_moe")


def _id(case):
    out = ["+".join(f"{h}x{w}" for h, w in case.get("image_sizes", ()))]
    out += ["video" + "+".join("x".join(map(str, g)) for g in case.get("video_grids", ()))]
    out += ["audio" + "+".join(str(n) for n in case.get("audio_samples", ()))]
    return "-".join(p for p in out if p and p not in ("audio", "video"))


@pytest.fixture(scope="module", params=FAMILIES)
def model(request):
    return build_model(tiny_config(request.param), 0)


def _family(model) -> str:
    return model.config.model_type.removesuffix("_thinker")


def _library(model, measured, case, mode="forward", frozen=()):
    from vlm_perf.arch import spec_from_config
    from vlm_perf.arch.families import FAMILIES as REG
    from vlm_perf.flops import compute_flops
    from vlm_perf.stats import BatchStats

    spec = spec_from_config(model.config.to_dict(), name="tiny-omni", processor=PROCESSOR)
    rule = REG[spec.family].media
    images = [rule.image(spec, h, w) for h, w in case.get("image_sizes", ())]
    clips = case.get("audio_samples", ())
    audio = [rule.audio(spec, n, longest=max(clips)) for n in clips]  # one feature-extractor call
    assert [m.grid for m in images] == measured.media["image_grids"]  # the media rule agrees with HF's processor
    assert [a.mel_frames for a in audio] == measured.media["audio_mel_frames"]  # ... and with its feature extractor
    assert [a.audio_tokens for a in audio] == measured.media["audio_tokens"]
    stats = BatchStats.from_batch(seq_lens=[measured.media["seq_len"]], image_grids=[m.grid for m in images],
                                  video_grids=[tuple(g) for g in case.get("video_grids", ())],
                                  audio_frames=[a.mel_frames for a in audio], spec=spec)
    return compute_flops(spec, stats, mode=mode, causal="full", frozen=frozen)


@pytest.mark.parametrize("case", CASES, ids=_id)
def test_forward_per_part_exact(model, case):
    m = measure_family(_family(model), model=model, **case)
    lib = _library(model, m, case)
    assert lib.parts == m.parts("forward")
    assert ("audio_samples" in case) == (lib.parts["audio"] > 0)


@pytest.mark.parametrize("frozen", [(), ("vision_tower",), ("audio",), ("vision_tower", "audio"), ("language_model",),
                                    ("projector", "language_model")],
                         ids=["all-trainable", "frozen-tower", "frozen-audio", "frozen-tower+audio", "frozen-lm",
                              "frozen-projector+lm"])
@pytest.mark.parametrize("case", CASES[:1] + CASES[2:3] + CASES[4:5], ids=_id)
def test_training_per_part_exact(model, case, frozen):
    m = measure_family(_family(model), model=model, mode="training", frozen=frozen, **case)
    lib = _library(model, m, case, mode="training", frozen=frozen)
    assert lib.parts == m.parts("training")


def test_parameters_per_part(model):
    from vlm_perf.arch import spec_from_config
    from vlm_perf.arch.params import count_params
    from vlm_perf.arch.blocks import inventory_params

    spec = spec_from_config(model.config.to_dict(), name="tiny-omni")
    numel = lambda mod: sum(p.numel() for p in mod.parameters())  # noqa: E731
    visual = model.model.visual
    mergers = numel(visual.merger) + sum(numel(m) for m in getattr(visual, "merger_list", []))
    c = count_params(spec)
    assert c.vision_tower == numel(visual) - mergers
    assert c.merger == mergers
    assert inventory_params(spec.blocks, "audio") == numel(model.model.audio_tower)
    assert c.lm == numel(model.model.language_model) + numel(model.lm_head)
    assert c.total == numel(model)


def test_forward_fuzzed_audio_and_images(model):
    """Seeded, bounded fuzz: random clip lengths (sub-chunk to several chunks; from 401 samples: shorter clips fail in
    the feature extractor's reflect-padded STFT) and image sizes, one encoder call."""
    pytest.importorskip("hypothesis")
    from hypothesis import given, settings, strategies as st

    chunk = model.config.audio_config.n_window * 2 * 160  # samples per full chunk

    @settings(derandomize=True, deadline=None, max_examples=6)
    @given(images=st.lists(st.tuples(st.integers(4, 80), st.integers(4, 80)), max_size=1),
           clips=st.lists(st.integers(401, 3 * chunk + 1000), min_size=1, max_size=3))
    def check(images, clips):
        case = dict(image_sizes=images, audio_samples=clips)
        m = measure_family(_family(model), model=model, **case)
        assert _library(model, m, case).parts == m.parts("forward")

    check()


@pytest.mark.parametrize("family", FAMILIES)
def test_video_rule_is_qwen2vl_video_processor(family):
    """Qwen2VLVideoProcessor (both Omni processors map to it; it needs torchvision, absent here): each frame
    smart_resized with the PROCESSOR CLASS's videos_kwargs bounds 128..768 x factor^2 (factor = patch x merge:
    28 for Qwen2.5-Omni, 32 for Qwen3-Omni), frames padded to a multiple of T_p = 2. By hand for one size."""
    from vlm_perf.arch import load_model
    from vlm_perf.arch.families import FAMILIES as REG
    from vlm_perf.arch.resize import smart_resize

    spec = load_model({"qwen2_5_omni": "qwen2.5-omni-7b", "qwen3_omni_moe": "qwen3-omni-30b-a3b"}[family])
    factor, patch = (28, 14) if family == "qwen2_5_omni" else (32, 16)
    got = REG[family].media.video(spec, 5, 720, 1280)
    h, w = smart_resize(720, 1280, factor, 128 * factor * factor, 768 * factor * factor)
    assert got.grid == (3, h // patch, w // patch)
    assert got.visual_tokens == 3 * (h // patch) * (w // patch) // 4
    assert h * w <= 768 * factor * factor
