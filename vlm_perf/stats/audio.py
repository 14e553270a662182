"""Audio statistics of one audio-encoder call (Qwen2.5-Omni / Qwen3-Omni thinkers; pure, no I/O).

A thinker runs its audio encoder ONCE per forward pass over every audio clip of the batch
(``get_audio_features``: the clips' mel frames concatenated, ``feature_lens`` per clip). Inside
(transformers ``chunk_and_pad_features``): each clip is cut into chunks of ``2 * n_window`` mel frames (the
last one shorter), and **every chunk is right-padded to the longest chunk of the call** before the
convolutions, which therefore run on ``chunks x longest`` frames (padding included); the encoder layers
then run on the real positions only. So the statistics are exact per encoder call and additive over calls
(micro-batches), not over clips: :func:`audio_call_stats` takes all the clips of one call.

Per clip of ``L`` mel frames (``h(n) = (n - 1) // 2 + 1``, one kernel-3 stride-2 convolution):

* ``conv1d`` (Qwen2.5-Omni): chunk tokens ``h(c)``; attention within each chunk; output rows (LM
  placeholders) ``(h(L) - 2) // 2 + 1`` after the stride-2 average pool;
* ``parakeet`` (Nemotron omni's FastConformer): no chunks (one chunk per clip: ``n_window`` >= any clip), every
  clip padded to the call's longest ``P``; tokens ``h(h(h(P)))`` per clip, attention over them; output rows (LM
  placeholders) ``h(h(h(L)))``;
* ``conv2d`` (Qwen3-Omni): chunk tokens ``h(h(h(c)))`` (transformers writes a full chunk as the constant 13,
  equal for ``n_window`` 50, the only value the family accepts); attention in windows of
  ``longest chunk's tokens x (n_window_infer // (2 n_window))`` tokens per clip (the call's longest chunk
  again); output rows = tokens.

Fields (see :class:`vlm_perf.stats.BatchStats`): ``audio_items`` clips, ``audio_conv_frames`` = chunks x
longest chunk, ``audio_conv_frames_s2/_s4/_s8`` = chunks x that length halved 1/2/3 times (the convolutions'
output positions), ``audio_tokens`` encoder positions, ``audio_tokens_sq`` sum of squared attention-sequence
lengths, ``audio_out_tokens`` output-head rows = the clips' LM placeholder tokens.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Sequence

from ..arch.audio import chunk_lengths, chunk_tokens, clip_out_tokens, clip_tokens
from ..arch.blocks import halve as _h
from ..errors import InputError

if TYPE_CHECKING:  # pragma: no cover
    from ..arch.spec import AudioSpec

AUDIO_FIELDS = ("audio_items", "audio_conv_frames", "audio_conv_frames_s2", "audio_conv_frames_s4",
                "audio_conv_frames_s8", "audio_tokens", "audio_tokens_sq", "audio_out_tokens", "audio_calls",
                "audio_sequences")
NEMO_MAX_SEQ = 500  # Phi4MultimodalAudioModel.forward: max_seq_len, longer encoder inputs are cut into 500-row pieces
MAX_MEL_FRAMES = 1 << 26  # ~7.8 days of audio at 100 frames/s: anything larger is a unit mistake


def validate_frames(mel_frames: Sequence[int], where: str = "audio") -> list[int]:
    out = []
    for i, f in enumerate(mel_frames):
        if isinstance(f, bool) or not isinstance(f, int) or not 0 < f <= MAX_MEL_FRAMES:
            raise InputError(f"{where} #{i + 1}: mel frames must be an integer from 1 to {MAX_MEL_FRAMES}, got {f!r}")
        out.append(f)
    return out


def audio_call_stats(audio: "AudioSpec", mel_frames: Sequence[int]) -> dict[str, int]:
    """The ``audio_*`` statistics of ONE encoder call over clips of ``mel_frames`` mel frames each."""
    frames = validate_frames(mel_frames)
    out = dict.fromkeys(AUDIO_FIELDS, 0)
    if not frames:
        return out
    if audio.frontend == "sscp":
        return _sscp_call_stats(audio, frames)
    if audio.frontend == "nemo":
        return _nemo_call_stats(frames)
    chunks = [chunk_lengths(f, audio.chunk_frames) for f in frames]
    all_chunks = [c for per in chunks for c in per]
    longest = max(all_chunks)
    n = len(all_chunks)
    s2 = _h(longest)
    s4 = _h(s2)
    s8 = _h(s4)
    out.update(audio_items=len(frames), audio_conv_frames=n * longest, audio_conv_frames_s2=n * s2,
               audio_conv_frames_s4=n * s4, audio_conv_frames_s8=n * s8)
    if audio.frontend == "conv1d":
        lengths = [chunk_tokens(audio, c) for c in all_chunks]
    elif audio.frontend == "parakeet":  # whole clips padded to the call's longest: every clip attends over s8
        lengths = [s8] * len(frames)
    else:
        window = max(chunk_tokens(audio, c) for c in all_chunks) * (audio.n_window_infer // audio.chunk_frames)
        lengths = []
        for f in frames:
            full, rest = divmod(clip_tokens(audio, f), window)
            lengths += [window] * full + ([rest] if rest else [])
    out["audio_sequences"] = len(lengths)
    out["audio_tokens"] = sum(lengths)
    out["audio_tokens_sq"] = sum(x * x for x in lengths)
    out["audio_out_tokens"] = sum(clip_out_tokens(audio, f) for f in frames)
    out["audio_calls"] = 1
    return out


def _sscp_call_stats(audio: "AudioSpec", frames: list[int]) -> dict[str, int]:
    """Gemma 3n (``frontend="sscp"``): the call's clips are padded to the longest (T mel frames); every position
    runs: ``audio_conv_frames`` B·T, ``_s2`` B·T_1 and ``_s4`` B·T_2 after the two convolutions (time padded
    (0, k - 1): T_i = (T_(i-1) - 1) // s_i + 1), ``audio_tokens`` B·T_2 conformer rows, ``audio_tokens_sq`` the
    attention's block-padded query rows B·⌈T_2/W⌉·W (W = ``n_window``, the attention chunk), ``audio_out_tokens``
    B·⌈T_2/r⌉ after the reduction stride r."""
    from ..arch.blocks import sscp_out

    clips, longest = len(frames), max(frames)
    (k0, _), (k1, _) = audio.sscp_kernels
    (s0, _), (s1, _) = audio.sscp_strides
    t1 = sscp_out(longest, k0, s0, k0 - 1)
    t2 = sscp_out(t1, k1, s1, k1 - 1)
    w, r = audio.n_window, audio.reduction
    out = dict.fromkeys(AUDIO_FIELDS, 0)
    out.update(audio_items=clips, audio_conv_frames=clips * longest, audio_conv_frames_s2=clips * t1,
               audio_conv_frames_s4=clips * t2, audio_tokens=clips * t2, audio_tokens_sq=clips * -(-t2 // w) * w,
               audio_out_tokens=clips * -(-t2 // r), audio_calls=1,
               audio_sequences=clips)  # each padded clip: one conformer sequence
    return out


def _nemo_call_stats(frames: list[int]) -> dict[str, int]:
    """Phi-4-multimodal (``Phi4MultimodalAudioModel``): the B clips' features are padded to the longest clip's T
    mel frames and subsampled by three stride-2 convolutions to T_3 = h(h(h(T))) rows per clip; when T_3 exceeds
    500, every clip is padded to a multiple of 500 and cut into 500-row sequences (``unfold_tensor``), else each
    clip is one sequence of T_3 rows. The projection then runs on the B x T_3 rows (padding included)."""
    b, longest = len(frames), max(frames)
    s2 = _h(longest)
    s4 = _h(s2)
    s8 = _h(s4)
    pieces = -(-s8 // NEMO_MAX_SEQ) if s8 > NEMO_MAX_SEQ else 1
    length = NEMO_MAX_SEQ if s8 > NEMO_MAX_SEQ else s8
    return dict(audio_items=b, audio_conv_frames=b * longest, audio_conv_frames_s2=b * s2,
                audio_conv_frames_s4=b * s4, audio_conv_frames_s8=b * s8, audio_tokens=b * pieces * length,
                audio_tokens_sq=b * pieces * length * length, audio_out_tokens=b * s8, audio_sequences=b * pieces,
                audio_calls=1)
