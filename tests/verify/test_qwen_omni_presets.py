"""Omni thinker presets at full scale: parameters against transformers' meta-device count and the published
thinker total, and the audio encoder's FLOPs per second of audio by hand arithmetic (written here from the
transformers source: ``Qwen3OmniMoeAudioEncoder`` / ``Qwen2_5OmniAudioEncoder`` forward)."""

from __future__ import annotations

import pytest

from vlm_perf.arch import load_model, preset_config
from vlm_perf.arch.params import count_params
from vlm_perf.flops import compute_flops
from vlm_perf.stats import BatchStats

QWEN3_OMNI_THINKER_PUBLISHED = 31_719_205_488  # thinker module dump, ai-bot-pro/achatbot PR #196


@pytest.mark.parametrize("name,cls", [("qwen2.5-omni-7b", "Qwen2_5OmniThinker"), ("qwen3-omni-30b-a3b", "Qwen3OmniMoeThinker")])
def test_preset_equals_meta_device_count(name, cls):
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    thinker = dict(preset_config(name)["thinker_config"])
    thinker.pop("model_type")
    config = getattr(transformers, cls + "Config")(**thinker)
    with torch.device("meta"):
        model = getattr(transformers, cls + "ForConditionalGeneration")(config)
    numel = lambda mod: sum(p.numel() for p in mod.parameters())  # noqa: E731
    c = count_params(load_model(name))
    assert c.total == numel(model)
    assert c.audio == numel(model.model.audio_tower)
    assert c.lm == numel(model.model.language_model) + numel(model.lm_head)


def test_qwen3_omni_published_thinker_total():
    assert count_params(load_model("qwen3-omni-30b-a3b")).total == QWEN3_OMNI_THINKER_PUBLISHED


def _audio_forward(name, frames):
    spec = load_model(name)
    stats = BatchStats.from_batch(seq_len=4096, spec=spec, audio_frames=frames)
    return compute_flops(spec, stats, mode="forward").components, stats


def test_qwen3_omni_one_second_by_hand():
    """100 mel frames (1 s) = one chunk: Conv2d 3x3/2 over (128 x 100) -> (64 x 50) -> (32 x 25) -> (16 x 13),
    480 channels; conv_out 480*16 -> 1280 on 13 frames; 32 layers of width 1280 (FFN 5120) on 13 tokens,
    one attention window (13 <= 104); proj1 1280 -> 1280, proj2 1280 -> 2048 on 13 tokens."""
    comp, stats = _audio_forward("qwen3-omni-30b-a3b", [100])
    c, d = 480, 1280
    conv = 2 * 64 * 50 * 9 * c + 2 * 32 * 25 * 9 * c * c + 2 * 16 * 13 * 9 * c * c + 2 * 13 * (c * 16) * d
    assert comp["audio.conv"] == conv  # 4.46 GFLOPs; the second conv alone 3.32
    assert round(2 * 32 * 25 * 9 * c * c / 1e9, 2) == 3.32
    assert comp["audio.attn_proj"] == 32 * 2 * 13 * 4 * d * d
    assert comp["audio.mlp"] == 32 * 2 * 13 * 2 * d * 5120
    assert comp["audio.attn_core"] == 32 * 4 * d * 13 * 13
    assert comp["audio.proj"] == 2 * 13 * (d * d + d * 2048)
    assert stats.audio_out_tokens == 13


def test_qwen3_omni_windows_and_padding_by_hand():
    """Two clips in one call: 950 frames (9 full chunks + 50) and 120 (1 + 20). Every chunk is padded to 100 frames
    for the convolutions (12 chunks x 100); tokens 9*13 + 7 = 124 and 13 + 3 = 16 (20 -> 10 -> 5 -> 3); windows of
    13 * (800 // 100) = 104 tokens per clip: [104, 20] and [16]."""
    _, s = _audio_forward("qwen3-omni-30b-a3b", [950, 120])
    assert (s.audio_conv_frames, s.audio_conv_frames_s2, s.audio_conv_frames_s8) == (1200, 12 * 50, 12 * 13)
    assert (s.audio_tokens, s.audio_out_tokens) == (140, 140)
    assert s.audio_tokens_sq == 104 ** 2 + 20 ** 2 + 16 ** 2


def test_qwen2_5_omni_clips_by_hand():
    """Qwen2.5-Omni: chunks of 200 frames. 450 frames -> chunks [200, 200, 50] padded to 200: Conv1d rows 3 x 200,
    stride-2 conv rows 3 x 100; tokens 100 + 100 + 25 = 225, attention per chunk; pooled (225 - 2)//2 + 1 = 112."""
    comp, s = _audio_forward("qwen2.5-omni-7b", [450])
    assert (s.audio_conv_frames, s.audio_conv_frames_s2) == (600, 300)
    assert (s.audio_tokens, s.audio_tokens_sq, s.audio_out_tokens) == (225, 100 ** 2 * 2 + 25 ** 2, 112)
    d = 1280
    assert comp["audio.conv"] == 2 * 600 * (128 * 3) * d + 2 * 300 * (3 * d) * d
    assert comp["audio.proj"] == 2 * 112 * d * 3584


def test_audio_needs_an_audio_encoder():
    from vlm_perf.errors import InputError

    with pytest.raises(InputError, match="no audio encoder"):
        BatchStats.from_batch(seq_len=100, spec=load_model("qwen2.5-vl-7b"), audio_frames=[100])


def test_training_frozen_audio_is_forward_only():
    spec = load_model("qwen3-omni-30b-a3b")
    stats = BatchStats.from_batch(seq_len=4096, spec=spec, audio_frames=[3000])
    fwd = compute_flops(spec, stats, mode="forward").parts["audio"]
    assert compute_flops(spec, stats, mode="training", frozen=("audio",)).parts["audio"] == fwd
    trained = compute_flops(spec, stats, mode="training").parts["audio"]
    first_conv = 2 * 30 * 64 * 50 * 9 * 480  # reads the mel features: no input gradient
    assert trained == 3 * fwd - first_conv


def test_no_audio_clips_is_stated():
    spec = load_model("qwen2.5-omni-7b")
    silent = compute_flops(spec, BatchStats.from_batch(seq_len=1024, spec=spec, image_grids=[(1, 32, 32)]))
    assert silent.parts["audio"] == 0 and any("no audio clips" in n for n in silent.notes)
    heard = compute_flops(spec, BatchStats.from_batch(seq_len=1024, spec=spec, audio_frames=[500]))
    assert heard.parts["audio"] > 0 and not any("no audio clips" in n for n in heard.notes)
