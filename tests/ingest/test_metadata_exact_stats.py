"""Statistics the metadata path now computes instead of falling back to bounds: Llama 4's chunked-attention statistic
(``lm_tokens_sq_beyond_chunks``) from each document's length, the text-only microbatches of a cross-attention model
(``lm_tokens_no_vision``), and the named bound of the per-sample text x vision sums without ``images_per_sample``.

References: transformers' own chunked mask (``create_chunked_causal_mask`` with packed position ids: the allowed
entries are Σ_chunks c(c+1)/2, so Σ c² = 2·entries − tokens), hand arithmetic, and ``BatchStats.from_batch`` on the
same microbatches."""

from __future__ import annotations

import json

import pytest

from vlm_perf.arch import load_model, spec_from_config
from vlm_perf.ingest.metadata import iteration_stats
from vlm_perf.stats import BatchStats

CHUNK = 16


def _write(path, rows):
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def _llama4(chunk=CHUNK):
    vision = dict(hidden_size=32, num_hidden_layers=1, num_attention_heads=2, intermediate_size=128,
                  vision_output_dim=48, projector_input_dim=48, projector_output_dim=48, image_size=32, patch_size=4,
                  pixel_shuffle_ratio=0.5)
    text = dict(vocab_size=1000, hidden_size=64, intermediate_size=32, intermediate_size_mlp=96, num_hidden_layers=2,
                num_attention_heads=4, num_key_value_heads=2, head_dim=16, num_local_experts=4, num_experts_per_tok=1,
                interleave_moe_layer_step=2, no_rope_layer_interval=2, attention_chunk_size=chunk)
    return spec_from_config({"model_type": "llama4", "vision_config": vision, "text_config": text}, name="tiny-llama4")


def _mask_sq(lens: list[int], chunk: int) -> int:
    """Σ over chunks of c², from the entries transformers' chunked causal mask allows on the packed documents."""
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    from transformers.masking_utils import create_chunked_causal_mask

    cfg = transformers.Llama4TextConfig(hidden_size=8, num_attention_heads=2, num_key_value_heads=1, head_dim=4,
                                        num_hidden_layers=1, attention_chunk_size=chunk)
    cfg._attn_implementation = "sdpa"
    position_ids = torch.cat([torch.arange(n) for n in lens])[None]  # packed: positions restart per document
    mask = create_chunked_causal_mask(config=cfg, inputs_embeds=torch.zeros(1, sum(lens), 8), attention_mask=None,
                                      cache=None, position_ids=position_ids, allow_is_causal_skip=False)
    assert mask is not None and mask.dtype == torch.bool
    return 2 * int(mask.sum()) - sum(lens)


def test_chunks_follow_each_document_by_hand():
    # 40 = 16 + 16 + 8; 7; 33 = 16 + 16 + 1 (chunks restart at each document, not at the row's position 0)
    s = BatchStats.from_batch(seq_lens=[40, 7, 33], spec=_llama4())
    assert s.lm_tokens_sq - s.lm_tokens_sq_beyond_chunks == (2 * 256 + 64) + 49 + (2 * 256 + 1)


def test_chunks_from_metadata_equal_transformers_mask_and_from_batch(tmp_path):
    spec = _llama4()
    packed = [[40, 7, 33], [16, 17], [5]]
    rows = [{"iteration": 1, "microbatch": i, "seq_lens": lens} for i, lens in enumerate(packed)]
    rows.append({"iteration": 1, "microbatch": 3, "padded_tokens": 64, "samples": 2})  # 2 unpacked rows of 32
    got = iteration_stats(_write(tmp_path / "m.jsonl", rows), spec).stats_for(1)
    inside = sum(_mask_sq(lens, CHUNK) for lens in packed) + 2 * _mask_sq([32], CHUNK)
    assert got.lm_tokens_sq - got.lm_tokens_sq_beyond_chunks == inside
    ref = sum((BatchStats.from_batch(seq_lens=lens, spec=spec) for lens in packed), BatchStats()) \
        + BatchStats.from_batch(seq_len=32, samples=2, spec=spec)
    assert got.lm_tokens_sq_beyond_chunks == ref.lm_tokens_sq_beyond_chunks > 0
    from vlm_perf.flops import compute_flops

    ref = ref.with_(lm_padded_tokens=got.lm_padded_tokens, lm_samples=got.lm_samples)
    assert compute_flops(spec, got, mode="training").total == compute_flops(spec, ref, mode="training").total


