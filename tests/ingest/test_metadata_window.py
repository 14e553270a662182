"""The sliding-window statistic ``lm_tokens_sq_beyond_window`` (Σ max(s - W, 0)² per document) from metadata:
per document of ``seq_lens``, over the uniform sequences of a ``padded_tokens``-only row, 0 with a named bound for
pre-aggregated LM rows, and the same on the Dask path.

References: transformers' own sliding-window mask (``create_sliding_window_causal_mask`` with the Gemma 3 and gpt-oss
text configs, packed documents through position ids, unpacked rows as a batch): a document of s tokens keeps
Σ_i min(i + 1, W) entries, so the entries the window removes from the causal triangle are b(b + 1)/2 with
b = max(s - W, 0), and the statistic is Σ b² with b solved from the mask's own count; ``BatchStats.from_batch`` on the
same microbatches; hand arithmetic."""

from __future__ import annotations

import json
from math import isqrt

import pytest

from vlm_perf.arch import load_model, spec_from_config
from vlm_perf.ingest.metadata import iteration_stats
from vlm_perf.stats import BatchStats

W = 8  # the tiny models' window


def _write(path, rows):
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def _gemma3(window=W):
    vision = dict(hidden_size=32, intermediate_size=48, num_hidden_layers=1, num_attention_heads=2, image_size=32,
                  patch_size=4, vision_use_head=False)
    text = dict(vocab_size=300, hidden_size=64, intermediate_size=96, num_hidden_layers=3, num_attention_heads=4,
                num_key_value_heads=2, head_dim=16, query_pre_attn_scalar=16, sliding_window=window,
                layer_types=["sliding_attention", "sliding_attention", "full_attention"])
    cfg = {"model_type": "gemma3", "vision_config": vision, "text_config": text, "mm_tokens_per_image": 16,
           "tie_word_embeddings": True}
    return spec_from_config(cfg, name="tiny-gemma3", processor={
        "preprocessor_config.json": {"size": {"height": 32, "width": 32}, "do_pan_and_scan": None}})


def _gpt_oss(window=W):
    cfg = {"model_type": "gpt_oss", "vocab_size": 300, "hidden_size": 64, "intermediate_size": 64, "head_dim": 16,
           "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2, "num_local_experts": 4,
           "num_experts_per_tok": 2, "experts_per_token": 2, "sliding_window": window,
           "layer_types": ["sliding_attention", "full_attention"], "tie_word_embeddings": False}
    return spec_from_config(cfg, name="tiny-gpt-oss")


def _hf_config(family: str, window: int):
    transformers = pytest.importorskip("transformers")
    if family == "gemma3":
        cfg = transformers.Gemma3TextConfig(hidden_size=8, num_attention_heads=2, num_key_value_heads=1, head_dim=4,
                                            num_hidden_layers=1, sliding_window=window,
                                            layer_types=["sliding_attention"])
    else:
        cfg = transformers.GptOssConfig(hidden_size=8, num_attention_heads=2, num_key_value_heads=1, head_dim=4,
                                        num_hidden_layers=1, sliding_window=window, layer_types=["sliding_attention"])
    cfg._attn_implementation = "sdpa"
    return cfg


def _beyond_from_removed(removed: int) -> int:
    b = (isqrt(8 * removed + 1) - 1) // 2  # removed = b(b + 1)/2
    assert b * (b + 1) // 2 == removed, removed
    return b * b


