"""Fixtures shared by every test directory (the plain helpers behind them are in ``tests/support.py``)."""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import subprocess
from pathlib import Path

import pytest

# Under pytest-xdist every core already runs a worker: a worker that also starts a thread pool per core (torch's
# OpenMP, BLAS, polars, pyarrow) oversubscribes the machine and its idle threads spin against the other worker's.
# One thread per worker, set before any of those libraries is imported (subprocesses inherit it). A user's own
# setting wins; no result depends on the thread count (tests/verify measures with one torch thread anyway).
if os.environ.get("PYTEST_XDIST_WORKER"):
    for _name in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS", "POLARS_MAX_THREADS"):
        os.environ.setdefault(_name, "1")

# Helpers that hold test assertions outside test_*.py files: pytest rewrites them too (clear failure messages).
# Both names: tests/ has no __init__.py, so a collected test file imports it as verify.fixed_tile.
pytest.register_assert_rewrite("verify.fixed_tile", "tests.verify.fixed_tile")

from tests import support  # noqa: E402


@pytest.fixture
def cli():
    """``cli(*args, **invoke_kwargs)``: ``vlm-perf ARGS`` run in-process; click's Result (exit_code, stdout,
    stderr, output, exception)."""
    return support.invoke_cli


@pytest.fixture
def cli_proc():
    """``cli_proc(*args, timeout=600)``: ``python -m vlm_perf.cli ARGS`` in a subprocess; CompletedProcess."""
    return support.run_cli


@pytest.fixture
def sample_run(tmp_path):
    """``sample_run(name=SFT sample, dest="run")``: a bundled sample run copied to ``tmp_path / dest``; its path."""
    def copy(name: str = support.SFT_SAMPLE, dest: str = "run") -> Path:
        return support.copy_sample(tmp_path / dest, name)
    return copy


@pytest.fixture(params=["msgspec", "stdlib"])
def kineto_decoder(request, monkeypatch):
    """Both decoding paths of the Kineto trace reader (the optional msgspec fast path and the stdlib one), one per
    test run: whatever a trace test checks must hold on each."""
    from vlm_perf.ingest.traces import kineto

    if request.param == "msgspec":
        pytest.importorskip("msgspec")
        monkeypatch.setattr(kineto, "_FAST", [])
    else:
        monkeypatch.setattr(kineto, "_FAST", [None])
    return request.param


@pytest.fixture(scope="session")
def sample_report(tmp_path_factory):
    """``sample_report(name, *flags)`` -> ``(out, summary, completed)``: the report of the bundled sample run
    ``sample_logs/NAME`` (``python -m vlm_perf.cli report sample_logs/NAME -o OUT FLAGS``, the real entry point),
    rendered ONCE per test session and shared by every module and every xdist worker that asks for the same
    name and flags (a file lock in the session's shared temporary root). READ-ONLY: copy before changing it."""
    root = tmp_path_factory.getbasetemp()
    if os.environ.get("PYTEST_XDIST_WORKER"):
        root = root.parent  # the workers' basetemps share this parent
    shared = root / "sample-reports"
    shared.mkdir(exist_ok=True)

    def render(name: str, *flags: str) -> tuple[Path, dict, subprocess.CompletedProcess]:
        key = hashlib.sha256(repr((name, flags)).encode()).hexdigest()[:12]
        out, record = shared / f"{name}-{key}", shared / f"{name}-{key}.json"
        with open(shared / f"{name}-{key}.lock", "w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            if not record.exists():
                done = support.run_cli("report", support.SAMPLE_LOGS / name, "-o", out, *flags)
                record.write_text(json.dumps([done.args, done.returncode, done.stdout, done.stderr]))
        args, code, stdout, stderr = json.loads(record.read_text())
        done = subprocess.CompletedProcess(args, code, stdout, stderr)
        assert code == 0, f"report of {name} {flags} exited {code}: {stderr[-2000:]}"
        return out, json.loads((out / "summary.json").read_text()), done
    return render


def pytest_collection_modifyitems(config, items):
    """Files tests into the tiers (tests/tiers.py): ``measured`` for the torch-measured directories, ``slow`` for the
    listed heavy tests; ``dev.py test --fast`` deselects both. Under pytest-xdist, whole modules are ordered
    heaviest first (``dev.py`` passes ``--no-loadscope-reorder``, so the workers take them in this order)."""
    from tests.tiers import heaviest_modules_first, tier_markers

    for item in items:
        for name in tier_markers(item.nodeid):
            item.add_marker(getattr(pytest.mark, name))
    if os.environ.get("PYTEST_XDIST_WORKER"):  # every worker collects the same order; dev.py keeps it
        items[:] = [items[i] for i in heaviest_modules_first([item.nodeid for item in items])]
