"""BLIP-2 (transformers ``Blip2ForConditionalGeneration``, OPT LM) against FlopCounterMode, per part.

Reference: the famverify harness (``tests/verify/families/blip_2.py``): a tiny random BLIP-2 (tower 32 px, patch 8,
16 patches + CLS per image, 2 layers; Q-Former of 3 layers with cross-attention in layers 0 and 2, 6 queries;
Linear(24 -> 64) projection; OPT LM of 2 layers), eager attention, float64, inputs from transformers' own
``Blip2Processor`` (built offline), one image per sample, several samples padded into one batch. The library starts
from the SAME pixel sizes, derives media with its own rule (``Blip2Media``) and counts ``exact``: per part, forward
and training, all trainable, frozen tower, the standard BLIP-2 recipe (tower and LM frozen, only the Q-Former and its
projection train), frozen LM, and the unusual frozen Q-Former with a trainable tower (its gradient crosses the
Q-Former's cross-attention: the eager core computes dK, dP, dV but not dQ in layer 0).
"""

from __future__ import annotations

import pytest

pytestmark = pytest.mark.measured
torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from .families import measure_family  # noqa: E402
from .families.blip_2 import build_model, processor, tiny_config  # noqa: E402

PROCESSOR = {"preprocessor_config.json": {"size": {"height": 32, "width": 32}},
             "processor_config.json": {"num_query_tokens": 6}}
SIZES = [[(30, 50)], [(70, 20), (32, 32)], [(100, 30), (8, 9), (64, 64)]]
FROZEN = [(), ("vision_tower",), ("vision_tower", "language_model"), ("language_model",), ("projector",),
          ("vision_tower", "projector")]


@pytest.fixture(scope="module")
def model():
    return build_model(tiny_config(), 0)


def _spec(model, processor_files=PROCESSOR):
    from vlm_perf.arch import spec_from_config

    return spec_from_config(model.config.to_dict(), name="tiny-blip-2", processor=processor_files)


def _library(model, measured, images, mode="forward", frozen=(), causal="full"):
    from vlm_perf.arch.families import FAMILIES
    from vlm_perf.flops import compute_flops
    from vlm_perf.stats import BatchStats

    spec = _spec(model)
    media = [FAMILIES["blip-2"].media.image(spec, h, w) for h, w in images]
    assert sum(m.grid[0] for m in media) == measured.media["images"]  # the rule agrees with HF's processor
    assert sum(m.visual_tokens for m in media) == measured.media["visual_tokens"]
    stats = BatchStats.from_batch(seq_lens=[measured.media["seq_len"]] * measured.media["batch"],
                                  image_grids=[m.grid for m in media], spec=spec)
    return compute_flops(spec, stats, mode=mode, causal=causal, frozen=frozen)


@pytest.mark.parametrize("images", SIZES, ids=lambda s: "+".join(f"{h}x{w}" for h, w in s))
def test_forward_per_part(model, images):
    m = measure_family("blip-2", model=model, image_sizes=images)
    m.check()
    assert _library(model, m, images).parts == m.parts("forward")


@pytest.mark.parametrize("frozen", FROZEN, ids=lambda f: "+".join(f) or "all-trainable")
def test_training_per_part(model, frozen):
    images = [(70, 20), (32, 32), (9, 90)]
    m = measure_family("blip-2", model=model, image_sizes=images, mode="training", frozen=frozen)
    m.check()
    assert _library(model, m, images, "training", frozen).parts == m.parts("training")


def test_parameters_per_part(model):
    from vlm_perf.arch.params import count_params

    numel = lambda mod: sum(p.numel() for p in mod.parameters())
    c = count_params(_spec(model))
    assert c.vision_tower == numel(model.vision_model)
    assert c.merger == numel(model.qformer) + model.query_tokens.numel() + numel(model.language_projection)
    assert c.lm_embedding + c.lm_layers + c.lm_final_norm + c.lm_head == numel(model.language_model)
    assert c.total == numel(model)


