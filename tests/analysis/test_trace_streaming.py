"""Traces at production size: the streamed reader and the bounded-memory attribution equal the whole-file path.

* whole-file path = ``json.load`` of the file, the documented keep rules applied event by event (`_whole_file`),
  attributed by the event-by-event engine as it was before the bounded-memory one (tests/analysis/trace_reference.py);
* streamed path = `read_trace` (1 MiB chunks, or tiny ones here to cut events anywhere) + `trace_attribute`.

On real traces (a public GPU DDP trace, the bundled real CPU trace), on a synthetic real-shaped Kineto trace
(benchmarks/trace_gen.py: multi-line events, python_function stacks, NCCL, memcpy / memset, flows), plain and gz,
and on seeded hypothesis-fuzzed traces, every table is equal. Truncated or hostile files give one-line errors
naming the file. Per-rank files analysed by worker processes give the sequential result.
"""

from __future__ import annotations

import gzip
import importlib.util
import json
import sys
from pathlib import Path

import polars as pl
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from vlm_perf.analysis import trace_attribute
from vlm_perf.analysis.trace_attribute import attribute
from vlm_perf.analysis.trace_parts import analyze_traces
from vlm_perf.analysis.trace_ranks import analyze_trace_files
from vlm_perf.errors import InputError
from vlm_perf.ingest.traces import kineto, read_trace, read_traces
from vlm_perf.ingest.traces.events import KINDS, matmul_flops

ROOT = Path(__file__).resolve().parents[2]
HTA = ROOT / "tests" / "ingest" / "fixtures" / "traces" / "hta_ddp_step5.json.gz"
REAL = ROOT / "sample_logs" / "qwen2-vl-tiny-trace" / "trace" / "rank0.pt.trace.json.gz"
FUZZ = settings(derandomize=True, deadline=None, database=None, max_examples=40,
                suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
TABLES = ("parts", "steps", "top", "shape_flops", "attention_ops")

sys.path.insert(0, str(Path(__file__).parent))
import trace_reference  # noqa: E402  (the oracle: the event-by-event engine)


def _load(name: str, path: Path):
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)  # type: ignore[arg-type]
    spec.loader.exec_module(module)  # type: ignore[union-attr]
    return module


trace_gen = _load("trace_gen", ROOT / "benchmarks" / "trace_gen.py")

# the documented categories (docs/traces.md) -> kinds
_CATS = {"cpu_op": "cpu_op", "user_annotation": "annotation", "cuda_runtime": "runtime", "cuda_driver": "runtime",
         "kernel": "kernel", "gpu_memcpy": "memcpy", "gpu_memset": "memset", "gpu_user_annotation": "gpu_annotation",
         "python_function": "module", "Kernel": "kernel", "Memcpy": "memcpy", "Memset": "memset",
         "Runtime": "runtime", "Operator": "cpu_op"}


def _as_int(value, default: int) -> int:
    if value is None:
        return default
    if type(value) is int:
        return value
    try:
        return int(value)
    except (TypeError, ValueError):
        return default


def _whole_file(path: Path, rank: int) -> pl.DataFrame:
    """The event table from json.load of the whole file, one event at a time."""
    data = json.load(gzip.open(path) if path.name.endswith(".gz") else open(path))
    rows = []
    for e in data["traceEvents"]:
        if not isinstance(e, dict) or e.get("ph") != "X" or _CATS.get(e.get("cat")) is None or e.get("ts") is None:
            continue
        kind, name = _CATS[e["cat"]], e.get("name", "")
        if kind == "module" and not name.startswith("nn.Module: "):
            continue
        a = e["args"] if isinstance(e.get("args"), dict) else {}
        start = round(float(e["ts"]) * 1000)
        end = start + (0 if e.get("dur") is None else round(float(e["dur"]) * 1000))
        rows.append((rank, kind, name, _as_int(e.get("pid"), 0), _as_int(e.get("tid"), 0), start, end,
                     _as_int(a.get("External id"), -1), _as_int(a.get("correlation"), -1),
                     _as_int(a.get("Sequence number"), -1), _as_int(a.get("Fwd thread id"), -1),
                     matmul_flops(name, a.get("Input Dims")) if name in ("aten::mm", "aten::addmm", "aten::bmm",
                                                                          "aten::baddbmm") else 0))
    schema = {"rank": pl.Int64, "kind": pl.String, "name": pl.String, **{c: pl.Int64 for c in (
        "pid", "tid", "start", "end", "ext", "corr", "seq", "fwd_tid", "flops")}}
    return pl.DataFrame(rows, schema=schema, orient="row").with_columns(pl.col("kind").cast(pl.Enum(list(KINDS))))


