"""Object-store URLs for every input a command takes (`vlm_perf.remote`), on one machine and on a cluster.

* In-process: fsspec's ``memory://`` filesystem holds a byte copy of a sample run (logs, metadata shards or
  a ``.jsonl.gz``, run.yaml, config.json, adapter_config.json, trainability.json, profiler traces); the CLI
  reads it by URL and must write the summary.json it writes for the local folder (paths aside). Nothing
  is downloaded: ``memory://`` is a real fsspec protocol, read through the same calls s3fs / gcsfs answer.
* Across processes (the cluster path): ``memory://`` is per process, so the cluster test uses
  ``vlmtrack://``, fsspec's local filesystem registered under another protocol that records every file it
  opens with the opening process's id. It is registered in this process and in every worker; the report
  on the cluster reads the run by ``vlmtrack://`` URL, its summary equals the single-machine one, and the
  record shows that the worker processes (not this client) opened the metadata shards and the log.
"""

from __future__ import annotations

import importlib.util
import json
import os
from pathlib import Path

import fsspec
import pytest
from fsspec.implementations.local import LocalFileSystem

from vlm_perf.cli import main
from vlm_perf.extras import install_hint

ROOT = Path(__file__).resolve().parents[2] / "sample_logs"


def run(capsys, *args) -> tuple[int, str, str]:
    capsys.readouterr()
    try:
        main([str(a) for a in args])
        code = 0
    except SystemExit as exc:
        code = int(exc.code or 0)
    out, err = capsys.readouterr()
    return code, out, err


def to_memory(sample: Path, prefix: str) -> str:
    """Byte copy of a sample folder (every file, sub-folders included) at ``memory://PREFIX``; its URL."""
    fs = fsspec.filesystem("memory")
    for f in sample.rglob("*"):
        if f.is_file():
            fs.pipe(f"/{prefix}/{f.relative_to(sample).as_posix()}", f.read_bytes())
    return f"memory://{prefix}"


def normalised(summary: Path, *roots: str) -> str:
    text = summary.read_text()
    for root in roots:
        text = text.replace(root, "RUN")
    return text


@pytest.mark.parametrize("name", ["qwen2-vl-tiny-lora-real", "qwen2-vl-tiny-trace", "qwen2.5-vl-7b-video",
                                  "qwen2-vl-tiny-grpo-real"])
def test_report_reads_a_run_by_url(name, tmp_path, capsys, plain_report):
    """lora-real: metadata/ shards, config.json, adapter_config.json, trainability.json; trace: a trace/
    folder of Kineto traces; video: metadata.jsonl.gz and run.yaml; grpo: the rl/ records."""
    sample = ROOT / name
    url = to_memory(sample, f"{tmp_path.name}/{name}")
    local_dir, _ = plain_report(sample)  # the same command on the local folder (once per session)
    code, _, err = run(capsys, "report", url, "-o", tmp_path / "url")
    assert code == 0, err
    local = normalised(local_dir / "summary.json", str(sample.resolve()), str(sample))
    remote = normalised(tmp_path / "url" / "summary.json", url)
    assert remote == local
    inputs = json.loads((tmp_path / "url" / "summary.json").read_text())["inputs"]
    assert inputs["logs"] == [f"{url}/train.log"] and all(m.startswith(url) for m in inputs["metadata"])
    if name == "qwen2-vl-tiny-trace":  # the profiler trace was found and read through the URL
        assert json.loads(remote)["trace_parts"]["files"] == ["RUN/trace/rank0.pt.trace.json.gz"]


def test_log_and_metadata_flags_take_urls(tmp_path, capsys):
    """--log and --metadata name URLs while the run folder (run.yaml) is local."""
    sample = ROOT / "qwen2.5-vl-7b-video"
    url = to_memory(sample, f"{tmp_path.name}/video")
    code, _, err = run(capsys, "report", sample, "-o", tmp_path / "local", "--log", sample / "train.log",
                       "--metadata", sample / "metadata.jsonl.gz")
    assert code == 0, err
    code, _, err = run(capsys, "report", sample, "-o", tmp_path / "flags", "--log", f"{url}/train.log",
                       "--metadata", f"{url}/metadata.jsonl.gz")
    assert code == 0, err
    summary = json.loads((tmp_path / "flags" / "summary.json").read_text())
    assert summary["inputs"]["logs"] == [f"{url}/train.log"]
    assert summary["inputs"]["metadata"] == [f"{url}/metadata.jsonl.gz"]
    local = normalised(tmp_path / "local" / "summary.json", str(sample.resolve()), str(sample))
    assert normalised(tmp_path / "flags" / "summary.json", url, str(sample.resolve()), str(sample)) == local


