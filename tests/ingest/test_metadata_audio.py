"""Schema v2 ``audio_frames`` (mel frames per audio clip of a microbatch): statistics per row equal
``BatchStats.from_batch(audio_frames=...)`` (one audio-encoder call per microbatch), summed per iteration; bad
entries and audio for a model without an audio encoder are typed errors naming file:line."""

from __future__ import annotations

import json

import pytest

from vlm_perf.arch import load_model
from vlm_perf.errors import VlmPerfError
from vlm_perf.ingest.metadata_source import MetadataSource
from vlm_perf.stats import BatchStats

AUDIO_FIELDS = [f for f in BatchStats.field_names() if f.startswith("audio_")]


def _write(tmp_path, rows, name="m.jsonl"):
    path = tmp_path / name
    path.write_text("".join(json.dumps({"schema_version": 2, "dp_rank": 0, **r}) + "\n" for r in rows))
    return path


@pytest.mark.parametrize("model", ["qwen3-omni-30b-a3b", "qwen2.5-omni-7b"])
def test_rows_equal_one_encoder_call_each(tmp_path, model):
    spec = load_model(model)
    rows = [dict(iteration=0, microbatch=0, seq_lens=[900], image_grid_thw=[[1, 32, 32]], audio_frames=[950, 120]),
            dict(iteration=0, microbatch=1, seq_lens=[700], audio_frames=[300]),
            dict(iteration=1, microbatch=0, seq_lens=[500])]
    frame = MetadataSource([_write(tmp_path, rows)], spec).per_iteration.sort("iteration")
    expected = (BatchStats.from_batch(seq_lens=[900], image_grids=[(1, 32, 32)], audio_frames=[950, 120], spec=spec)
                + BatchStats.from_batch(seq_lens=[700], audio_frames=[300], spec=spec))
    got = frame.row(0, named=True)
    assert {f: got[f] for f in AUDIO_FIELDS} == {f: getattr(expected, f) for f in AUDIO_FIELDS}
    assert all(frame.row(1, named=True)[f] == 0 for f in AUDIO_FIELDS)
    # not the same as one call over all three clips (the chunk padding and windows are per call)
    one_call = BatchStats.from_batch(seq_lens=[1600], audio_frames=[950, 120, 300], spec=spec)
    assert one_call.audio_items == expected.audio_items


@pytest.mark.parametrize("bad", [[300, -4], [0], [None], [1 << 27]])
def test_bad_audio_entry_names_file_and_line(tmp_path, bad):
    rows = [dict(iteration=0, microbatch=0, seq_lens=[900]),
            dict(iteration=0, microbatch=1, seq_lens=[700], audio_frames=bad)]
    path = _write(tmp_path, rows)
    with pytest.raises(VlmPerfError, match=rf"{path.name}:2: audio_frames: must be a list of positive integers"):
        MetadataSource([path], load_model("qwen3-omni-30b-a3b")).per_iteration


@pytest.mark.parametrize("model", ["qwen2.5-vl-7b", "qwen3-30b-a3b", None])
def test_audio_without_an_audio_encoder_is_refused(tmp_path, model):
    path = _write(tmp_path, [dict(iteration=0, microbatch=0, seq_lens=[700], audio_frames=[300])])
    with pytest.raises(VlmPerfError, match=rf"{path.name}:1: audio_frames: the row has audio clips but the model "
                                           "has no audio encoder"):
        MetadataSource([path], load_model(model) if model else None).per_iteration


def test_skip_bad_counts_the_audio_rows(tmp_path):
    rows = [dict(iteration=0, microbatch=0, seq_lens=[900]),
            dict(iteration=0, microbatch=1, seq_lens=[700], audio_frames=[300])]
    src = MetadataSource([_write(tmp_path, rows)], load_model("qwen2.5-vl-7b"), skip_bad=True)
    assert src.per_iteration.row(0, named=True)["lm_tokens"] == 900
    assert any("no audio encoder" in k for k in src.diagnostics.rows_skipped)