@pytest.mark.parametrize("over", [{}, {"qformer": {"use_qformer_text_input": True, "cross_attention_frequency": 1}},
                                  {"vision": {"qkv_bias": False}, "text": {"enable_bias": False}}],
                         ids=["tiny", "text-ffn+cross-every-layer", "no-biases"])
def test_parameters_match_transformers_meta_count(over):
    """The inventory's total equals transformers' own count on the meta device, variants included."""
    import transformers

    from vlm_perf.arch import spec_from_config
    from vlm_perf.arch.params import count_params

    config = tiny_config(**over)
    with torch.device("meta"):
        model = transformers.Blip2ForConditionalGeneration(config)
    assert count_params(spec_from_config(config.to_dict(), name="t")).total == sum(p.numel()
                                                                                   for p in model.parameters())


def test_default_config_parameters_equal_transformers():
    """Blip2Config() (ViT-g 39 layers, Q-Former 12 layers, OPT-125m-sized LM): every section from its class defaults."""
    import transformers

    from vlm_perf.arch import spec_from_config
    from vlm_perf.arch.params import count_params

    with torch.device("meta"):
        model = transformers.Blip2ForConditionalGeneration(transformers.Blip2Config())
    assert count_params(spec_from_config({"model_type": "blip-2"}, name="d")).total == sum(
        p.numel() for p in model.parameters())


def test_qformer_by_hand(model):
    """Hand arithmetic on the Q-Former + projection of one image (Q = 6 queries, w = 24, FFN 40, 3 layers, cross in
    layers 0 and 2 over P = 17 tower rows of width 32, out 64): per layer self q/k/v/dense 2·6·4·24² + core 2·2·24·6²
    + FFN 2·6·2·24·40; per cross layer q/dense 2·6·2·24² + k/v 2·17·2·32·24 + core 2·2·24·6·17; projection 2·6·24·64."""
    m = measure_family("blip-2", model=model, image_sizes=[(30, 50)])
    layer = 2 * 6 * 4 * 24 * 24 + 2 * 2 * 24 * 36 + 2 * 6 * 2 * 24 * 40
    cross = 2 * 6 * 2 * 24 * 24 + 2 * 17 * 2 * 32 * 24 + 2 * 2 * 24 * 6 * 17
    assert m.parts("forward")["projector"] == 3 * layer + 2 * cross + 2 * 6 * 24 * 64
    assert _library(model, m, [(30, 50)]).parts["projector"] == m.parts("forward")["projector"]


def test_processor_tokens():
    """transformers' own processor: 6 <image> tokens per sample, one image per sample, resized to 32 x 32."""
    m = measure_family("blip-2", model=build_model(tiny_config(), 0), image_sizes=[(30, 50), (9, 90)])
    assert m.media["visual_tokens"] == 12 and m.media["images"] == 2
    assert m.media["pixel_values_shape"] == (2, 3, 32, 32)


def test_other_language_models_refused():
    """opt and t5 are built (t5: tests/verify/test_blip_2_t5_flops.py); any other text_config is refused by name."""
    from vlm_perf.arch import spec_from_config
    from vlm_perf.errors import UnsupportedModelError

    with pytest.raises(UnsupportedModelError, match=r"text_config.model_type 'llama' is not modelled; only opt"):
        spec_from_config({"model_type": "blip-2", "text_config": {"model_type": "llama"}}, name="x")


def test_processor_files_that_disagree_are_refused(model):
    from vlm_perf.arch.families import FAMILIES
    from vlm_perf.errors import UnsupportedModelError

    rule = FAMILIES["blip-2"].media
    with pytest.raises(UnsupportedModelError, match="num_query_tokens"):
        rule.image(_spec(model, {"processor_config.json": {"num_query_tokens": 32}}), 10, 10)
    with pytest.raises(UnsupportedModelError, match="image_size"):
        rule.image(_spec(model, {"preprocessor_config.json": {"size": {"height": 224, "width": 224}}}), 10, 10)


