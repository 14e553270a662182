"""BLIP-2 with a T5 language model (BLIP-2 FLAN-T5: ``Blip2ForConditionalGeneration`` running
``T5ForConditionalGeneration``) against FlopCounterMode, per part.

Reference: the BLIP-2 harness (``tests/verify/families/blip_2.py``: tower, Q-Former, transformers' own
``Blip2Processor`` built offline, one image per sample) with its OPT ``text_config`` replaced by a tiny T5 (width 48,
4 heads x ``d_kv`` 16 = 64: an attention width other than the model width; 2 encoder and 3 decoder layers; FFN 80,
gated GELU as flan-t5 or plain ReLU as t5 v1.0), labels of different lengths per sample padded with -100, eager,
float64, the model's own loss. The encoder reads the 6 query tokens + the text (``lm_*``), the decoder the labels
(``decoder_lens``); the library counts ``exact`` per part, forward and training, with the parts frozen as BLIP-2
recipes do.
"""

from __future__ import annotations

import pytest

pytestmark = pytest.mark.measured
torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from .families.blip_2 import build_model, make_inputs, part_modules, tiny_config  # noqa: E402
from .families.common import VOCAB, count  # noqa: E402

T5 = dict(model_type="t5", vocab_size=VOCAB, d_model=48, d_kv=16, num_heads=4, d_ff=80, num_layers=2,
          num_decoder_layers=3, feed_forward_proj="gated-gelu", relative_attention_num_buckets=8,
          decoder_start_token_id=0, pad_token_id=0, eos_token_id=1, dropout_rate=0.0)
PROCESSOR = {"preprocessor_config.json": {"size": {"height": 32, "width": 32}},
             "processor_config.json": {"num_query_tokens": 6}}
FROZEN = [(), ("vision_tower", "language_model"), ("vision_tower",), ("language_model",), ("projector",)]


def _model(**text):
    return build_model(tiny_config(text={**T5, **text}), 0)


@pytest.fixture(scope="module")
def model():
    return _model()


def _measure(model, images, mode="forward", frozen=(), decoder_len=3):
    inputs, media = make_inputs(model, images)
    dec = [decoder_len + i for i in range(len(images))]
    gen = torch.Generator().manual_seed(5)
    labels = torch.full((len(dec), max(dec)), -100, dtype=torch.long)
    for i, n in enumerate(dec):
        labels[i, :n] = torch.randint(8, VOCAB, (n,), generator=gen)
    inputs["labels"] = labels
    m = count(model, inputs, part_modules(model), training=mode == "training", frozen=frozen,
              run=lambda mod, x: mod(**x).loss,
              loose_params=lambda mod, part: [mod.query_tokens] if part == "projector" else [])
    m.check()
    media["decoder_len"] = max(dec)
    return m, media


def _library(model, media, images, mode="forward", frozen=()):
    from vlm_perf.arch import spec_from_config
    from vlm_perf.arch.families import FAMILIES
    from vlm_perf.flops import compute_flops
    from vlm_perf.stats import BatchStats

    spec = spec_from_config(model.config.to_dict(), name="tiny-blip-2-t5", processor=PROCESSOR)
    grids = [FAMILIES["blip-2"].media.image(spec, h, w).grid for h, w in images]
    batch = media["batch"]
    stats = BatchStats.from_batch(seq_lens=[media["seq_len"]] * batch, image_grids=grids, spec=spec,
                                  decoder_lens=[media["decoder_len"]] * batch)
    return compute_flops(spec, stats, mode=mode, causal="full", frozen=frozen).parts


@pytest.mark.parametrize("images", [[(30, 50)], [(70, 20), (32, 32), (9, 90)]], ids=["1-image", "3-images"])
def test_forward_per_part(model, images):
    m, media = _measure(model, images)
    assert _library(model, media, images) == m.parts("forward")


@pytest.mark.parametrize("frozen", FROZEN, ids=lambda f: "+".join(f) or "all-trainable")
def test_training_per_part(model, frozen):
    images = [(70, 20), (32, 32)]
    m, media = _measure(model, images, "training", frozen)
    assert _library(model, media, images, "training", frozen) == m.parts("training")


def test_plain_relu_t5_per_part():
    """t5 v1.0 style: a non-gated ReLU FFN (``feed_forward_proj`` relu), forward and training."""
    variant = _model(feed_forward_proj="relu")
    images = [(30, 50), (9, 90)]
    for mode in ("forward", "training"):
        m, media = _measure(variant, images, mode)
        assert _library(variant, media, images, mode) == m.parts(mode), mode


