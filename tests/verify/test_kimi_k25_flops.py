"""Kimi K2.5 (transformers ``Kimi_K25ForConditionalGeneration``) against FlopCounterMode, per part, and its media rule
against transformers' own processor code.

Reference: the harness ``tests/verify/families/kimi_k25.py`` -- a tiny random Kimi K2.5 (patch 14, MoonViT3d of 2
layers hidden 32, projector 128 -> 128 -> 64, DeepSeek-V3 LM of 2 layers: MLA, layer 1 MoE 4 experts top-2 + 1
shared, eager experts), eager attention, float64; media through ``Kimi_K25ImageProcessor._preprocess`` /
``Kimi_K25VideoProcessor._preprocess`` (transformers' code; torch stand-ins for resize / pad / normalise, see the
harness). The library sees only the config dict and the grid rows the processor produced (eager attention computes
the full LM square: ``causal="full"``). Every part is exact to the FLOP, forward and training, frozen parts
included: transformers' eager experts run each routed expert on its own tokens (top-k), so there is no dense-routing
difference to account for on this family (tested below by hand arithmetic on the MoE layer).
"""

from __future__ import annotations

import pytest

pytestmark = pytest.mark.measured
torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

from vlm_perf.arch import spec_from_config  # noqa: E402
from vlm_perf.flops import compute_flops  # noqa: E402
from vlm_perf.stats import BatchStats  # noqa: E402

from .families import measure_family  # noqa: E402
from .families.kimi_k25 import build_model, placeholder_counts, process_videos, processor_module, tiny_config  # noqa: E402

CASES = [dict(image_sizes=[(30, 50)]), dict(image_sizes=[(60, 90), (28, 28), (20, 200)]),
         dict(video_sizes=[(6, 40, 60)]), dict(image_sizes=[(30, 50)], video_sizes=[(3, 28, 56), (9, 20, 30)])]
FROZEN = [(), ("vision_tower",), ("vision_tower", "projector"), ("language_model",), ("language_model", "projector")]


@pytest.fixture(scope="module")
def model():
    return build_model(tiny_config(), 0)


def _spec(model):
    return spec_from_config(model.config.to_dict(), name="tiny-kimi-k25")


def _library(model, media, mode="forward", frozen=()):
    """Eager attention over the padded batch: every row computes the longest row's square (``seq_len`` x
    ``samples`` uniform rows)."""
    spec = _spec(model)
    stats = BatchStats.from_batch(seq_len=media["seq_len"], samples=media["samples"],
                                  image_grids=media["image_grids"], video_grids=media["video_grids"], spec=spec)
    return compute_flops(spec=spec, stats=stats, mode=mode, causal="full", frozen=tuple(frozen)).parts


@pytest.mark.parametrize("case", CASES, ids=lambda c: "+".join(f"{k}={v}" for k, v in c.items()))
def test_forward_per_part(model, case):
    m = measure_family("kimi_k25", model=model, **case)
    assert _library(model, m.media) == m.parts("forward")


@pytest.mark.parametrize("frozen", FROZEN, ids=lambda f: "+".join(f) or "all-trainable")
def test_training_per_part_mixed_batch(model, frozen):
    case = CASES[3]  # an image and two videos (one with a 1-frame last chunk) in one sample
    m = measure_family("kimi_k25", model=model, mode="training", frozen=frozen, **case)
    assert _library(model, m.media, "training", frozen) == m.parts("training")


def test_training_several_images_frozen_tower(model):
    m = measure_family("kimi_k25", model=model, mode="training", frozen=("vision_tower",), **CASES[1])
    assert _library(model, m.media, "training", ("vision_tower",)) == m.parts("training")


@pytest.mark.parametrize("mode,frozen", [("forward", ()), ("training", ()), ("training", ("vision_tower",))])
def test_padded_batch_of_an_image_sample_and_a_video_sample(model, mode, frozen):
    """Two rows in one microbatch (an image sample and a video sample, right-padded): the media of both rows
    go through the tower in one call; the LM runs both padded rows."""
    rows = [dict(image_sizes=[(30, 50), (60, 90)]), dict(video_sizes=[(5, 28, 56)])]
    m = measure_family("kimi_k25", model=model, samples=rows, mode=mode, frozen=frozen)
    assert m.media["samples"] == 2 and len(set(m.media["seq_lens"])) == 2  # really padded
    assert _library(model, m.media, mode, frozen) == m.parts(mode)


