"""Trace readers: the streamed Kineto JSON reader against json.load, chunk boundaries, errors, ranks,
folders, merge associativity; the Nsight SQLite reader against the rows written by hand."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import polars as pl
import pytest

from vlm_perf.errors import InputError
from vlm_perf.ingest.traces import kineto, merge_partials, read_trace, read_traces, trace_files

ROOT = Path(__file__).resolve().parents[2]
FIX = Path(__file__).parent / "fixtures" / "traces"
HTA = FIX / "hta_ddp_step5.json.gz"
REAL = ROOT / "sample_logs" / "qwen2-vl-tiny-trace" / "trace" / "rank0.pt.trace.json.gz"
NSYS = FIX / "nsys_tiny.sqlite"

_KEEP = {"cpu_op", "user_annotation", "cuda_runtime", "cuda_driver", "kernel", "gpu_memcpy", "gpu_memset",
         "gpu_user_annotation"}


def _reference(path: Path) -> list[tuple]:
    """What the reader must keep, from json.load (independent of the streaming scanner)."""
    data = json.load(gzip.open(path) if path.suffix == ".gz" else open(path))
    out = []
    for e in data["traceEvents"]:
        if e.get("ph") != "X":
            continue
        cat = e.get("cat")
        if cat in _KEEP or (cat == "python_function" and e["name"].startswith("nn.Module: ")):
            a = e.get("args", {})
            start = round(e["ts"] * 1000)
            out.append((e["name"], start, start + round(e.get("dur", 0) * 1000), a.get("External id", -1),
                        a.get("correlation", -1), a.get("Sequence number", -1)))
    return out


def _rows(events: pl.DataFrame) -> list[tuple]:
    return list(events.select("name", "start", "end", "ext", "corr", "seq").iter_rows())



@pytest.mark.parametrize("path", [HTA, REAL], ids=["hta-gpu", "real-cpu"])
def test_streamed_equals_json_load(path, kineto_decoder):
    part = read_trace(path)
    part.raise_error()
    assert _rows(part.events) == _reference(path)


def test_chunk_boundaries_do_not_matter(monkeypatch, tmp_path, kineto_decoder):
    ref = _rows(read_trace(HTA).events)
    for chunk in (7, 333, 4096):
        monkeypatch.setattr(kineto, "CHUNK", chunk)
        assert _rows(read_trace(HTA).events) == ref


def test_plain_json_metadata_after_events_and_rank(tmp_path):
    events = [{"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": 1, "tid": 1, "ts": 1.5, "dur": 2.25,
               "args": {"External id": 3}}]
    p = tmp_path / "trace.json"
    p.write_text(json.dumps({"traceEvents": events, "distributedInfo": {"rank": 5, "world_size": 8}}))
    part = read_trace(p)
    part.raise_error()
    ev = part.events
    assert ev["rank"].to_list() == [5]
    assert (ev["start"][0], ev["end"][0]) == (1500, 3750)


def test_rank_from_file_name_and_position(tmp_path):
    body = json.dumps({"traceEvents": [{"ph": "X", "cat": "cpu_op", "name": "x", "pid": 1, "tid": 1, "ts": 0,
                                        "dur": 1}]})
    (tmp_path / "worker_rank3.json").write_text(body)
    (tmp_path / "other.json").write_text(body)
    merged = read_traces(tmp_path)
    ranks = dict(zip([Path(f).name for f in merged.files], [m["rank"] for m in merged.meta]))
    assert ranks == {"other.json": 0, "worker_rank3.json": 3}
    assert any("rank 0" in n for n in merged.notes)


@pytest.mark.parametrize("text, message", [
    ('{"traceEvents": [{"ph": "X", "name": "a", "ts": 1', "truncated"),
    ('{"traceEvents": [{"ph": "X", "name": "a", "ts": 1}, {"ph": ]}', "invalid JSON"),
    ('{"other": 1}', "no traceEvents"),
    ("", "empty file"),
    ("[1, 2]", "expected '{'"),
    ('{"traceEvents": [{"ph": "X", "cat": "cpu_op", "name": "a", "ts": "x"}, {"ph": "X"}]}', "not a number"),
])
def test_bad_files_give_one_line_errors(tmp_path, text, message, kineto_decoder):
    p = tmp_path / "bad.json"
    p.write_text(text)
    with pytest.raises(InputError) as exc:
        read_traces(p)
    assert message in str(exc.value) and str(p) in str(exc.value)
    assert "\n" not in str(exc.value)


def test_truncated_gzip(tmp_path):
    data = gzip.open(HTA).read()
    p = tmp_path / "cut.json.gz"
    p.write_bytes(gzip.compress(data[: len(data) // 2]))
    with pytest.raises(InputError, match="truncated"):
        read_traces(p)


def test_missing_and_empty_folder(tmp_path):
    with pytest.raises(InputError, match="no such trace file"):
        trace_files(tmp_path / "nope.json")
    with pytest.raises(InputError, match="no trace files"):
        trace_files(tmp_path)


def test_merge_is_associative():
    parts = [read_trace(HTA, 0), read_trace(NSYS, 1), read_trace(REAL, 2)]
    a = merge_partials([merge_partials(parts[:2]), parts[2]])
    b = merge_partials([parts[0], merge_partials(parts[1:])])
    c = merge_partials(parts)
    assert a.files == b.files == c.files
    assert a.events.equals(b.events) and b.events.equals(c.events)


def test_nsys_reader_rows():
    part = read_trace(NSYS)
    part.raise_error()
    ev = part.events
    kernels = ev.filter(pl.col("kind") == "kernel").sort("start")
    assert kernels.select("name", "start", "end", "corr", "pid", "tid").rows() == [
        ("sm90_xmma_gemm_bf16bf16_vision", 150, 350, 1, 0, 7), ("flash_fwd_kernel", 450, 550, 2, 0, 7),
        ("sm90_xmma_gemm_bf16bf16_mlp", 650, 850, 3, 0, 7),
        ("ncclDevKernel_AllReduce_Sum_bf16_RING_LL", 800, 950, 4, 0, 21)]
    runtime = ev.filter(pl.col("kind") == "runtime")
    assert set(runtime.select("pid", "tid").rows()) == {(7, 9)}  # globalTid decoded
    assert sorted(runtime["corr"].to_list()) == [1, 2, 3, 4, 5]
    nvtx = ev.filter(pl.col("kind") == "annotation").sort("start", "end")
    # textId resolved through StringIds; the instant mark (end NULL) is not a range
    assert nvtx["name"].to_list() == ["step 1", "vision_tower", "self_attention", "language_model", "mlp"]


def test_nsys_not_an_export(tmp_path):
    import sqlite3

    p = tmp_path / "x.sqlite"
    sqlite3.connect(p).execute("CREATE TABLE t (a)").connection.commit()
    with pytest.raises(InputError, match="not an Nsight Systems export"):
        read_traces(p)


def test_odd_but_valid_events_same_on_both_paths(tmp_path, monkeypatch):
    """Strings for ids, null dur, a "}," inside a name, args that are not an object: both paths agree."""
    events = [
        {"ph": "X", "cat": "cpu_op", "name": "a},{b", "pid": "1", "tid": 2, "ts": 1, "dur": None,
         "args": {"External id": "7"}},
        {"ph": "X", "cat": "kernel", "name": "k", "pid": 0, "tid": 7, "ts": 2.5, "dur": 1,
         "args": {"correlation": 3, "Comms Id": 2 ** 70}},
        {"ph": "X", "cat": "cpu_op", "name": "c", "pid": 1, "tid": 1, "ts": 3, "dur": 1, "args": [1]},
        {"ph": "i", "name": "instant", "ts": 4},
    ]
    p = tmp_path / "odd.json"
    p.write_text(json.dumps({"traceEvents": events * 50}))
    out = []
    for fast in ([], [None]):
        monkeypatch.setattr(kineto, "_FAST", fast)
        monkeypatch.setattr(kineto, "CHUNK", 97)
        part = read_trace(p)
        part.raise_error()
        out.append(part.events.rows())
    assert out[0] == out[1]
    assert out[0][0][2:] == ("a},{b", 1, 2, 1000, 1000, 7, -1, -1, -1, 0)


def test_matmul_flops_from_recorded_shapes(tmp_path, kineto_decoder):
    """2*m*k*n per multiply-add, worked by hand; the bias of addmm/baddbmm is not a matmul; bad shapes -> 0."""
    ops = [("aten::mm", [[3, 4], [4, 5]], 2 * 3 * 4 * 5), ("aten::addmm", [[5], [3, 4], [4, 5]], 2 * 3 * 4 * 5),
           ("aten::bmm", [[2, 3, 4], [2, 4, 5]], 2 * 2 * 3 * 4 * 5),
           ("aten::baddbmm", [[2, 3, 5], [2, 3, 4], [2, 4, 5]], 2 * 2 * 3 * 4 * 5),
           ("aten::mm", [[3, 4], [7, 5]], 0), ("aten::mm", [[3, 4]], 0), ("aten::add", [[3, 4], [3, 4]], 0)]
    events = [{"ph": "X", "cat": "cpu_op", "name": n, "pid": 1, "tid": 1, "ts": i, "dur": 1,
               "args": {"Input Dims": d}} for i, (n, d, _) in enumerate(ops)]
    p = tmp_path / "mm.json"
    p.write_text(json.dumps({"traceEvents": events}))
    part = read_trace(p)
    part.raise_error()
    assert part.events["flops"].to_list() == [f for _, _, f in ops]


def test_fast_path_is_really_taken():
    """The msgspec path must decode real traces itself (a silent fallback would hide a broken fast path)."""
    pytest.importorskip("msgspec")
    from vlm_perf.ingest.traces.events import EventBuilder

    fast = kineto._fast_decoder() if kineto._FAST and kineto._FAST[0] is not None else None
    if fast is None:
        kineto._FAST.clear()
        fast = kineto._fast_decoder()
    for path in (REAL, HTA):
        events = json.load(gzip.open(path))["traceEvents"]
        text = ",\n".join(json.dumps(e) for e in events[:2000]) + ","
        b = EventBuilder()
        assert kineto._fast_batch(fast, text, 0, b) == len(text) - 1
        assert len(b) > 0
