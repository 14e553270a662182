"""Phi-4-multimodal (transformers ``phi4_multimodal``: ``Phi4MultimodalForCausalLM``).

Read from transformers ``models/phi4_multimodal/modeling_phi4_multimodal.py``,
``image_processing_phi4_multimodal.py`` and ``processing_phi4_multimodal.py`` (5.24):

* **Tower** (``Phi4MultimodalVisionModel``, SigLIP-like): Conv2d patch embed (bias) on every crop of
  ``crop_size`` px (``image_size // patch_size`` = n patches per side, 32 for 448 / 14), learned position table
  (n^2 entries, bucketised: a lookup), ``num_hidden_layers`` pre-norm layers (LayerNorm, q/k/v/out with
  bias, full attention over the crop's n^2 patches -- the processor's padding mask is additive, eager
  computes the whole square --, LayerNorm, fc1 -> GELU-tanh -> fc2), ``post_layernorm`` and a SigLIP
  attention-pooling head that runs on every crop but whose output is discarded (forward only). The image
  embedding reads ``hidden_states[vision_config.feature_layer]`` (-2): the layers after it run but reach no
  loss (forward only in training).
* **Crops** (``Phi4MultimodalImageProcessor.dynamic_preprocess``): c x r crops (c = ceil(W / S), r =
  ceil(H / S), or -- when c*r exceeds ``dynamic_hd`` -- the aspect ratio closest to W/H among every (i, j) with
  i*j <= dynamic_hd), the image resized into the c*S x r*S canvas keeping its aspect and padded at the
  right / bottom, plus one global view resized to S x S: 1 + c*r crops through the tower. Every image of one
  processor call (hence one model forward, whose ``image_pixel_values`` is one padded tensor) is padded
  with all-zero crops to the call's largest crop count, and those run through the tower too
  (:meth:`Phi4MultimodalMedia.one_call`).
* **Projector**: 2 x 2 average pool of each crop's patch grid (not a matmul) -> b = n/2 tokens per side;
  the crops' pooled grid is cut to the image's un-padded part (u_h x u_w tokens), a learned row separator
  is appended to every row (global view too) and a learned separator joins crops and global view: placeholders
  = u_h (u_w + 1) + 1 + b (b + 1); every placeholder row goes through Linear(d_v -> h) -> GELU -> Linear(h ->
  h). The processor writes 256 + 16 + 1 + u_h u_w + u_h placeholders (hard-coded for b = 16).
* **LM**: Phi-3 decoder (fused qkv_proj and gate_up_proj without bias, RMSNorm, SwiGLU, lm_head tied as the config says);
  ``sliding_window`` (when set) applies to every layer.
* **Audio** (``Phi4MultimodalAudioEmbedding``, part ``audio``): one encoder call per forward over every clip,
  features padded to the call's longest clip; NeMo conv subsampling (three stride-2 Conv2d steps, the last two
  depthwise + pointwise, then a Linear), ``num_blocks`` conformer blocks (half-step feed-forwards, attention
  with a relative-position bias table (a lookup), a GLU / depthwise conv module), each clip's rows cut into
  500-row pieces when longer; then Linear -> GELU -> Linear on every encoder row (the speech pair, or the
  vision-speech pair when the forward has images: one runs, the other is stored). LM placeholders per clip:
  ceil(mel frames / 8). The encoder does not run in a forward without audio placeholders.

The released checkpoint applies LoRA adapters to the LM (``vision-lora`` for image inputs, ``speech-lora`` for
audio); transformers' class holds only the base model: the adapters are PEFT adapters (``--adapter``).
"""

from __future__ import annotations

import math
from dataclasses import replace
from typing import Any, Mapping

from ...errors import ConfigError, InputError, UnsupportedModelError
from ..blocks import (AudioProjection, ConformerFrontEnd, NemoConformerLayers, ExtraParams, PositionTable,
                      SeparatorProjector, StoredOnly, linear_params)
from ..fields import Fields
from ..parts import AUDIO, MERGER
from ..spec import AudioSpec, ModelSpec, VisionSpec
from . import Family, register_family
from .decoder import feature_layer_depth, forward_only_after, lm_blocks, read_lm
from .media import DerivedAudio, DerivedMedia, MediaRule, positive
from .siglip import read_siglip, siglip_blocks

