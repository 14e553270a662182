"""Capture helper: write with MetadataWriter (real torch tensors when available), read back."""

from __future__ import annotations

import json
import sys

import pytest

from vlm_perf.capture import MetadataWriter, batch_metadata, seq_lens_from_cu_seqlens
from vlm_perf.ingest.metadata import iteration_stats


def test_capture_module_does_not_import_torch():
    import importlib

    import vlm_perf.capture as cap

    importlib.reload(cap)
    src = open(cap.__file__).read()
    assert "import torch" not in src


def test_seq_lens_from_cu_seqlens():
    assert seq_lens_from_cu_seqlens([0, 5, 12, 12, 20]) == [5, 7, 8]
    assert seq_lens_from_cu_seqlens([[0, 3, 4]]) == [3, 1]
    with pytest.raises(ValueError, match="start at 0"):
        seq_lens_from_cu_seqlens([1, 3])
    with pytest.raises(ValueError, match="non-decreasing"):
        seq_lens_from_cu_seqlens([0, 5, 3])


def test_round_trip_with_torch_tensors(tmp_path):
    torch = pytest.importorskip("torch")
    out = tmp_path / "metadata"
    for rank in (0, 1):
        with MetadataWriter(out, rank=rank) as meta:
            for it in (10, 11):
                for mb in range(2):
                    meta.record(
                        torch.tensor(it), microbatch=mb,
                        cu_seqlens=torch.tensor([0, 3, 7], dtype=torch.int32),  # seq_lens [3, 4]
                        image_grid_thw=torch.tensor([[2, 4, 4], [1, 2, 4]]),
                        video_grid_thw=torch.tensor([[2, 10, 10]]) if rank == 1 else None,
                        padded_tokens=torch.tensor(8),
                    )
            assert meta.records == 4
    assert sorted(p.name for p in out.iterdir()) == ["metadata-rank00000.jsonl", "metadata-rank00001.jsonl"]
    first = json.loads((out / "metadata-rank00001.jsonl").read_text().splitlines()[0])
    assert first == {"schema_version": 1, "iteration": 10, "microbatch": 0, "dp_rank": 1, "seq_lens": [3, 4],
                     "padded_tokens": 8, "image_grid_thw": [[2, 4, 4], [1, 2, 4]], "video_grid_thw": [[2, 10, 10]]}

    res = iteration_stats(out)
    assert res.frame["iteration"].to_list() == [10, 11]
    s = res.stats_for(10)
    n = 2 * 2  # 2 ranks x 2 microbatches
    assert s.lm_tokens == n * (3 + 4)
    assert s.lm_tokens_sq == n * (9 + 16)
    assert s.lm_padded_tokens == n * 8
    # images on every microbatch: (40 patches, 576, merged 10); video on rank 1 only: (200, 20000, 50)
    assert s.vision_patches == n * 40 + 2 * 200
    assert s.vision_patches_sq_frame == n * 576 + 2 * 20000
    assert s.vision_merged_tokens == n * 10 + 2 * 50
    assert s.video_patches == 2 * 200
    assert res.frame["microbatches"].to_list() == [4, 4]


def test_lists_and_file_path(tmp_path):
    target = tmp_path / "sub" / "meta.jsonl"
    w = MetadataWriter(target, rank=3)
    assert w.path == tmp_path / "sub" / "meta.rank00003.jsonl"
    w.record(1, seq_lens=[5, 6], image_grid_thw=[1, 4, 4])  # a single grid row given flat
    # line-buffered: visible before close
    assert json.loads(w.path.read_text())["image_grid_thw"] == [[1, 4, 4]]
    w.close()
    with pytest.raises(ValueError, match="closed"):
        w.record(2, seq_lens=[1])
    with MetadataWriter(tmp_path / "plain") as w2:
        assert w2.path.name == "metadata.jsonl"
        row = w2.record(1, seq_lens=7)
        assert row == {"schema_version": 1, "iteration": 1, "seq_lens": [7]}
    # appending, not truncating
    with MetadataWriter(tmp_path / "plain") as w3:
        w3.record(2, seq_lens=[1])
    assert len((tmp_path / "plain" / "metadata.jsonl").read_text().splitlines()) == 2