def test_video_attention_is_per_chunk_not_per_frame_by_hand(model):
    """6 frames of 40x60 px: the processor cuts chunks of 4 + 2 frames (``temporal_patch_size`` 4) and pads each frame
    to 56x84 px = 4x6 patches. ``get_vision_cu_seqlens(merge_temporal=True)`` makes each chunk ONE sequence: 96 and 48
    patches. Tower forward by hand (h 32, MLP 48, 2 layers, conv 3·14·14 = 588 -> 32):
    conv 2·144·588·32; per layer q/k/v/o 2·144·4·32·32, MLP 2·144·2·32·48, attention 4·32·(96² + 48²);
    per frame it would be 4·32·6·24² instead. Projector: temporal mean -> 2 chunks x 2x3 tokens = 12 rows."""
    m = measure_family("kimi_k25", model=model, video_sizes=[(6, 40, 60)])
    assert m.media["video_grids"] == [(4, 4, 6), (2, 4, 6)]
    assert m.media["video_chunk_tokens"] == [[6, 6]]
    patches, layers = 144, 2
    per_layer = 2 * patches * 4 * 32 * 32 + 2 * patches * 2 * 32 * 48
    chunked = 4 * 32 * (96**2 + 48**2)
    tower = 2 * patches * 588 * 32 + layers * (per_layer + chunked)
    assert m.parts("forward")["vision_tower"] == tower
    per_frame = 4 * 32 * 6 * 24**2
    assert tower - layers * (chunked - per_frame) != m.parts("forward")["vision_tower"]
    assert m.parts("forward")["projector"] == 2 * 12 * (128 * 128 + 128 * 64)


def test_moe_layer_routes_top_k_by_hand(model):
    """The MoE layer's experts (eager: each expert on its routed tokens) cost k·2·S·3·h·F, not E·...: a text-only
    forward of S = 10 tokens, LM by hand. MLA (h 64, 4 heads, q LoRA 24, kv LoRA 16, nope 8 + rope 8, v 16):
    per layer q_a 64·24 + q_b 24·4·16 + kv_a 64·(16+8) + kv_b 16·4·(8+16) + o 4·16·64 per token; core (full square)
    2·4·(16 + 16)·S²; layer 0 dense MLP 3·64·96; layer 1 router 64·4, shared expert 3·64·24, routed k=2 of
    3·64·24; lm_head 64·1000."""
    ids = torch.randint(0, 900, (1, 10), generator=torch.Generator().manual_seed(3))
    from .families.common import count, default_run
    from .families.kimi_k25 import part_modules

    m = count(model, {"input_ids": ids, "use_cache": False}, part_modules(model), run=default_run)
    s = 10
    mla = 2 * s * (64 * 24 + 24 * 4 * 16 + 64 * 24 + 16 * 4 * 24 + 4 * 16 * 64) + 2 * 4 * 32 * s * s
    lm = 2 * mla + 2 * s * 3 * 64 * 96 + 2 * s * (64 * 4 + 3 * 64 * 24 + 2 * 3 * 64 * 24) + 2 * s * 64 * 1000
    assert m.forward["language_model"] == lm
    dense = lm + 2 * s * (4 - 2) * 3 * 64 * 24  # what a dense reference (every token through all 4) would add
    assert dense != m.forward["language_model"]
    stats = BatchStats.from_batch(seq_lens=[s], spec=_spec(model))
    assert compute_flops(_spec(model), stats, mode="forward", causal="full").parts["language_model"] == lm


def test_parameters_per_part(model):
    from vlm_perf.arch.params import count_params

    numel = lambda mod: sum(p.numel() for p in mod.parameters())
    c = count_params(_spec(model))
    inner = model.model
    # transformers registers DeepSeek-V3's e_score_correction_bias as a buffer; checkpoints store it
    buffers = sum(b.numel() for n, b in model.named_buffers() if n.endswith("e_score_correction_bias"))
    assert buffers == 4
    assert c.vision_tower == numel(inner.vision_tower)
    assert c.merger == numel(inner.mm_projector)
    assert c.lm == numel(inner.language_model) + numel(model.lm_head) + buffers
    assert c.total == numel(model) + buffers


def test_top_level_tie_word_embeddings_decides():
    """``Kimi_K25Config.tie_word_embeddings`` (default true) ties lm_head whatever text_config says [measured]."""
    from vlm_perf.arch.params import count_params

    for top, text in ((True, False), (False, True), (None, False)):
        d = tiny_config(text={"tie_word_embeddings": text}).to_dict()
        d.pop("tie_word_embeddings")
        if top is not None:
            d["tie_word_embeddings"] = top
        keep = ("vision_config", "text_config", "projection_hidden_size", "image_token_id", "video_token_id",
                "tie_word_embeddings")
        with torch.device("meta"):
            meta = transformers.Kimi_K25ForConditionalGeneration(
                transformers.Kimi_K25Config(**{k: v for k, v in d.items() if k in keep}))
        assert (meta.lm_head.weight is meta.model.language_model.embed_tokens.weight) == (top is not False)
        got = count_params(spec_from_config(d, name="t")).total
        buffers = sum(b.numel() for n, b in meta.named_buffers() if n.endswith("e_score_correction_bias"))
        assert got == sum(p.numel() for p in meta.parameters()) + buffers


