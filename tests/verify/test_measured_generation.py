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


# --------------------------------------------------------------------------- the command line, end to end
# `vlm-perf flops --new-tokens N --json` on a checkpoint folder of the tiny model (its config.json, and the processor
# settings the family's FLOPs tests use) against FlopCounterMode around transformers' own generate(): greedy,
# max_new_tokens = min_new_tokens = N (it cannot stop early), KV cache; one prompt and two (the same prompt twice in
# one batch: equal lengths, no padding), plain and with a LoRA adapter PEFT saved (the peft-wrapped model generates).
# Qwen2.5-VL's prompt comes from the measure harness (grids), InternVL's and Gemma 3's from HF's own processors
# (images by pixel size, which the command derives through the family's processor rule).
NEW_TOKENS = 5
FAMILY_PROCESSORS = {
    "internvl": {"preprocessor_config.json": {"size": {"height": 32, "width": 32}, "min_patches": 1,
                                              "max_patches": 6, "crop_to_patches": False}},
    "gemma3": {"preprocessor_config.json": {"size": {"height": 32, "width": 32}, "do_pan_and_scan": None}},
}
IMAGE = (48, 80)
# LoRA on q/v everywhere: the LM's and (LM-style names) the tower's attention, so prefill adapts both parts
LORA = dict(r=4, lora_alpha=8, lora_dropout=0.0, target_modules=["q_proj", "v_proj", "qkv"])


def _checkpoint(folder, model, processor=None):
    import json

    folder.mkdir(parents=True)
    (folder / "config.json").write_text(model.config.to_json_string())
    for name, body in (processor or {}).items():
        (folder / name).write_text(json.dumps(body))
    return folder


def _cli_parts(*args):
    import json

    from tests.support import run_main

    r = run_main("flops", *map(str, args), "--new-tokens", NEW_TOKENS, "--causal", "full", "--json")
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)
    return out["generation"]["parts"], out


def _generate_parts(model, inputs, parts, names):
    """FlopCounterMode per part around ``model.generate`` (``names``: harness part -> library part)."""
    counter = _make_counter_class()(model, parts=parts)
    inputs = {k: v for k, v in inputs.items() if k != "use_cache"}
    with torch.no_grad(), counter:
        out = model.generate(**inputs, max_new_tokens=NEW_TOKENS, min_new_tokens=NEW_TOKENS, do_sample=False,
                             use_cache=True, pad_token_id=0)
    assert out.shape[1] == inputs["input_ids"].shape[1] + NEW_TOKENS
    assert not any(phase == "backward" for phase, _ in counter.counts)
    measured = {p: n for (phase, p), n in counter.counts.items() if phase == "forward"}
    assert measured.get("other", 0) == 0
    return {lib: measured.get(h, 0) for h, lib in names.items()}


def _adapted(model, tmp_path, adapter):
    """(model that generates, extra CLI args): the peft-wrapped copy and its saved adapter_config.json."""
    if not adapter:
        return model, ()
    import copy

    from peft import LoraConfig, get_peft_model

    pm = get_peft_model(copy.deepcopy(model), LoraConfig(**LORA)).eval()
    pm.save_pretrained(tmp_path / "adapter")
    return pm, ("--adapter", tmp_path / "adapter" / "adapter_config.json")


QWEN_PARTS = {"tower": "vision_tower", "merger": "projector", "lm": "language_model"}


def _grid_args(flag, grids):
    return [x for g in grids for x in (flag, ",".join(map(str, g)))]


def _twice(inputs):
    """The same prompt twice in one batch (equal lengths: no padding)."""
    return {k: torch.cat([v, v]) if torch.is_tensor(v) else v for k, v in inputs.items()}