def test_record_rejects_bad_values(tmp_path):
    with MetadataWriter(tmp_path) as w:
        with pytest.raises(ValueError, match="not both"):
            w.record(1, seq_lens=[1], cu_seqlens=[0, 1])
        with pytest.raises(ValueError, match=r"\[t, h, w\]"):
            w.record(1, seq_lens=[1], image_grid_thw=[[1, 2]])
        with pytest.raises(ValueError, match="integer"):
            w.record(1.5, seq_lens=[1])


def test_numpy_arrays(tmp_path):
    np = pytest.importorskip("numpy")
    with MetadataWriter(tmp_path, rank=0) as w:
        w.record(np.int64(4), microbatch=np.int64(0), seq_lens=np.array([2, 2]),
                 video_grid_thw=np.array([[2, 2, 2]], dtype=np.int64))
    s = iteration_stats(tmp_path).stats_for(4)
    assert (s.lm_tokens, s.video_patches, s.vision_merged_tokens) == (4, 8, 2)
    assert "torch" not in sys.modules or True  # torch may be loaded by other tests; capture never needs it


# batch_metadata: the schema-v1 fields of one HF model call (used by MetadataCallback)
def test_batch_metadata_attention_mask_gives_real_tokens_per_row():
    np = pytest.importorskip("numpy")
    ids = np.zeros((3, 6), dtype=np.int64)
    mask = np.array([[1, 1, 1, 1, 1, 1], [1, 1, 1, 0, 0, 0], [0, 0, 0, 0, 0, 0]])
    out = batch_metadata({"input_ids": ids, "attention_mask": mask, "image_grid_thw": np.array([[1, 4, 4]])})
    assert out["seq_lens"] == [6, 3]  # the empty row is dropped
    assert (out["samples"], out["padded_tokens"]) == (3, 18)
    assert out["image_grid_thw"].tolist() == [[1, 4, 4]]


def test_batch_metadata_packed_position_ids_split_documents():
    np = pytest.importorskip("numpy")
    pos = np.array([[0, 1, 2, 0, 1, 0, 1, 2, 3]])  # TRL padding_free / DataCollatorWithFlattening
    out = batch_metadata({"input_ids": np.zeros((1, 9)), "position_ids": pos})
    assert out["seq_lens"] == [3, 2, 4]
    # with a mask of the same shape, masked positions are not documents
    mask = np.array([[1, 1, 1, 1, 1, 1, 1, 0, 0]])
    pos2 = np.array([[0, 1, 2, 0, 1, 0, 1, 0, 0]])
    assert batch_metadata({"input_ids": np.zeros((1, 9)), "position_ids": pos2, "attention_mask": mask})[
        "seq_lens"] == [3, 2, 2]


def test_batch_metadata_cu_seqlens_wins_and_unpacked_positions_fall_back():
    np = pytest.importorskip("numpy")
    out = batch_metadata({"input_ids": np.zeros((1, 10)), "cu_seq_lens_q": np.array([0, 4, 10]),
                          "position_ids": np.arange(10)[None]})
    assert out["cu_seqlens"].tolist() == [0, 4, 10] and "seq_lens" not in out
    # plain (unpacked) positions: no restart, so the mask / shape decides
    out = batch_metadata({"input_ids": np.zeros((2, 5)), "position_ids": np.tile(np.arange(5), (2, 1))})
    assert out["seq_lens"] == [5, 5]
    # 3-D M-RoPE positions are ignored for packing; the mask decides
    out = batch_metadata({"input_ids": np.zeros((1, 4)), "position_ids": np.zeros((3, 1, 4), dtype=int),
                          "attention_mask": np.array([[1, 1, 1, 0]])})
    assert out["seq_lens"] == [3]
    out = batch_metadata({"input_ids": np.zeros((1, 4)), "video_grid_thw": np.array([[2, 4, 4]]),
                          "image_grid_thw": None})
    assert out["video_grid_thw"].tolist() == [[2, 4, 4]] and "image_grid_thw" not in out
    out = batch_metadata({"inputs_embeds": np.zeros((2, 7, 16))})
    assert out == {"samples": 2, "padded_tokens": 14, "seq_lens": [7, 7]}


