"""Qwen2.5-Omni and Qwen3-Omni(-MoE) **thinkers**: a Qwen ViT + merger, an audio encoder, and a Qwen LM.

Only the thinker is modelled (transformers ``Qwen2_5OmniThinkerForConditionalGeneration`` /
``Qwen3OmniMoeThinkerForConditionalGeneration``): it is what text-output training trains. The talker and the
token2wav / code2wav speech decoder are NOT part of the inventory (neither their parameters nor their FLOPs):
a run that trains the talker is not counted by this family. A hub ``config.json`` (``model_type``
``qwen2_5_omni`` / ``qwen3_omni_moe``) is read through its ``thinker_config``; a thinker config on its own
(``qwen2_5_omni_thinker`` / ``qwen3_omni_moe_thinker``, what ``save_pretrained`` of the thinker writes) directly.

* Vision: Qwen2.5-Omni's tower is Qwen2.5-VL's (windowed attention, gated MLP, RMSNorm); Qwen3-Omni's is
  Qwen3-VL's (learned position table, deepstack mergers, stored as ``visual.merger_list``) -- read with
  :mod:`.qwen_vl`'s reader. Class defaults are not checkpoint values (``Qwen2_5OmniVisionEncoderConfig.hidden_size``
  defaults to 3584): every width is read from the file.
* Audio (its own part ``audio``; :class:`~vlm_perf.arch.blocks.AudioConvFrontEnd`, ``AudioLayers``, ``AudioHead``):
  Qwen2.5-Omni: Conv1d(mel -> d, k3), Conv1d(d -> d, k3, s2), ``encoder_layers`` Whisper layers (k_proj without
  bias) attending within chunks of ``2 n_window`` mel frames, stride-2 average pool, LayerNorm, Linear(d -> out);
  an ``audio_bos_eos_token`` Embedding(2, out) is stored but never used in the forward. Qwen3-Omni (AuT): three
  Conv2d 3x3 stride 2 (1 -> c -> c -> c), ``conv_out`` Linear(c·F -> d, no bias), layers (k_proj biased)
  attending within windows of ``n_window_infer`` frames, LayerNorm, proj1 d -> d, GELU, proj2 d -> out. The
  chunk padding and windows are batch-level: see :mod:`vlm_perf.stats.audio`.
* LM: Qwen2.5-Omni: a Qwen2 decoder; Qwen3-Omni: a Qwen3-MoE decoder (q/k norm, ``mlp_only_layers``,
  ``decoder_sparse_step``). TMRoPE (time-aligned 3D positions) changes position ids only, not FLOPs; deepstack
  features are added into early LM layers (no matmul). ``use_audio_in_video``: a video's sound track is one more
  clip of the same audio-encoder call and its tokens are interleaved with the video's in 2-s chunks: the same
  token counts, so the same FLOPs as the clip and the video given separately.
* Frozen parts: ``audio`` (aliases ``audio_tower``, ``audio_encoder``) freezes the whole audio encoder, output head
  included (transformers' ``audio_tower`` module); the vision parts as for Qwen-VL.
"""

from __future__ import annotations

from typing import Any, Mapping

from ...errors import ConfigError, UnsupportedModelError
from ..audio import chunk_tokens, clip_out_tokens, clip_tokens
from ..blocks import AudioConvFrontEnd, AudioHead, AudioLayers, ExtraParams, halve
from ..fields import Fields, text_section
from ..parts import AUDIO
from ..spec import AudioSpec, ModelSpec
from . import Family, register_family
from .decoder import lm_blocks, read_lm
from ..resize import smart_resize
from .media import DerivedAudio, DerivedMedia, QwenMedia, pixel_bounds, positive
from .qwen_vl import read_vision, vision_blocks

_LM = {"qwen2_5_omni": "qwen2", "qwen3_omni_moe": "qwen3_moe"}
_VISION = {"qwen2_5_omni": "qwen2_5_vl", "qwen3_omni_moe": "qwen3_vl"}
_THINKER = {"qwen2_5_omni": "qwen2_5_omni_thinker", "qwen3_omni_moe": "qwen3_omni_moe_thinker"}
QWEN3_FULL_CHUNK_TOKENS = 13  # transformers' _get_feat_extract_output_lengths: a full chunk is the constant 13


def thinker_section(config: Mapping[str, Any], family: str, source: str) -> tuple[Mapping[str, Any], str]:
    """The thinker's config and its section name: ``thinker_config`` of a whole-model config, or the config."""
    if config.get("model_type") == _THINKER[family]:
        return config, ""
    thinker = config.get("thinker_config")
    if not isinstance(thinker, dict):
        raise ConfigError(f"{source}: config lacks required field thinker_config for model_type {family}")
    return thinker, "thinker_config"


def _section(parent: Mapping[str, Any], key: str, prefix: str, source: str, family: str) -> Fields:
    name = f"{prefix}.{key}" if prefix else key
    data = parent.get(key)
    if not isinstance(data, dict):
        raise ConfigError(f"{source}: config lacks required field {name} for model_type {family}")
    return Fields(data, name, source)