# Phi4MultimodalVisionConfig class defaults (configuration_phi4_multimodal.py)
VISION_DEFAULTS = {"hidden_size": 1152, "intermediate_size": 4304, "num_hidden_layers": 27,
                   "num_attention_heads": 16, "num_channels": 3, "image_size": 448, "patch_size": 14,
                   "vision_use_head": True}
VISION_CROP, VISION_FEATURE_LAYER = 448, -2
# Phi4MultimodalAudioConfig class defaults
AUDIO_DEFAULTS = {"hidden_size": 1024, "intermediate_size": 1536, "num_blocks": 24, "num_attention_heads": 16,
                  "ext_pw_out_channel": 1024, "depthwise_separable_out_channel": 1024, "depthwise_multiplier": 1,
                  "kernel_size": 3, "input_size": 80, "time_reduction": 8, "bias_max_distance": 1000,
                  "bias_symmetric": False, "nemo_conv_channels": 1024, "downsample_rate": 1}
# Phi4MultimodalConfig (LM) class defaults
LM_DEFAULTS = {"vocab_size": 200064, "hidden_size": 3072, "intermediate_size": 8192, "num_hidden_layers": 32,
               "num_attention_heads": 32, "num_key_value_heads": 8, "tie_word_embeddings": False}
# Phi4MultimodalImageProcessor class defaults
PROCESSOR_DEFAULTS = {"size": 448, "patch_size": 14, "dynamic_hd": 36}
PROCESSOR_GLOBAL_TOKENS = 256 + 16 + 1  # _preprocess: num_img_tokens = 256 + 1 + ... + 16 (hard-coded)