@pytest.mark.parametrize("text", [{}, {"feed_forward_proj": "relu"}, {"num_decoder_layers": None},
                                  {"tie_word_embeddings": False}], ids=["gated", "relu", "symmetric", "untied-flag"])
def test_parameters_match_transformers_meta_count(text):
    """The inventory equals transformers' count (meta device); T5Config in 5.24 ties the head whatever
    tie_word_embeddings says."""
    import transformers

    from vlm_perf.arch import spec_from_config
    from vlm_perf.arch.params import count_params

    config = tiny_config(text={**T5, **text})
    with torch.device("meta"):
        model = transformers.Blip2ForConditionalGeneration(config)
    assert count_params(spec_from_config(config.to_dict(), name="t")).total == sum(p.numel()
                                                                                   for p in model.parameters())


def test_flan_t5_xl_sized_lm_parameters():
    """BLIP-2 FLAN-T5-XL's language model dims (flan-t5-xl config.json: d_model 2048, d_kv 64, 32 heads, d_ff 5120,
    24 + 24 layers, gated-gelu, vocab 32128, 32 buckets): the inventory's LM equals transformers' T5 built from them
    (meta device; head tied by transformers 5.24)."""
    import transformers

    from vlm_perf.arch import spec_from_config
    from vlm_perf.arch.params import count_params

    text = dict(model_type="t5", d_model=2048, d_kv=64, num_heads=32, d_ff=5120, num_layers=24,
                feed_forward_proj="gated-gelu", vocab_size=32128, relative_attention_num_buckets=32)
    with torch.device("meta"):
        t5 = transformers.T5ForConditionalGeneration(transformers.T5Config(**{k: v for k, v in text.items()
                                                                             if k != "model_type"}))
    c = count_params(spec_from_config({"model_type": "blip-2", "text_config": text}, name="x"))
    assert c.lm == sum(p.numel() for p in t5.parameters())


def test_generation_is_refused():
    from vlm_perf.arch import spec_from_config
    from vlm_perf.errors import UnsupportedModelError
    from vlm_perf.flops.generation import generation_flops

    spec = spec_from_config(tiny_config(text=T5).to_dict(), name="t")
    with pytest.raises(UnsupportedModelError, match="encoder-decoder"):
        generation_flops(spec, [20], [2], [(1, 4, 4)])


@pytest.mark.parametrize("trainable", [["vision_tower[-1]"], ["vision_tower[-1]", "projector"]],
                         ids=lambda t: "+".join(t))
def test_tower_layer_regimes_through_a_frozen_t5(trainable):
    """--trainable: the last tower layer trains (and the Q-Former or not); the frozen Q-Former and the frozen T5
    encoder-decoder pass nothing back but what their inputs need (the regime engine; the T5 LM, without a per-Linear
    layout, trains or freezes as a whole)."""
    import copy

    from vlm_perf.arch import spec_from_config
    from vlm_perf.arch.families import FAMILIES
    from vlm_perf.arch.trainability import Trainability
    from vlm_perf.flops.regime import regime_flops
    from vlm_perf.stats import BatchStats

    from .regimes import measure_regime, measured_parts

    images = [(70, 20), (32, 32)]
    m = copy.deepcopy(_model())
    m.requires_grad_(False)
    mods = [m.vision_model.encoder.layers[-1]]
    if "projector" in trainable:
        mods += [m.qformer, m.language_projection]
        m.query_tokens.requires_grad_(True)
    for mod in mods:
        mod.requires_grad_(True)
    inputs, media = make_inputs(m, images)
    inputs["labels"] = torch.tensor([[9, 10, 11, -100], [12, 13, 14, 15]])
    measured = measured_parts(measure_regime(m, inputs, parts=part_modules(m)))
    spec = spec_from_config(m.config.to_dict(), name="t5", processor=PROCESSOR)
    grids = [FAMILIES["blip-2"].media.image(spec, h, w).grid for h, w in images]
    stats = BatchStats.from_batch(seq_lens=[media["seq_len"]] * media["batch"], image_grids=grids, spec=spec,
                                  decoder_lens=[4, 4])
    assert regime_flops(spec, stats, Trainability.build(trainable), causal="full").parts == measured
