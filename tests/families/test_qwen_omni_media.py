"""Omni thinkers' audio media rule (samples -> mel frames -> LM tokens) against transformers' own
WhisperFeatureExtractor called with each processor class's ``audio_kwargs``, and the processing modules' own
``_get_feat_extract_output_lengths``: fixed cases plus a seeded, bounded hypothesis fuzz (several clips per call:
the padding length is the call's longest clip for Qwen3-Omni, max_length for Qwen2.5-Omni, which truncates)."""

from __future__ import annotations

import pytest

pytest.importorskip("transformers")

from vlm_perf.arch import load_model  # noqa: E402
from vlm_perf.arch.families import FAMILIES  # noqa: E402
from vlm_perf.errors import VlmPerfError  # noqa: E402

PRESETS = {"qwen2_5_omni": "qwen2.5-omni-7b", "qwen3_omni_moe": "qwen3-omni-30b-a3b"}
MEL = 16  # the mel-bin count does not change lengths; a small one keeps the STFT cheap


def _hf(family, clips, chunk_length=None):
    from tests.verify.families.qwen_omni import feature_extract

    kw = {} if chunk_length is None else {"chunk_length": chunk_length}
    _, mask, tokens = feature_extract(family, clips, mel=MEL, **kw)
    return [int(x) for x in mask.sum(-1)], tokens


def _ours(family, clips, processor=None):
    spec = load_model(PRESETS[family])
    if processor:
        from dataclasses import replace

        spec = replace(spec, processor=processor)
    rule = FAMILIES[family].media
    out = [rule.audio(spec, n, longest=max(clips)) for n in clips]
    return [a.mel_frames for a in out], [a.audio_tokens for a in out]


@pytest.mark.parametrize("family", list(PRESETS))
@pytest.mark.parametrize("clips", [[16000], [48077, 9000], [401], [160 * 200, 160 * 199 + 1, 5000], [16000 * 7 + 3]])
def test_audio_rule_matches_feature_extractor(family, clips):
    assert _ours(family, clips) == _hf(family, clips)


def test_qwen2_5_omni_truncates_at_n_samples():
    """Qwen2.5-Omni pads to max_length and truncates: a 3 s cap (chunk_length 3 -> n_samples 48000, 300 frames)."""
    clips = [16000 * 5, 16000 * 2]
    pre = {"preprocessor_config.json": {"chunk_length": 3}}
    assert _ours("qwen2_5_omni", clips, pre) == _hf("qwen2_5_omni", clips, chunk_length=3)
    assert _ours("qwen2_5_omni", clips, pre)[0] == [300, 200]


def test_qwen3_omni_does_not_truncate():
    frames, tokens = _ours("qwen3_omni_moe", [16000 * 40])
    assert frames == [4000] and tokens == [40 * 13]


@pytest.mark.parametrize("bad", [0, -5, 2.5, True])
def test_bad_clip_length_is_a_typed_error(bad):
    spec = load_model("qwen3-omni-30b-a3b")
    with pytest.raises(VlmPerfError, match="audio length"):
        FAMILIES["qwen3_omni_moe"].media.audio(spec, bad)


def test_models_without_audio_refuse_audio():
    spec = load_model("qwen2.5-vl-7b")
    with pytest.raises(VlmPerfError, match="no audio encoder"):
        FAMILIES["qwen2_5_vl"].media.audio(spec, 16000)


@pytest.mark.parametrize("family", list(PRESETS))
def test_fuzzed_clip_lengths(family):
    pytest.importorskip("hypothesis")
    from hypothesis import given, settings, strategies as st

    @settings(derandomize=True, deadline=None, max_examples=25)
    @given(clips=st.lists(st.integers(401, 16000 * 12), min_size=1, max_size=4))
    def check(clips):
        assert _ours(family, clips) == _hf(family, clips)

    check()
