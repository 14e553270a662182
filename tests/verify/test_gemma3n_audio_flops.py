"""Gemma 3n's audio encoder (transformers ``Gemma3nAudioEncoder``, a USM-style conformer) and its embedder
(``Gemma3nMultimodalEmbedder`` as ``embed_audio``) against FlopCounterMode, on clips through transformers' own
``Gemma3nAudioFeatureExtractor``.

The whole ``Gemma3nForConditionalGeneration`` cannot be built here (its vision tower is timm's MobileNetV5, and
model_type ``gemma3n`` is refused for that reason), so the encoder and the embedder are measured as the model runs
them in ``get_audio_features``: ``audio_tower(input_features, ~input_features_mask)`` then
``embed_audio(inputs_embeds=last_hidden_state)``. Tiny random config: 16 mel bins, width 32, 4 heads, 2 conformer
blocks, attention chunk 4 with 4 past positions (context_left 5), conv kernel 3, sub-sampling channels (8, 4);
float64. The library side is the family's own reader (``read_gemma3n_audio``) and statistics
(``audio_call_stats``, frontend ``sscp``) from mel lengths derived by its own rule (``mel_frames``).
"""

from __future__ import annotations

import pytest

pytestmark = pytest.mark.measured
torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")
np = pytest.importorskip("numpy")

AUDIO = dict(input_feat_size=16, hidden_size=32, conf_num_attention_heads=4, conf_num_hidden_layers=2,
             conf_attention_chunk_size=4, conf_attention_context_left=5, conf_attention_context_right=0,
             conf_conv_kernel_size=3, sscp_conv_channel_size=[8, 4], vocab_size=10)
TEXT_HIDDEN = 48
CLIPS = [[4000], [4000, 1234], [16000, 800, 3000]]  # samples at 16 kHz: one clip, a padded pair, three


@pytest.fixture(scope="module")
def parts():
    from transformers.models.gemma3n.modeling_gemma3n import Gemma3nAudioEncoder, Gemma3nMultimodalEmbedder

    config = transformers.Gemma3nAudioConfig(**AUDIO)
    text = transformers.Gemma3nTextConfig(hidden_size=TEXT_HIDDEN, num_hidden_layers=1, num_attention_heads=2,
                                          num_key_value_heads=1, head_dim=8, intermediate_size=16,
                                          num_kv_shared_layers=0, vocab_size=50, vocab_size_per_layer_input=50,
                                          hidden_size_per_layer_input=4, layer_types=["full_attention"])
    torch.manual_seed(0)
    return (config, Gemma3nAudioEncoder(config).to(torch.float64),
            Gemma3nMultimodalEmbedder(config, text).to(torch.float64))


def _features(clips):
    extractor = transformers.Gemma3nAudioFeatureExtractor(feature_size=AUDIO["input_feat_size"])
    rng = np.random.default_rng(0)
    out = extractor([rng.standard_normal(n) for n in clips], return_tensors="pt")
    return out["input_features"].to(torch.float64), out["input_features_mask"]


def _measure(parts, clips, training):
    from torch.utils.flop_counter import FlopCounterMode

    _, encoder, embedder = parts
    x, mask = _features(clips)
    counter = FlopCounterMode(display=False)
    with (torch.enable_grad() if training else torch.no_grad()), counter:
        out = embedder(inputs_embeds=encoder(x, ~mask.bool()).last_hidden_state)
        if training:
            out.mean().backward()
    counts = counter.get_flop_counts()

    def inside(name):
        return sum(sum(v.values()) for k, v in counts.items() if k == name)
    subsample = inside("Gemma3nAudioEncoder.subsample_conv_projection")
    layers = range(AUDIO["conf_num_hidden_layers"])
    return {"total": counter.get_total_flops(), "rows": out.shape[0] * out.shape[1], "subsample": subsample,
            "ffw": sum(inside(f"Gemma3nAudioEncoder.conformer.{i}.ffw_layer_{w}") for i in layers
                       for w in ("start", "end")),
            "attention": sum(inside(f"Gemma3nAudioEncoder.conformer.{i}.attention") for i in layers),
            "lconv": sum(inside(f"Gemma3nAudioEncoder.conformer.{i}.lconv1d") for i in layers),
            "embed": inside("Gemma3nMultimodalEmbedder")}


