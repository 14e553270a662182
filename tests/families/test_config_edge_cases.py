"""Config edge cases that need no model run (hand arithmetic in each test): every part frozen, no top-level
model_type, sliding windows (Mistral, Qwen2), deepstack merger freezing, a convention not defined for a family,
registries rejecting duplicates. The measured counterparts (Qwen-VL index lists, deepstack freezing) are in
tests/verify/test_measured_deepstack_fullatt_indexes.py."""

from __future__ import annotations

import pytest

from vlm_perf.arch import load_model, preset_config, spec_from_config
from vlm_perf.errors import ConfigError, ConventionNotDefined, UnsupportedModelError
from vlm_perf.flops import compute_flops
from vlm_perf.stats import BatchStats


def _mistral(**over):
    cfg = {"model_type": "mistral", "hidden_size": 64, "num_attention_heads": 4, "num_key_value_heads": 2,
           "num_hidden_layers": 3, "intermediate_size": 128, "vocab_size": 100, "sliding_window": 16}
    cfg.update(over)
    return spec_from_config(cfg, name="tiny-mistral")


# --------------------------------------------------------------------------- text-only, all frozen
def test_frozen_language_model_on_text_only_model_is_refused():
    spec = load_model("qwen3-30b-a3b")
    stats = BatchStats.from_batch(seq_len=1024, spec=spec)
    with pytest.raises(ConfigError, match="every part it has .*language_model.* is frozen.*mode 'forward'"):
        compute_flops(spec, stats, frozen=["language_model"])
    # forward-only is the stated alternative, and equals the unfrozen forward
    assert (compute_flops(spec, stats, mode="forward", frozen=["lm"]).total
            == compute_flops(spec, stats, mode="forward").total)


def test_every_part_of_a_vlm_frozen_is_refused_too():
    spec = load_model("qwen3-vl-8b")
    stats = BatchStats.from_batch(seq_len=1024, image_grids=[(1, 16, 16)], spec=spec)
    with pytest.raises(ConfigError, match="frozen"):
        compute_flops(spec, stats, frozen=["vision", "language_model"])


# --------------------------------------------------------------------------- no top-level model_type
def test_missing_model_type_with_vision_config_is_refused():
    cfg = preset_config("qwen3-vl-8b")
    del cfg["model_type"]
    cfg["text_config"]["model_type"] = "qwen3"
    with pytest.raises(UnsupportedModelError, match="no top-level model_type.*'qwen3'.*vision_config"):
        spec_from_config(cfg)


def test_missing_model_type_text_only_says_so():
    cfg = {"text_config": {**preset_config("qwen3-30b-a3b")}}
    cfg["text_config"].pop("_vlm_perf_source", None)
    spec = spec_from_config(cfg)
    assert spec.family == "qwen3_moe" and spec.vision is None
    assert any("no top-level model_type" in n and "text-only" in n for n in spec.extra["notes"])


# --------------------------------------------------------------------------- sliding windows
def test_mistral_sliding_window_under_causal_half():
    spec = _mistral()
    assert spec.lm.sliding_window == 16 and spec.lm.sliding_layers == (0, 1, 2)
    s1, s2 = 40, 10  # one sequence longer than the window, one shorter
    stats = BatchStats.from_batch(seq_lens=[s1, s2], spec=spec)
    core = compute_flops(spec, stats, mode="forward").components["lm.attn_core"]
    # per query i (0-based) a window of W keys attends min(i+1, W) keys; the causal-half convention is the
    # continuous area: s^2/2 for s <= W, W^2/2 + (s - W)*W beyond; QK^T and AV: 2 * 2 * heads * head_dim
    per_entry = 2 * 2 * 4 * 16
    area = (16 * 16 / 2 + (s1 - 16) * 16) + s2 * s2 / 2
    assert core == 3 * per_entry * area
    full = compute_flops(spec, stats, mode="forward", causal="full").components["lm.attn_core"]
    assert full == 3 * per_entry * (s1 * s1 + s2 * s2)  # eager: the whole square whatever the mask


def test_mistral_without_window_is_full_causal():
    spec = _mistral(sliding_window=None)
    stats = BatchStats.from_batch(seq_lens=[40], spec=spec)
    assert compute_flops(spec, stats, mode="forward").components["lm.attn_core"] == 3 * 2 * 2 * 4 * 16 * 40 * 40 / 2


