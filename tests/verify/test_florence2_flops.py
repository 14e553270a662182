"""Florence-2 (transformers ``Florence2ForConditionalGeneration``: DaViT tower, pooled-token projector, BART
encoder-decoder LM) against FlopCounterMode, per part.

Reference: the famverify harness (``tests/verify/families/florence2.py``): a tiny random Florence-2 (two DaViT stages on
56 x 56 images whose grids, 14 x 14 and 7 x 7, are both zero-padded to whole 3 x 3 windows; 50 image tokens per image;
a BART LM of 2 encoder and 3 decoder layers), eager attention, float64, inputs from transformers' own
``Florence2Processor`` (built offline), one image per sample, texts and labels of different lengths padded into one
batch, the model's own loss. The library starts from the SAME pixel sizes, derives media with its own rule
(``Florence2Media``), takes the encoder length from the padded ``input_ids`` and the decoder length from the padded
labels, and counts ``exact``: per part, forward and training, every whole-part freezing (the depthwise convolutions'
weight gradients corrected for torch's grouped-conv over-count, ``PartMeasurement.grouped_conv_overcount``).
"""

from __future__ import annotations

import pytest

pytestmark = pytest.mark.measured
torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from .families import measure_family  # noqa: E402
from .families.florence2 import PROCESSOR_FILES, build_model, processor, tiny_config  # noqa: E402

SIZES = [[(30, 50)], [(70, 20), (56, 56)], [(100, 30), (8, 9), (64, 64)]]
FROZEN = [(), ("vision_tower",), ("language_model",), ("vision_tower", "language_model"), ("projector",),
          ("vision_tower", "projector"), ("projector", "language_model")]


@pytest.fixture(scope="module")
def model():
    return build_model(tiny_config(), 0)


def _spec(model, processor_files=PROCESSOR_FILES):
    from vlm_perf.arch import spec_from_config

    return spec_from_config(model.config.to_dict(), name="tiny-florence2", processor=processor_files)


def _library(model, measured, images, mode="forward", frozen=(), causal="full"):
    from vlm_perf.arch.families import FAMILIES
    from vlm_perf.flops import compute_flops
    from vlm_perf.stats import BatchStats

    spec = _spec(model)
    media = [FAMILIES["florence2"].media.image(spec, h, w) for h, w in images]
    assert len(media) == measured.media["images"]  # the rule agrees with HF's processor
    assert sum(m.visual_tokens for m in media) == measured.media["visual_tokens"]
    batch = measured.media["batch"]
    stats = BatchStats.from_batch(seq_lens=[measured.media["seq_len"]] * batch, image_grids=[m.grid for m in media],
                                  spec=spec, decoder_lens=[measured.media["decoder_len"]] * batch)
    return compute_flops(spec, stats, mode=mode, causal=causal, frozen=frozen)


@pytest.mark.parametrize("images", SIZES, ids=lambda s: "+".join(f"{h}x{w}" for h, w in s))
def test_forward_per_part(model, images):
    m = measure_family("florence2", model=model, image_sizes=images)
    m.check()
    assert _library(model, m, images).parts == m.parts("forward")


@pytest.mark.parametrize("frozen", FROZEN, ids=lambda f: "+".join(f) or "all-trainable")
def test_training_per_part(model, frozen):
    """Training = forward + the backward autograd runs: a frozen tower is forward only; a frozen LM in front of a
    trainable tower or projector still pays its input gradients, except in the decoder's first self-attention
    (it reads only the decoder's own embeddings) and the first cross-attention's dQ."""
    images = [(70, 20), (56, 56), (9, 90)]
    m = measure_family("florence2", model=model, image_sizes=images, mode="training", frozen=frozen)
    m.check()
    assert _library(model, m, images, "training", frozen).parts == m.parts("training")


