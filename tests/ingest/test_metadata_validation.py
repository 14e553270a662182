"""Schema v1 validation: every broken rule -> ValueError naming file:line and the field;
``skip_bad`` counts by reason; a property test against the scalar reference."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from vlm_perf.ingest.metadata import iteration_stats
from vlm_perf.stats import BatchStats

FIXTURES = Path(__file__).parent / "fixtures" / "metadata"
GOOD = json.dumps({"iteration": 1, "seq_lens": [4], "image_grid_thw": [[1, 2, 2]]})

BAD_LINES = [
    ('{"seq_lens": [4]}', "iteration"),
    ('{"iteration": -1, "seq_lens": [4]}', "iteration"),
    ('{"iteration": "x", "seq_lens": [4]}', "iteration"),
    ('{"iteration": 1.5, "seq_lens": [4]}', "iteration"),
    ('{"iteration": 1, "microbatch": -2, "seq_lens": [4]}', "microbatch"),
    ('{"iteration": 1, "dp_rank": -1, "seq_lens": [4]}', "dp_rank"),
    ('{"iteration": 1, "schema_version": 3, "seq_lens": [4]}', "schema_version"),
    ('{"iteration": 1, "seq_lens": [4], "image_grid_thw": [[1, -2, 4]]}', "image_grid_thw: t, h, w must be positive"),
    ('{"iteration": 1, "seq_lens": [4], "image_grid_thw": [[0, 2, 4]]}', "image_grid_thw: t, h, w must be positive"),
    ('{"iteration": 1, "seq_lens": [4], "image_grid_thw": [[1, 3, 4]]}', "image_grid_thw: h and w must be divisible"),
    ('{"iteration": 1, "seq_lens": [4], "image_grid_thw": [[1, 4, 2], [1, 2, 5]]}', "image_grid_thw: h and w must"),
    ('{"iteration": 1, "seq_lens": [4], "image_grid_thw": [[1, 2]]}', "image_grid_thw: a grid row is not 3"),
    ('{"iteration": 1, "seq_lens": [4], "image_grid_thw": [[1, 2, 2, 2]]}', "image_grid_thw: a grid row is not 3"),
    ('{"iteration": 1, "seq_lens": [4], "image_grid_thw": [[1, null, 2]]}', "image_grid_thw: a grid row is not 3"),
    ('{"iteration": 1, "seq_lens": [4], "image_grid_thw": [null]}', "image_grid_thw: a grid row is not 3"),
    ('{"iteration": 1, "seq_lens": [4], "image_grid_thw": [[1, 2, "a"]]}', "image_grid_thw"),
    ('{"iteration": 1, "seq_lens": [4], "image_grid_thw": [[1, 2.5, 2]]}', "image_grid_thw"),
    ('{"iteration": 1, "seq_lens": [4], "image_grid_thw": [1, 2, 2]}', "image_grid_thw"),
    ('{"iteration": 1, "seq_lens": [4], "video_grid_thw": [[2, 2, 3]]}', "video_grid_thw: h and w must be divisible"),
    ('{"iteration": 1, "seq_lens": [4], "video_grid_thw": [[2, 2]]}', "video_grid_thw: a grid row is not 3"),
    ('{"iteration": 1, "seq_lens": [0]}', "seq_lens"),
    ('{"iteration": 1, "seq_lens": [3, -1]}', "seq_lens"),
    ('{"iteration": 1, "seq_lens": []}', "seq_lens"),
    ('{"iteration": 1, "seq_lens": [1.5]}', "seq_lens"),
    ('{"iteration": 1, "seq_lens": "abc"}', "seq_lens"),
    ('{"iteration": 1, "seq_lens": [5, 5], "padded_tokens": 9}', "padded_tokens"),
    ('{"iteration": 1, "padded_tokens": 0}', "padded_tokens"),
    ('{"iteration": 1, "padded_tokens": 8, "samples": 0}', "samples"),
    ('{"iteration": 1}', "lm_tokens"),
    ('{"iteration": 1, "lm_tokens": 5}', "lm_tokens"),
    ('{"iteration": 1, "seq_lens": [5], "lm_tokens": 5, "lm_tokens_sq": 25}', "lm_tokens"),
    ('{"iteration": 1, "seq_lens": [4], "vision_patches": 4}', "vision_patches"),
    ('{"iteration": 1, "seq_lens": [4], "image_grid_thw": [[1, 2, 2]], "vision_patches": 4, '
     '"vision_patches_sq": 16, "vision_merged_tokens": 1}', "vision_patches"),
    ("this is not json", "json"),
    ('{"iteration": 1, "seq_lens": [4]', "json"),
    ("[1, 2, 3]", "json"),
]


@pytest.mark.parametrize("line, field", BAD_LINES)
def test_bad_line_names_file_line_and_field(tmp_path, line, field):
    f = tmp_path / "meta.jsonl"
    f.write_text(GOOD + "\n\n" + GOOD + "\n" + line + "\n" + GOOD + "\n")  # the bad line is line 4
    with pytest.raises(ValueError) as info:
        iteration_stats(f)
    message = str(info.value)
    assert message.startswith(f"{f}:4: "), message
    assert field in message
    res = iteration_stats(f, skip_bad=True)
    d = res.diagnostics
    assert (d.rows_read, d.rows_used, d.rows_skipped_total) == (4, 3, 1)
    assert d.bad_lines[0].startswith(f"{f}:4: ")
    assert res.stats_for(1).vision_patches == 3 * 4  # three good rows of [1,2,2]


def test_valid_edge_cases(tmp_path):
    f = tmp_path / "meta.jsonl"
    f.write_text("\n".join([
        '{"iteration": 0, "seq_lens": [1], "image_grid_thw": [], "video_grid_thw": null, "unknown_key": [1, "x"]}',
        '{"iteration": 0, "padded_tokens": 10}',
        '   {"iteration": 0, "seq_lens": [2], "padded_tokens": 2}   ',
        '{"iteration": 0, "seq_lens": [3]}\r',
    ]))  # no trailing newline, CRLF, surrounding blanks
    s = iteration_stats(f).stats_for(0)
    assert (s.lm_tokens, s.lm_tokens_sq, s.lm_padded_tokens) == (1 + 10 + 2 + 3, 1 + 100 + 4 + 9, 1 + 10 + 2 + 3)


def test_skip_bad_fixture_counts_by_reason():
    f = FIXTURES / "bad.jsonl"
    with pytest.raises(ValueError, match=r"bad\.jsonl:2: image_grid_thw: h and w must be divisible"):
        iteration_stats(f)
    res = iteration_stats(f, skip_bad=True)
    d = res.diagnostics
    assert (d.rows_read, d.rows_used) == (5, 2)
    assert d.rows_skipped == {
        "image_grid_thw: h and w must be divisible by spatial_merge_size=2": 1,
        "json: not a JSON object matching schema v1 types": 1,
        "iteration: missing or negative": 1,
    }
    assert [b.split(": ")[0] for b in d.bad_lines] == [f"{f}:2", f"{f}:3", f"{f}:4"]
    assert res.frame["iteration"].to_list() == [1, 2]
    assert res.stats_for(1).vision_patches == 4 and res.stats_for(2).lm_tokens == 5
    assert d.cleaned == [str(f)]


def test_error_in_second_shard(tmp_path):
    (tmp_path / "a.jsonl").write_text(GOOD + "\n" + GOOD + "\n")
    (tmp_path / "b.jsonl").write_text(GOOD + "\n" + '{"iteration": 1, "seq_lens": [4], "image_grid_thw": [[1, 2, 3]]}\n')
    with pytest.raises(ValueError, match=r"b\.jsonl:2: image_grid_thw"):
        iteration_stats(tmp_path)
    (tmp_path / "b.jsonl").write_text(GOOD + "\n" + "{oops\n")
    with pytest.raises(ValueError, match=r"b\.jsonl:2: json"):
        iteration_stats(tmp_path)
    res = iteration_stats(tmp_path, skip_bad=True)
    assert res.diagnostics.rows_used == 3 and res.diagnostics.cleaned == [str(tmp_path / "b.jsonl")]


def test_bad_lines_are_capped(tmp_path):
    f = tmp_path / "m.jsonl"
    f.write_text("".join('{"iteration": 1, "seq_lens": [0]}\n' for _ in range(50)) + GOOD + "\n")
    d = iteration_stats(f, skip_bad=True).diagnostics
    assert d.rows_skipped_total == 50 and len(d.bad_lines) == 20
    assert d.bad_lines[0].startswith(f"{f}:1: seq_lens")


# --------------------------------------------------------------------------- property test
hypothesis = pytest.importorskip("hypothesis")
from hypothesis import given, settings, strategies as st  # noqa: E402

_grid = st.tuples(st.integers(1, 4), st.integers(1, 12).map(lambda v: 2 * v), st.integers(1, 12).map(lambda v: 2 * v))


def _holds_its_visual_tokens(row: dict) -> dict:
    """The first sequence holds the row's merged visual tokens (merge 2): an LM sequence counts every placeholder
    (the reader refuses a row with more visual tokens than LM tokens)."""
    visual = sum(t * (h // 2) * (w // 2) for t, h, w in row["image_grid_thw"] + row["video_grid_thw"])
    return {**row, "seq_lens": [row["seq_lens"][0] + visual, *row["seq_lens"][1:]]}


_row = st.fixed_dictionaries({
    "iteration": st.integers(0, 3),
    "seq_lens": st.lists(st.integers(1, 5000), min_size=1, max_size=5),
    "image_grid_thw": st.lists(_grid, max_size=3),
    "video_grid_thw": st.lists(_grid, max_size=2),
    "pad": st.integers(0, 100),
}).map(_holds_its_visual_tokens)


@settings(max_examples=25, deadline=None)
@given(rows=st.lists(_row, min_size=1, max_size=12), window=st.sampled_from([None, 4, 3]))
def test_property_matches_reference(tmp_path_factory, rows, window):
    f = tmp_path_factory.mktemp("prop") / "m.jsonl"
    with open(f, "w") as fh:
        for r in rows:
            out = {k: v for k, v in r.items() if k != "pad"}
            out["padded_tokens"] = sum(r["seq_lens"]) + r["pad"]
            fh.write(json.dumps(out) + "\n")
    res = iteration_stats(f, spec=type("S", (), {"vision": type("V", (), {
        "spatial_merge_size": 2, "window_side_merged": window})()})())
    for it in sorted({r["iteration"] for r in rows}):
        expected = BatchStats()
        for r in rows:
            if r["iteration"] == it:
                expected = expected + BatchStats.from_batch(
                    seq_lens=r["seq_lens"], image_grids=r["image_grid_thw"], video_grids=r["video_grid_thw"],
                    padded_tokens=sum(r["seq_lens"]) + r["pad"], merge_size=2, window_side=window)
        assert res.stats_for(it) == expected
