"""The per-file map / merge of the trace readers is what a Dask run executes: partials survive a pickle
round trip (how they cross worker boundaries) and a Dask map + tree of merges equals the sequential read."""

from __future__ import annotations

import pickle
from pathlib import Path

import pytest

from vlm_perf.ingest.traces import merge_partials, read_trace, read_traces, trace_files

FIX = Path(__file__).parent / "fixtures" / "traces"
REAL = Path(__file__).resolve().parents[2] / "sample_logs" / "qwen2-vl-tiny-trace" / "trace"
FILES = [FIX / "hta_ddp_step5.json.gz", FIX / "nsys_tiny.sqlite", REAL]


def test_partials_pickle_round_trip():
    part = read_trace(FILES[0])
    back = pickle.loads(pickle.dumps(part, protocol=5))
    assert back.events.equals(part.events) and back.meta == part.meta and back.files == part.files


def test_dask_map_and_tree_merge_equal_sequential():
    dask = pytest.importorskip("dask")
    files = trace_files(FILES)
    mapped = [dask.delayed(read_trace)(f, i) for i, f in enumerate(files)]
    tree = dask.delayed(merge_partials)([dask.delayed(merge_partials)(mapped[:2]),
                                         dask.delayed(merge_partials)(mapped[2:])])
    got = tree.compute(scheduler="threads")
    want = read_traces(FILES)
    assert got.files == want.files and got.events.equals(want.events)
