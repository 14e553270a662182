"""Gemma 3n (transformers ``gemma3n``): the text decoder ``gemma3n_text`` (``Gemma3nForCausalLM``).

Read from transformers 5.24 ``models/gemma3n/modeling_gemma3n.py`` and ``configuration_gemma3n.py``:

* **Embeddings**: ``embed_tokens`` (V x h) and ``embed_tokens_per_layer`` (``vocab_size_per_layer_input`` x L·p,
  p = ``hidden_size_per_layer_input``): both lookups (scaled), no FLOPs. ``per_layer_model_projection``
  Linear(h -> L·p) + RMSNorm(p) mixes the embedding into each layer's per-layer input; ``altup_projections``
  ((n - 1) Linear(h -> h), n = ``altup_num_inputs``) make the n AltUp streams, ``altup_unembed_projections``
  ((n - 1) Linear(h -> h)) fold them back before the final norm. Magnitude rescaling is elementwise.
* **Each decoder layer**: AltUp predict (router Linear(h -> n), ``prediction_coefs`` Linear(n -> n²), the
  per-token (h x n) x (n x n) stream mix); input RMSNorm; LAuReL (Linear(h -> r) -> Linear(r -> h) -> RMSNorm,
  r = ``laurel_rank``); attention (q/k/v/o, q/k RMSNorm with weights, v RMSNorm without, scaling 1); GeGLU MLP of
  the layer's ``intermediate_size`` (a list per layer or one value; the Gaussian top-k ``activation_sparsity`` of
  the first layers is mean / std / relu: elementwise, the matmuls are unchanged); AltUp correct (router again,
  ``correction_coefs`` Linear(n -> n)); per-layer input gate Linear(h -> p), GELU, times the per-layer input,
  Linear(p -> h), RMSNorm. Four Gemma norms per layer (input, post-attention, pre- and post-feedforward).
* **KV sharing** (``num_kv_shared_layers``, ``kv_sharing_modes``): the last layers have no k/v projection or k
  norm and attend the keys / values of the last earlier layer of their type (the same sequence: same core).
* **Attention types**: ``layer_types`` (default: every 5th layer full, the rest sliding, window
  ``sliding_window`` = 512 tokens, query included). Logit soft-capping is elementwise; lm_head tied by default.
"""

from __future__ import annotations

from typing import Any, Mapping

from ...errors import ConfigError
from ..blocks import (AltUpLayer, AltUpStreams, AudioEmbedder, ChunkedConformerLayers, DecoderAttention, DenseMLP, FinalNorm,
                      LaurelBlock, LMHead, LMLayerNorms, PerLayerInputGate, SharedKVDecoderAttention, SSCPFrontEnd,
                      TokenEmbedding, sscp_out)
from ..fields import Fields, text_section
from ..parts import AUDIO, LANGUAGE_MODEL
from ..spec import AudioSpec, LMSpec, ModelSpec
from . import Family, refuse_model_type, register_family

# Gemma3nTextConfig class defaults (transformers 5.24): a hub config may omit any of them
TEXT_DEFAULTS: dict[str, Any] = {
    "vocab_size": 262_400, "hidden_size": 2048, "intermediate_size": 16_384, "num_hidden_layers": 35,
    "num_attention_heads": 8, "num_key_value_heads": 2, "head_dim": 256, "sliding_window": 512,
    "attention_bias": False, "tie_word_embeddings": True, "vocab_size_per_layer_input": 262_144,
    "hidden_size_per_layer_input": 256, "altup_num_inputs": 4, "altup_active_idx": 0, "num_kv_shared_layers": 15,
    "laurel_rank": 64}


def _int(f: Fields, key: str) -> int:
    """A non-negative integer field, Gemma3nTextConfig's class default when absent."""
    if f.opt(key) is None:
        return int(TEXT_DEFAULTS[key])
    return f.int(key)


def kv_sharing_modes(layer_types: list[str], shared: int) -> list[str | None]:
    """``Gemma3nTextConfig.kv_sharing_modes``: the last ``shared`` layers "reuse" the keys / values of the last
    earlier layer of their type ("store"); None elsewhere."""
    layers = len(layer_types)
    if shared == 0:
        return [None] * layers
    first = layers - shared
    modes: list[str | None] = [None if i < first else "reuse" for i in range(layers)]
    producers = set(layer_types[:first])
    if producers != set(layer_types):
        raise ConfigError(f"num_kv_shared_layers {shared}: the layer types of the shared layers "
                          f"({sorted(set(layer_types[first:]))}) must each have an earlier, unshared layer "
                          f"(unshared types: {sorted(producers)})")
    for kind in producers:
        modes[max(i for i in range(first) if layer_types[i] == kind)] = "store"
    return modes