def _library(parts, clips, training=False):
    from vlm_perf.arch.families.gemma3n import encoder_outputs, mel_frames, read_gemma3n_audio
    from vlm_perf.flops.blocks import FlopsContext, inventory_terms
    from vlm_perf.flops.training import training_flops
    from vlm_perf.stats import BatchStats
    from vlm_perf.stats.audio import audio_call_stats

    config = parts[0]
    audio, blocks = read_gemma3n_audio(config.to_dict(), "tiny", TEXT_HIDDEN)
    frames = [mel_frames(n) for n in clips]
    stats = audio_call_stats(audio, frames)
    assert stats["audio_out_tokens"] == len(clips) * encoder_outputs(audio, max(frames))
    terms = inventory_terms(blocks, BatchStats(**stats), FlopsContext(causal="full"))
    out: dict = {"rows": stats["audio_out_tokens"]}
    for t in terms:
        out[t.component] = out.get(t.component, 0) + (training_flops(t, frozenset()) if training else t.forward)
    return out, blocks


@pytest.mark.parametrize("clips", CLIPS, ids=["1clip", "2clips", "3clips"])
def test_forward_exact_per_module(parts, clips):
    m = _measure(parts, clips, False)
    lib, _ = _library(parts, clips)
    assert lib["rows"] == m["rows"]  # the encoder's output rows (B x ceil(T_2 / 4))
    assert sum(v for k, v in lib.items() if k != "rows") == m["total"]
    assert lib["audio.proj"] == m["embed"]
    assert lib["audio.attn_proj"] + lib["audio.attn_core"] == m["attention"]
    conv_front = m["subsample"]
    assert lib["audio.conv"] + lib["audio.mlp"] == conv_front + m["ffw"] + m["lconv"]


def _depthwise_weight_grad_overcount(parts, clips):
    """FlopCounterMode bills a depthwise Conv1d's weight gradient as a dense conv (it ignores ``groups``):
    2·R·K·d·d instead of 2·R·K·d, i.e. 2·R·K·d·(d - 1) too much per layer (R = B·T_2 rows)."""
    from vlm_perf.arch.families.gemma3n import mel_frames, read_gemma3n_audio
    from vlm_perf.stats.audio import audio_call_stats

    audio, _ = read_gemma3n_audio(parts[0].to_dict(), "tiny", TEXT_HIDDEN)
    rows = audio_call_stats(audio, [mel_frames(n) for n in clips])["audio_tokens"]
    d, k = AUDIO["hidden_size"], AUDIO["conf_conv_kernel_size"]
    return AUDIO["conf_num_hidden_layers"] * 2 * rows * k * d * (d - 1)


@pytest.mark.parametrize("clips", CLIPS, ids=["1clip", "2clips", "3clips"])
def test_training_exact(parts, clips):
    """Everything trains: GEMMs x3 except the first conv (reads features: no input gradient) and ``pos_proj`` (reads
    constant sinusoids); the chunked attention's three products (QKᵀ, the relative-position term, AV) have two
    activation operands: x3. Equal to the measurement once FlopCounterMode's depthwise over-count is removed."""
    m = _measure(parts, clips, True)
    lib, _ = _library(parts, clips, training=True)
    lib_total = sum(v for k, v in lib.items() if k != "rows")
    assert m["total"] - _depthwise_weight_grad_overcount(parts, clips) == lib_total


