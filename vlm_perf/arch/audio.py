"""Audio clip geometry of the Omni thinkers' audio encoders (pure, no I/O): mel frames -> chunks -> encoder
tokens -> LM tokens, as transformers' ``chunk_and_pad_features`` / ``_get_feat_extract_output_lengths`` compute
them (models/qwen2_5_omni, models/qwen3_omni_moe). ``h(n) = (n - 1) // 2 + 1`` is one kernel-3 stride-2
convolution. The batch-level statistics built on these live in :mod:`vlm_perf.stats.audio`.
"""

from __future__ import annotations

from .blocks import halve
from .spec import AudioSpec


def chunk_lengths(frames: int, chunk: int) -> list[int]:
    """The chunks transformers cuts a clip of ``frames`` mel frames into: full chunks, then the remainder."""
    full, tail = divmod(frames, chunk)
    return [chunk] * full + ([tail] if tail else [])


def chunk_tokens(audio: AudioSpec, c: int) -> int:
    """Encoder positions one chunk of ``c`` mel frames yields: ``h(c)`` (conv1d) or ``h(h(h(c)))`` (conv2d)."""
    return halve(c) if audio.frontend == "conv1d" else halve(halve(halve(c)))


def clip_tokens(audio: AudioSpec, frames: int) -> int:
    """Encoder positions of a clip of ``frames`` mel frames (sum over its chunks; Phi-4-multimodal's ``nemo``
    front-end: three stride-2 convolutions over the whole clip)."""
    if audio.frontend == "nemo":
        return halve(halve(halve(frames)))
    return sum(chunk_tokens(audio, c) for c in chunk_lengths(frames, audio.chunk_frames))


def clip_out_tokens(audio: AudioSpec, frames: int) -> int:
    """LM placeholder tokens of a clip: after the stride-2 average pool ``(tokens - 2) // 2 + 1`` (conv1d,
    Qwen2.5-Omni), the encoder positions themselves (conv2d, Qwen3-Omni)."""
    tokens = clip_tokens(audio, frames)
    if audio.frontend == "nemo":
        return tokens  # audio_embed_sizes: ceil(frames / 8) (downsample_rate 1)
    return (tokens - 2) // 2 + 1 if audio.frontend == "conv1d" else tokens