def read_gemma3n_text(f: Fields) -> tuple[LMSpec, dict[str, Any]]:
    """The :class:`LMSpec` summary of a Gemma 3n text config and the Gemma-3n-only shapes (per-layer MLP widths,
    KV sharing, AltUp / LAuReL / per-layer input widths)."""
    hidden, heads, layers = _int(f, "hidden_size"), _int(f, "num_attention_heads"), _int(f, "num_hidden_layers")
    if heads == 0 or layers == 0 or hidden == 0:
        raise ConfigError(f"{f.source}: {f.name_of('hidden_size')}, {f.name_of('num_attention_heads')} and "
                          f"{f.name_of('num_hidden_layers')} must be positive")
    raw = f.opt("intermediate_size", TEXT_DEFAULTS["intermediate_size"])
    if isinstance(raw, (list, tuple)):
        widths = tuple(f.int_list("intermediate_size"))
        if len(widths) != layers:
            raise ConfigError(f"{f.source}: {f.name_of('intermediate_size')} lists {len(widths)} widths for "
                              f"{layers} layers")
    else:
        widths = (_int(f, "intermediate_size"),) * layers
    types = f.opt("layer_types")
    if types is None:
        types = ["full_attention" if (i + 1) % 5 == 0 else "sliding_attention" for i in range(layers)]
    if (not isinstance(types, list) or len(types) != layers
            or any(t not in ("sliding_attention", "full_attention") for t in types)):
        raise ConfigError(f"{f.source}: {f.name_of('layer_types')} must list 'sliding_attention' / "
                          f"'full_attention' for each of the {layers} layers, got {types!r}")
    shared = _int(f, "num_kv_shared_layers")
    if shared >= layers:
        raise ConfigError(f"{f.source}: {f.name_of('num_kv_shared_layers')} {shared} must be below the "
                          f"{layers} layers")
    try:
        modes = kv_sharing_modes(types, shared)
    except ConfigError as e:
        raise ConfigError(f"{f.source}: {f.name_of('num_kv_shared_layers')}: {e}") from None
    sliding = tuple(i for i, t in enumerate(types) if t == "sliding_attention")
    window = _int(f, "sliding_window")
    if sliding and not window:
        raise ConfigError(f"{f.source}: {len(sliding)} sliding_attention layers but {f.name_of('sliding_window')} "
                          "is 0")
    streams, active = _int(f, "altup_num_inputs"), _int(f, "altup_active_idx")
    if streams < 1 or active >= streams:
        raise ConfigError(f"{f.source}: {f.name_of('altup_num_inputs')} {streams} must be >= 1 and above "
                          f"{f.name_of('altup_active_idx')} {active}")
    lm = LMSpec(family="gemma3n_text", num_layers=layers, hidden_size=hidden, num_heads=heads,
                num_kv_heads=_int(f, "num_key_value_heads"), head_dim=_int(f, "head_dim"),
                intermediate_size=widths[0], vocab_size=_int(f, "vocab_size"),
                tie_word_embeddings=bool(f.opt("tie_word_embeddings", TEXT_DEFAULTS["tie_word_embeddings"])),
                qkv_bias=bool(f.opt("attention_bias", False)), qk_norm=True,
                sliding_window=window if sliding else None, sliding_layers=sliding if window else ())
    extra = {"mlp_widths": widths, "layer_types": tuple(types), "kv_modes": tuple(modes), "streams": streams,
             "laurel_rank": _int(f, "laurel_rank"), "per_layer_width": _int(f, "hidden_size_per_layer_input"),
             "per_layer_vocab": _int(f, "vocab_size_per_layer_input")}
    return lm, extra