@pytest.mark.parametrize("adapter", [False, True], ids=["plain", "lora"])
@pytest.mark.parametrize("rows", [1, 2])
def test_cli_generate_qwen2_5_vl(model, rows, adapter, tmp_path):
    if adapter:
        pytest.importorskip("peft")
    grids = [(1, 4, 4), (1, 10, 14)]
    batch = make_batch(model, grids, [], rows=rows)
    runner, extra = _adapted(model, tmp_path, adapter)
    base = runner.get_base_model() if adapter else runner
    measured = _generate_parts(runner, batch.inputs, part_modules(base), QWEN_PARTS)
    folder = _checkpoint(tmp_path / "ckpt", model)
    prompt = ("--model", folder, "--seq-len", batch.seq_lens[0], "--samples", rows,
              *_grid_args("--grid", batch.image_grids))
    ours, out = _cli_parts(*prompt, *extra)
    assert ours == measured
    assert out["generation"]["new_tokens"] == rows * NEW_TOKENS
    if adapter:  # the adapter ran in the tower's prefill and on every LM token
        plain = _cli_parts(*prompt)[0]
        assert ours["vision_tower"] > plain["vision_tower"] and ours["language_model"] > plain["language_model"]


@pytest.fixture(scope="module", params=sorted(FAMILY_PROCESSORS))
def family_model(request):
    from .regimes import family_case

    return request.param, family_case(request.param, [IMAGE], FAMILY_PROCESSORS[request.param])


@pytest.mark.parametrize("adapter", [False, True], ids=["plain", "lora"])
@pytest.mark.parametrize("rows", [1, 2])
def test_cli_generate_internvl_gemma3(family_model, rows, adapter, tmp_path):
    """InternVL (tiles + pixel shuffle) and Gemma 3 (sliding-window cache: the window binds during decode)."""
    if adapter:
        pytest.importorskip("peft")
    family, (model, inputs, spec, stats, h) = family_model
    if family == "gemma3":
        assert spec.lm.sliding_window and stats.lm_tokens + NEW_TOKENS > spec.lm.sliding_window
    runner, extra = _adapted(model, tmp_path, adapter)
    base = runner.get_base_model() if adapter else runner
    prompt = inputs if rows == 1 else _twice(inputs)
    measured = _generate_parts(runner, prompt, h.part_modules(base),
                               {p: p for p in ("vision_tower", "projector", "language_model")})
    folder = _checkpoint(tmp_path / "ckpt", model, FAMILY_PROCESSORS[family])
    ours, out = _cli_parts("--model", folder, "--seq-len", stats.lm_tokens, "--samples", rows,
                           *["--image-size", ",".join(map(str, IMAGE))] * rows, *extra)
    assert ours == measured
    assert out["generation"]["prompts"] == [stats.lm_tokens] * rows


@pytest.mark.parametrize("images, videos", [([(1, 4, 4)], [(2, 4, 6)]), ([], [])], ids=["image+video", "text-only"])
def test_cli_generate_qwen2_5_vl_video_and_text_prompts(model, images, videos, tmp_path):
    batch = make_batch(model, images, videos)
    measured = _generate_parts(model, batch.inputs, part_modules(model), QWEN_PARTS)
    ours, _ = _cli_parts("--model", _checkpoint(tmp_path / "ckpt", model), "--seq-len", batch.seq_lens[0],
                         *_grid_args("--grid", batch.image_grids), *_grid_args("--video-grid", batch.video_grids))
    assert ours == measured


def test_cli_generate_prompts_of_different_lengths_each_count_their_own_work(model, tmp_path):
    """--seq-lens P1,P2: one prompt per length, each with its own cache: the sum of generating each prompt alone
    (a batched generate() would left-pad the shorter one and run the padding too)."""
    a = make_batch(model, [(1, 4, 4)], [], text_tokens=7)
    b = make_batch(model, [(1, 10, 14)], [], text_tokens=12, seed=2)
    assert a.seq_lens[0] != b.seq_lens[0]
    measured = [_generate_parts(model, x.inputs, part_modules(model), QWEN_PARTS) for x in (a, b)]
    ours, out = _cli_parts("--model", _checkpoint(tmp_path / "ckpt", model),
                           "--seq-lens", f"{a.seq_lens[0]},{b.seq_lens[0]}", *_grid_args("--grid", [(1, 4, 4), (1, 10, 14)]))
    assert ours == {p: measured[0][p] + measured[1][p] for p in ours}
    assert out["generation"]["prompts"] == [a.seq_lens[0], b.seq_lens[0]]