def test_preaggregated_lm_rows_stay_full_causal_and_no_chunk_means_zero(tmp_path):
    rows = [{"iteration": 1, "lm_tokens": 40, "lm_tokens_sq": 1600}]
    assert iteration_stats(_write(tmp_path / "a.jsonl", rows), _llama4()).stats_for(1).lm_tokens_sq_beyond_chunks == 0
    rows = [{"iteration": 1, "seq_lens": [40]}]
    assert iteration_stats(_write(tmp_path / "b.jsonl", rows), None).stats_for(1).lm_tokens_sq_beyond_chunks == 0


def test_scout_chunk_of_8192_from_metadata(tmp_path):
    spec = load_model("llama4-scout-17b-16e")
    assert spec.lm.attention_chunk == 8192
    got = iteration_stats(_write(tmp_path / "m.jsonl", [{"iteration": 1, "seq_lens": [20000, 8192, 100]}]),
                          spec).stats_for(1)
    # 20000 = 8192 + 8192 + 3616; 8192 and 100 are one chunk each
    assert got.lm_tokens_sq_beyond_chunks == 20000 ** 2 - (2 * 8192 ** 2 + 3616 ** 2)


# --- Mllama: text-only microbatches, and the named longest-sample bound ---

V = 4 * 1600 + 4  # Llama-3.2-11B-Vision: every image is 4 tiles of 40x40 patches + 4 CLS for the cross-attention


def test_text_only_rows_from_metadata_equal_from_batch(tmp_path):
    spec = load_model("llama3.2-11b-vision")
    rows = [{"schema_version": 2, "iteration": 1, "microbatch": 0, "seq_lens": [100], "image_sizes": [[560, 560]]},
            {"iteration": 1, "microbatch": 1, "seq_lens": [70, 30]},
            {"iteration": 1, "microbatch": 2, "padded_tokens": 64, "samples": 2},
            {"iteration": 1, "microbatch": 3, "lm_tokens": 9, "lm_tokens_sq": 81}]
    got = iteration_stats(_write(tmp_path / "m.jsonl", rows), spec).stats_for(1)
    assert got.lm_tokens_no_vision == 70 + 30 + 64 + 9
    ref = BatchStats.from_batch(seq_lens=[100], image_grids=[(1, 160, 40)], spec=spec) \
        + BatchStats.from_batch(seq_lens=[70, 30], spec=spec) + BatchStats.from_batch(seq_len=32, samples=2, spec=spec)
    assert ref.lm_tokens_no_vision == 70 + 30 + 64


def _bound_rows():
    return [
        # images of two samples of 10 and 30 tokens, no images_per_sample: the bound (30 x 2V counted, 10 x 2V low)
        {"schema_version": 2, "iteration": 1, "seq_lens": [10, 30], "image_sizes": [[560, 560], [300, 900]]},
        # exact: images_per_sample, or equal lengths, or one sample
        {"schema_version": 2, "iteration": 1, "seq_lens": [100, 50], "images_per_sample": [2, 1],
         "image_sizes": [[560, 560], [300, 1200], [1000, 200]]},
        {"schema_version": 2, "iteration": 2, "seq_lens": [20, 20], "image_sizes": [[560, 560]]},
        {"schema_version": 2, "iteration": 2, "seq_lens": [40], "image_sizes": [[560, 560]]},
        {"iteration": 2, "seq_lens": [5, 50]},  # unequal, but no image: nothing bounded
    ]


