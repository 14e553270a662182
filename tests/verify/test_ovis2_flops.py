"""Ovis2 (transformers ``Ovis2ForConditionalGeneration``) against FlopCounterMode, per part.

Reference: the famverify harness (``tests/verify/families/ovis2.py``): a tiny random Ovis2 (AIMv2-style tower at
32 px, patch 4, 2 layers, hidden_stride 2; visual vocabulary 64 with 5 indicator tokens; Qwen2 LM of 2 layers, tied
head), eager attention, float64, images through transformers' own ``Ovis2ImageProcessorPil`` (crop_to_patches,
max_patches 6) and ``Ovis2Processor.replace_image_token``. The library starts from the SAME pixel sizes, derives
the tiles and placeholders with its own rule and counts ``exact`` with ``causal="full"``. Parts: vision_tower =
``Ovis2VisionModel`` (the visual head included, as in transformers), projector = ``visual_embeddings_table``
(probabilities @ table). Tolerance 0.5 % per part (all exact to the FLOP).
"""

from __future__ import annotations

import pytest

pytestmark = pytest.mark.measured
torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from .families import measure_family  # noqa: E402
from .families.ovis2 import PROCESSOR, SIZE  # noqa: E402
from .fixed_tile import FROZEN_CASES, FixedTileFamily, check_parts, numel  # noqa: E402

FILES = {"preprocessor_config.json": PROCESSOR, "processor_config.json": {"image_seq_length": 16}}
TINY = FixedTileFamily("ovis2", "tiny-ovis2", FILES)
CASES = pytest.mark.parametrize("images", [[(30, 30)], [(40, 90)], [(70, 20), (32, 32), (9, 90)]],
                                ids=["one-tile", "3x2-split", "three-images"])
TRAINING_IMAGES = [(40, 90), (32, 32)]


def tiles_as_processed(media: list, got: dict) -> None:
    """The processor made as many 32-px tiles as the rule's grids hold, in the tile grids the rule chose."""
    assert sum(d.grid[0] for d in media) == got["images_in_tower"]
    assert all(d.resized == got["pixel_shape"][1:] for d in media)
    assert [d.detail["tile_grid"][0] * d.detail["tile_grid"][1] for d in media] == [r * c for r, c in got["grids"]]


def model(**vision):
    return TINY.model(**vision)


@pytest.mark.parametrize("bias", [False, True], ids=["no-bias", "qkv-mlp-bias"])
@CASES
def test_forward_per_part(bias, images):
    m = model(qkv_bias=bias, mlp_bias=bias)
    measured = measure_family("ovis2", model=m, image_sizes=images)
    check_parts(measured.parts("forward"), TINY.library(m, measured, images, check_media=tiles_as_processed).parts)


@FROZEN_CASES
def test_training_per_part(frozen):
    m = model()
    measured = measure_family("ovis2", model=m, image_sizes=TRAINING_IMAGES, mode="training", frozen=frozen)
    library = TINY.library(m, measured, TRAINING_IMAGES, mode="training", frozen=frozen, check_media=tiles_as_processed)
    check_parts(measured.parts("training"), library.parts)


def test_last_tower_layer_only_regime(monkeypatch):
    """``--trainable 'vit[-1:]'``: only the tower's last layer trains (its norms included); the visual head, the
    table and the LM run their input gradients back to it. Measured by freezing everything else."""
    from vlm_perf.arch.families import FAMILIES
    from vlm_perf.arch.trainability import Trainability
    from vlm_perf.flops.regime import regime_flops
    from vlm_perf.stats import BatchStats

    from .families import common, harness

    m, h = model(), harness("ovis2")
    last = m.model.vision_tower.transformer.encoder.layers[-1]

    def only_last(model_, parts, frozen, loose_params=None):
        model_.requires_grad_(False)
        last.requires_grad_(True)

    monkeypatch.setattr(common, "freeze_parts", only_last)
    inputs, media = h.make_inputs(m, image_sizes=TRAINING_IMAGES)
    measured = common.count(m, inputs, h.part_modules(m), training=True)
    spec = TINY.spec(m)
    grids = [FAMILIES["ovis2"].media.image(spec, a, b).grid for a, b in TRAINING_IMAGES]
    stats = BatchStats.from_batch(seq_lens=[media["seq_len"]], image_grids=grids, spec=spec)
    library = regime_flops(spec, stats, Trainability.build(trainable=["vit[-1:]"]), causal="full").parts
    check_parts(measured.parts("training"), library)


def test_projector_by_hand():
    """One 30x30 image = one tile: 16 folded tokens x (64-word vocabulary @ 64-wide table) = 2·16·64·64 forward;
    training with a frozen tower: + the weight gradient only (its input, the tower's probabilities, needs none)."""
    m = model()
    measured = measure_family("ovis2", model=m, image_sizes=[(30, 30)])
    assert measured.parts("forward")["projector"] == 2 * 16 * 64 * 64
    measured = measure_family("ovis2", model=m, image_sizes=[(30, 30)], mode="training", frozen=("vision_tower",))
    assert measured.parts("training")["projector"] == 2 * (2 * 16 * 64 * 64)


def test_parameters_per_part():
    from vlm_perf.arch.params import count_params

    m = model()
    c = count_params(TINY.spec(m))
    assert c.vision_tower == numel(m.model.vision_tower)
    # head: Linear(2·2·32 -> 64 - 5, no bias) + LayerNorm(59); by hand
    assert numel(m.model.vision_tower.head_linear) + numel(m.model.vision_tower.head_norm) == 128 * 59 + 2 * 59
    assert c.merger == numel(m.model.visual_embeddings_table) == 64 * 64
    assert c.lm_embedding + c.lm_layers + c.lm_final_norm == numel(m.model.language_model)  # lm_head tied
    assert c.total == numel(m)