def _mask_beyond_packed(lens: list[int], window: int, family: str = "gemma3") -> int:
    """Σ over the packed documents of b², from transformers' sliding-window mask of the packed row."""
    torch = pytest.importorskip("torch")
    from transformers.masking_utils import create_sliding_window_causal_mask

    total = sum(lens)
    position_ids = torch.cat([torch.arange(n) for n in lens])[None]  # packed: positions restart per document
    mask = create_sliding_window_causal_mask(config=_hf_config(family, window), inputs_embeds=torch.zeros(1, total, 8),
                                             attention_mask=None, cache=None, position_ids=position_ids,
                                             allow_is_causal_skip=False)
    assert mask is not None and mask.dtype == torch.bool
    m = mask[0, 0]
    out, start = 0, 0
    for s in lens:
        block = m[start:start + s, start:start + s]
        assert int(m[start:start + s].sum()) == int(block.sum())  # no entry across documents
        out += _beyond_from_removed(s * (s + 1) // 2 - int(block.sum()))
        start += s
    return out


def _mask_beyond_rows(seq_len: int, samples: int, window: int, family: str = "gemma3") -> int:
    """Σ over ``samples`` unpacked rows of ``seq_len`` tokens (a batch, no position ids) of b²."""
    torch = pytest.importorskip("torch")
    from transformers.masking_utils import create_sliding_window_causal_mask

    mask = create_sliding_window_causal_mask(config=_hf_config(family, window),
                                             inputs_embeds=torch.zeros(samples, seq_len, 8), attention_mask=None,
                                             cache=None, allow_is_causal_skip=False)
    assert mask is not None and mask.shape[0] == samples
    full = seq_len * (seq_len + 1) // 2
    return sum(_beyond_from_removed(full - int(mask[i, 0].sum())) for i in range(samples))


def test_window_per_document_by_hand():
    # 20 -> 12², 8 and 5 fit the window, 9 -> 1²: documents, not the row's 42 tokens ((42 - 8)² = 1156)
    s = BatchStats.from_batch(seq_lens=[20, 8, 5, 9], spec=_gemma3())
    assert s.lm_tokens_sq_beyond_window == 144 + 0 + 0 + 1


@pytest.mark.parametrize("family", ["gemma3", "gpt_oss"])
def test_window_from_metadata_equals_transformers_mask_and_from_batch(tmp_path, family):
    spec = _gemma3() if family == "gemma3" else _gpt_oss()
    packed = [[20, 8, 5, 9], [30], [3, 4], [8, 9]]
    rows = [{"iteration": 1 + i % 2, "microbatch": i, "seq_lens": lens} for i, lens in enumerate(packed)]
    rows.append({"iteration": 2, "microbatch": 9, "padded_tokens": 48, "samples": 3})  # 3 unpacked rows of 16
    res = iteration_stats(_write(tmp_path / "m.jsonl", rows), spec)
    got = res.stats_for(1) + res.stats_for(2)
    mask = sum(_mask_beyond_packed(lens, W, family) for lens in packed) + _mask_beyond_rows(16, 3, W, family)
    assert got.lm_tokens_sq_beyond_window == mask == 144 + 1 + 22 ** 2 + 0 + 1 + 3 * 8 ** 2
    ref = sum((BatchStats.from_batch(seq_lens=lens, spec=spec) for lens in packed), BatchStats()) \
        + BatchStats.from_batch(seq_len=16, samples=3, spec=spec)
    assert got.lm_tokens_sq_beyond_window == ref.lm_tokens_sq_beyond_window
    assert not any(n.startswith("upper bound:") for n in res.diagnostics.notes)


@pytest.mark.parametrize("family", ["gemma3", "gpt_oss"])
def test_report_flops_equal_the_per_batch_path(tmp_path, family):
    """The report's vectorised FLOPs (``with_flops`` over the metadata frame) equal ``compute_flops`` on
    ``BatchStats.from_batch`` of the same microbatches, per iteration, and the windowed layers are cheaper than full."""
    from vlm_perf.analysis.flops_frame import with_flops
    from vlm_perf.flops import compute_flops

    spec = _gemma3() if family == "gemma3" else _gpt_oss()
    batches = {1: [[40, 3], [17]], 2: [[9, 9, 9]]}
    rows = [{"iteration": it, "microbatch": i, "seq_lens": lens}
            for it, bs in batches.items() for i, lens in enumerate(bs)]
    rows.append({"iteration": 2, "microbatch": 5, "padded_tokens": 60, "samples": 2})
    frame = with_flops(iteration_stats(_write(tmp_path / "m.jsonl", rows), spec).frame, spec, ["exact"])
    per_iter = dict(zip(frame["iteration"].to_list(), frame["exact_total"].to_list()))
    refs = {it: sum((BatchStats.from_batch(seq_lens=lens, spec=spec) for lens in bs), BatchStats())
            for it, bs in batches.items()}
    refs[2] = refs[2] + BatchStats.from_batch(seq_len=30, samples=2, spec=spec)
    for it, ref in refs.items():
        assert ref.lm_tokens_sq_beyond_window > 0
        want = compute_flops(spec, ref, mode="training").total
        assert per_iter[it] == pytest.approx(want, rel=1e-12)
        full = compute_flops(spec, ref.with_(lm_tokens_sq_beyond_window=0), mode="training").total
        assert want < full


def test_preaggregated_lm_rows_stay_full_causal_and_the_bound_is_named(tmp_path):
    spec = _gemma3()
    rows = [{"iteration": 1, "microbatch": 0, "seq_lens": [20, 5]},  # exact: 144 beyond, windowed 400 - 144 + 25
            # pre-aggregated, 2 documents of 20 and 10 tokens (the reader cannot know): counted 500, least
            # max(30, 2·8·30 - 64·2) = 352 (exact: (400 - 144) + (100 - 4) = 352, every document exceeds W)
            {"iteration": 1, "microbatch": 1, "lm_tokens": 30, "lm_tokens_sq": 500, "lm_sequences": 2},
            # no lm_sequences: least is the token count, 12
            {"iteration": 2, "microbatch": 0, "lm_tokens": 12, "lm_tokens_sq": 144},
            # lm_tokens_sq <= W²: no document exceeds the window, 0 is exact (not on the bound)
            {"iteration": 2, "microbatch": 1, "lm_tokens": 10, "lm_tokens_sq": 52, "lm_sequences": 2}]
    res = iteration_stats(_write(tmp_path / "m.jsonl", rows), spec)
    assert res.stats_for(1).lm_tokens_sq_beyond_window == 144 and res.stats_for(2).lm_tokens_sq_beyond_window == 0
    d = res.diagnostics
    assert (d.lm_window, d.rows_window_bound, d.window_bound_counted, d.window_bound_least) == (8, 2, 644, 364)
    total = (425 - 144) + 500 + 144 + 52  # the run's windowed Σ as counted
    assert d.window_total == total
    note = next(n for n in d.notes if n.startswith("upper bound:") and "sliding-window" in n)
    assert "2 row(s)" in note and "644" in note and "364" in note and f"{(644 - 364) / total:.1%}" in note, note
    assert "seq_lens" in note


def test_no_window_no_statistic_and_no_note(tmp_path):
    rows = [{"iteration": 1, "seq_lens": [40]}, {"iteration": 1, "lm_tokens": 30, "lm_tokens_sq": 900}]
    path = _write(tmp_path / "m.jsonl", rows)
    for spec in (None, load_model("qwen2.5-vl-7b")):  # no model / use_sliding_window false: no sliding layers
        res = iteration_stats(path, spec)
        assert res.stats_for(1).lm_tokens_sq_beyond_window == 0
        assert res.diagnostics.rows_window_bound == 0
        assert not any("sliding-window" in n for n in res.diagnostics.notes)


def test_gpt_oss_20b_window_of_128_from_metadata(tmp_path):
    spec = load_model("gpt-oss-20b")
    assert spec.lm.sliding_window == 128
    got = iteration_stats(_write(tmp_path / "m.jsonl", [{"iteration": 1, "seq_lens": [4096, 128, 129, 7]}]),
                          spec).stats_for(1)
    assert got.lm_tokens_sq_beyond_window == (4096 - 128) ** 2 + 0 + 1 + 0


def test_dask_equals_single(tmp_path):
    pytest.importorskip("dask")
    from vlm_perf.scale import aggregate_metadata_dask

    spec = _gpt_oss()
    rows = [{"iteration": 1, "microbatch": 0, "seq_lens": [20, 5]},
            {"iteration": 1, "microbatch": 1, "lm_tokens": 30, "lm_tokens_sq": 500, "lm_sequences": 2},
            {"iteration": 2, "microbatch": 0, "padded_tokens": 48, "samples": 3},
            {"iteration": 2, "microbatch": 1, "seq_lens": [9, 30]},
            {"iteration": 1, "microbatch": 2, "lm_tokens": 12, "lm_tokens_sq": 144}]
    paths = [_write(tmp_path / "a.jsonl", rows[:2]), _write(tmp_path / "b.jsonl", rows[2:4]),
             _write(tmp_path / "c.jsonl", rows[4:])]
    single = iteration_stats(paths, spec)
    dask = aggregate_metadata_dask(paths, spec, files_per_partition=1)
    for it in (1, 2):
        assert dask.stats_for(it).lm_tokens_sq_beyond_window == single.stats_for(it).lm_tokens_sq_beyond_window
    assert single.stats_for(1).lm_tokens_sq_beyond_window == 144
    assert single.stats_for(2).lm_tokens_sq_beyond_window == 3 * 8 ** 2 + 1 + 22 ** 2
    s, d = single.diagnostics, dask.diagnostics
    assert (d.rows_window_bound, d.window_bound_counted, d.window_bound_least, d.window_total) == \
        (s.rows_window_bound, s.window_bound_counted, s.window_bound_least, s.window_total) == (2, 644, 364,
                                                                                               s.window_total)
    pick = [n for n in s.notes if "sliding-window" in n]
    assert [n for n in d.notes if "sliding-window" in n] == pick != []


def test_one_window_per_model_and_the_bound_only_where_flops_read_it(tmp_path):
    """The statistic is computed for the LM's one ``sliding_window``: every windowed attention block of every preset
    must use that window (a family with several windows would need one statistic per window). PaliGemma 2 has sliding
    layers but is billed as the eager square: the statistic is still exact (as from_batch), no bound is noted."""
    from vlm_perf.arch.blocks import DecoderAttention
    from vlm_perf.arch.presets_loader import preset_names

    for name in preset_names():
        spec = load_model(name)
        windows = {b.window for b in spec.blocks if isinstance(b, DecoderAttention) and b.window}
        assert windows <= {spec.lm.sliding_window}, (name, windows, spec.lm.sliding_window)
    spec = load_model("paligemma2-3b-224")
    assert spec.lm.sliding_window == 4096
    rows = [{"iteration": 1, "seq_lens": [5000, 10]}, {"iteration": 1, "lm_tokens": 5000, "lm_tokens_sq": 5000 ** 2}]
    res = iteration_stats(_write(tmp_path / "m.jsonl", rows), spec)
    assert res.stats_for(1).lm_tokens_sq_beyond_window == 904 ** 2
    assert res.diagnostics.lm_window is None and not any("sliding-window" in n for n in res.diagnostics.notes)