def test_the_longest_sample_bound_is_named_with_its_size(tmp_path):
    spec = load_model("llama3.2-11b-vision")
    res = iteration_stats(_write(tmp_path / "m.jsonl", _bound_rows()), spec)
    d = res.diagnostics
    assert d.rows_cross_bound == 1 and d.cross_kv_tokens_per_frame == 4
    assert (d.cross_bound_patches, d.cross_bound_patches_low) == (30 * 2 * 6400, 10 * 2 * 6400)
    assert (d.cross_bound_frames, d.cross_bound_frames_low) == (30 * 2, 10 * 2)
    counted = 30 * 2 * V + (100 * 2 * V + 50 * V) + 20 * V + 40 * V  # Σ S·V of every row, as counted
    s1, s2 = res.stats_for(1), res.stats_for(2)
    assert s1.lm_x_vision_patches + 4 * s1.lm_x_vision_frames + s2.lm_x_vision_patches + 4 * s2.lm_x_vision_frames \
        == counted
    share = (30 - 10) * 2 * V / counted
    note = next(n for n in d.notes if n.startswith("upper bound:"))
    assert f"{30 * 2 * V:,}" in note and f"{10 * 2 * V:,}" in note and f"{share:.1%}" in note, note
    assert "images_per_sample" in note


def test_no_note_when_nothing_reads_the_sums_or_nothing_is_bounded(tmp_path):
    rows = [{"iteration": 1, "seq_lens": [10, 30], "image_grid_thw": [[1, 2, 2], [1, 4, 4]]}]
    d = iteration_stats(_write(tmp_path / "a.jsonl", rows)).diagnostics  # no model: no cross-attention layers known
    assert d.rows_cross_bound == 1 and not any(n.startswith("upper bound:") for n in d.notes)
    spec = load_model("llama3.2-11b-vision")
    exact = [r for r in _bound_rows() if r.get("images_per_sample") or len(set(r["seq_lens"])) == 1]
    d = iteration_stats(_write(tmp_path / "b.jsonl", exact), spec).diagnostics
    assert d.rows_cross_bound == 0 and not any(n.startswith("upper bound:") for n in d.notes)


def test_dask_backend_names_the_same_bound(tmp_path):
    pytest.importorskip("dask")
    from vlm_perf.scale import aggregate_metadata_dask

    spec = load_model("llama3.2-11b-vision")
    rows = _bound_rows()
    paths = [_write(tmp_path / "a.jsonl", rows[:2]), _write(tmp_path / "b.jsonl", rows[2:])]
    single = iteration_stats(paths, spec).diagnostics
    dask = aggregate_metadata_dask(paths, spec, files_per_partition=1).diagnostics
    assert [n for n in dask.notes if n.startswith("upper bound:")] == [n for n in single.notes
                                                                      if n.startswith("upper bound:")] != []


def test_flops_cli_names_the_bound_of_unequal_seq_lens():
    """`vlm-perf flops --seq-lens 10,30` with two 560 px images on Llama-3.2-11B-Vision: counted 30 x 2V, the shortest
    sample gives 10 x 2V; one sequence (or equal lengths) is exact and carries no such note."""
    from tests.support import run_main  # the entry point in-process (flops keeps subprocess tests in tests/cli)

    def notes(*args):
        res = run_main("flops", "-m", "llama3.2-11b-vision", *args, "--json")
        return [n for n in json.loads(res.stdout)["notes"] if n.startswith("upper bound:")]

    got = notes("--seq-lens", "10,30", "--image-size", "560,560", "--image-size", "560,560")
    assert len(got) == 1 and f"{30 * 2 * V:,}" in got[0] and f"{10 * 2 * V:,}" in got[0], got
    assert notes("--seq-lens", "20,20", "--image-size", "560,560") == []
    assert notes("--seq-lens", "40", "--image-size", "560,560") == []
