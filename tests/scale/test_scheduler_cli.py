"""``--scheduler``: the commands that read a run give the single-machine answer on a Dask cluster.

One local cluster (2 worker processes, 1 thread each) serves the module; the commands join it by its
address, and one test starts its own with ``--scheduler local:2`` (the form a user types).
The reference is always the same command without ``--scheduler``, run here, never a stored number.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

pytest.importorskip("dask")
distributed = pytest.importorskip("distributed")

from vlm_perf.cli import main  # noqa: E402
from vlm_perf.errors import ClusterError, ConfigError  # noqa: E402
from vlm_perf.scale import cluster as cluster_mod  # noqa: E402

SAMPLES = sorted(p for p in (Path(__file__).resolve().parents[2] / "sample_logs").iterdir() if p.is_dir())


@pytest.fixture(scope="module")
def address():
    import dask

    # allowed-failures 0: a task whose worker dies fails at once (the worker-failure test below); the nanny
    # restarts the worker, so the cluster stays usable
    with dask.config.set({"distributed.scheduler.allowed-failures": 0}):
        with distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None,
                                      silence_logs=50) as cluster:
            yield cluster.scheduler_address


def run(capsys, *args: str) -> tuple[int, str, str]:
    capsys.readouterr()
    try:
        main([str(a) for a in args])
        code = 0
    except SystemExit as exc:
        code = int(exc.code or 0)
    out, err = capsys.readouterr()
    return code, out, err


@pytest.mark.parametrize("sample", SAMPLES, ids=[p.name for p in SAMPLES])
def test_report_on_the_cluster_writes_the_same_summary(sample, address, tmp_path, capsys, plain_report):
    single_dir, single_out = plain_report(sample)  # the same command without --scheduler (once per session)
    code, cluster_out, err = run(capsys, "report", sample, "-o", tmp_path / "cluster", "--scheduler", address)
    assert code == 0, err
    single = (single_dir / "summary.json").read_bytes()
    assert (tmp_path / "cluster" / "summary.json").read_bytes() == single  # byte for byte: no key differs
    assert cluster_out.replace(str(tmp_path / "cluster"), "OUT") == single_out.replace(str(single_dir), "OUT")
    assert json.loads(single)["inputs"]["metadata"], "every sample has metadata: the cluster path was exercised"


def test_report_with_local_2_starts_its_own_cluster(tmp_path, capsys, plain_report):
    sample = next(p for p in SAMPLES if p.name == "qwen3-30b-a3b-text")
    single_dir, _ = plain_report(sample)
    code, _, err = run(capsys, "report", sample, "-o", tmp_path / "local2", "--scheduler", "local:2")
    assert code == 0, err
    assert (tmp_path / "local2" / "summary.json").read_bytes() == (single_dir / "summary.json").read_bytes()
    # which cluster ran: said on stderr (its workers and threads, the tasks, none re-run), once
    said = [line for line in err.splitlines() if line.startswith("cluster local:2 (tcp://")]
    assert len(said) == 1 and ": 2 worker(s), 2 thread(s); " in said[0] and said[0].endswith("none re-run"), err


def test_a_joined_cluster_is_named_with_its_workers(address, capsys):
    sample = next(p for p in SAMPLES if p.name == "qwen3-vl-30b-a3b-sft")
    code, _, err = run(capsys, "parse", sample / "train.log", "--scheduler", address)
    assert code == 0, err
    said = [line for line in err.splitlines() if line.startswith(f"cluster {address}: ")]
    assert said == [f"cluster {address}: 2 worker(s), 2 thread(s); 1 task(s) run, none re-run"], err


def test_cluster_use_by_hand():
    use = cluster_mod.ClusterUse("local:3", "tcp://127.0.0.1:1", 3, 6, tasks=12, retried=2,
                                 workers_at_start={"a", "b", "c"}, workers_lost=1)
    assert use.describe() == ("cluster local:3 (tcp://127.0.0.1:1): 3 worker(s), 6 thread(s); 12 task(s) run, 2 "
                              "re-run after a worker was lost; 1 worker(s) left during the read")

    class Scheduler:  # what run_on_scheduler hands the function: the scheduler, its tasks by key
        tasks = {"a": type("T", (), {"suspicious": 1})(), "b": type("T", (), {"suspicious": 0})()}

    class Client:
        def run_on_scheduler(self, fn):
            return fn(dask_scheduler=Scheduler())

    assert cluster_mod._retried(Client(), ["a", "b", "gone"]) == 1
    assert cluster_mod._retried(object(), ["a"]) == 0  # a client that cannot ask: none counted, no error


def _die_once(marker: str) -> int:
    import os

    if not os.path.exists(marker):
        open(marker, "w").close()
        os._exit(1)  # the worker dies holding the task: the scheduler re-runs it elsewhere
    return 7


@pytest.mark.slow
def test_a_task_rerun_after_a_lost_worker_is_counted(tmp_path):
    import dask

    with dask.config.set({"distributed.scheduler.allowed-failures": 2}):
        with distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True, dashboard_address=":0",
                                      silence_logs=50) as cluster:
            with cluster_mod.connect(cluster.scheduler_address) as client:
                futures = [client.submit(_die_once, str(tmp_path / "died"), pure=False)]
                assert [r for _, r in cluster_mod.done_in_turn(client, futures)] == [7]
                use = cluster_mod.cluster_use(client)
                assert (use.tasks, use.retried) == (1, 1)
                assert "1 re-run after a worker was lost" in use.describe(client)


def test_parse_and_metadata_on_the_cluster(address, tmp_path, capsys):
    sample = next(p for p in SAMPLES if p.name == "qwen3-vl-30b-a3b-sft")
    for args in (["parse", sample / "train.log", "-o", "{out}.csv"],
                 ["metadata", sample / "metadata.jsonl.gz", "-m", "qwen3-vl-30b-a3b", "-o", "{out}.csv"],
                 ["metadata", sample / "metadata.jsonl.gz", "-m", "qwen3-vl-30b-a3b"]):
        single = [str(a).format(out=tmp_path / "AAA") for a in args]
        clustered = [str(a).format(out=tmp_path / "BBB") for a in args]
        code_a, out_a, err_a = run(capsys, *single)
        code_b, out_b, err_b = run(capsys, *clustered, "--scheduler", address)
        assert (code_a, code_b) == (0, 0), err_b
        assert out_a == out_b
        said = [line for line in err_b.splitlines() if line.startswith(f"cluster {address}: ")]
        assert len(said) == 1, err_b  # which cluster ran: the one line the cluster run adds
        err_b = "".join(line for line in err_b.splitlines(keepends=True) if not line.startswith("cluster "))
        assert err_a.replace("AAA", "X") == err_b.replace("BBB", "X")
        if "-o" in args:
            assert (tmp_path / "AAA.csv").read_bytes() == (tmp_path / "BBB.csv").read_bytes()


def test_metadata_partitions_merge_to_the_single_pass(address, tmp_path):
    """Many small partitions (one shard each), skip-bad lines and per-rank statistics: the merge and the
    source's own finish give the single pass's frames and diagnostics."""
    import gzip

    from vlm_perf.ingest.metadata_source import MetadataSource

    sample = next(p for p in SAMPLES if p.name == "qwen2.5-vl-7b-video")
    with gzip.open(sample / "metadata.jsonl.gz", "rb") as src:
        lines = src.read().splitlines(keepends=True)
    shards = tmp_path / "shards"
    shards.mkdir()
    step = len(lines) // 5 + 1
    for k in range(5):
        chunk = lines[k * step:(k + 1) * step]
        if k in (1, 3):
            chunk.insert(3, b'{"iteration": "oops"}\n')  # a bad line in two partitions
        (shards / f"rank{k:02d}.jsonl").write_bytes(b"".join(chunk))
    from vlm_perf.arch import load_model

    spec = load_model("qwen2.5-vl-7b")
    single = MetadataSource(shards, spec, skip_bad=True, per_rank=True).read()
    with distributed.Client(address) as client:
        dist = cluster_mod.read_metadata(client, [shards], spec, skip_bad=True, per_rank=True, files_per_partition=1)
        assert dist.per_iteration.equals(single.per_iteration)
        assert dist.per_rank.equals(single.per_rank)
        assert dist.diagnostics.to_dict() == single.diagnostics.to_dict()
        assert dist.diagnostics.rows_skipped_total == 2
        # without skip-bad: the same first bad line (file:line) as the single pass
        with pytest.raises(ValueError) as one:
            MetadataSource(shards, spec).read()
        with pytest.raises(ValueError) as other:
            cluster_mod.read_metadata(client, [shards], spec, files_per_partition=1)
        assert str(other.value) == str(one.value) and "rank01.jsonl:4" in str(one.value)


def test_unreachable_scheduler_is_one_line_and_exit_2(monkeypatch, tmp_path, capsys):
    monkeypatch.setattr(cluster_mod, "CONNECT_TIMEOUT_S", 3.0)
    start = time.monotonic()
    code, out, err = run(capsys, "report", SAMPLES[0], "-o", tmp_path / "x", "--scheduler", "tcp://127.0.0.1:9")
    assert time.monotonic() - start < 30
    assert code == 2
    assert err.strip().count("\n") == 0 and err.startswith("error: scheduler tcp://127.0.0.1:9: cannot connect")


def test_bad_scheduler_strings(tmp_path):
    for text in ("local:0", "local:x", "lcal:2", str(tmp_path / "missing.json")):
        with pytest.raises(ConfigError):
            cluster_mod.parse_scheduler(text)
    bad = tmp_path / "sched.json"
    bad.write_text("{}")
    with pytest.raises(ConfigError, match="no 'address'"):
        cluster_mod.parse_scheduler(str(bad))
    good = tmp_path / "good.json"
    good.write_text(json.dumps({"address": "tcp://10.0.0.1:8786"}))
    assert cluster_mod.parse_scheduler(str(good)).kind == "file"
    assert cluster_mod.parse_scheduler("local:2").workers == 2


def test_scheduler_file_joins_the_cluster(address, tmp_path, capsys):
    sample = next(p for p in SAMPLES if p.name == "qwen2-vl-tiny-real")
    sched = tmp_path / "scheduler.json"
    sched.write_text(json.dumps({"type": "Scheduler", "address": address}))
    code, _, err = run(capsys, "parse", sample / "train.log", "--scheduler", sched)
    assert code == 0, err


def test_version_mismatch_is_one_clear_line(address, monkeypatch):
    import vlm_perf

    monkeypatch.setattr(vlm_perf, "__version__", "0.0.0-other")  # this client only; the workers import their own
    with pytest.raises(ClusterError, match=r"runs vlm-perf \S+, this client 0.0.0-other"):
        with cluster_mod.connect(address):
            pass


def _die() -> None:
    import os

    os._exit(1)


def test_worker_failure_is_one_clear_line(address):
    """A worker process that dies mid-task (allowed-failures 0 on this cluster): a `ClusterError`, no hang."""
    with distributed.Client(address) as client:
        futures = [client.submit(_die, pure=False)]
        start = time.monotonic()
        with pytest.raises(ClusterError, match="a Dask worker failed reading shard 0: KilledWorker"):
            cluster_mod.gather_in_order(client, futures, lambda i: f"shard {i}")
        assert time.monotonic() - start < 60


def test_compare_on_the_cluster(address, capsys):
    a, b = (next(p for p in SAMPLES if p.name == n) for n in ("qwen3-30b-a3b-text", "qwen3-vl-30b-a3b-sft"))
    code, single, _ = run(capsys, "compare", a, b, "--json")
    assert code == 0
    code, clustered, err = run(capsys, "compare", a, b, "--json", "--scheduler", address)
    assert code == 0, err
    assert clustered == single


def test_a_missing_run_fails_before_a_cluster_starts(tmp_path, capsys):
    start = time.monotonic()
    code, _, err = run(capsys, "report", tmp_path / "nope", "-o", tmp_path / "x", "--scheduler", "local:2")
    assert code == 2 and "no such log file or run directory" in err
    assert time.monotonic() - start < 5