hyp = pytest.importorskip("hypothesis")
from hypothesis import given, settings, strategies as st  # noqa: E402


@settings(derandomize=True, deadline=None, max_examples=15)
@given(sizes=st.lists(st.tuples(st.integers(1, 300), st.integers(1, 300)), min_size=1, max_size=3))
def test_media_rule_fuzzed_against_the_processor(sizes):
    from vlm_perf.arch import spec_from_config
    from vlm_perf.arch.families import FAMILIES

    from .families.common import random_images

    cfg = tiny_config()
    spec = spec_from_config(cfg.to_dict(), name="tiny-blip-2", processor=PROCESSOR)
    proc = processor(cfg)
    out = proc(images=random_images(sizes, 0), text=["a b"] * len(sizes), return_tensors="pt",
               input_data_format="channels_last")
    media = [FAMILIES["blip-2"].media.image(spec, h, w) for h, w in sizes]
    assert sum(m.visual_tokens for m in media) == int((out["input_ids"] == 7).sum())
    assert [m.grid for m in media] == [(1, 4, 4)] * len(sizes)
    assert tuple(out["pixel_values"].shape) == (len(sizes), 3) + media[0].resized


@pytest.mark.parametrize("new_tokens", [1, 4])
def test_generate_with_kv_cache_per_part(new_tokens):
    """``Blip2ForConditionalGeneration.generate`` (greedy, fixed ``max_new_tokens``, KV cache): the tower and the
    Q-Former once, the OPT LM's prefill (head on the last position only) and decode steps, to the FLOP."""
    from vlm_perf.arch.families import FAMILIES
    from vlm_perf.flops.generation import generation_flops

    from .families.blip_2 import make_inputs, part_modules
    from .families.common import _make_counter_class

    images = [(30, 50)]
    model = build_model(tiny_config(), 0).requires_grad_(False)  # query_tokens.expand under no_grad is a view that
    # still requires grad, which FlopCounterMode's module tracker cannot hook; generation has no backward anyway
    inputs, media = make_inputs(model, images)
    counter = _make_counter_class()(parts=part_modules(model))
    inputs = {k: v for k, v in inputs.items() if k != "use_cache"}
    with torch.no_grad(), counter:
        out = model.generate(**inputs, max_new_tokens=new_tokens, min_new_tokens=new_tokens, do_sample=False,
                             use_cache=True, pad_token_id=0)
    assert out.shape[1] == media["seq_len"] + new_tokens
    measured = {p: n for (phase, p), n in counter.counts.items() if phase == "forward"}
    spec = _spec(model)
    grid = FAMILIES["blip-2"].media.image(spec, *images[0]).grid
    lib = generation_flops(spec, [media["seq_len"]], [new_tokens], [grid], causal="full")
    assert {k: lib.prefill[k] + lib.decode[k] for k in lib.prefill} == {
        p: measured.get(p, 0) for p in ("vision_tower", "projector", "language_model")}


