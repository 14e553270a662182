"""``--scheduler`` never hangs and never crashes (issue 34, hangs and crashes).

Specification (`vlm_perf.scale.cluster`, T = the connect timeout, ``VLM_PERF_CONNECT_TIMEOUT``):
* ``local:N`` takes N from 1 to `max_local_workers` (4 per CPU), ASCII digits only; anything else is one line
  before any worker starts;
* an address that answers but is not a Dask scheduler (an HTTP port) fails in one line after T + GRACE_S s,
  an unusable transport (``ucx://`` without UCX) at once;
* a scheduler with no live worker fails in one line after T s; a cluster that loses every worker while tasks
  are pending fails in one line after T s of having none;
* a scheduler file is read with the JSON limits of every reader (depth, size) and its ``address`` must be an
  address string; ``VLM_PERF_CONNECT_TIMEOUT`` must be seconds in (0, 3600].
The guards on elapsed time below are generous hang detectors (several times T), not performance checks.
"""

from __future__ import annotations

import http.server
import json
import os
import threading
import time

import pytest

pytest.importorskip("dask")
distributed = pytest.importorskip("distributed")

from tests.support import run_main  # noqa: E402
from vlm_perf.errors import ClusterError, ConfigError, InputError  # noqa: E402
from vlm_perf.scale import cluster as cluster_mod  # noqa: E402

LOG = "sample_logs/qwen2-vl-tiny-real/train.log"
FAST = {"VLM_PERF_CONNECT_TIMEOUT": "2"}


def _one_line_exit_2(r) -> str:
    assert r.returncode == 2, (r.stdout, r.stderr)
    assert r.stderr.startswith("error: ") and r.stderr.strip().count("\n") == 0, r.stderr
    return r.stderr


@pytest.mark.parametrize("text", ["local:0", "local:-1", "local:²", "local:١", "local:1e3", "local: 2",
                                  "local:" + "9" * 5000, "local:100000"])
def test_local_worker_counts_outside_the_bound_are_one_line(text):
    err = _one_line_exit_2(run_main("parse", LOG, "--scheduler", text))
    assert "local" in err and str(cluster_mod.max_local_workers()) in err and len(err) < 300


def test_the_local_bound_is_four_workers_per_cpu():
    limit = 4 * (os.cpu_count() or 1)
    assert cluster_mod.max_local_workers() == limit
    assert cluster_mod.parse_scheduler(f"local:{limit}").workers == limit
    with pytest.raises(ConfigError, match=f"at most {limit} local workers"):
        cluster_mod.parse_scheduler(f"local:{limit + 1}")


@pytest.mark.parametrize("value", ["abc", "nan", "inf", "-1", "0", "1e9"])
def test_a_bad_connect_timeout_is_one_line(value):
    err = _one_line_exit_2(run_main("parse", LOG, "--scheduler", "tcp://127.0.0.1:9",
                                    env={"VLM_PERF_CONNECT_TIMEOUT": value}))
    assert "VLM_PERF_CONNECT_TIMEOUT" in err


def test_an_http_port_is_not_a_scheduler_and_fails_within_the_timeout():
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), http.server.BaseHTTPRequestHandler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        start = time.monotonic()
        err = _one_line_exit_2(run_main("parse", LOG, "--scheduler", f"tcp://127.0.0.1:{server.server_address[1]}",
                                        env=FAST))
        assert time.monotonic() - start < 60
        assert "no Dask scheduler answered" in err or "cannot connect" in err
        # the client left connecting in the abandoned thread is not this process's default: a later plain
        # dask.compute (aggregate_metadata_dask without a cluster) waited on it forever before
        import dask

        with pytest.raises(ValueError):
            distributed.default_client()
        assert dask.config.get("scheduler", None) != "dask.distributed"
    finally:
        server.shutdown()
        server.server_close()


def test_an_unusable_transport_is_one_line():
    err = _one_line_exit_2(run_main("parse", LOG, "--scheduler", "ucx://127.0.0.1:1", env=FAST))
    assert "scheduler ucx://127.0.0.1:1" in err


@pytest.mark.parametrize("content, message", [
    ("[" * 100_000 + "]" * 100_000, "nested deeper"),
    (json.dumps({"address": 8786}), "field 'address'"),
    (json.dumps({"address": ["tcp://x:1"]}), "field 'address'"),
    (json.dumps({"address": "localhost"}), "not a scheduler address"),
    ('{"address": NaN}', "NaN"),
])
def test_a_bad_scheduler_file_is_one_line_naming_it(tmp_path, content, message):
    path = tmp_path / "scheduler.json"
    path.write_text(content)
    with pytest.raises((ConfigError, InputError), match=message):
        cluster_mod.parse_scheduler(str(path))
    err = _one_line_exit_2(run_main("parse", LOG, "--scheduler", path))
    assert str(path) in err


def test_a_scheduler_without_workers_fails_within_the_timeout():
    with distributed.LocalCluster(n_workers=0, dashboard_address=None, silence_logs=50) as cluster:
        start = time.monotonic()
        err = _one_line_exit_2(run_main("parse", LOG, "--scheduler", cluster.scheduler_address, env=FAST))
        assert time.monotonic() - start < 60
        assert "no live worker joined within 2 s" in err


def _slow() -> int:
    time.sleep(600)
    return 1


def test_a_cluster_that_loses_every_worker_fails_instead_of_waiting(monkeypatch):
    monkeypatch.setenv("VLM_PERF_CONNECT_TIMEOUT", "2")
    with distributed.LocalCluster(n_workers=1, processes=True, dashboard_address=None, silence_logs=50) as cluster:
        with distributed.Client(cluster) as client:
            futures = [client.submit(_slow, pure=False)]
            while not client.processing() or not any(client.processing().values()):
                time.sleep(0.05)
            cluster.scale(0)  # every worker leaves; the task goes back to waiting for one
            start = time.monotonic()
            with pytest.raises(ClusterError, match="no live worker for 2 s with 1 task"):
                cluster_mod.gather_in_order(client, futures, lambda i: f"shard {i}")
            assert time.monotonic() - start < 60