def test_parse_metadata_and_compare_read_urls(tmp_path, capsys):
    sample = ROOT / "qwen3-vl-30b-a3b-sft"
    url = to_memory(sample, f"{tmp_path.name}/sft")
    assert run(capsys, "parse", sample / "train.log")[:2] == run(capsys, "parse", f"{url}/train.log")[:2]
    code, local_explain, _ = run(capsys, "parse", "--explain", sample / "train.log")
    code_url, url_explain, err = run(capsys, "parse", "--explain", f"{url}/train.log")
    assert (code, code_url) == (0, 0), err
    assert url_explain == local_explain.replace(str(sample / "train.log"), f"{url}/train.log")
    local = run(capsys, "metadata", sample / "metadata.jsonl.gz", "-m", "qwen3-vl-30b-a3b")
    for arg in (f"{url}/metadata.jsonl.gz", f"{url}/metadata*.jsonl.gz", url):  # file, glob, run folder
        code, out, err = run(capsys, "metadata", arg, "-m", "qwen3-vl-30b-a3b")
        assert (code, out) == local[:2], err
        assert err == local[2].replace(str(sample / "metadata.jsonl.gz"), f"{url}/metadata.jsonl.gz")
    other = ROOT / "qwen3-30b-a3b-text"
    other_url = to_memory(other, f"{tmp_path.name}/text")
    code, single, _ = run(capsys, "compare", other, sample, "--json")
    assert code == 0
    assert run(capsys, "compare", other_url, url, "--json")[:2] == (0, single)


def test_a_missing_protocol_package_is_one_line(tmp_path, capsys):
    from vlm_perf.remote import PROTOCOL_PACKAGES

    missing = [(proto, pkg, extra) for proto, (pkg, extra) in PROTOCOL_PACKAGES.items()
               if proto in ("s3", "gs", "az") and importlib.util.find_spec(pkg) is None]
    if not missing:
        pytest.skip("s3fs, gcsfs and adlfs are all installed")
    proto, pkg, extra = missing[0]
    code, _, err = run(capsys, "report", f"{proto}://bucket/run", "-o", tmp_path / "x")
    assert code == 2
    assert err.strip().count("\n") == 0
    assert f"needs {pkg}: {install_hint(extra)}" in err


def test_unknown_protocol_and_missing_url_are_one_line(tmp_path, capsys):
    code, _, err = run(capsys, "report", "nosuchproto://bucket/run", "-o", tmp_path / "x")
    assert code == 2 and err.strip().count("\n") == 0 and "unknown URL protocol 'nosuchproto'" in err
    code, _, err = run(capsys, "report", f"memory://{tmp_path.name}/nothing-here", "-o", tmp_path / "x")
    assert code == 2 and err.strip().count("\n") == 0 and "no such log file or run directory" in err
    code, _, err = run(capsys, "metadata", f"memory://{tmp_path.name}/none-*.jsonl")
    assert code == 2 and "the pattern matches no file" in err


# ------------------------------------------------------------------------------------ the cluster
class TrackingFS(LocalFileSystem):
    """The local filesystem as protocol ``vlmtrack://``; every file opened is appended to ``log`` with the pid."""

    protocol = ("vlmtrack",)
    log: str | None = None

    @classmethod
    def _strip_protocol(cls, path):  # type: ignore[no-untyped-def]
        path = str(path)
        return LocalFileSystem._strip_protocol(path[len("vlmtrack://"):] if path.startswith("vlmtrack://") else path)

    def _open(self, path, mode="rb", **kwargs):  # type: ignore[no-untyped-def]
        if TrackingFS.log:
            with open(TrackingFS.log, "a") as fh:
                fh.write(f"{os.getpid()} {path}\n")
        return super()._open(path, mode, **kwargs)


def register_tracking(log: str) -> int:
    TrackingFS.log = log
    fsspec.register_implementation("vlmtrack", TrackingFS, clobber=True)
    return os.getpid()