def _same(a, b) -> None:
    for name in TABLES:
        assert getattr(a, name).equals(getattr(b, name)), name
    assert a.notes == b.notes


def _streamed(path: Path) -> pl.DataFrame:
    part = read_trace(path)
    part.raise_error()
    return part.events



@pytest.fixture(scope="module")
def synthetic(tmp_path_factory) -> dict[str, Path]:
    """Two whole steps of the synthetic real-shaped trace (small model), plain and gz, rank 3."""
    folder = tmp_path_factory.mktemp("synthetic")
    out = {}
    for name in ("rank3.json", "rank3.json.gz"):
        trace_gen.write_trace(folder / name, 400_000, seed=7, rank=3, vision_blocks=2, layers=3)
        out[name] = folder / name
    return out


@pytest.mark.parametrize("which", ["hta-gpu", pytest.param("real-cpu", marks=pytest.mark.slow), "synthetic",
                                   "synthetic-gz"])
def test_streamed_equals_whole_file_table_and_attribution(which, synthetic, kineto_decoder, monkeypatch):
    path = {"hta-gpu": HTA, "real-cpu": REAL, "synthetic": synthetic["rank3.json"],
            "synthetic-gz": synthetic["rank3.json.gz"]}[which]
    monkeypatch.setattr(kineto, "CHUNK", 4093)  # events cut at every kind of place
    monkeypatch.setattr(trace_attribute, "WINDOW", 97)  # host events walked in many windows
    streamed = _streamed(path)
    whole = _whole_file(path, int(streamed["rank"][0]))
    assert streamed.equals(whole)
    _same(attribute(streamed, 1), trace_reference.attribute(whole, 1))


def test_the_synthetic_trace_is_real_shaped(synthetic):
    """What the benchmark's 1 GB trace is made of: every kind of event, attributed to the model's parts."""
    events = _streamed(synthetic["rank3.json"])
    assert set(events["kind"].cast(pl.String).unique()) == set(KINDS)
    result = analyze_traces(read_traces(synthetic["rank3.json"]))
    parts = set(result.parts["part"])
    assert {"vision_tower.attention", "vision_tower.mlp", "projector", "language_model.attention",
            "language_model.mlp", "language_model.head", "communication.all_reduce", "memory_copy", "memset",
            "optimizer"} <= parts
    assert result.check_sums() == 0.0
    assert result.steps["overlap_ns"].sum() > 0  # the all-reduce runs under backward compute


# ------------------------------------------------------------------------------------------- fuzzed traces
_NAMES = ["aten::mm", "aten::addmm", "aten::add", "aten::linear", "nn.Module: Qwen2VLVisionBlock_0",
          "nn.Module: Qwen2MLP_1", "nn.Module: Qwen2VLAttention_0", "nn.Module: PatchMerger_0",
          "torch/nn/modules/module.py(1747): _call_impl", "ProfilerStep#0", "ProfilerStep#1",
          "autograd::engine::evaluate_function: AddmmBackward0", "enumerate(DataLoader)#_SingleProcess",
          "ncclDevKernel_AllReduce_Sum_bf16_RING_LL", "sm90_xmma_gemm", "Memcpy HtoD", "cudaLaunchKernel",
          "a},{\"b\": [1]", "naïve ✓"]
_ids = st.one_of(st.integers(-3, 40), st.none(), st.sampled_from(["7", "x"]))
_args = st.fixed_dictionaries({}, optional={
    "External id": _ids, "correlation": _ids, "Sequence number": _ids, "Fwd thread id": _ids,
    "Input Dims": st.sampled_from([[[3, 4], [4, 5]], [[5], [3, 4], [4, 5]], [[2, 3]], "x"]),
    "other": st.sampled_from([[1, {"}, {": 2}], "}, {", 1.5])})