def _positive(value: Any, name: str, source: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        raise ConfigError(f"{source}: field {name} must be a positive integer, got {value!r}")
    return value


def read_audio(ac: Mapping[str, Any], lm_hidden: int, source: str) -> tuple[tuple, AudioSpec | None]:
    """The audio part of ``Phi4MultimodalAudioEmbedding`` (module by module from modeling_phi4_multimodal.py) and
    its :class:`AudioSpec`: the NeMo conv subsampling, the relative-attention bias table (an ``nn.Embedding``
    of buckets x heads), ``num_blocks`` conformer blocks, the running projection pair and the stored other one
    (speech / vision-speech). The mean/variance normaliser holds buffers only. FLOPs are modelled for the
    released geometry (``time_reduction`` 8, ``downsample_rate`` 1); another one keeps the parameters and refuses
    audio clips (spec ``audio`` None)."""
    a = {k: _positive(ac.get(k, d), f"audio_config.{k}", source) if not isinstance(d, bool) else bool(ac.get(k, d))
         for k, d in AUDIO_DEFAULTS.items()}
    h, c = a["hidden_size"], a["nemo_conv_channels"]
    reduction = a["time_reduction"]
    if reduction & (reduction - 1) or reduction < 2:
        raise ConfigError(f"{source}: audio_config.time_reduction must be a power of two >= 2, got {reduction}")
    steps = int(math.log2(reduction))
    final = a["input_size"]
    for _ in range(steps):
        final = math.floor((final - 1) / 2 + 1)
    buckets = a["bias_max_distance"] * (1 if a["bias_symmetric"] else 2)
    layers = NemoConformerLayers(part=AUDIO, count=a["num_blocks"], width=h, num_heads=a["num_attention_heads"],
                             mlp_width=a["intermediate_size"], glu_width=a["ext_pw_out_channel"],
                             sep_width=a["depthwise_separable_out_channel"], multiplier=a["depthwise_multiplier"],
                             kernel=a["kernel_size"])
    projection = AudioProjection(part=AUDIO, count=1, widths=(h * a["downsample_rate"], lm_hidden, lm_hidden))
    table = PositionTable(part=AUDIO, count=1, entries=buckets, width=a["num_attention_heads"])
    modelled = reduction == 8 and a["downsample_rate"] == 1
    if modelled:
        front: Any = ConformerFrontEnd(part=AUDIO, count=1, mel_bins=a["input_size"], width=h, channels=c)
    else:
        conv = (9 * c + c) + (steps - 1) * ((9 * c + c) + (c * c + c)) + linear_params(c * final, h, True)
        front = ExtraParams(part=AUDIO, count=1, label=f"audio conv subsampling (time_reduction {reduction}, "
                            f"downsample_rate {a['downsample_rate']}: FLOPs not modelled, audio refused)", numel=conv)
    blocks = (front, table, layers, projection, StoredOnly(part=AUDIO, count=1, module=projection))
    spec = AudioSpec(family="phi4_multimodal", frontend="nemo", num_mel_bins=a["input_size"], d_model=h,
                     num_layers=a["num_blocks"], num_heads=a["num_attention_heads"], ffn_dim=a["intermediate_size"],
                     output_dim=lm_hidden, n_window=0, downsample_hidden_size=c) if modelled else None
    return blocks, spec


def build(config: Mapping[str, Any], source: str, name: str = "") -> ModelSpec:
    text = {**LM_DEFAULTS, **{k: v for k, v in config.items() if k not in ("vision_config", "audio_config")}}
    f = Fields(text, "", source)
    lm = read_lm(f, "llama")  # Phi-3 decoder: fused qkv / gate_up without bias = llama's matmuls and params
    window = f.opt("sliding_window")
    if window:
        lm = replace(lm, sliding_window=_positive(window, "sliding_window", source),
                     sliding_layers=tuple(range(lm.num_layers)))
    vc = dict(config.get("vision_config") or {})
    vc.setdefault("model_type", "siglip_vision_model")
    if vc["model_type"] == "phi4_multimodal_vision":
        vc["model_type"] = "siglip_vision_model"
    tower = read_siglip(vc, source, defaults=VISION_DEFAULTS)
    tower = replace(tower, use_head=True)  # Phi4MultimodalVisionModel always builds its pooling head
    crop = _positive(vc.get("crop_size", VISION_CROP), "vision_config.crop_size", source)
    if crop != tower.image_size:
        raise UnsupportedModelError(f"{source}: vision_config.crop_size {crop} differs from image_size "
                                    f"{tower.image_size}: the tower's crops would not be square crops of the tower")
    layer = vc.get("feature_layer", VISION_FEATURE_LAYER)
    _, used = feature_layer_depth(layer, tower.depth, source)
    side = tower.side + tower.side % 2  # ReflectionPad2d to an even side before the 2x2 pool
    vision = VisionSpec(family="phi4_multimodal", depth=tower.depth, hidden_size=tower.width,
                        num_heads=tower.num_heads, head_dim=tower.head_dim, intermediate_size=tower.mlp_width,
                        mlp_gated=False, patch_size=tower.patch_size, temporal_patch_size=1,
                        in_channels=tower.channels, spatial_merge_size=2, out_hidden_size=lm.hidden_size,
                        num_position_embeddings=tower.patches, patch_embed_bias=True, norm="layernorm")
    if tower.side % 2:
        raise UnsupportedModelError(f"{source}: {tower.side} patches per crop side is odd (the image embedding "
                                    "reflection-pads it before pooling): not modelled")
    patch, pos, layers, post, head = siglip_blocks(tower)
    ac = config.get("audio_config") or {}
    if not isinstance(ac, dict):
        raise ConfigError(f"{source}: audio_config must be an object, got {type(ac).__name__}")
    audio_blocks, audio = read_audio(ac, lm.hidden_size, source)
    blocks = (patch, pos) + forward_only_after(layers, used) + (post, head) + (
        SeparatorProjector(part=MERGER, count=1, widths=(tower.width, lm.hidden_size, lm.hidden_size),
                           biases=(True, True), label="image projection"),
    ) + audio_blocks + lm_blocks(lm)
    spec = ModelSpec(name=name or str(config.get("_name_or_path") or "phi4_multimodal"),
                     model_type="phi4_multimodal", lm=lm, vision=vision, source=source, family="phi4_multimodal",
                     blocks=blocks, audio=audio)
    spec.extra.update(image_size=tower.image_size, crop_size=crop, pooled_side=side // 2)
    return spec


def closest_aspect_ratio(aspect: float, ratios: list, width: int, height: int, size: int) -> tuple[int, int]:
    """``find_closest_aspect_ratio``: the (i, j) whose i/j is nearest W/H; on a tie, the later one when the
    image area exceeds half the tiles' area."""
    best_diff, best = float("inf"), (1, 1)
    area = width * height
    for ratio in ratios:
        diff = abs(aspect - ratio[0] / ratio[1])
        if diff < best_diff:
            best_diff, best = diff, ratio
        elif diff == best_diff and area > 0.5 * size * size * ratio[0] * ratio[1]:
            best = ratio
    return best


class Phi4MultimodalMedia(MediaRule):
    """Phi-4-multimodal's dynamic-HD crops (``Phi4MultimodalImageProcessor``): settings from
    preprocessor_config.json (``size`` {height, width} square, ``patch_size``, ``dynamic_hd``), else the class
    defaults 448 / 14 / 36. Grid per image: (1 + c*r, n, n) crops of n x n patches; projector rows = LM
    placeholders = u_h (u_w + 1) + 1 + b (b + 1) (module docstring). No video input."""

    family = "phi4_multimodal"

    def settings(self, spec) -> dict:
        pre = spec.processor.get("preprocessor_config.json", {})
        size = pre.get("size", PROCESSOR_DEFAULTS["size"])
        if isinstance(size, dict):
            if size.get("height") != size.get("width"):
                raise UnsupportedModelError(f"{spec.name}: preprocessor size {size}: Phi4MultimodalImageProcessor "
                                            "only supports square sizes")
            size = size.get("height")
        out = {"size": size, "patch_size": pre.get("patch_size", PROCESSOR_DEFAULTS["patch_size"]),
               "dynamic_hd": pre.get("dynamic_hd", PROCESSOR_DEFAULTS["dynamic_hd"]),
               "source": "processor files" if pre else "Phi4MultimodalImageProcessor class defaults"}
        for key in ("size", "patch_size", "dynamic_hd"):
            _positive(out[key], f"preprocessor_config.json {key}", spec.name)
        if out["size"] != spec.extra["crop_size"]:
            raise UnsupportedModelError(f"{spec.name}: preprocessor size {out['size']} differs from the tower's "
                                        f"crop_size {spec.extra['crop_size']}")
        if out["size"] // out["patch_size"] != spec.extra["image_size"] // spec.vision.patch_size:
            raise UnsupportedModelError(f"{spec.name}: the processor's mask ({out['size']} // {out['patch_size']}) "
                                        "and the tower's patch grid differ")
        if spec.extra["pooled_side"] != 16:
            raise UnsupportedModelError(f"{spec.name}: the processor writes 256 + 16 global-view placeholders "
                                        f"(hard-coded for 16 pooled tokens per side) but this tower pools to "
                                        f"{spec.extra['pooled_side']}: transformers fails on the mismatch")
        return out

    def image(self, spec, height: int, width: int) -> DerivedMedia:
        height, width = positive((height, width), "image size (H, W pixels)")
        s = self.settings(spec)
        size, patch, max_num = s["size"], s["patch_size"], s["dynamic_hd"]
        cols, rows = math.ceil(width / size), math.ceil(height / size)
        if cols * rows > max_num:
            ratios = sorted({(i, j) for n in range(1, max_num + 1) for i in range(1, n + 1) for j in range(1, n + 1)
                             if 1 <= i * j <= max_num}, key=lambda x: x[0] * x[1])
            cols, rows = closest_aspect_ratio(width / height, ratios, width, height, size)
        target_w, target_h = size * cols, size * rows
        if target_w / width < target_h / height:
            new_w, new_h = target_w, int(height * (target_w / width))
            pad_w, pad_h = 0, target_h - new_h
        else:
            new_w, new_h = int(width * (target_h / height)), target_h
            pad_w, pad_h = target_w - new_w, 0
        if min(new_h, target_h) < 10 or min(new_w, target_w) < 10:
            raise InputError(f"image {height}x{width}: the aspect ratio is too extreme for Phi-4-multimodal's "
                             f"processor (resized to {new_h}x{new_w})")
        n = size // patch
        useful_h = n * rows - (pad_h // patch if pad_h >= patch else 0)
        useful_w = n * cols - (pad_w // patch if pad_w >= patch else 0)
        u_h, u_w = -(-useful_h // 2), -(-useful_w // 2)  # the [0::2, 0::2] subsampled mask
        tokens = PROCESSOR_GLOBAL_TOKENS + u_h * u_w + u_h
        crops = 1 + cols * rows
        side = spec.extra["image_size"] // spec.vision.patch_size
        return DerivedMedia("image", (height, width), (target_h, target_w), (crops, side, side), tokens, tiles=crops,
                            merged_tokens=tokens,
                            detail={"crops": [cols, rows], "useful_tokens": [u_h, u_w], "resized_image": [new_h, new_w]})

    def one_call(self, spec, media: list) -> list:
        """The images of one processor call / model forward: every image's crops padded with all-zero crops to
        the call's largest crop count (``pad_to_max_num_crops``); the tower runs them all."""
        most = max(m.grid[0] for m in media)
        return [replace(m, grid=(most, m.grid[1], m.grid[2]), detail={**m.detail, "padded_crops": most - m.grid[0]})
                for m in media]

    def video(self, spec, frames: int, height: int, width: int) -> DerivedMedia:
        raise UnsupportedModelError(f"{spec.name}: Phi-4-multimodal has no video input")

    def audio(self, spec, samples: int, longest=None) -> DerivedAudio:
        """``Phi4MultimodalFeatureExtractor``: mel frames ``(n - win_length) // hop_length + 1`` (400 / 160 at
        16 kHz, or the preprocessor file's values), LM placeholders ``audio_embed_sizes`` = ceil(frames /
        audio_compression_rate) (= the encoder's three stride-2 convolutions' rows)."""
        if spec.audio is None:
            raise UnsupportedModelError(f"{spec.name}: this audio encoder's geometry (time_reduction / "
                                        "downsample_rate other than 8 / 1) is not modelled; audio clips cannot be "
                                        "counted")
        (n,) = positive((samples,), "audio clip (samples)")
        pre = spec.processor.get("preprocessor_config.json", {})
        hop, win = int(pre.get("hop_length", 160)), int(pre.get("win_length", 400))
        rate, down = int(pre.get("audio_compression_rate", 8)), int(pre.get("audio_downsample_rate", 1))
        if (rate, down) != (8, 1):
            raise UnsupportedModelError(f"{spec.name}: audio_compression_rate {rate} / audio_downsample_rate {down}: "
                                        "only 8 / 1 (the encoder's subsampling) is modelled")
        if n < win:
            raise InputError(f"audio clip of {n} samples: shorter than one {win}-sample analysis window")
        frames = (n - win) // hop + 1
        tokens = -(-frames // rate)
        return DerivedAudio(samples=n, mel_frames=frames, encoder_tokens=tokens, audio_tokens=tokens)


register_family(Family(
    name="phi4_multimodal", model_types=("phi4_multimodal",), build=build, hf_class="Phi4MultimodalForCausalLM",
    is_vlm=True, media=Phi4MultimodalMedia(), has_audio=True,
    notes=("the 2x2 average pool, the crop reassembly and the separators are not matmuls (0 FLOPs); every "
           "placeholder row (separators included) goes through the projection",
           "crops padded to the call's largest crop count run through the tower (one_call)",
           "tower layers after vision_config.feature_layer (-2) and the pooling head run forward only",
           "audio encoder counted as its own part `audio`: conv subsampling on the call's features padded to its "
           "longest clip, conformer blocks on 500-row pieces (exact per encoder call: BatchStats.from_batch("
           "audio_frames=...)); the projection runs on every padded encoder row",
           "the released checkpoint's vision-lora / speech-lora adapters (LoRA on the LM): module names not laid "
           "out yet, --adapter refused (docs/training-regimes.md); whole-part freezing is exact",
           "no preset: the transformers-format hub config.json could not be read from a public source; the class "
           "defaults (32 heads, untied head: 5,308,268,992 parameters) differ from third-party copies of the released "
           "remote-code config (24 heads, tied embeddings)")))

__all__ = ["Phi4MultimodalMedia", "closest_aspect_ratio", "read_audio"]
