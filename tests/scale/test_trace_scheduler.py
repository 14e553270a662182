"""``vlm-perf trace --scheduler``: the per-file trace partials read on Dask workers and merged in file order give
the single machine's attribution (the reference is the same command without ``--scheduler``, run here); the
trace command's run flags are the declared ones (``tests/report/test_run_options.py`` covers ``trace`` among
`COMMANDS`); trace files and the run folder may be URLs."""

from __future__ import annotations

import shutil
from pathlib import Path

import fsspec
import pytest

from vlm_perf.cli import main

ROOT = Path(__file__).resolve().parents[2]
TRACE_RUN = ROOT / "sample_logs" / "qwen2-vl-tiny-trace"
NSYS = ROOT / "tests" / "ingest" / "fixtures" / "traces" / "nsys_tiny.sqlite"


def run(capsys, *args) -> tuple[int, str, str]:
    capsys.readouterr()
    try:
        main([str(a) for a in args])
        code = 0
    except SystemExit as exc:
        code = int(exc.code or 0)
    out, err = capsys.readouterr()
    return code, out, err


@pytest.fixture(scope="module")
def address():
    distributed = pytest.importorskip("distributed")
    with distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None,
                                  silence_logs=50) as cluster:
        yield cluster.scheduler_address


def test_trace_with_run_metadata_on_the_cluster(address, capsys):
    """The sample's trace joined with its metadata's exact FLOPs (metadata read on the cluster too)."""
    args = ["trace", TRACE_RUN / "trace", "--run", TRACE_RUN, "--causal", "full", "--peak-tflops", "100", "--json"]
    code, single, err = run(capsys, *args)
    assert code == 0, err
    assert '"flops_source": "metadata"' in single
    code, clustered, err = run(capsys, *args, "--scheduler", address)
    assert code == 0, err
    assert clustered == single


def test_many_rank_files_and_an_nsight_url_on_the_cluster(address, tmp_path, capsys):
    """Four rank files (four tasks, merged in file order), and an Nsight SQLite export named by a file:// URL: the
    worker copies it locally for SQLite)."""
    ranks = tmp_path / "trace"
    ranks.mkdir()
    for r in range(4):
        shutil.copy(TRACE_RUN / "trace" / "rank0.pt.trace.json.gz", ranks / f"rank{r}.pt.trace.json.gz")
    code, single, err = run(capsys, "trace", ranks, "--json")
    assert code == 0, err
    assert run(capsys, "trace", ranks, "--json", "--scheduler", address)[:2] == (0, single)
    url = f"file://{NSYS}"
    code, local, err = run(capsys, "trace", NSYS, "--json")
    assert code == 0, err
    code, clustered, err = run(capsys, "trace", url, "--json", "--scheduler", address)
    assert code == 0, err
    assert clustered == local.replace(str(NSYS), url)


def test_trace_reads_urls_on_one_machine(tmp_path, capsys):
    fs = fsspec.filesystem("memory")
    for f in TRACE_RUN.rglob("*"):
        if f.is_file():
            fs.pipe(f"/{tmp_path.name}/{f.relative_to(TRACE_RUN).as_posix()}", f.read_bytes())
    url = f"memory://{tmp_path.name}"
    code, local, err = run(capsys, "trace", TRACE_RUN / "trace", "--run", TRACE_RUN, "--json")
    assert code == 0, err
    code, remote, err = run(capsys, "trace", f"{url}/trace", "--run", url, "--json")
    assert code == 0, err
    assert remote.replace(url, "RUN") == local.replace(str(TRACE_RUN), "RUN")


def test_trace_flags_are_validated_as_declared(capsys):
    code, _, err = run(capsys, "trace", TRACE_RUN / "trace", "--causal", "square")
    assert code == 2 and "--causal" in err
    code, _, err = run(capsys, "trace", TRACE_RUN / "trace", "--peak-tflops", "0")
    assert code == 2 and "--peak-tflops" in err