def test_blip2_opt_2_7b_published_sizes():
    """Salesforce/blip2-opt-2.7b: the hub config.json sets only the OPT-2.7b text sizes (hidden 2560, 32 layers, 32
    heads, ffn_dim 10240, word_embed_proj_dim 2560) and num_query_tokens 32; tower and Q-Former take their class
    defaults (ViT-g 1408 x 39, Q-Former 768 x 12). Published: 3.74B parameters (hub safetensors count of the tied
    checkpoint; vocab_size 50272 or 50304 both round to it) and 107M trainable in the BLIP-2 paper's Table 1 (Q-Former +
    queries + projection, which the inventory reports as the projector part). By hand: the Q-Former is
    32·768 + 2·768 (queries, LayerNorm) + 12·(4·(768² + 768) + 2·768 + 768·3072 + 3072 + 3072·768 + 768 + 2·768)
    + 6·(2·(768² + 768) + 2·(1408·768 + 768) + 2·768), the projection 768·2560 + 2560."""
    from vlm_perf.arch import spec_from_config
    from vlm_perf.arch.params import count_params

    text = {"model_type": "opt", "hidden_size": 2560, "num_hidden_layers": 32, "num_attention_heads": 32,
            "ffn_dim": 10240, "word_embed_proj_dim": 2560, "vocab_size": 50272}
    c = count_params(spec_from_config({"model_type": "blip-2", "num_query_tokens": 32, "text_config": text}, name="b"))
    qformer = (32 * 768 + 2 * 768 + 12 * (4 * (768 * 768 + 768) + 2 * 768 + 768 * 3072 + 3072 + 3072 * 768 + 768
                                          + 2 * 768)
               + 6 * (2 * (768 * 768 + 768) + 2 * (1408 * 768 + 768) + 2 * 768))
    assert c.merger == qformer + 768 * 2560 + 2560 == 107_130_880
    assert round(c.total / 1e9, 2) == 3.74


@pytest.mark.parametrize("trainable", [["vision_tower[-1]"], ["vision_tower[-1]", "projector"],
                                       ["vision_tower[-1]", "projector", "lm"]], ids=lambda t: "+".join(t))
def test_tower_layer_regimes(trainable):
    """Finer regimes (``--trainable``): the last tower layer trains, the Q-Former and the LM train or stay frozen;
    the Q-Former passes the tower's gradient through its cross-attention keys / values even when frozen. The LM
    (OPT: no per-layer layout) only trains or freezes as a whole."""
    import copy

    from vlm_perf.arch.families import FAMILIES
    from vlm_perf.arch.trainability import Trainability
    from vlm_perf.flops.regime import regime_flops
    from vlm_perf.stats import BatchStats

    from .families.blip_2 import make_inputs, part_modules
    from .regimes import measure_regime, measured_parts

    images = [(70, 20), (32, 32)]
    m = copy.deepcopy(build_model(tiny_config(), 0))
    m.requires_grad_(False)
    mods = [m.vision_model.encoder.layers[-1]]
    if "projector" in trainable:
        mods += [m.qformer, m.language_projection]
        m.query_tokens.requires_grad_(True)
    if "lm" in trainable:
        mods.append(m.language_model)
    for mod in mods:
        mod.requires_grad_(True)
    inputs, media = make_inputs(m, images)
    measured = measured_parts(measure_regime(m, inputs, parts=part_modules(m)))
    spec = _spec(m)
    grids = [FAMILIES["blip-2"].media.image(spec, h, w).grid for h, w in images]
    stats = BatchStats.from_batch(seq_lens=[media["seq_len"]] * media["batch"], image_grids=grids, spec=spec)
    assert regime_flops(spec, stats, Trainability.build(trainable), causal="full").parts == measured


VARIANT = dict(vision={"qkv_bias": False}, qformer={"cross_attention_frequency": 1, "use_qformer_text_input": True,
                                                     "num_hidden_layers": 2},
               text={"enable_bias": False, "do_layer_norm_before": False})


@pytest.mark.parametrize("frozen", [(), ("vision_tower", "language_model")], ids=["all-trainable", "recipe"])
def test_variant_config_per_part(frozen):
    """Cross-attention in every layer, stored text FFNs, no tower q/v bias, OPT without biases and post-norm layers
    (``do_layer_norm_before`` false: no final LayerNorm): parameters, forward and training exact per part."""
    from vlm_perf.arch.params import count_params

    variant = build_model(tiny_config(**VARIANT), 0)
    assert count_params(_spec(variant)).total == sum(p.numel() for p in variant.parameters())
    images = [(70, 20), (9, 90)]
    for mode in ("forward", "training"):
        m = measure_family("blip-2", model=variant, image_sizes=images, mode=mode, frozen=frozen)
        m.check()
        assert _library(variant, m, images, mode, frozen).parts == m.parts(mode), mode