def test_forward_by_hand(parts):
    """One clip of 4000 samples: padded to 4096 -> (4096 - 513) // 160 + 1 = 23 mel frames; T_1 = 12, T_2 = 6 rows
    (F: 16 -> 8 -> 4 bins); blocks of 4 -> 8 query rows; output ceil(6 / 4) = 2 rows. d 32, C = 4 + 4 = 8 keys,
    5 relative positions, K 3.
    convs 2·12·8·8·9 + 2·6·4·4·72 + 2·6·16·32; per layer: q/k/v/post 4·2·6·32², pos_proj 2·5·32², core
    2·8·32·(2·8 + 5), ffw 2·2·2·6·32·128, lconv 2·6·32·64 + 2·6·32² + 2·6·3·32; embedder 2·2·32·48."""
    lib, _ = _library(parts, [4000])
    per_layer = (4 * 2 * 6 * 32 * 32 + 2 * 5 * 32 * 32 + 2 * 8 * 32 * 21 + 2 * 2 * 2 * 6 * 32 * 128
                 + 2 * 6 * 32 * 64 + 2 * 6 * 32 * 32 + 2 * 6 * 3 * 32)
    convs = 2 * 12 * 8 * 8 * 9 + 2 * 6 * 4 * 4 * 72 + 2 * 6 * 16 * 32
    expect = convs + 2 * per_layer + 2 * 2 * 32 * 48
    assert sum(v for k, v in lib.items() if k != "rows") == expect == _measure(parts, [4000], False)["total"]


def test_parameters_equal_transformers(parts):
    from vlm_perf.arch.blocks import inventory_params

    _, encoder, embedder = parts
    _, blocks = _library(parts, [4000])
    assert inventory_params(blocks) == sum(p.numel() for p in encoder.parameters()) + sum(
        p.numel() for p in embedder.parameters())


def test_mel_frames_rule_fuzzed_against_the_feature_extractor():
    """``mel_frames`` equals the frames ``Gemma3nAudioFeatureExtractor`` returns for a clip (padding to a multiple of
    128 samples, truncation to 30 s), and ``encoder_outputs`` the rows the encoder returns, on 40 seeded lengths."""
    from vlm_perf.arch.families.gemma3n import encoder_outputs, mel_frames, read_gemma3n_audio

    rng = np.random.default_rng(7)
    extractor = transformers.Gemma3nAudioFeatureExtractor(feature_size=16)
    lengths = [int(n) for n in rng.integers(600, 40_000, 38)] + [480_000, 481_000]
    audio, _ = read_gemma3n_audio(transformers.Gemma3nAudioConfig().to_dict(), "default", 2048)
    for n in lengths:
        got = extractor([np.zeros(n)], return_tensors="np")["input_features"].shape[1]
        assert mel_frames(n) == got, n
    # a 30 s clip fills exactly the processor's 188 audio placeholders at the default geometry
    assert encoder_outputs(audio, mel_frames(480_000)) == 188
    assert encoder_outputs(audio, mel_frames(481_000)) == 188  # truncated to 30 s


def test_class_default_encoder_equals_transformers_meta_count():
    """Gemma3nAudioConfig's class defaults (12 conformer blocks of 1536, 8 heads, chunk 12, context 13 / 0,
    kernel 5, sub-sampling (128, 32) over 128 mel bins) and an embedder into h = 2048: the inventory equals the
    meta-device count of Gemma3nAudioEncoder + Gemma3nMultimodalEmbedder; a bare {} reads the same defaults."""
    from transformers.models.gemma3n.modeling_gemma3n import Gemma3nAudioEncoder, Gemma3nMultimodalEmbedder

    from vlm_perf.arch.blocks import inventory_params
    from vlm_perf.arch.families.gemma3n import read_gemma3n_audio

    config, text = transformers.Gemma3nAudioConfig(), transformers.Gemma3nTextConfig()
    with torch.device("meta"):
        meta = sum(p.numel() for p in Gemma3nAudioEncoder(config).parameters()) + sum(
            p.numel() for p in Gemma3nMultimodalEmbedder(config, text).parameters())
    assert inventory_params(read_gemma3n_audio(config.to_dict(), "default", 2048)[1]) == meta
    assert inventory_params(read_gemma3n_audio({}, "default", 2048)[1]) == meta


@pytest.mark.parametrize("bad, message", [
    (dict(hidden_size=30), "must be a positive multiple of audio_config.conf_num_attention_heads"),
    (dict(sscp_conv_kernel_size=[[3, 3]]), "must be two \\[time, freq\\] pairs"),
    (dict(sscp_conv_channel_size=[8]), "must be two positive integers"),
    (dict(input_feat_size=1, sscp_conv_kernel_size=[[3, 9], [3, 9]]), "leaves no frequency bins"),
])
def test_bad_audio_configs_are_refused_in_one_line(bad, message):
    from vlm_perf.arch.families.gemma3n import read_gemma3n_audio
    from vlm_perf.errors import ConfigError

    with pytest.raises(ConfigError, match=message):
        read_gemma3n_audio({**AUDIO, **bad}, "cfg.json", TEXT_HIDDEN)