def read_audio(f: Fields, family: str) -> AudioSpec:
    d, heads = f.int("d_model"), f.int("encoder_attention_heads")
    if not heads or d % heads:
        raise ConfigError(f"{f.source}: field {f.name_of('encoder_attention_heads')} ({heads}) must divide "
                          f"{f.name_of('d_model')} ({d})")
    n_window = f.int("n_window")
    if n_window <= 0:
        raise ConfigError(f"{f.source}: field {f.name_of('n_window')} must be a positive integer, got {n_window}")
    conv2d = family == "qwen3_omni_moe"
    infer = f.int("n_window_infer") if conv2d else 0
    sizes = ["num_mel_bins", "encoder_layers", "encoder_ffn_dim", "output_dim"] + (["downsample_hidden_size"] if conv2d else [])
    for key in sizes:
        if f.int(key) <= 0:
            raise ConfigError(f"{f.source}: field {f.name_of(key)} must be a positive integer, got {f.int(key)}")
    if conv2d:
        if halve(halve(halve(2 * n_window))) != QWEN3_FULL_CHUNK_TOKENS:
            raise UnsupportedModelError(
                f"{f.source}: {f.name_of('n_window')} {n_window}: transformers writes a full audio chunk as "
                f"{QWEN3_FULL_CHUNK_TOKENS} tokens (true only for n_window 49..52); other values index the encoder "
                "output inconsistently and are not modelled")
        if infer < 2 * n_window:
            raise UnsupportedModelError(f"{f.source}: {f.name_of('n_window_infer')} {infer} is shorter than one "
                                        f"chunk (2 x n_window = {2 * n_window}): transformers' window is then 0")
    return AudioSpec(family=family, frontend="conv2d" if conv2d else "conv1d", num_mel_bins=f.int("num_mel_bins"),
                     d_model=d, num_layers=f.int("encoder_layers"), num_heads=heads, ffn_dim=f.int("encoder_ffn_dim"),
                     output_dim=f.int("output_dim"), n_window=n_window, n_window_infer=infer,
                     downsample_hidden_size=f.int("downsample_hidden_size") if conv2d else 0)