_event = st.fixed_dictionaries({
    "ph": st.sampled_from(["X", "X", "X", "X", "s", "f", "M", "i"]),
    "cat": st.sampled_from([*_CATS, "ac2g", "fwdbwd", "Trace", None]),
    "name": st.sampled_from(_NAMES),
    "pid": st.one_of(st.integers(0, 3), st.sampled_from(["Spans", "7"])),
    "tid": st.one_of(st.integers(0, 3), st.just("PyTorch Profiler")),
    "ts": st.one_of(st.integers(0, 5000).map(lambda x: x / 8), st.integers(0, 5000), st.none()),
}, optional={"dur": st.one_of(st.integers(0, 800).map(lambda x: x / 4), st.none()), "args": st.one_of(_args,
                                                                                                       st.just([1]))})


def _write(path: Path, events: list, multiline: bool, meta_after: bool) -> None:
    body = (",\n".join("  " + json.dumps(e, indent=2 if multiline else None, ensure_ascii=False) for e in events))
    head = '{"schemaVersion": 1, "distributedInfo": {"rank": 2, "world_size": 4},\n' if not meta_after else "{"
    tail = ',\n "distributedInfo": {"rank": 2}}' if meta_after else "}"
    text = f'{head}"traceEvents": [\n{body}\n]{tail}'
    if path.name.endswith(".gz"):
        path.write_bytes(gzip.compress(text.encode()))
    else:
        path.write_text(text, encoding="utf-8")


@pytest.mark.slow
@FUZZ
@given(events=st.lists(_event, min_size=1, max_size=60), multiline=st.booleans(), meta_after=st.booleans(),
       gz=st.booleans(), chunk=st.sampled_from([61, 509, 1 << 20]))
def test_fuzzed_traces_streamed_equals_whole_file(tmp_path, monkeypatch, events, multiline, meta_after, gz, chunk):
    path = tmp_path / ("fuzz.json.gz" if gz else "fuzz.json")
    _write(path, events, multiline, meta_after)
    monkeypatch.setattr(kineto, "CHUNK", chunk)
    tables = []
    for fast in ([], [None]):  # the msgspec columns / rows path, the stdlib path
        monkeypatch.setattr(kineto, "_FAST", fast)
        part = read_trace(path)
        part.raise_error()
        tables.append(part.events)
    whole = _whole_file(path, 2)
    assert tables[0].equals(whole) and tables[1].equals(whole)
    kept = whole.filter(pl.col("end") >= pl.col("start"))
    if kept.height:
        _same(attribute(kept, 1), trace_reference.attribute(kept, 1))


@pytest.mark.slow
@FUZZ
@given(cut=st.floats(0.0, 0.999), gz=st.booleans(), junk=st.sampled_from(["", "]]}", "\x00\xff", "{\"ph\": 1e999}"]))
def test_truncated_or_hostile_files_give_one_line_errors_naming_the_file(tmp_path, synthetic, cut, gz, junk):
    text = synthetic["rank3.json"].read_bytes()
    data = text[:int(len(text) * cut)] + junk.encode("utf-8", "surrogateescape")
    path = tmp_path / ("rank3.json.gz" if gz else "rank3.json")
    path.write_bytes(gzip.compress(data)[:-7] if gz and cut > 0.5 else gzip.compress(data) if gz else data)
    part = read_trace(path)
    assert isinstance(part.error, InputError)
    message = str(part.error)
    assert "\n" not in message and str(path) in message
    with pytest.raises(InputError) as err:
        analyze_trace_files([path], workers=1)
    assert str(err.value) == message


# ----------------------------------------------------------------------------------------- many ranks
@pytest.fixture(scope="module")
def ranks(tmp_path_factory) -> list[Path]:
    folder = tmp_path_factory.mktemp("ranks")
    paths = []
    for rank in range(3):
        path = folder / (f"rank{rank}.pt.trace.json" + (".gz" if rank == 1 else ""))
        trace_gen.write_trace(path, 350_000, seed=rank, rank=rank, vision_blocks=2, layers=2)
        paths.append(path)
    return paths


def test_per_rank_files_in_this_process_equal_the_sequential_result(ranks):
    _same(analyze_trace_files(ranks, workers=1), analyze_traces(read_traces(ranks)))


@pytest.mark.slow
def test_per_rank_files_in_worker_processes_equal_the_sequential_result(ranks):
    sequential = analyze_traces(read_traces(ranks), first_iteration=5, peak_flops=989e12)
    parallel = analyze_trace_files(ranks, workers=2, first_iteration=5, peak_flops=989e12)
    _same(parallel, sequential)
    assert parallel.summary().equals(sequential.summary())