@pytest.mark.parametrize("use, layers, expected", [(False, None, ()), (True, None, (2,)), (True, 1, (1, 2))])
def test_qwen2_use_sliding_window_and_max_window_layers(use, layers, expected):
    # transformers Qwen2Config: sliding_window only with use_sliding_window, on layers >= max_window_layers
    cfg = {"model_type": "qwen2", "hidden_size": 64, "num_attention_heads": 4, "num_key_value_heads": 2,
           "num_hidden_layers": 3, "intermediate_size": 128, "vocab_size": 100, "sliding_window": 16,
           "use_sliding_window": use, "max_window_layers": 2 if layers is None else layers}
    spec = spec_from_config(cfg)
    assert spec.lm.sliding_layers == expected


def test_llama_has_no_sliding_window():
    cfg = {**preset_config("llama3-8b"), "sliding_window": 16}
    assert load_model("llama3-8b").lm.sliding_window is None
    assert spec_from_config(cfg).lm.sliding_window is None


# --------------------------------------------------------------------------- deepstack freezing
def test_frozen_deepstack_merger_hand_arithmetic():
    spec = load_model("qwen3-vl-8b")
    stats = BatchStats.from_batch(seq_len=4096, image_grids=[(1, 32, 32)], spec=spec)
    fwd = compute_flops(spec, stats, mode="forward").components
    b = compute_flops(spec, stats, frozen=["vision_tower", "deepstack_merger"]).components
    # deepstack mergers: frozen, input from a frozen tower -> forward only
    assert b["vision.deepstack_merger"] == fwd["vision.deepstack_merger"]
    # main merger trainable: weight + input gradients of both GEMMs (its LayerNorm needs fc1's) -> x3
    assert b["vision.merger"] == 3 * fwd["vision.merger"]
    # the tower stays forward-only
    assert b["vision.mlp"] == fwd["vision.mlp"]
    old = compute_flops(spec, stats, frozen=["vision_tower", "merger"]).components  # whole projector
    assert old["vision.merger"] == fwd["vision.merger"] and old["vision.deepstack_merger"] == fwd["vision.deepstack_merger"]


def test_convention_not_defined_for_uncovered_family():
    from vlm_perf.flops.conventions import get_convention

    spec = load_model("qwen3-vl-8b")
    fake = spec.__class__(**{**spec.__dict__, "family": "some_new_family"})
    with pytest.raises(ConventionNotDefined, match="not defined for some_new_family"):
        get_convention("megatron-bridge").compute(fake, BatchStats.from_batch(seq_len=8, spec=spec),
                                                  __import__("vlm_perf.flops", fromlist=["Options"]).Options())


def test_frozen_projector_keeps_input_gradients_for_a_trainable_tower():
    spec = load_model("qwen3-vl-8b")
    stats = BatchStats.from_batch(seq_len=4096, image_grids=[(1, 32, 32)], spec=spec)
    fwd = compute_flops(spec, stats, mode="forward").components
    b = compute_flops(spec, stats, frozen=["projector"]).components
    # no weight gradients, but the tower behind it trains: both GEMMs pass input gradients back (x2)
    assert b["vision.merger"] == 2 * fwd["vision.merger"]
    assert b["vision.deepstack_merger"] == 2 * fwd["vision.deepstack_merger"]
    assert b["vision.mlp"] == 3 * fwd["vision.mlp"] and b["lm.dense_mlp"] == 3 * fwd["lm.dense_mlp"]


# --------------------------------------------------------------------------- registries reject duplicates
def test_family_registry_rejects_duplicates():
    from vlm_perf.arch.families import FAMILIES, Family, register_family

    with pytest.raises(ValueError, match="already registered"):
        register_family(FAMILIES["internvl"])
    with pytest.raises(ValueError, match="model_type 'qwen2' already belongs to family 'qwen2'"):
        register_family(Family(name="other", model_types=("qwen2",), build=lambda *a: None, hf_class="X",
                               is_vlm=False))


def test_block_flops_registry_rejects_duplicates_and_unknown_kinds():
    from dataclasses import dataclass

    from vlm_perf.arch.blocks import Block, PatchEmbed
    from vlm_perf.flops.blocks import FlopsContext, block_flops, inventory_terms

    with pytest.raises(ValueError, match="PatchEmbed already registered"):
        block_flops(PatchEmbed)(lambda b, s, c: [])

    @dataclass(frozen=True)
    class Unregistered(Block):
        def params(self):
            return 1

    with pytest.raises(NotImplementedError, match="no FLOPs function registered for block kind Unregistered"):
        inventory_terms([Unregistered(part="vision_tower", count=1)], BatchStats(), FlopsContext())
    with pytest.raises(ValueError, match="part must be one of"):
        Unregistered(part="vision", count=1)
