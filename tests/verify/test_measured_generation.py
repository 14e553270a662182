"""Generation FLOPs (prefill + decode against a KV cache) against FlopCounterMode around ``generate()``.

A tiny transformers Qwen2.5-VL (``measure``), eager attention, greedy ``generate(max_new_tokens=N,
min_new_tokens=N, use_cache=True)``; the library's ``generation_flops`` with ``causal="full"`` (eager prefill
square) must match the tower, the projector and the LM TO THE FLOP.
"""

from __future__ import annotations

import pytest

pytestmark = pytest.mark.measured
torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from .measure import _make_counter_class, build_model, make_batch, part_modules  # noqa: E402


@pytest.fixture(scope="module")
def model():
    return build_model("qwen2_5_vl")


@pytest.mark.parametrize("new_tokens", [1, 3, 8])
@pytest.mark.parametrize("rows, grids", [(1, ([(1, 4, 4), (1, 10, 14)], [])), (2, ([(1, 6, 6)], [(2, 4, 6)])),
                                         (1, ([], []))], ids=["images", "2rows-image+video", "text-only"])
def test_generate_with_kv_cache_per_part_to_the_flop(model, new_tokens, rows, grids):
    from vlm_perf.arch import spec_from_config
    from vlm_perf.flops.generation import generation_flops

    batch = make_batch(model, *grids, rows=rows)
    inputs = {k: v for k, v in batch.inputs.items() if k != "use_cache"}
    counter = _make_counter_class()(model, parts=part_modules(model))
    with torch.no_grad(), counter:
        out = model.generate(**inputs, max_new_tokens=new_tokens, min_new_tokens=new_tokens, do_sample=False,
                             use_cache=True, pad_token_id=0)
    assert out.shape[1] == batch.seq_lens[0] + new_tokens
    measured = {p: n for (phase, p), n in counter.counts.items() if phase == "forward"}
    assert not any(phase == "backward" for phase, _ in counter.counts)
    spec = spec_from_config(model.config.to_dict(), name="tiny")
    lib = generation_flops(spec, batch.seq_lens, [new_tokens] * rows, image_grids=batch.image_grids,
                           video_grids=batch.video_grids, causal="full")
    assert lib.prefill["vision_tower"] + lib.decode["vision_tower"] == measured.get("tower", 0)
    assert lib.prefill["projector"] + lib.decode["projector"] == measured.get("merger", 0)
    assert lib.prefill["language_model"] + lib.decode["language_model"] == measured["lm"]
    assert measured.get("other", 0) == 0


def test_prefill_alone_is_one_forward_with_the_head_on_the_last_position(model):
    """With one new token generate() runs only the prefill: a full forward minus (P - 1) head rows."""
    from vlm_perf.arch import spec_from_config
    from vlm_perf.flops.generation import generation_flops

    batch = make_batch(model, [(1, 4, 4)], [])
    inputs = {k: v for k, v in batch.inputs.items() if k != "use_cache"}
    full = _make_counter_class()(model, parts=part_modules(model))
    with torch.no_grad(), full:
        model(**inputs)
    spec = spec_from_config(model.config.to_dict(), name="tiny")
    lib = generation_flops(spec, batch.seq_lens, [1], image_grids=batch.image_grids, causal="full")
    head = 2 * spec.lm.hidden_size * spec.lm.vocab_size
    assert lib.decode["language_model"] == 0
    assert full.counts[("forward", "lm")] - lib.prefill["language_model"] == (batch.seq_lens[0] - 1) * head


def _generate_counts(model, inputs, parts, new_tokens):
    counter = _make_counter_class()(model, parts=parts)
    inputs = {k: v for k, v in inputs.items() if k != "use_cache"}
    with torch.no_grad(), counter:
        model.generate(**inputs, max_new_tokens=new_tokens, min_new_tokens=new_tokens, do_sample=False,
                       use_cache=True, pad_token_id=0)
    return {p: n for (phase, p), n in counter.counts.items() if phase == "forward"}


def test_generate_qwen3_vl_deepstack():
    from vlm_perf.arch import spec_from_config
    from vlm_perf.flops.generation import generation_flops

    model = build_model("qwen3_vl")
    batch = make_batch(model, [(1, 4, 4)], [(2, 4, 6)])
    measured = _generate_counts(model, batch.inputs, part_modules(model), 4)
    lib = generation_flops(spec_from_config(model.config.to_dict(), name="tiny"), batch.seq_lens, [4],
                           batch.image_grids, batch.video_grids, causal="full")
    assert {"tower": lib.prefill["vision_tower"], "merger": lib.prefill["projector"],
            "lm": lib.prefill["language_model"] + lib.decode["language_model"]} == {
        p: measured.get(p, 0) for p in ("tower", "merger", "lm")}


def test_generate_gemma3_sliding_window_cache():
    """Gemma 3's sliding layers keep the last ``window`` positions: decode attends to min(P + j, W)."""
    from vlm_perf.arch.families import FAMILIES
    from vlm_perf.flops.generation import generation_flops

    from .regimes import family_case

    processor = {"preprocessor_config.json": {"size": {"height": 32, "width": 32}, "do_pan_and_scan": None}}
    model, inputs, spec, stats, h = family_case("gemma3", [(48, 80)], processor)
    assert spec.lm.sliding_window and stats.lm_tokens + 6 > spec.lm.sliding_window  # the window binds
    measured = _generate_counts(model, inputs, h.part_modules(model), 6)
    media = FAMILIES[spec.family].media.image(spec, 48, 80)
    lib = generation_flops(spec, [stats.lm_tokens], [6], [media.grid], causal="full")
    assert {k: lib.prefill[k] + lib.decode[k] for k in lib.prefill} == {
        p: measured.get(p, 0) for p in ("vision_tower", "projector", "language_model")}


def test_generate_internvl():
    from vlm_perf.arch.families import FAMILIES
    from vlm_perf.flops.generation import generation_flops

    from .regimes import family_case

    processor = {"preprocessor_config.json": {"size": {"height": 32, "width": 32}, "min_patches": 1,
                                              "max_patches": 6, "crop_to_patches": False}}
    model, inputs, spec, stats, h = family_case("internvl", [(48, 80)], processor)
    measured = _generate_counts(model, inputs, h.part_modules(model), 5)
    media = FAMILIES[spec.family].media.image(spec, 48, 80)
    lib = generation_flops(spec, [stats.lm_tokens], [5], [media.grid], causal="full")
    assert {k: lib.prefill[k] + lib.decode[k] for k in lib.prefill} == {
        p: measured.get(p, 0) for p in ("vision_tower", "projector", "language_model")}
