"""The log parse as map + combine (vlm_perf/ingest/logs/partial.py): any grouping of the merge
gives the single-pass result; merged diagnostics equal one sequential recording."""

from __future__ import annotations

import pickle
from unittest import mock

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mixed_logs import write_run
from vlm_perf.ingest.logs import Diagnostics, parse_logs
from vlm_perf.ingest.logs import diagnostics as diagnostics_module
from vlm_perf.ingest.logs.partial import (
    LogPartial,
    combine_partials,
    finish,
    merge_diagnostics,
    merge_partials,
    parse_file_partial,
)


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    files = write_run(tmp_path_factory.mktemp("mixed"))
    parts = [parse_file_partial(f, i) for i, f in enumerate(files)]
    return files, parts, parse_logs(files)


def same_result(got, ref) -> None:
    assert got.raw.equals(ref.raw) and got.raw.schema == ref.raw.schema
    assert got.deduplicated.equals(ref.deduplicated)
    assert got.iterations.equals(ref.iterations)
    assert got.diagnostics.to_dict() == ref.diagnostics.to_dict()
    assert got.run_config == ref.run_config


def test_the_run_is_not_trivial(run):
    files, parts, ref = run
    d = ref.diagnostics
    # segments: attempt1 before/after its banner (0, 1), attempt2 opens with a banner (2),
    # attempt3 steps back across files (3), its closing banner opens attempt4 (4), attempt5 opens
    # with a banner (5); progress.txt opens with "Starting job" (6); the HF console, LLaMA-Factory
    # and NeMo files each step back against the previous unlabelled record (7, 8, 9); torchtitan
    # ("rank0", a label not seen before) does not step back: stays in 9
    assert d.segments == 10 and d.duplicates == 3
    assert d.failed_count == 2 and d.partial_count == 1 and d.decode_errors == 2
    assert d.ignored["joined_continuation"] == 3  # the hard-wrapped record was rejoined
    assert len(d.formats_seen) == 6 and len(d.files) == len(files)
    assert any("nccl.log: skipped" in n for n in d.notes) and any("'ETA'" in n for n in d.notes)
    assert [p.empty for p in parts].count(1) == 1


def _group(items: list, cuts: list[int]) -> list[list]:
    bounds = [0, *sorted(set(c for c in cuts if 0 < c < len(items))), len(items)]
    return [items[a:b] for a, b in zip(bounds, bounds[1:])]


@settings(derandomize=True, deadline=None, max_examples=25)
@given(st.lists(st.integers(0, 12), max_size=6), st.lists(st.integers(0, 6), max_size=3))
def test_any_tree_of_merges_gives_the_single_pass_result(run, cuts, cuts2):
    """merge is associative and keeps file order: merging consecutive groups, then groups of
    those, then finishing once equals parse_logs over all files."""
    files, parts, ref = run
    level1 = [merge_partials(g) for g in _group(parts, cuts)]
    level2 = [merge_partials(g) for g in _group(level1, cuts2)]
    same_result(finish(merge_partials(level2)), ref)


def test_combine_is_what_parse_logs_returns(run):
    files, parts, ref = run
    same_result(combine_partials(parts), ref)
    same_result(combine_partials(pickle.loads(pickle.dumps(parts))), ref)  # partials travel as pickles
    buffers: list = []  # as Dask pickles them: protocol 5, buffers out of band
    blob = pickle.dumps(parts, protocol=5, buffer_callback=buffers.append)
    assert len(buffers) > len(parts)  # the record tables went out of band
    same_result(combine_partials(pickle.loads(blob, buffers=buffers)), ref)


# events a file's parse records into its Diagnostics (the methods the parser calls)
_EVENT = st.one_of(
    st.tuples(st.just("fail"), st.integers(0, 9)),
    st.tuples(st.just("partial"), st.integers(0, 9)),
    st.tuples(st.just("note"), st.sampled_from("abcdefg")),
    st.tuples(st.just("ignore"), st.sampled_from(["blank", "other", "traceback"]), st.integers(0, 5)),
    st.tuples(st.just("saw"), st.sampled_from(["megatron", "hf"]), st.integers(0, 5)),
    st.tuples(st.just("lines"), st.integers(0, 100)),
)


def _apply(diag: Diagnostics, file: int, event: tuple) -> None:
    kind = event[0]
    if kind == "fail":
        diag.fail(f"f{file}.log:{event[1]}")
    elif kind == "partial":
        diag.mark_partial(f"f{file}.log:{event[1]}")
    elif kind == "note":
        diag.note(f"note {event[1]}")
    elif kind == "ignore":
        diag.ignore(event[1], event[2])
    elif kind == "saw":
        diag.saw(event[1], event[2])
    else:
        diag.lines_read += event[1]