def test_a_rank_spread_over_two_files_takes_the_sequential_path(tmp_path, ranks):
    """Two files of one rank (its steps split): attributed together, exactly as the sequential path does."""
    events = json.loads(ranks[0].read_text())
    first, second = dict(events), dict(events)
    steps = [e for e in events["traceEvents"] if e.get("name", "").startswith("ProfilerStep#")]
    cut = steps[1]["ts"]
    first["traceEvents"] = [e for e in events["traceEvents"] if e.get("ts", 0) < cut]
    second["traceEvents"] = [e for e in events["traceEvents"] if e.get("ts", 0) >= cut]
    paths = [tmp_path / "a.json", tmp_path / "b.json"]
    for p, d in zip(paths, (first, second)):
        p.write_text(json.dumps(d))
    _same(analyze_trace_files(paths, workers=1), analyze_traces(read_traces(paths)))


def test_two_copies_of_one_rank_are_refused_on_both_paths(tmp_path, ranks):
    copy = tmp_path / "copy_rank0.json"
    copy.write_bytes(ranks[0].read_bytes())
    for run in (lambda: analyze_traces(read_traces([ranks[0], copy])),
                lambda: analyze_trace_files([ranks[0], copy], workers=1)):
        with pytest.raises(InputError, match="two copies of one rank's trace"):
            run()


@pytest.mark.slow
def test_per_rank_files_on_dask_workers_equal_the_sequential_result(ranks):
    distributed = pytest.importorskip("distributed")
    with distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None,
                                  silence_logs=50) as cluster, distributed.Client(cluster) as client:
        parallel = analyze_trace_files(ranks, client=client)
    _same(parallel, analyze_traces(read_traces(ranks)))


def test_kernel_names_holding_brace_comma_keep_the_fast_path(synthetic, monkeypatch):
    """Real kernel names contain ``}, `` (``{lambda(float)#1}, at::detail::Array<...>``): a batch must end at an event
    boundary, not inside such a name, or the whole chunk would fall back to event-by-event decoding."""
    pytest.importorskip("msgspec")
    calls = []

    class Counting(json.JSONDecoder):
        def raw_decode(self, s, idx=0):
            calls.append(idx)
            return super().raw_decode(s, idx)

    monkeypatch.setattr(kineto, "_FAST", [])
    monkeypatch.setattr(kineto.json, "JSONDecoder", Counting)
    monkeypatch.setattr(kineto, "CHUNK", 1 << 14)  # many batches
    text = synthetic["rank3.json"].read_text()
    assert "}, at::detail::Array" in text
    events = _streamed(synthetic["rank3.json"])
    batches = len(text) // (1 << 14)
    # the stdlib decodes the top-level keys and about the one event cut at each batch's end
    assert len(calls) < batches + 25, (len(calls), events.height)  # 61 for 42 batches; 125 before the fix


@pytest.mark.slow
def test_the_trace_command_takes_worker_processes_for_large_inputs_with_the_same_output(ranks, monkeypatch):
    """`vlm-perf trace` analyses per-rank files in worker processes once they are `PARALLEL_BYTES` together (here
    lowered to 0 bytes); its JSON equals the one-process run's, byte for byte."""
    import json

    import vlm_perf.analysis.trace_ranks as trace_ranks
    from tests.support import invoke_cli

    calls = []
    real = trace_ranks.analyze_trace_files
    monkeypatch.setattr(trace_ranks, "analyze_trace_files", lambda *a, **k: calls.append(k) or real(*a, **k))
    one = invoke_cli("trace", *ranks, "--json")
    assert one.exit_code == 0, one.output
    assert calls == [] and not trace_ranks.worth_parallel(ranks)  # small files: the command's own process
    monkeypatch.setattr(trace_ranks, "PARALLEL_BYTES", 0)
    assert trace_ranks.worth_parallel(ranks) and not trace_ranks.worth_parallel(ranks[:1])
    many = invoke_cli("trace", *ranks, "--json")
    assert many.exit_code == 0, many.output
    assert len(calls) == 1 and "client" not in calls[0]  # worker processes (no cluster)
    assert json.loads(many.stdout) == json.loads(one.stdout)