def test_refusals():
    from vlm_perf.arch import spec_from_config
    from vlm_perf.arch.families import FAMILIES
    from vlm_perf.errors import UnsupportedModelError

    m = model()
    rule, cfg = FAMILIES["ovis2"].media, m.config.to_dict()
    with pytest.raises(UnsupportedModelError, match="no video"):
        rule.video(TINY.spec(m), 2, 32, 32)
    # no processor file: the class default size 384 is not the tower's 32-px tile
    with pytest.raises(UnsupportedModelError, match="class default"):
        rule.image(TINY.spec(m, {}), 30, 50)
    with pytest.raises(UnsupportedModelError, match="image_seq_length"):
        rule.image(TINY.spec(m, {**FILES, "processor_config.json": {"image_seq_length": 256}}), 30, 50)
    with pytest.raises(UnsupportedModelError, match="qwen2"):
        spec_from_config(dict(cfg, text_config=dict(cfg["text_config"], model_type="llama")), name="t")
    with pytest.raises(UnsupportedModelError, match="hidden_stride"):
        spec_from_config(dict(cfg, vision_config=dict(cfg["vision_config"], hidden_stride=3)), name="t")
    with pytest.raises(UnsupportedModelError, match="vocab_size"):
        spec_from_config({k: v for k, v in cfg.items() if k != "vocab_size"}, name="t")  # class default 151643


def test_conventions_coverage():
    """hf-trainer / ms-swift: transformers' own ``Trainer.floating_point_ops`` on the same ids; 6nd by hand."""
    # 6nd: 2 Qwen2 layers of q/o 64x64, k/v 64x32, SwiGLU 3 x 64x96 (matrices only: Qwen2's q/k/v biases are not
    # billed), tied head 64 x 1000; hf-trainer leaves out the visual embedding table (an nn.Embedding subclass)
    per_layer = 2 * 64 * 64 + 2 * 64 * 32 + 3 * 64 * 96
    TINY.check_conventions(model(), 80, 6 * (2 * per_layer + 64 * 1000) * 160)


hyp = pytest.importorskip("hypothesis")
st = hyp.strategies


@hyp.settings(derandomize=True, deadline=None, max_examples=60)
@hyp.given(h=st.integers(1, 400), w=st.integers(1, 400), covering=st.booleans(), most=st.integers(1, 12))
def test_media_rule_equals_hf_processor(h, w, covering, most):
    """Any image, either tiling rule, any max_patches: the processor's tiles and placeholders equal the rule's."""
    from vlm_perf.arch.families import FAMILIES

    pre = dict(PROCESSOR, use_covering_area_grid=covering, max_patches=most)
    _, got = __import__("tests.verify.families.ovis2", fromlist=["make_inputs"]).make_inputs(
        model(), image_sizes=[(h, w)], processor=pre)
    d = FAMILIES["ovis2"].media.image(TINY.spec(model(), {**FILES, "preprocessor_config.json": pre}), h, w)
    assert (d.grid[0], d.resized, d.visual_tokens) == (got["images_in_tower"], (SIZE, SIZE), got["visual_tokens"])


def test_full_scale_parameters_equal_transformers_meta_model():
    """Ovis2Config's vision defaults (16384-word visual vocabulary, 24 x 1024 tower at 224 px) with a Qwen2 LM of the
    top-level class-default width (1536) and vocabulary (151643), on the meta device: the inventory's count equals
    transformers' per part. (``Ovis2Config()`` alone pairs hidden_size 1536 with Qwen2Config's 4096-wide LM, a model
    whose forward cannot run: the library refuses it.)"""
    from vlm_perf.arch import spec_from_config
    from vlm_perf.errors import UnsupportedModelError

    from .fixed_tile import meta_default

    text = dict(model_type="qwen2", hidden_size=1536, vocab_size=151643, intermediate_size=8960, num_hidden_layers=28,
                num_attention_heads=12, num_key_value_heads=2)
    counts, meta = meta_default("Ovis2Config", "Ovis2ForConditionalGeneration", "ovis2-defaults", text_config=text)
    assert counts.vision_tower == numel(meta.model.vision_tower)
    assert counts.merger == numel(meta.model.visual_embeddings_table) == 16384 * 1536
    assert counts.total == numel(meta)
    import transformers

    with pytest.raises(UnsupportedModelError, match="hidden_size 1536 .*differs from text_config.hidden_size 4096"):
        spec_from_config(transformers.Ovis2Config().to_dict(), name="t")


def test_generate_with_kv_cache_per_part():
    """Greedy ``generate(max_new_tokens=5)`` with a KV cache on a 3 x 2 split + thumbnail: the tower and the table run
    once (prefill), the LM prefills then decodes 4 tokens; ``generation_flops`` to the FLOP per part."""
    from vlm_perf.arch.families import FAMILIES
    from vlm_perf.flops.generation import generation_flops

    from .families import harness
    from .measure import measure_generate

    m, h = model(), harness("ovis2")
    inputs, media = h.make_inputs(m, image_sizes=[(40, 90)])
    measured = measure_generate(m, inputs, h.part_modules(m), 5, media["seq_len"])
    spec = TINY.spec(m)
    lib = generation_flops(spec, [media["seq_len"]], [5], image_grids=[FAMILIES["ovis2"].media.image(spec, 40, 90).grid],
                           causal="full")
    assert {k: lib.prefill[k] + lib.decode[k] for k in lib.prefill} == {
        p: measured.get(p, 0) for p in ("vision_tower", "projector", "language_model")}
