"""PaliGemma 1 / 2 (transformers ``PaliGemmaForConditionalGeneration``) against FlopCounterMode, per part.

Reference: the famverify harness (``tests/verify/families/paligemma.py``): a tiny random PaliGemma (SigLIP 32 px,
patch 4, 2 layers, 64 patches per image; Linear(32 -> 64, bias) projector; Gemma LM of 2 layers, or Gemma 2 of 3
layers [sliding, full, sliding] with window 8), eager attention, float64, inputs from transformers' own
``PaliGemmaProcessor`` (built offline) with a prompt and a suffix, so ``token_type_ids`` carry the prefix-LM mask of
a training batch. The library starts from the SAME pixel sizes, derives media with its own rule
(``PaliGemmaMedia``) and counts ``exact`` under both ``--causal`` rules: PaliGemma's LM core is the whole square in
both (eager and SDPA compute every entry whatever the mask; transformers refuses FlashAttention for this model).
Exact to the FLOP, per part, forward and training, with frozen parts and one to three images.
"""

from __future__ import annotations

import pytest

pytestmark = pytest.mark.measured
torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from .families import measure_family  # noqa: E402
from .families.paligemma import build_model, processor, tiny_config  # noqa: E402

PROCESSOR = {"preprocessor_config.json": {"size": {"height": 32, "width": 32}, "image_seq_length": 64}}
SIZES = [[(30, 50)], [(70, 20), (32, 32)], [(100, 30), (8, 9), (64, 64)]]
FROZEN = [(), ("vision_tower",), ("vision_tower", "projector"), ("language_model",)]


@pytest.fixture(scope="module", params=["gemma", "gemma2"])
def model(request):
    return build_model(tiny_config(request.param), 0)


def _spec(model, processor_files=PROCESSOR):
    from vlm_perf.arch import spec_from_config

    return spec_from_config(model.config.to_dict(), name="tiny-paligemma", processor=processor_files)


def _library(model, measured, images, mode="forward", frozen=(), causal="full"):
    from vlm_perf.arch.families import FAMILIES
    from vlm_perf.flops import compute_flops
    from vlm_perf.stats import BatchStats

    spec = _spec(model)
    media = [FAMILIES["paligemma"].media.image(spec, h, w) for h, w in images]
    assert sum(m.grid[0] for m in media) == measured.media["images"]  # the rule agrees with HF's processor
    assert sum(m.visual_tokens for m in media) == measured.media["visual_tokens"]
    stats = BatchStats.from_batch(seq_lens=[measured.media["seq_len"]], image_grids=[m.grid for m in media],
                                  spec=spec)
    return compute_flops(spec, stats, mode=mode, causal=causal, frozen=frozen)


@pytest.mark.parametrize("images", SIZES, ids=lambda s: "+".join(f"{h}x{w}" for h, w in s))
def test_forward_per_part_both_causal_rules(model, images):
    m = measure_family("paligemma", model=model, image_sizes=images)
    m.check()
    for causal in ("full", "half"):
        assert _library(model, m, images, causal=causal).parts == m.parts("forward"), causal


@pytest.mark.parametrize("frozen", FROZEN, ids=lambda f: "+".join(f) or "all-trainable")
def test_training_per_part(model, frozen):
    images = [(70, 20), (32, 32)]
    m = measure_family("paligemma", model=model, image_sizes=images, mode="training", frozen=frozen)
    m.check()
    for causal in ("full", "half"):
        assert _library(model, m, images, "training", frozen, causal).parts == m.parts("training"), causal


def test_parameters_per_part(model):
    from vlm_perf.arch.params import count_params

    numel = lambda mod: sum(p.numel() for p in mod.parameters())
    c = count_params(_spec(model))
    assert c.vision_tower == numel(model.model.vision_tower)
    assert c.merger == numel(model.model.multi_modal_projector)
    assert c.lm == numel(model.model.language_model)  # tied head: the embedding holds it
    assert c.total == numel(model)