def test_depthwise_convs_are_corrected_not_ignored(model):
    """The harness's correction is real and bounded: torch counts each depthwise conv's weight gradient 'groups' times
    (grouped_conv_overcount); the library's tower equals the corrected count, not the raw one."""
    images = [(30, 50)]
    m = measure_family("florence2", model=model, image_sizes=images, mode="training")
    over = m.grouped_conv_overcount()
    assert set(over) == {"vision_tower"} and over["vision_tower"] > 0
    lib = _library(model, m, images, "training").parts
    assert lib["vision_tower"] == m.training()["vision_tower"] == m.training(corrected=False)["vision_tower"] - over[
        "vision_tower"]


def test_tower_by_hand(model):
    """One 56 x 56 image. Stage 0: conv 7x7/4 (pad 3) 3 -> 16 on 14 x 14 = 196 positions; windows of 3 on a grid padded
    to 15 x 15 = 225 positions; 2·196·49·3·16 + [4 depthwise 2·196·9·16 + 2 MLPs 2·196·2·16·64 + spatial qkv/proj
    2·225·4·16² + window core 4·225·9·16 + channel qkv/proj 2·196·4·16² + channel core 4·196·16·(16/2)].
    Stage 1 (2 blocks): conv 3x3/2 16 -> 32 on 7 x 7 = 49, padded to 9 x 9 = 81."""
    def stage(n, padded, c_in, k, w, groups, depth, window=3):
        block = (4 * 2 * n * 9 * w + 2 * 2 * n * 2 * w * 4 * w + 2 * padded * 4 * w * w + 4 * padded * window ** 2 * w
                 + 2 * n * 4 * w * w + 4 * n * w * (w // groups))
        return 2 * n * k * k * c_in * w + depth * block

    m = measure_family("florence2", model=model, image_sizes=[(30, 50)])
    assert m.parts("forward")["vision_tower"] == stage(196, 225, 3, 7, 16, 2, 1) + stage(49, 81, 16, 3, 32, 4, 2)
    assert m.parts("forward")["projector"] == 2 * (49 + 1) * 32 * 48


def test_language_model_by_hand(model):
    """One sample: E encoder positions (50 image tokens + <s> + 5 words + </s> = 57), D = 4 label positions, width 48,
    FFN 64 (encoder) / 80 (decoder), vocabulary 1000: encoder 2·(2·E·4·48² + 4·48·E² + 2·E·2·48·64); decoder
    3·(2·D·4·48² + 4·48·D² + 2·D·2·48² + 2·E·2·48² + 4·48·D·E + 2·D·2·48·80); head 2·D·48·1000."""
    e, d, h = 57, 4, 48
    enc = 2 * (2 * e * 4 * h * h + 4 * h * e * e + 2 * e * 2 * h * 64)
    dec = 3 * (2 * d * 4 * h * h + 4 * h * d * d + 2 * d * 2 * h * h + 2 * e * 2 * h * h + 4 * h * d * e
               + 2 * d * 2 * h * 80)
    m = measure_family("florence2", model=model, image_sizes=[(30, 50)], text_len=5)
    assert m.media["seq_len"] == e and m.media["decoder_len"] == d
    assert m.parts("forward")["language_model"] == enc + dec + 2 * d * h * 1000
    assert _library(model, m, [(30, 50)]).parts["language_model"] == enc + dec + 2 * d * h * 1000


def test_unequal_samples_are_exact_per_sample(model):
    """Cross-attention pairs each decoder position with its own sample's encoder positions: two samples of different
    encoder and decoder lengths, run one at a time (no padding), sum to ``from_batch`` with both lengths lists
    (Σ d·e per sample, not the longest-sample product)."""
    from vlm_perf.arch.families import FAMILIES
    from vlm_perf.flops import compute_flops
    from vlm_perf.stats import BatchStats

    runs = [measure_family("florence2", model=model, image_sizes=[(30, 50)], text_len=3, decoder_len=2, mode="training"),
            measure_family("florence2", model=model, image_sizes=[(70, 20)], text_len=9, decoder_len=7,
                           mode="training")]
    spec = _spec(model)
    grids = [FAMILIES["florence2"].media.image(spec, h, w).grid for h, w in ((30, 50), (70, 20))]
    stats = BatchStats.from_batch(seq_lens=[r.media["seq_len"] for r in runs], image_grids=grids, spec=spec,
                                  decoder_lens=[r.media["decoder_len"] for r in runs])
    assert stats.lm_decoder_x_encoder == 2 * runs[0].media["seq_len"] + 7 * runs[1].media["seq_len"]
    lib = compute_flops(spec, stats, mode="training", causal="full").parts
    assert lib == {p: runs[0].parts("training")[p] + runs[1].parts("training")[p] for p in lib}


def test_parameters_per_part(model):
    from vlm_perf.arch.params import count_params

    numel = lambda mod: sum(p.numel() for p in mod.parameters())  # noqa: E731
    c = count_params(_spec(model))
    assert c.vision_tower == numel(model.model.vision_tower)
    assert c.merger == numel(model.model.multi_modal_projector)
    assert c.lm == numel(model.model.language_model)  # the head is tied to its shared embedding
    assert c.total == numel(model)


VARIANTS = {"tiny": {}, "untied-head": {"tie_word_embeddings": False},
            "no-qkv-bias+mlp-ratio-2+wide-window": {"vision": {"qkv_bias": False, "mlp_ratio": 2.0, "window_size": 8}},
            "three-stages": {"vision": {"depths": [1, 1, 2], "patch_size": [7, 3, 3], "patch_stride": [4, 2, 2],
                                        "patch_padding": [3, 1, 1], "patch_prenorm": [False, True, True],
                                        "embed_dim": [8, 16, 32], "num_heads": [1, 2, 4], "num_groups": [2, 2, 8]}}}


@pytest.mark.parametrize("over", list(VARIANTS.values()), ids=list(VARIANTS))
def test_parameters_match_transformers_meta_count(over):
    """The inventory's total equals transformers' own count on the meta device, variants included."""
    import transformers

    from vlm_perf.arch import spec_from_config
    from vlm_perf.arch.params import count_params

    config = tiny_config(**over)
    with torch.device("meta"):
        model = transformers.Florence2ForConditionalGeneration(config)
    assert count_params(spec_from_config(config.to_dict(), name="t")).total == sum(p.numel()
                                                                                   for p in model.parameters())


@pytest.mark.parametrize("name", list(VARIANTS)[1:])
def test_variant_config_per_part(name):
    """Untied head, no q/k/v bias, a window wider than every grid (one padded window per image), three stages: forward
    and training exact per part (all trainable, and the tower frozen)."""
    variant = build_model(tiny_config(**VARIANTS[name]), 0)
    images = [(70, 20), (9, 90)]
    for mode, frozen in (("forward", ()), ("training", ()), ("training", ("vision_tower",))):
        m = measure_family("florence2", model=variant, image_sizes=images, mode=mode, frozen=frozen)
        m.check()
        assert _library(variant, m, images, mode, frozen).parts == m.parts(mode), (mode, frozen)


def test_default_config_parameters_equal_transformers():
    """Florence2Config() (Florence2VisionConfig and BartConfig class defaults): every section from its class
    defaults."""
    import transformers

    from vlm_perf.arch import spec_from_config
    from vlm_perf.arch.params import count_params

    with torch.device("meta"):
        model = transformers.Florence2ForConditionalGeneration(transformers.Florence2Config())
    config = transformers.Florence2Config().to_dict()
    assert count_params(spec_from_config({"model_type": "florence2"}, name="d")).total == sum(
        p.numel() for p in model.parameters()) == count_params(spec_from_config(config, name="d2")).total


@pytest.mark.parametrize("name,total,published", [("florence-2-base", 231_443_968, 0.23),
                                                  ("florence-2-large", 770_213_888, 0.77)])
def test_presets_equal_transformers_and_published_sizes(name, total, published):
    """The presets: transformers' own count of the preset config (meta device) equals the inventory and rounds to the
    published size (0.23B / 0.77B); each image is 577 LM tokens (24 x 24 + 1) on the 768 x 768 processor square."""
    import transformers

    from vlm_perf.arch import load_model, preset_config
    from vlm_perf.arch.params import count_params

    cfg = {k: v for k, v in preset_config(name).items() if not k.startswith("_")}
    config = transformers.Florence2Config(**{k: v for k, v in cfg.items() if k != "architectures"})
    with torch.device("meta"):
        model = transformers.Florence2ForConditionalGeneration(config)
    spec = load_model(name)
    assert count_params(spec).total == sum(p.numel() for p in model.parameters()) == total
    assert round(total / 1e9, 2) == published
    assert spec.extra["lm_tokens_per_frame"] == 577 and spec.extra["image_size"] == 768


def test_processor_tokens(model):
    """transformers' own processor: 50 <image> tokens per image, one image per sample, resized to 56 x 56."""
    m = measure_family("florence2", model=model, image_sizes=[(30, 50), (9, 90)])
    assert m.media["visual_tokens"] == 100 and m.media["images"] == 2
    assert m.media["pixel_values_shape"] == (2, 3, 56, 56)


def test_regimes_engine_agrees_and_refuses_what_it_cannot_place(model):
    """Whole-part regimes through the regime engine equal compute_flops; a finer tower selector, an adapter (no
    per-Linear layout for the encoder-decoder) and generation are refused with their reasons."""
    from vlm_perf.arch.adapters import AdapterConfig
    from vlm_perf.arch.trainability import Trainability
    from vlm_perf.errors import UnsupportedModelError
    from vlm_perf.flops import compute_flops
    from vlm_perf.flops.generation import generation_flops
    from vlm_perf.flops.regime import regime_flops
    from vlm_perf.stats import BatchStats

    spec = _spec(model)
    stats = BatchStats.from_batch(seq_lens=[60, 57], image_grids=[(1, 7, 7)] * 2, spec=spec, decoder_lens=[5, 9])
    for frozen in FROZEN:
        for causal in ("full", "half"):
            assert (regime_flops(spec, stats, Trainability.from_frozen(frozen), causal=causal).parts
                    == compute_flops(spec, stats, mode="training", causal=causal, frozen=frozen).parts)
    with pytest.raises(UnsupportedModelError, match=r"vision_tower has block kinds without a per-layer layout"):
        regime_flops(spec, stats, Trainability.build(["vision_tower[-1]"]))
    lora = Trainability.build([], adapter=AdapterConfig(r=8, target_modules=("q_proj", "v_proj")))
    with pytest.raises(UnsupportedModelError, match=r"adapters on an encoder-decoder LM are not modelled"):
        regime_flops(spec, stats, lora)
    with pytest.raises(UnsupportedModelError, match=r"generation with an encoder-decoder LM .* is not modelled"):
        generation_flops(spec, [60], [1], [(1, 7, 7)])


def test_decoder_lengths_default_and_validation(model):
    """Without decoder_lens an encoder-decoder model takes each sample's decoder length equal to its encoder length
    (the stated stand-in); a decoder-only model refuses decoder_lens; lengths are checked."""
    from vlm_perf.arch import load_model
    from vlm_perf.errors import InputError
    from vlm_perf.stats import BatchStats

    spec = _spec(model)
    s = BatchStats.from_batch(seq_lens=[60, 57], image_grids=[(1, 7, 7)] * 2, spec=spec)
    assert (s.lm_decoder_tokens, s.lm_decoder_tokens_sq, s.lm_decoder_x_encoder) == (117, 60 ** 2 + 57 ** 2,
                                                                                     60 ** 2 + 57 ** 2)
    u = BatchStats.from_batch(seq_len=60, samples=3, spec=spec, decoder_lens=[4, 5, 6])
    assert (u.lm_decoder_tokens, u.lm_decoder_x_encoder) == (15, 60 * 15)
    with pytest.raises(InputError, match="decoder_lens must hold one length per sample"):
        BatchStats.from_batch(seq_lens=[60, 57], spec=spec, decoder_lens=[3])
    with pytest.raises(InputError, match=r"decoder_lens\[1\]: decoder lengths must be positive integers"):
        BatchStats.from_batch(seq_lens=[60, 57], spec=spec, decoder_lens=[3, 0])
    with pytest.raises(InputError, match="has no encoder-decoder language model"):
        BatchStats.from_batch(seq_lens=[60], spec=load_model("qwen2.5-vl-3b"), decoder_lens=[3])


def test_causal_half_halves_only_the_decoder_self_attention(model):
    """--causal half: the decoder's self-attention core is halved; the encoder's (bidirectional) and the cross-attention
    cores are whole squares / rectangles under any kernel."""
    from vlm_perf.flops import compute_flops
    from vlm_perf.stats import BatchStats

    spec = _spec(model)
    s = BatchStats.from_batch(seq_lens=[60], image_grids=[(1, 7, 7)], spec=spec, decoder_lens=[8])
    full = compute_flops(spec, s, mode="forward", causal="full").parts["language_model"]
    half = compute_flops(spec, s, mode="forward", causal="half").parts["language_model"]
    assert full - half == 3 * 4 * 48 * 8 * 8 // 2


def test_refusals_name_the_reason(model):
    from vlm_perf.arch import spec_from_config
    from vlm_perf.arch.families import FAMILIES
    from vlm_perf.errors import UnsupportedModelError

    cfg = model.config.to_dict()
    with pytest.raises(UnsupportedModelError, match=r"text_config.model_type 't5' is not modelled"):
        spec_from_config({**cfg, "text_config": {**cfg["text_config"], "model_type": "t5"}}, name="x")
    with pytest.raises(UnsupportedModelError, match="original remote-code layout"):
        spec_from_config({"model_type": "florence2", "vision_config": {"dim_embed": [8, 16]}}, name="x")
    rule = FAMILIES["florence2"].media
    with pytest.raises(UnsupportedModelError, match="image_seq_length 577 differs"):
        rule.image(_spec(model, {"preprocessor_config.json": {"size": {"height": 56, "width": 56},
                                                              "image_seq_length": 577}}), 10, 10)
    with pytest.raises(UnsupportedModelError, match="is not one positive square"):
        _spec(model, {"preprocessor_config.json": {"size": {"height": 56, "width": 64}}})
    with pytest.raises(UnsupportedModelError, match="more than vision_config.max_position_embeddings 20"):
        rule.image(_spec(model, {}), 10, 10)  # the default 768 square: a 96 x 96 output over 20 learned rows
    with pytest.raises(UnsupportedModelError, match="takes no videos"):
        rule.video(_spec(model), 2, 10, 10)


hyp = pytest.importorskip("hypothesis")
from hypothesis import given, settings, strategies as st  # noqa: E402


@settings(derandomize=True, deadline=None, max_examples=15)
@given(sizes=st.lists(st.tuples(st.integers(1, 300), st.integers(1, 300)), min_size=1, max_size=3))
def test_media_rule_fuzzed_against_the_processor(sizes):
    from vlm_perf.arch import spec_from_config
    from vlm_perf.arch.families import FAMILIES

    from .families.common import random_images

    cfg = tiny_config()
    spec = spec_from_config(cfg.to_dict(), name="tiny-florence2", processor=PROCESSOR_FILES)
    out = processor(cfg)(images=random_images(sizes, 0), text=["a b"] * len(sizes), return_tensors="pt",
                         input_data_format="channels_last")
    media = [FAMILIES["florence2"].media.image(spec, h, w) for h, w in sizes]
    assert sum(m.visual_tokens for m in media) == int((out["input_ids"] == 7).sum())
    assert [m.grid for m in media] == [(1, 7, 7)] * len(sizes)
    assert tuple(out["pixel_values"].shape) == (len(sizes), 3) + media[0].resized