def gemma3n_text_blocks(lm: LMSpec, x: Mapping[str, Any]) -> tuple:
    """The Gemma 3n text inventory: embeddings (two lookups), stream machinery, attention groups (full / sliding x
    own / shared keys), MLP groups per width, AltUp / LAuReL / per-layer gates, norms, final norm, lm_head."""
    h, L, p, n = lm.hidden_size, lm.num_layers, x["per_layer_width"], x["streams"]
    blocks: list = [TokenEmbedding(part=LANGUAGE_MODEL, count=1, vocab=lm.vocab_size, width=h),
                    TokenEmbedding(part=LANGUAGE_MODEL, count=1, vocab=x["per_layer_vocab"], width=L * p),
                    AltUpStreams(part=LANGUAGE_MODEL, count=1, hidden=h, streams=n, layers=L, per_layer_width=p)]
    groups: dict[tuple[bool, bool], int] = {}
    for kind, mode in zip(x["layer_types"], x["kv_modes"]):
        key = (kind == "sliding_attention", mode == "reuse")
        groups[key] = groups.get(key, 0) + 1
    for (sliding, reuse), count in sorted(groups.items()):
        cls = SharedKVDecoderAttention if reuse else DecoderAttention
        blocks.append(cls(part=LANGUAGE_MODEL, count=count, hidden=h, num_heads=lm.num_heads,
                          num_kv_heads=lm.num_kv_heads, head_dim=lm.head_dim, qkv_bias=lm.qkv_bias,
                          o_bias=lm.qkv_bias, qk_norm=True, window=lm.sliding_window if sliding else None))
    blocks.append(LMLayerNorms(part=LANGUAGE_MODEL, count=L, hidden=h, norms_per_layer=4))
    for width in sorted(set(x["mlp_widths"])):
        blocks.append(DenseMLP(part=LANGUAGE_MODEL, count=x["mlp_widths"].count(width), hidden=h, width=width))
    blocks += [AltUpLayer(part=LANGUAGE_MODEL, count=L, hidden=h, streams=n),
               LaurelBlock(part=LANGUAGE_MODEL, count=L, hidden=h, rank=x["laurel_rank"]),
               PerLayerInputGate(part=LANGUAGE_MODEL, count=L, hidden=h, width=p),
               FinalNorm(part=LANGUAGE_MODEL, count=1, hidden=h),
               LMHead(part=LANGUAGE_MODEL, count=1, hidden=h, vocab=lm.vocab_size, tied=lm.tie_word_embeddings)]
    return tuple(blocks)


def build_text(config: Mapping[str, Any], source: str, name: str = "") -> ModelSpec:
    text, section = text_section(config)
    lm, extra = read_gemma3n_text(Fields(text, section, source))
    spec = ModelSpec(name=name or str(config.get("_name_or_path") or "gemma3n_text"), model_type="gemma3n_text",
                     lm=lm, source=source, family="gemma3n_text", blocks=gemma3n_text_blocks(lm, extra))
    spec.extra.update(kv_shared_layers=sum(m == "reuse" for m in extra["kv_modes"]))
    return spec


register_family(Family(
    name="gemma3n_text", model_types=("gemma3n_text",), build=build_text, hf_class="Gemma3nForCausalLM",
    is_vlm=False,
    notes=("AltUp's per-token stream mix (h x n x n) is a matmul of two activations (no weight: 2x in backward)",
           "activation sparsity (Gaussian top-k on the first layers' gate) and AltUp magnitude rescaling are "
           "elementwise (0 FLOPs); KV-shared layers run q/o projections only, their core is the usual one",
           "sliding-window layers: windowed under --causal half, the eager square under --causal full")))

# --------------------------------------------------------------------------- audio encoder (Gemma3nAudioEncoder)
# Gemma3nAudioConfig class defaults (transformers 5.24)
AUDIO_DEFAULTS: dict[str, Any] = {
    "vocab_size": 128, "input_feat_size": 128, "hidden_size": 1536, "conf_attention_chunk_size": 12,
    "conf_attention_context_left": 13, "conf_attention_context_right": 0, "conf_num_attention_heads": 8,
    "conf_num_hidden_layers": 12, "conf_conv_kernel_size": 5, "conf_reduction_factor": 4,
    "sscp_conv_channel_size": (128, 32), "sscp_conv_kernel_size": ((3, 3), (3, 3)),
    "sscp_conv_stride_size": ((2, 2), (2, 2))}
AUDIO_TOKENS_DEFAULT = 188  # Gemma3nConfig.audio_soft_tokens_per_image / Gemma3nProcessor.audio_seq_length


def _pairs(f: Fields, key: str) -> tuple[tuple[int, int], tuple[int, int]]:
    raw = f.opt(key, AUDIO_DEFAULTS[key])
    ok = (isinstance(raw, (list, tuple)) and len(raw) == 2
          and all(isinstance(p, (list, tuple)) and len(p) == 2 for p in raw)
          and all(isinstance(v, int) and not isinstance(v, bool) and v > 0 for p in raw for v in p))
    if not ok:
        raise ConfigError(f"{f.source}: {f.name_of(key)} must be two [time, freq] pairs of positive integers, "
                          f"got {raw!r}")
    return (tuple(raw[0]), tuple(raw[1]))  # type: ignore[return-value]