def audio_blocks(a: AudioSpec) -> tuple:
    front = AudioConvFrontEnd(part=AUDIO, count=1, style=a.frontend, mel_bins=a.num_mel_bins, width=a.d_model,
                              channels=a.downsample_hidden_size)
    layers = AudioLayers(part=AUDIO, count=a.num_layers, width=a.d_model, num_heads=a.num_heads,
                         head_dim=a.d_model // a.num_heads, mlp_width=a.ffn_dim, k_bias=a.frontend == "conv2d")
    if a.frontend == "conv1d":
        head = AudioHead(part=AUDIO, count=1, widths=(a.d_model, a.output_dim), pooled=True)
        bos_eos = ExtraParams(part=AUDIO, count=1, label="audio_bos_eos_token Embedding(2, output_dim), never run",
                              numel=2 * a.output_dim)
        return (front, layers, head, bos_eos)
    return (front, layers, AudioHead(part=AUDIO, count=1, widths=(a.d_model, a.d_model, a.output_dim)))


def build_omni(family: str):
    def build(config: Mapping[str, Any], source: str, name: str = "") -> ModelSpec:
        thinker, prefix = thinker_section(config, family, source)
        text, section = text_section(thinker)
        text_name = f"{prefix}.{section}" if prefix and section else (prefix or section)
        lm = read_lm(Fields(text, text_name, source), _LM[family])
        vision = read_vision(_section(thinker, "vision_config", prefix, source, family), _VISION[family])
        audio = read_audio(_section(thinker, "audio_config", prefix, source, family), family)
        if audio.output_dim != lm.hidden_size:
            raise ConfigError(f"{source}: audio_config.output_dim ({audio.output_dim}) must equal the LM hidden size "
                              f"({lm.hidden_size}): the audio features replace LM token embeddings")
        return ModelSpec(name=name or str(config.get("_name_or_path") or config.get("model_type")),
                         model_type=str(config.get("model_type")), lm=lm, vision=vision, source=source,
                         family=family, audio=audio,
                         blocks=vision_blocks(vision) + audio_blocks(audio) + lm_blocks(lm))
    return build


# ------------------------------------------------------------------------------------------- media
# Reference checkpoints' processor settings. Images (Qwen2VLImageProcessor): min/max pixels from
# preprocessor_config.json; default 56^2 .. 28^2 x 16384 (the Qwen2.5-VL / Qwen2.5-Omni release value, applied to
# Qwen3-Omni too: a checkpoint's file beats it). Videos: the processor CLASS passes videos_kwargs.size on every call
# (Qwen2_5OmniProcessor 128..768 x 28^2, Qwen3OmniMoeProcessor 128..768 x 32^2 per frame): it beats the files.
# Audio (WhisperFeatureExtractor, sampling_rate 16000 forced by the processor class): hop_length 160 by default;
# Qwen2.5-Omni pads to max_length and truncates at n_samples (the feature extractor's; 30 s = 480000 by the
# class default, chunk_length x sampling_rate from the file); Qwen3-Omni passes truncation=False (no cap).
IMAGE_BOUNDS = (56 * 56, 28 * 28 * 16384)
HOP_LENGTH = 160
SAMPLING_RATE = 16000
DEFAULT_N_SAMPLES = 30 * SAMPLING_RATE


class OmniMedia(QwenMedia):
    """Images as the Qwen-VL rule (``QwenMedia.image``: smart_resize with factor patch x merge, grid (1, h/p, w/p),
    tokens / merge^2); videos as Qwen2VLVideoProcessor: each frame resized with the processor class's bounds,
    frames padded to a multiple of T_p; audio: samples
    ``n`` -> mel frames ``min(ceil(n / hop), P // hop)`` (WhisperFeatureExtractor's attention mask; ``P`` = the
    padded length: ``n_samples`` for Qwen2.5-Omni, which pads to max_length and truncates there, the call's longest
    clip for Qwen3-Omni) -> encoder tokens and LM tokens (:mod:`vlm_perf.arch.audio`)."""

    def __init__(self, family: str):
        super().__init__(family)

    def settings(self, spec) -> dict:
        pre = spec.processor.get("preprocessor_config.json", {})
        lo, hi, origin = pixel_bounds(pre, IMAGE_BOUNDS, "reference checkpoint default")
        factor = spec.vision.patch_size * spec.vision.spatial_merge_size
        out: dict[str, Any] = {"min_pixels": lo, "max_pixels": hi, "source": origin}
        out["video"] = {"min_pixels": 128 * factor * factor, "max_pixels": 768 * factor * factor,
                        "source": "processor class videos_kwargs (passed on every call)"}
        hop = int(pre.get("hop_length", HOP_LENGTH))
        audio: dict[str, Any] = {"sampling_rate": SAMPLING_RATE, "hop_length": hop,
                                 "source": "processor files" if "hop_length" in pre else "reference checkpoint default"}
        if self.family == "qwen2_5_omni":
            n = pre.get("n_samples")
            if n is None and pre.get("chunk_length") is not None:
                n = int(pre["chunk_length"]) * SAMPLING_RATE
            audio["max_samples"] = int(n) if n is not None else DEFAULT_N_SAMPLES
        else:
            audio["max_samples"] = None  # truncation=False
        out["audio"] = audio
        return out

    def video(self, spec, frames: int, height: int, width: int) -> DerivedMedia:
        frames, height, width = positive((frames, height, width), "video size (T frames, H, W pixels)")
        v, s = spec.vision, self.settings(spec)["video"]
        h, w = smart_resize(height, width, v.patch_size * v.spatial_merge_size, s["min_pixels"], s["max_pixels"])
        t = -(-frames // v.temporal_patch_size)
        grid = (t, h // v.patch_size, w // v.patch_size)
        return DerivedMedia("video", (frames, height, width), (h, w), grid, t * grid[1] * grid[2] // v.merge_unit)

    def audio(self, spec, samples: int, longest: int | None = None) -> DerivedAudio:
        """One clip of ``samples`` samples; ``longest``: the longest clip of the same feature-extractor call (the
        clip itself by default). WhisperFeatureExtractor pads every clip of a call to ``P`` samples (Qwen2.5-Omni:
        ``max_samples``; Qwen3-Omni: the longest clip), takes the sample mask every ``hop`` samples and drops its
        last column when ``P`` is not a multiple of ``hop``: mel frames = ``min(ceil(n / hop), P // hop)``."""
        (samples,) = positive((samples,), "audio length (samples)")
        (longest,) = positive((samples if longest is None else longest,), "longest clip (samples)")
        if longest < samples:
            raise ConfigError(f"longest clip of the call ({longest} samples) is shorter than this clip ({samples})")
        s = self.settings(spec)["audio"]
        hop = s["hop_length"]
        padded = s["max_samples"] or longest
        kept = min(samples, padded)
        frames = min(-(-kept // hop), padded // hop)
        if frames <= 0:
            raise ConfigError(f"audio clip of {samples} samples gives no mel frame (hop_length {hop})")
        a = spec.audio
        return DerivedAudio(samples=samples, mel_frames=frames, encoder_tokens=clip_tokens(a, frames),
                            audio_tokens=clip_out_tokens(a, frames),
                            detail={"chunks": -(-frames // a.chunk_frames),
                                    "full_chunk_tokens": chunk_tokens(a, a.chunk_frames)})


for _family, _cls in (("qwen2_5_omni", "Qwen2_5OmniThinkerForConditionalGeneration"),
                      ("qwen3_omni_moe", "Qwen3OmniMoeThinkerForConditionalGeneration")):
    register_family(Family(
        name=_family, model_types=(_family, _THINKER[_family]), build=build_omni(_family), hf_class=_cls,
        is_vlm=True, media=OmniMedia(_family), has_audio=True,
        notes=("thinker only: the talker and the speech decoder (token2wav / code2wav) are not counted",
               "audio encoder counted as its own part `audio`; its convolutions run on chunks padded to the "
               "longest chunk of each encoder call (exact per call: BatchStats.from_batch(audio_frames=...))")))