def test_cluster_workers_read_the_urls_themselves(tmp_path, capsys, plain_report):
    distributed = pytest.importorskip("distributed")
    sample = ROOT / "qwen2-vl-tiny-real"  # metadata/ shard folder, config.json, run.yaml
    log = str(tmp_path / "opened.txt")
    client_pid = register_tracking(log)
    with distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None,
                                  silence_logs=50) as cluster, distributed.Client(cluster) as client:
        worker_pids = set(client.run(register_tracking, log).values())
        assert client_pid not in worker_pids
        single_dir, _ = plain_report(sample)  # the same command without the URL or the cluster
        Path(log).write_text("")
        url = f"vlmtrack://{sample.resolve()}"
        code, _, err = run(capsys, "report", url, "-o", tmp_path / "cluster", "--scheduler",
                           cluster.scheduler_address)
        assert code == 0, err
    local = normalised(single_dir / "summary.json", str(sample.resolve()), str(sample))
    remote = normalised(tmp_path / "cluster" / "summary.json", url)
    assert remote == local
    opened = [line.split(" ", 1) for line in Path(log).read_text().splitlines()]
    by_workers = {path for pid, path in opened if int(pid) in worker_pids}
    shards = {str(p) for p in (sample / "metadata").iterdir()}
    assert shards <= by_workers, "every metadata shard was opened by a worker through the URL's filesystem"
    assert str(sample / "train.log") in by_workers
    by_client = {path for pid, path in opened if int(pid) == client_pid}
    assert str(sample / "run.yaml") in by_client  # the small files are read where the run is resolved


def test_tensorboard_folder_and_wandb_parquet_by_url(tmp_path):
    """The two log kinds whose readers are not the line reader: a TensorBoard event folder (tbparse reads a
    temporary local copy) and a W&B history Parquet (streamed); the URL's iteration table equals the local one."""
    pytest.importorskip("tbparse")
    import polars as pl
    from tensorboard.compat.proto.event_pb2 import Event
    from tensorboard.compat.proto.summary_pb2 import Summary
    from tensorboard.summary.writer.event_file_writer import EventFileWriter

    from vlm_perf.ingest.logs import parse_logs

    w = EventFileWriter(str(tmp_path / "tb"))
    for step, loss in enumerate([3.0, 2.5, 2.25], start=1):
        for tag, v in (("lm loss", loss), ("iteration-time", 2.0 - step / 10)):
            w.add_event(Event(wall_time=1000.0 + step, step=step,
                              summary=Summary(value=[Summary.Value(tag=tag, simple_value=v)])))
    w.close()
    pl.DataFrame({"_step": [1, 2], "train/loss": [0.5, 0.25], "iteration-time": [1.0, 1.1]}).write_parquet(
        tmp_path / "history.parquet")
    fs = fsspec.filesystem("memory")
    for f in tmp_path.rglob("*"):
        if f.is_file():
            fs.pipe(f"/{tmp_path.name}/{f.relative_to(tmp_path).as_posix()}", f.read_bytes())
    url = f"memory://{tmp_path.name}"
    for name in ("tb", "history.parquet"):
        local, remote = parse_logs([tmp_path / name]), parse_logs([f"{url}/{name}"])
        assert remote.iterations.drop("file").equals(local.iterations.drop("file"))
        assert remote.diagnostics.files == [f"{url}/{name}"]


def test_remote_path_names_follow_pathlib():
    """Names, suffixes, parents and joins of a URL are those of the same path after the scheme (PurePosixPath)."""
    from pathlib import PurePosixPath

    from vlm_perf.remote import RemotePath, as_path, is_url

    for rest in ("bucket/run42/metadata/metadata-rank00001.jsonl.gz", "bucket/run42/train.log", "b/x.pt.trace.json"):
        url, ref = RemotePath(f"s3://{rest}"), PurePosixPath(rest)
        assert (url.name, url.suffix, url.suffixes, url.stem) == (ref.name, ref.suffix, ref.suffixes, ref.stem)
        assert str(url.parent) == f"s3://{ref.parent}" and str(url / "x") == f"s3://{ref / 'x'}"
        assert url.parts == ref.parts
    assert RemotePath("gs://b/run/") == RemotePath("gs://b/run")
    assert is_url("memory://x") and is_url("file:///tmp/x") and not is_url("C://x") and not is_url("/tmp/x")
    assert isinstance(as_path("/tmp/x"), Path) and isinstance(as_path("s3://b/x"), RemotePath)