def read_gemma3n_audio(config: Mapping[str, Any], source: str, text_hidden: int,
                       section: str = "audio_config") -> tuple[AudioSpec, tuple]:
    """The :class:`AudioSpec` (frontend ``sscp``) and the inventory (part ``audio``) of a Gemma 3n audio encoder and
    its embedder (``embed_audio``: d -> ``text_hidden``)."""
    f = Fields(config, section, source)

    def num(key: str) -> int:
        return int(AUDIO_DEFAULTS[key]) if f.opt(key) is None else f.int(key)
    d, heads, layers = num("hidden_size"), num("conf_num_attention_heads"), num("conf_num_hidden_layers")
    if d == 0 or heads == 0 or d % heads:
        raise ConfigError(f"{source}: {f.name_of('hidden_size')} {d} must be a positive multiple of "
                          f"{f.name_of('conf_num_attention_heads')} {heads}")
    chunk, reduction = num("conf_attention_chunk_size"), num("conf_reduction_factor")
    if chunk == 0 or reduction == 0:
        raise ConfigError(f"{source}: {f.name_of('conf_attention_chunk_size')} and "
                          f"{f.name_of('conf_reduction_factor')} must be positive")
    channels = f.opt("sscp_conv_channel_size", AUDIO_DEFAULTS["sscp_conv_channel_size"])
    if (not isinstance(channels, (list, tuple)) or len(channels) != 2
            or not all(isinstance(c, int) and not isinstance(c, bool) and c > 0 for c in channels)):
        raise ConfigError(f"{source}: {f.name_of('sscp_conv_channel_size')} must be two positive integers, got "
                          f"{channels!r}")
    kernels, strides = _pairs(f, "sscp_conv_kernel_size"), _pairs(f, "sscp_conv_stride_size")
    mel = num("input_feat_size")
    front = SSCPFrontEnd(part=AUDIO, count=1, mel_bins=mel, channels=(channels[0], channels[1]), kernels=kernels,
                         strides=strides, width=d)
    if front.freq_bins(2) <= 0:
        raise ConfigError(f"{source}: {f.name_of('input_feat_size')} {mel} leaves no frequency bins after the "
                          "two sub-sampling convolutions")
    audio = AudioSpec(family="gemma3n", frontend="sscp", num_mel_bins=mel, d_model=d, num_layers=layers,
                      num_heads=heads, ffn_dim=4 * d, output_dim=text_hidden, n_window=chunk,
                      sscp_kernels=kernels, sscp_strides=strides, reduction=reduction)
    blocks = (front,
              ChunkedConformerLayers(part=AUDIO, count=layers, width=d, num_heads=heads, chunk=chunk,
                              context_left=num("conf_attention_context_left"),
                              context_right=num("conf_attention_context_right"), conv_kernel=num("conf_conv_kernel_size")),
              AudioEmbedder(part=AUDIO, count=1, width=d, out_width=text_hidden, vocab=num("vocab_size")))
    return audio, blocks


def mel_frames(samples: int, frame_length: int = 512, hop_length: int = 160, pad_to_multiple_of: int = 128,
               max_length: int = 480_000) -> int:
    """Mel frames ``Gemma3nAudioFeatureExtractor`` makes of a clip of ``samples`` samples (its defaults: 16 kHz,
    frames of ``frame_length`` + 1 samples every ``hop_length``): truncated to ``max_length``, padded to a multiple
    of ``pad_to_multiple_of``, then (padded - (frame_length + 1)) // hop + 1 (the batch pads every clip to its
    longest first: the encoder call's length is that of the longest clip)."""
    n = min(samples, max_length)
    n = -(-n // pad_to_multiple_of) * pad_to_multiple_of
    return max(0, (n - (frame_length + 1)) // hop_length + 1)


def encoder_outputs(audio: AudioSpec, frames: int) -> int:
    """Encoder output rows of a clip of ``frames`` mel frames: ⌈T_2 / reduction⌉."""
    (k0, _), (k1, _) = audio.sscp_kernels
    (s0, _), (s1, _) = audio.sscp_strides
    t2 = sscp_out(sscp_out(frames, k0, s0, k0 - 1), k1, s1, k1 - 1)
    return -(-t2 // audio.reduction)


# why a timm tower cannot be verified here (docs/families-notes.md, "Not built"); shared with perception_lm
TIMM_UNAVAILABLE = (
    "transformers builds it only with timm (TimmWrapperModel: 'requires the timm library'), and timm cannot join the "
    "locked CPU stack: timm 1.0.29 imports torchvision, whose only torch-2.13 wheel on the install indexes "
    "(torchvision 0.28.0) is the CUDA build and fails to load on torch 2.13.0+cpu ('operator torchvision::nms does "
    "not exist'), so nothing could verify a count")


refuse_model_type("gemma3n", (
    "Gemma 3n's vision tower is timm's MobileNetV5 ('mobilenetv5_300m_enc' through TimmWrapper), which is not "
    "modelled (its parameters and FLOPs are neither counted nor guessed: " + TIMM_UNAVAILABLE + "); the text decoder "
    "is supported: pass the config's text_config "
    "(model_type gemma3n_text, transformers Gemma3nForCausalLM), which leaves out the whole model's towers and its "
    "embed_vision / embed_audio projections that run on every LM token"))