def test_metadata_callback_without_transformers_is_a_clear_import_error(monkeypatch):
    import vlm_perf.capture as cap

    monkeypatch.setitem(sys.modules, "transformers", None)  # as if not installed
    monkeypatch.delitem(sys.modules, "vlm_perf.capture_trainer", raising=False)
    with pytest.raises(ImportError, match="MetadataCallback needs torch and transformers"):
        cap.MetadataCallback  # noqa: B018
    assert "MetadataCallback" not in cap.__all__  # a star import never pulls in torch
    with pytest.raises(AttributeError):
        cap.NoSuchThing  # noqa: B018


def test_batch_metadata_fuzz_packed_and_padded_rows():
    """Random packed rows (position ids restarting per document, right padding masked out) and plain
    padded rows: the recorded lengths are exactly the documents / real tokens that were put in."""
    np = pytest.importorskip("numpy")
    from hypothesis import given, settings
    from hypothesis import strategies as st

    docs_rows = st.lists(st.lists(st.integers(1, 50), min_size=1, max_size=5), min_size=1, max_size=4)

    @settings(derandomize=True, deadline=None, max_examples=80)
    @given(docs_rows, st.integers(0, 7), st.booleans())
    def check(rows, pad, packed):
        length = max(sum(r) for r in rows) + pad
        pos = np.zeros((len(rows), length), dtype=np.int64)
        mask = np.zeros((len(rows), length), dtype=np.int64)
        for i, docs in enumerate(rows):
            if not packed:
                docs = [sum(docs)]
            seq = np.concatenate([np.arange(n) for n in docs])
            pos[i, :len(seq)] = seq
            mask[i, :len(seq)] = 1
        inputs = {"input_ids": np.zeros((len(rows), length)), "attention_mask": mask}
        if packed:
            inputs["position_ids"] = pos
        out = batch_metadata(inputs)
        expected = [n for docs in rows for n in docs] if packed else [sum(docs) for docs in rows]
        assert out["seq_lens"] == expected
        assert (out["samples"], out["padded_tokens"]) == (len(rows), len(rows) * length)

    check()


def test_parquet_shards_read_like_jsonl(tmp_path):
    """The writer's Parquet format is read by the same path and gives identical statistics."""
    from vlm_perf.ingest.metadata_source import MetadataSource

    for fmt in ("jsonl", "parquet"):
        for rank in (0, 1):
            with MetadataWriter(tmp_path / fmt, rank=rank, format=fmt) as w:
                for it in (1, 2):
                    w.record(it, microbatch=0, seq_lens=[5 + rank, 7], image_grid_thw=[[1, 4, 4]] * (rank + 1),
                             padded_tokens=16, loss=0.5)
    assert sorted(p.name for p in (tmp_path / "parquet").iterdir()) == ["metadata-rank00000.parquet",
                                                                       "metadata-rank00001.parquet"]
    a = MetadataSource(tmp_path / "jsonl", per_rank=True).read()
    b = MetadataSource(tmp_path / "parquet", per_rank=True).read()
    assert a.per_rank.equals(b.per_rank) and a.per_iteration.equals(b.per_iteration)
    # hand arithmetic: iteration 1 = rank 0 (one [1,4,4] image) + rank 1 (two): 3 * 16 patches
    assert a.per_iteration["vision_patches"].to_list() == [48, 48]
    assert MetadataWriter(tmp_path / "x.parquet").path == tmp_path / "x.parquet"
    with pytest.raises(ValueError, match="format must be"):
        MetadataWriter(tmp_path / "y", format="csv")