def test_lm_attention_core_is_the_whole_square_by_hand():
    """Hand arithmetic on the Gemma 2 LM (3 layers, 4 heads x 16, kv 2 x 16, hidden 64, GeGLU 96, vocab 1000), one
    image (64 tokens) + <bos> + 8 prompt words + suffix 5 + <eos> (the "\\n" the processor appends is whitespace to
    the harness tokenizer): s = 79. Per layer: projections 2·s·64·(64 + 2·32) + 2·s·64·64, core 2·(2·4·16)·s² (the
    whole square, also on the sliding layers, whatever --causal says), MLP 2·s·3·64·96; head 2·s·64·1000."""
    model = build_model(tiny_config("gemma2"), 0)
    m = measure_family("paligemma", model=model, image_sizes=[(30, 50)])
    s = m.media["seq_len"]
    assert s == 64 + 1 + 8 + 5 + 1
    layer = 2 * s * 64 * 128 + 2 * s * 64 * 64 + 2 * 2 * 4 * 16 * s * s + 2 * s * 3 * 64 * 96
    lm = 3 * layer + 2 * s * 64 * 1000
    assert m.parts("forward")["language_model"] == lm
    for causal in ("full", "half"):
        assert _library(model, m, [(30, 50)], causal=causal).parts["language_model"] == lm


def test_backends_transformers_allows():
    """Why the square under both --causal rules: the class refuses FlashAttention (the prefix-LM mask would be lost),
    and PaliGemma 2 cannot run SDPA at all (Gemma 2's attention soft-capping: transformers raises), so it runs eager
    (measured above: the whole square). PaliGemma 1 may run SDPA with the explicit prefix-LM mask (no causal block
    skipping); FlopCounterMode cannot count SDPA's CPU kernel, so that case is not measured here."""
    import transformers

    assert transformers.PaliGemmaForConditionalGeneration._supports_flash_attn is False
    softcapped = build_model(tiny_config("gemma2"), 0)
    softcapped.config.text_config._attn_implementation = "sdpa"
    with pytest.raises(ValueError, match="softcap"):
        measure_family("paligemma", model=softcapped, image_sizes=[(30, 50)])


def test_processor_prefix_and_tokens():
    """transformers' own processor: 64 <image> tokens per image, then <bos> + prompt in the prefix (token type 0)."""
    m = measure_family("paligemma", model=build_model(tiny_config("gemma"), 0), image_sizes=[(30, 50), (9, 90)])
    assert m.media["visual_tokens"] == 128 and m.media["images"] == 2
    assert m.media["prefix_len"] == 128 + 1 + 8
    assert m.media["pixel_values_shape"] == (2, 3, 32, 32)


hyp = pytest.importorskip("hypothesis")
from hypothesis import given, settings, strategies as st  # noqa: E402


@settings(derandomize=True, deadline=None, max_examples=15)
@given(sizes=st.lists(st.tuples(st.integers(1, 300), st.integers(1, 300)), min_size=1, max_size=3))
def test_media_rule_fuzzed_against_the_processor(sizes):
    from vlm_perf.arch.families import FAMILIES

    cfg = tiny_config("gemma")
    spec = _spec(build_model_cached())
    proc = processor(cfg)
    from .families.common import random_images

    out = proc(images=[random_images(sizes, 0)], text=["<image>" * len(sizes) + "a b"], return_tensors="pt",
               input_data_format="channels_last")
    media = [FAMILIES["paligemma"].media.image(spec, h, w) for h, w in sizes]
    assert sum(m.visual_tokens for m in media) == int((out["input_ids"] == proc.image_token_id).sum())
    assert [m.grid for m in media] == [(1, 8, 8)] * len(sizes)
    assert tuple(out["pixel_values"].shape) == (len(sizes), 3) + media[0].resized


_CACHE: dict = {}


def build_model_cached():
    if "m" not in _CACHE:
        _CACHE["m"] = build_model(tiny_config("gemma"), 0)
    return _CACHE["m"]


def test_siglip_pooling_head_runs_forward_only():
    """A vision_config without ``vision_use_head: false`` takes SiglipVisionConfig's default (True): the attention-
    pooling head runs on every image but PaliGemma reads last_hidden_state, so it is never back-propagated."""
    model = build_model(tiny_config("gemma", vision={"vision_use_head": True}), 0)
    from vlm_perf.arch.params import count_params

    assert count_params(_spec(model)).total == sum(p.numel() for p in model.parameters())
    for mode in ("forward", "training"):
        m = measure_family("paligemma", model=model, image_sizes=[(30, 50), (9, 9)], mode=mode)
        assert _library(model, m, [(30, 50), (9, 9)], mode).parts == m.parts(mode), mode