def test_whole_model_text_and_audio_forward_decomposes(monkeypatch):
    """What the refused whole model would need, measured on transformers' own Gemma3nForConditionalGeneration with
    its timm vision tower replaced by an empty module (it never runs without ``pixel_values``): a forward with text
    and one audio clip (4 placeholders, as Gemma3nProcessor lays them out: <boa>, the audio tokens, <eoa>) equals
    the gemma3n_text inventory of its text_config + the audio inventory (encoder + ``embed_audio`` on the encoder's
    rows) + what ``Gemma3nModel.forward`` adds: ``embed_vision`` and ``embed_audio``'s hard-token projections on
    EVERY LM token (2·S·(d_v + d_a)·h) and ``embed_audio`` of the audio padding token (2·d_a·h, one row per call)."""
    from torch import nn
    from torch.utils.flop_counter import FlopCounterMode

    import transformers.models.gemma3n.modeling_gemma3n as modeling
    from vlm_perf.arch import spec_from_config
    from vlm_perf.arch.families.gemma3n import mel_frames, read_gemma3n_audio
    from vlm_perf.flops import compute_flops
    from vlm_perf.flops.blocks import FlopsContext, inventory_terms
    from vlm_perf.stats import BatchStats
    from vlm_perf.stats.audio import audio_call_stats

    text = dict(vocab_size=300, vocab_size_per_layer_input=200, hidden_size=64, intermediate_size=48,
                num_hidden_layers=3, num_attention_heads=4, num_key_value_heads=2, head_dim=16, sliding_window=8,
                hidden_size_per_layer_input=8, laurel_rank=4, altup_num_inputs=2, num_kv_shared_layers=0,
                layer_types=["sliding_attention", "sliding_attention", "full_attention"])
    d_v = 24
    config = transformers.Gemma3nConfig(
        text_config=text, audio_config={**AUDIO, "conf_num_hidden_layers": 1, "vocab_offset": 290},
        vision_config=dict(hidden_size=d_v, vocab_size=8, vocab_offset=282), audio_soft_tokens_per_image=4,
        image_token_id=283, audio_token_id=291, boa_token_id=280, eoa_token_id=281, boi_token_id=279,
        eoi_token_id=278)
    config._attn_implementation = "eager"
    config.text_config._attn_implementation = "eager"
    original = modeling.AutoModel.from_config
    monkeypatch.setattr(modeling.AutoModel, "from_config", lambda c, *a, **k: nn.Module()
                        if type(c).__name__ == "Gemma3nVisionConfig" else original(c, *a, **k))
    torch.manual_seed(0)
    model = transformers.Gemma3nForConditionalGeneration(config).to(torch.float64)
    x, mask = _features([4000])
    ids = torch.tensor([[5, 6, 280, 291, 291, 291, 291, 281, 7, 8]])
    counter = FlopCounterMode(display=False)
    with torch.no_grad(), counter:
        model(input_ids=ids, input_features=x, input_features_mask=mask, use_cache=False)

    S, h, d_a = ids.shape[1], 64, AUDIO["hidden_size"]
    lm_spec = spec_from_config(config.text_config.to_dict())
    lm = compute_flops(lm_spec, BatchStats.from_batch(seq_lens=[S], spec=lm_spec), mode="forward", causal="full").total
    audio, blocks = read_gemma3n_audio(config.audio_config.to_dict(), "tiny", h)
    stats = BatchStats(**audio_call_stats(audio, [mel_frames(4000)]))
    audio_flops = sum(t.forward for t in inventory_terms(blocks, stats, FlopsContext(causal="full")))
    assert stats.audio_out_tokens == 2  # 2 encoder rows, padded to the 4 placeholders with the padding embedding
    hard = 2 * S * (d_v + d_a) * h + 2 * 1 * d_a * h
    assert counter.get_total_flops() == lm + audio_flops + hard