@settings(derandomize=True, deadline=None, max_examples=200)
@given(st.lists(st.lists(_EVENT, max_size=12), min_size=1, max_size=6), st.lists(st.integers(0, 6), max_size=4))
def test_merged_diagnostics_equal_one_sequential_recording(files, cuts):
    """With the location lists capped at 3 entries, per-file diagnostics merged in any grouping
    equal one Diagnostics that recorded every file's events in order (what a sequential pass
    records): counts exact, the first 3 locations and the first 3 distinct notes in file order."""
    with mock.patch.object(diagnostics_module, "MAX_LOCATIONS", 3):
        sequential = Diagnostics()
        per_file = []
        for k, events in enumerate(files):
            own = Diagnostics(files=[f"f{k}.log"])
            sequential.files.append(f"f{k}.log")
            for event in events:
                _apply(sequential, k, event)
                _apply(own, k, event)
            per_file.append(own)
        grouped = merge_diagnostics(merge_diagnostics(g) for g in _group(per_file, cuts))
        assert grouped.to_dict() == sequential.to_dict()
        assert len(grouped.failed) <= 3 and len(grouped.notes) <= 3


def test_first_error_in_file_order_wins(tmp_path, run):
    files, parts, _ = run
    missing = LogPartial(files=["gone.log"], error=ValueError("log file not found: gone.log"))
    other = LogPartial(files=["x"], error=ValueError("second"))
    merged = merge_partials([merge_partials(parts[:2]), missing, merge_partials([parts[2], other])])
    with pytest.raises(ValueError, match="^log file not found: gone.log$"):
        finish(merged)
    with pytest.raises(ValueError, match="log file not found"):
        parse_file_partial(tmp_path / "gone.log", 0)


def test_record_less_files(tmp_path):
    empty = tmp_path / "launcher.log"
    empty.write_text("hello\nworld\n")
    part = parse_file_partial(empty, 0)
    assert part.empty == 1 and not part.frames and part.diagnostics.lines_read == 2
    with pytest.raises(ValueError, match="launcher.log: no recognisable training-log record"):
        finish(part)  # alone: an error
    with pytest.raises(ValueError, match="none of 2 log files"):
        finish(merge_partials([part, parse_file_partial(empty, 1)]))
    res = finish(part, empty_ok=True)
    assert res.raw.height == 0 and res.diagnostics.notes == [f"{empty}: skipped, no training-log record (2 lines read)"]


def test_a_file_parses_the_same_at_any_position_in_the_run(tmp_path):
    """The ordering key is file-local. It used to be file index * 2**50 + line * 1000 + piece in
    a Float64 column: from the 9th file on a ``\\r``-piece lost its place (a banner printed before
    a record on the same line opened the segment one record late: a spurious restart), and from
    the 8193rd file on the key overflowed Int64 (a polars error instead of a result)."""
    from mixed_logs import BANNER, mline

    fillers = []
    for k in range(8):
        p = tmp_path / f"other{k}.log"
        p.write_text(mline(10 + k, 1.0, prefix="[other]:") + "\n")
        fillers.append(p)
    f = tmp_path / "r.log"
    f.write_text(mline(70, 1.2) + "\n" + BANNER.format(60) + "\r" + mline(61, 1.1) + "\n" + mline(62, 1.0) + "\n")
    # by the segment rules: 70; banner (and a step back) -> 61 opens a segment; 62 continues it
    for files in ([f], [*fillers, f]):
        rows = parse_logs(files).raw.filter(file=str(f))
        assert rows["iteration"].to_list() == [70, 61, 62]
        assert (rows["segment"] - rows["segment"][0]).to_list() == [0, 1, 1]
    far = parse_file_partial(f, 10_000)
    near = parse_file_partial(f, 0)
    assert far.first_file == 10_000 and far.frames[0].equals(near.frames[0])
    assert far.banner_rows == near.banner_rows == [[1]]  # the banner opens at the record after it


def test_partials_out_of_file_order_are_refused(run):
    files, parts, _ = run
    with pytest.raises(ValueError, match="out of file order: file 2 after files 0..0"):
        merge_partials([parts[0], parts[2]])
    with pytest.raises(ValueError, match="out of file order"):
        merge_partials([merge_partials(parts[2:4]), merge_partials(parts[:2])])


def test_dask_without_a_distributed_client(run):
    """``client=None`` and no distributed client: Dask's local scheduler runs the same map."""
    pytest.importorskip("dask")
    from vlm_perf.scale import parse_logs_dask

    files, _, ref = run
    same_result(parse_logs_dask(files), ref)
    same_result(parse_logs_dask(files, split_every=4), ref)