def test_hf_trainer_convention_is_transformers_own(model):
    from types import SimpleNamespace

    stats = BatchStats.from_batch(seq_len=12, samples=2, image_grids=[(1, 4, 4)], spec=_spec(model))
    trainer = transformers.Trainer.floating_point_ops(SimpleNamespace(model=model),
                                                      {"input_ids": torch.zeros((2, 12), dtype=torch.long)})
    assert compute_flops(_spec(model), stats, "hf-trainer").total == trainer


# --------------------------------------------------------------------------- media rule vs transformers' processors
hyp = pytest.importorskip("hypothesis")
from hypothesis import given, settings, strategies as st  # noqa: E402


def _kimi_spec(**files):
    from vlm_perf.arch import spec_from_config as build

    spec = build(tiny_config().to_dict(), name="tiny-kimi-k25")
    spec.processor.update(files)
    return spec


@settings(derandomize=True, deadline=None, max_examples=150)
@given(size=st.tuples(st.integers(1, 12000), st.integers(1, 12000)),
       limits=st.sampled_from([(16384, 512), (1024, 512), (4096, 40), (64, 8)]))
def test_image_rule_fuzzed_against_the_processor(size, limits):
    """Grid and placeholder count vs ``navit_resize`` / ``get_number_of_image_patches`` of
    ``Kimi_K25ImageProcessor`` and ``Kimi_K25Processor.replace_image_token`` (transformers' code)."""
    from types import SimpleNamespace

    from vlm_perf.arch.families import FAMILIES

    ns = processor_module("image_processing_kimi_k25")
    max_patches, side = limits
    (_, _), (ph, pw) = ns["navit_resize"](*size, patch_size=14, merge_kernel_size=2, max_patches=max_patches,
                                          max_size_per_side=side)
    settings = dict(size={"max_height": side}, patch_size=14, merge_size=2, max_patches=max_patches)
    # every setting is passed in the call; transformers 5.25 merges the call's settings over the instance's with
    # the base class's _merge_and_standardize_kwargs, stood in here (5.24 read them with .get)
    proc = SimpleNamespace(**settings, _merge_and_standardize_kwargs=lambda **given: {**settings, **given})
    patches = ns["Kimi_K25ImageProcessor"].get_number_of_image_patches(proc, *size, dict(settings))
    spec = _kimi_spec(**{"preprocessor_config.json": {"max_patches": max_patches,
                                                      "size": {"max_height": side, "max_width": side}}})
    media = FAMILIES["kimi_k25"].media.image(spec, *size)
    assert media.grid == (1, ph // 14, pw // 14) and media.grid[1] * media.grid[2] == patches
    grid = torch.tensor([list(media.grid)])
    tokens, _ = placeholder_counts({"image_grid_thw": grid}, None)
    assert media.visual_tokens == tokens[0]


@settings(derandomize=True, deadline=None, max_examples=30)
@given(video=st.tuples(st.integers(1, 13), st.integers(1, 160), st.integers(1, 160)),
       max_patches=st.sampled_from([4096, 24, 8]))
def test_video_rule_fuzzed_against_the_processor(video, max_patches):
    """One row (T, h, w) from the rule gives the same statistics as the chunk rows ``Kimi_K25VideoProcessor``'s
    ``_preprocess`` returns, and the placeholder count ``Kimi_K25Processor.replace_video_token`` writes."""
    from vlm_perf.arch.families import FAMILIES

    spec = _kimi_spec(**{"video_preprocessor_config.json": {"max_patches": max_patches}})
    media = FAMILIES["kimi_k25"].media.video(spec, *video)
    out = process_videos([video], video_max_patches=max_patches)
    chunks = [tuple(r) for r in out["video_grid_thw"].tolist()]
    _, per_video = placeholder_counts(None, out)
    assert media.visual_tokens == sum(per_video[0])
    ours = BatchStats.from_batch(seq_lens=[10_000], video_grids=[media.grid], spec=spec).as_dict()
    theirs = BatchStats.from_batch(seq_lens=[10_000], video_grids=chunks, spec=spec).as_dict()
    ours.pop("vision_items"), theirs.pop("vision_items")  # one row vs its chunk rows; nothing reads it here
    assert ours == theirs
    assert ours["vision_merged_tokens"] == media.visual_tokens


def test_metadata_rows_equal_from_batch(tmp_path):
    """Per-microbatch metadata: the processor's chunk rows, one whole-video row, and v2 ``video_sizes`` read the same
    as ``BatchStats.from_batch`` (temporal_chunk through the polars path)."""
    import json

    from vlm_perf.ingest.metadata import iteration_stats

    spec = _kimi_spec()
    rows = [{"iteration": 0, "seq_lens": [400], "image_grid_thw": [[1, 4, 6]], "video_grid_thw": [[4, 4, 6], [2, 4, 6]]},
            {"iteration": 1, "seq_lens": [400], "image_grid_thw": [[1, 4, 6]], "video_grid_thw": [[6, 4, 6]]},
            {"iteration": 2, "seq_lens": [400], "image_grid_thw": [[1, 4, 6]], "video_sizes": [[6, 40, 60]]}]
    f = tmp_path / "m.jsonl"
    f.write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    res = iteration_stats(f, spec)
    want = BatchStats.from_batch(seq_lens=[400], image_grids=[(1, 4, 6)], video_grids=[(4, 4, 6), (2, 4, 6)],
                                 spec=spec).as_dict()
    assert want["vision_patches_sq_item"] == 24**2 + 96**2 + 48**2 and want["vision_merged_tokens"] == 6 + 12
    for it in (0, 1, 2):
        got = res.stats_for(it).as_dict()
        for key, value in want.items():
            if key != "vision_items":
                assert got[key] == value, (it, key, got[key], value)


def test_refusals():
    from vlm_perf.arch.families import FAMILIES
    from vlm_perf.errors import ConfigError, UnsupportedModelError

    d = tiny_config().to_dict()
    with pytest.raises(ConfigError, match="projection_hidden_size"):
        spec_from_config(dict(d, projection_hidden_size=48), name="t")
    bad = dict(d, vision_config=dict(d["vision_config"], init_pos_emb_height=32))
    with pytest.raises(UnsupportedModelError, match="init_pos_emb_height"):
        spec_from_config(bad, name="t")
    for key, value in (("vt_hidden_size", 1024), ("norm_type", "rmsnorm"), ("mm_projector_type", "patchmergerv2"),
                       ("qkv_hidden_size", 48)):
        with pytest.raises(UnsupportedModelError, match=key):
            spec_from_config(dict(d, vision_config=dict(d["vision_config"], **{key: value})), name="t")
    same = dict(d["vision_config"], vt_hidden_size=32, init_pos_emb_time=4, merge_type="sd2_tpool")
    assert spec_from_config(dict(d, vision_config=same), name="t").vision.hidden_size == 32  # remote names agreeing
    spec = _kimi_spec(**{"video_preprocessor_config.json": {"temporal_patch_size": 2}})
    with pytest.raises(UnsupportedModelError, match="temporal_patch_size"):
        FAMILIES["kimi_k25"].media.video(spec, 8, 40, 40)
    with pytest.raises(ConfigError, match="max_patches"):
        FAMILIES["kimi_k25"].media.image(_kimi_spec(**{"preprocessor_config.json": {"max_patches": "many"}}), 40, 40)


def test_captured_metadata_of_a_real_batch_counts_what_was_measured(model, tmp_path):
    """The capture path end to end: ``batch_metadata`` on the very inputs the model ran (a padded two-row batch with
    images and a 5-frame video: chunk rows 4 + 1) -> ``MetadataWriter`` -> ``iteration_stats`` -> ``compute_flops``
    equals FlopCounterMode per part, the padded LM rows included."""
    from vlm_perf.capture import MetadataWriter, batch_metadata
    from vlm_perf.ingest.metadata import iteration_stats

    from .families.kimi_k25 import make_inputs

    rows = [dict(image_sizes=[(30, 50), (60, 90)]), dict(video_sizes=[(5, 28, 56)])]
    inputs, media = make_inputs(model, samples=rows, seed=2)
    assert media["video_grids"] == [(4, 2, 4), (1, 2, 4)]
    with MetadataWriter(tmp_path / "meta.jsonl") as writer:
        writer.record(0, microbatch=0, **batch_metadata(inputs))
    stats = iteration_stats(tmp_path / "meta.jsonl", _spec(model)).stats_for(0)
    m = measure_family("kimi_k25", model=model, samples=rows, seed=1, mode="training")
    assert m.media == media
    # eager attention computes every padded row's full square: ``padded_tokens`` rows x the longest length
    uniform = stats.with_(lm_tokens=stats.lm_padded_tokens, lm_tokens_sq=media["samples"] * media["seq_len"] ** 2,
                          lm_sequences=media["samples"])
    got = compute_flops(_spec(model), uniform, mode="training", causal="full").parts
    assert got == m.parts("training")
