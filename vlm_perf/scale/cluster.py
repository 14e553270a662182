"""``--scheduler``: where a command reads a run — this process, a local Dask cluster or an existing one.

``local`` / ``local:N`` starts a `distributed.LocalCluster` of N worker processes (one thread each;
default: the CPU count) for the duration of the command; ``tcp://host:8786`` (any address a
``distributed.Client`` accepts) or the path of a scheduler file (dask-jobqueue, ``dask-scheduler
--scheduler-file``, dask-kubernetes) joins a running cluster.

On the cluster the run is read as map + combine with the single-machine code per partition:

* metadata (`read_metadata`, THE partitioned reader; `vlm_perf.scale.aggregate_metadata_dask` forwards to it):
  each partition of consecutive shards is read by `MetadataSource.read_partition` (the single pass, stopped
  before its finish: the per-(iteration[, dp_rank]) partial sums with the replay keys, the per-microbatch row
  values, the bad lines, the sampled keys and the counters); the client merges them in file order and runs the
  source's own finish over the merged state (`MetadataSource.finish_partitions`), so the statistics, the row
  values, the diagnostics and the error raised for bad input are those of the single-machine pass (the re-read of
  iterations a resumed job recorded twice, rare, runs on the client);
* logs: one task per file, `vlm_perf.ingest.logs.partial.parse_file_partial` (the map of
  ``parse_logs``), merged and finished once (`vlm_perf.scale.dask_backend.parse_logs_dask`);
* profiler traces: one task per file, `vlm_perf.ingest.traces.read_trace` (the map of ``read_traces``),
  merged in file order by its ``merge_partials`` (`read_traces_on`).

Bounds (each a one-line `ClusterError` or `ConfigError`; the CLI exits 2), T = the connect timeout
(`connect_timeout`: ``VLM_PERF_CONNECT_TIMEOUT`` seconds, default `CONNECT_TIMEOUT_S` = 20, at most
`MAX_CONNECT_TIMEOUT_S`):

* ``local:N``: N <= `max_local_workers` (`LOCAL_WORKERS_PER_CPU` x the machine's CPU count; each worker is a
  process);
* an address or scheduler file: the client is built in a helper thread and abandoned after T + `GRACE_S` s, so
  an address that answers but is not a Dask scheduler (an HTTP port: the client would read its reply as a frame
  length and wait, or allocate exabytes) or a transport this install lacks (``ucx://``) fails in that time;
* a scheduler with no live worker: `wait_for_workers` gives it T s to get one before anything is submitted;
* while reading, the cluster losing every worker: the results are awaited in polls (`POLL_S`) and a cluster
  with no live worker for T s fails the command (`done_in_turn`), instead of waiting forever;
* workers whose vlm-perf / dask / Python differ from the client's, and a worker that dies while reading.
"""

from __future__ import annotations

import contextlib
import math
import os
import re
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Iterator, Mapping, Sequence

from ..errors import ClusterError, ConfigError, VlmPerfError
from ..extras import install_hint

if TYPE_CHECKING:  # pragma: no cover
    from ..arch.spec import ModelSpec

__all__ = ["Scheduler", "parse_scheduler", "scheduled", "connect", "read_metadata", "parse_logs_on", "read_traces_on",
           "CONNECT_TIMEOUT_S", "connect_timeout", "max_local_workers", "done_in_turn", "ClusterUse", "cluster_use",
           "plan_partitions", "auto_partition_bytes", "DEFAULT_PARTITION_BYTES", "TASKS_PER_THREAD",
           "MIN_PARTITION_BYTES"]

#: seconds to reach a scheduler (and, for ``local:N``, for the workers to start), and to wait for a live worker,
#: before giving up; ``VLM_PERF_CONNECT_TIMEOUT`` overrides it (`connect_timeout`)
CONNECT_TIMEOUT_S = 20.0
#: the largest ``VLM_PERF_CONNECT_TIMEOUT`` accepted (one hour)
MAX_CONNECT_TIMEOUT_S = 3600.0
#: seconds a client thread gets beyond the connect timeout before it is abandoned
GRACE_S = 2.0
#: ``local:N`` starts at most this many worker processes per CPU of the machine
LOCAL_WORKERS_PER_CPU = 4
#: seconds between two checks for a live worker while results are awaited
POLL_S = 1.0


def connect_timeout() -> float:
    """The connect / no-live-worker timeout in seconds: ``VLM_PERF_CONNECT_TIMEOUT`` when set (a finite number
    in (0, `MAX_CONNECT_TIMEOUT_S`]), else `CONNECT_TIMEOUT_S`."""
    raw = os.environ.get("VLM_PERF_CONNECT_TIMEOUT")
    if raw is None or not raw.strip():
        return CONNECT_TIMEOUT_S
    try:
        value = float(raw)
    except ValueError:
        value = math.nan
    if not (math.isfinite(value) and 0 < value <= MAX_CONNECT_TIMEOUT_S):
        raise ConfigError(f"VLM_PERF_CONNECT_TIMEOUT={raw[:40]!r}: give seconds, a number > 0 and <= "
                          f"{MAX_CONNECT_TIMEOUT_S:g}")
    return value


def max_local_workers() -> int:
    """The most worker processes ``local:N`` starts: `LOCAL_WORKERS_PER_CPU` x this machine's CPU count."""
    return LOCAL_WORKERS_PER_CPU * (os.cpu_count() or 1)


@dataclass(frozen=True)
class Scheduler:
    kind: str  # local | address | file
    target: str = ""
    workers: int | None = None

    def __str__(self) -> str:
        if self.kind == "local":
            return "local" + (f":{self.workers}" if self.workers else "")
        return self.target


def parse_scheduler(text: str) -> Scheduler:
    """``local[:N]``, a scheduler address (``tcp://host:8786``, ``tls://...``) or a scheduler file."""
    text = text.strip()
    if text == "local" or text.startswith("local:"):
        count = text[6:]
        if not count:
            return Scheduler("local")
        limit = max_local_workers()
        if not re.fullmatch(r"[0-9]{1,9}", count) or int(count) < 1:  # ASCII digits only ("²".isdigit() is True)
            raise ConfigError(f"scheduler {text[:40]!r}: local:N needs a worker count N, a whole number from 1 to "
                              f"{limit}")
        if int(count) > limit:
            raise ConfigError(f"scheduler {text!r}: at most {limit} local workers on this machine "
                              f"({LOCAL_WORKERS_PER_CPU} per CPU, {os.cpu_count() or 1} CPUs); give local:N with "
                              f"N <= {limit} or a cluster's address")
        return Scheduler("local", workers=int(count))
    if "://" in text:
        return Scheduler("address", text)
    path = Path(text).expanduser()
    if path.is_file():
        from ..arch.validate import read_json_file

        info = read_json_file(path, "Dask scheduler file")  # size, depth and NaN limits; errors name the file
        if not isinstance(info, dict) or "address" not in info:
            raise ConfigError(f"scheduler file {text}: no 'address' key (not a Dask scheduler file)")
        address = info["address"]
        if not isinstance(address, str) or "://" not in address or len(address) > 1000:
            raise ConfigError(f"scheduler file {text}: field 'address' is {str(address)[:60]!r}, not a scheduler "
                              "address such as tcp://host:8786 (not a Dask scheduler file)")
        return Scheduler("file", str(path))
    raise ConfigError(f"scheduler {text[:200]!r}: expected local[:N], an address such as tcp://host:8786, or an "
                      "existing scheduler file")


@dataclass
class ClusterUse:
    """What a command's cluster was and did, said when the command ends (``cluster: ...`` on stderr; the report's
    messages): its workers and threads when reading began, the tasks it ran, how many of them the scheduler re-ran
    because the worker holding them was lost (Dask's recovery, counted from the scheduler's ``suspicious`` counts),
    and the workers that left."""

    scheduler: str
    address: str = ""
    workers: int = 0
    threads: int = 0
    tasks: int = 0
    retried: int = 0
    workers_at_start: set = field(default_factory=set)
    workers_lost: int = 0

    def describe(self, client: Any = None) -> str:
        """One line; with ``client``, the workers lost are counted first (those present at the start, gone now)."""
        if client is not None:
            self.workers_lost = len(self.workers_at_start - set(_worker_threads(client)))
        text = (f"cluster {self.scheduler}" + (f" ({self.address})" if self.address and self.address != self.scheduler
                                               else "")
                + f": {self.workers} worker(s), {self.threads} thread(s); {self.tasks} task(s) run")
        text += f", {self.retried} re-run after a worker was lost" if self.retried else ", none re-run"
        if self.workers_lost:
            text += f"; {self.workers_lost} worker(s) left during the read"
        return text


#: id(client) -> its ClusterUse, while `connect` holds it
_USES: dict[int, ClusterUse] = {}


def cluster_use(client: Any) -> ClusterUse | None:
    """The `ClusterUse` of a client `connect` made (None for another client)."""
    return _USES.get(id(client))


def _worker_threads(client: Any) -> dict[str, int]:
    try:
        return {str(k): int(v) for k, v in client.nthreads().items()}
    except Exception:  # noqa: BLE001 - the scheduler went away
        return {}


def _retried(client: Any, keys: list) -> int:
    """How many of ``keys`` the scheduler marks ``suspicious`` (their worker died while holding or running them:
    they were re-run); 0 when the scheduler cannot be asked."""
    def count(dask_scheduler: Any, keys: list = keys) -> int:
        tasks = dask_scheduler.tasks
        return sum(1 for k in keys if k in tasks and getattr(tasks[k], "suspicious", 0))

    try:
        return int(client.run_on_scheduler(count))
    except Exception:  # noqa: BLE001 - an older scheduler without the counter, a closed connection
        return 0


def _import_distributed():
    try:
        import distributed
    except ImportError:  # pragma: no cover - the dask extra is not installed
        raise ConfigError(f"a Dask scheduler needs dask.distributed: {install_hint('dask')}") from None
    return distributed


def _versions() -> dict[str, str]:
    """What must match between client and workers for the per-partition code to be the same code."""
    import sys

    import dask
    import distributed
    import polars

    from .. import __version__

    return {"vlm-perf": __version__, "python": "%d.%d" % sys.version_info[:2], "dask": dask.__version__,
            "distributed": distributed.__version__, "polars": polars.__version__}


def check_versions(client: Any, where: str) -> None:
    """`ClusterError` naming the first package whose version differs between this client and a worker."""
    mine = _versions()
    try:
        theirs = client.run(_versions)
    except Exception as exc:  # noqa: BLE001 - a worker that cannot even run the check
        raise ClusterError(f"scheduler {where}: the workers cannot run vlm-perf's version check "
                           f"({type(exc).__name__}: {_first_line(exc)}); install the same vlm-perf on them") from None
    for worker, versions in sorted(theirs.items()):
        for name, value in mine.items():
            if versions.get(name) != value:
                raise ClusterError(f"scheduler {where}: worker {worker} runs {name} {versions.get(name)}, this client "
                                   f"{value}; install the same versions on the workers and the client")


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


@contextlib.contextmanager
def scheduled(scheduler: str | None, before: Callable[[], object] | None = None) -> Iterator[Any]:
    """THE ``--scheduler`` dispatch of every command: without a scheduler, yields None (read in this process);
    with one, the text is parsed first (a typo fails before anything is read), then ``before()`` runs (e.g. a missing
    run folder fails before a cluster is started), then the connected client is yielded (`connect`) and closed
    after."""
    if not scheduler:
        yield None
        return
    sched = parse_scheduler(scheduler)
    if before is not None:
        before()
    with connect(sched) as client:
        yield client


@contextlib.contextmanager
def connect(scheduler: Scheduler | str) -> Iterator[Any]:
    """A ``distributed.Client`` for ``scheduler`` (a local cluster is started and closed with it)."""
    sched = parse_scheduler(scheduler) if isinstance(scheduler, str) else scheduler
    timeout = connect_timeout()
    distributed = _import_distributed()
    stack = contextlib.ExitStack()
    with stack:
        try:
            if sched.kind == "local":
                import dask

                stack.enter_context(dask.config.set({"distributed.worker.daemon": False}))
                cluster = stack.enter_context(distributed.LocalCluster(
                    n_workers=sched.workers or (os.cpu_count() or 1), threads_per_worker=1, processes=True,
                    dashboard_address=":0", silence_logs=50, timeout=timeout))
                client = stack.enter_context(distributed.Client(cluster, timeout=timeout, set_as_default=False))
            else:
                kwargs = {"scheduler_file": sched.target} if sched.kind == "file" else {"address": sched.target}
                client = stack.enter_context(_client_within(distributed, sched, kwargs, timeout))
        except VlmPerfError:
            raise
        except Exception as exc:  # noqa: BLE001 - OSError, TimeoutError, MemoryError (a non-Dask reply read as a
            # frame length), ValueError / ImportError (an unknown or uninstalled transport such as ucx://), ...
            raise ClusterError(f"scheduler {sched}: cannot connect within {timeout:g} s "
                               f"({type(exc).__name__}: {_first_line(exc)})") from None
        if sched.kind != "local":
            try:
                client.wait_for_workers(1, timeout=timeout)
            except Exception:  # noqa: BLE001 - TimeoutError (its class moved between distributed versions)
                raise ClusterError(f"scheduler {sched}: no live worker joined within {timeout:g} s; start workers "
                                   "(dask worker ADDRESS) or check that they can reach the scheduler") from None
        check_versions(client, str(sched))
        threads = _worker_threads(client)
        use = ClusterUse(str(sched), str(getattr(getattr(client, "scheduler", None), "address", "") or ""),
                         len(threads), sum(threads.values()), workers_at_start=set(threads))
        _USES[id(client)] = use
        try:
            yield client
        finally:
            _USES.pop(id(client), None)
        import sys

        # which cluster ran (a failed command says its one error line instead)
        print(use.describe(client), file=sys.stderr)


def _client_within(distributed: Any, sched: Scheduler, kwargs: dict, timeout: float) -> Any:
    """``distributed.Client(**kwargs)`` built in a daemon thread that is abandoned after ``timeout`` + `GRACE_S`
    seconds: the client's own timeout does not cover a peer that accepts the connection and then answers
    something other than Dask's handshake (it waits for a frame that never comes).

    The client is never the process's default (``set_as_default=False``: every computation here names its client):
    a default client half-built in an abandoned thread would capture every later ``dask.compute`` of the process
    and wait on a peer that never answers. A client that comes up after the caller gave up is closed."""
    box: dict[str, Any] = {}
    lock = threading.Lock()

    def build() -> None:
        try:
            client = distributed.Client(timeout=timeout, set_as_default=False, **kwargs)
        except BaseException as exc:  # noqa: BLE001 - handed to the caller's thread
            with lock:
                box["error"] = exc
            return
        with lock:
            if not box.get("abandoned"):
                box["client"] = client
                return
        with contextlib.suppress(Exception):
            client.close()

    thread = threading.Thread(target=build, name="vlm-perf-connect", daemon=True)
    thread.start()
    thread.join(timeout + GRACE_S)
    with lock:
        if "client" not in box and "error" not in box:
            box["abandoned"] = True
    if "error" in box:
        raise box["error"]
    if "client" not in box:
        raise ClusterError(f"scheduler {sched}: no Dask scheduler answered within {timeout + GRACE_S:g} s (is it "
                           "the address of a Dask scheduler? an HTTP or other service's port does not answer Dask's "
                           "handshake)")
    return box["client"]


def _live_workers(client: Any) -> int:
    try:
        return len(client.nthreads())
    except Exception:  # noqa: BLE001 - the scheduler itself went away: no worker either
        return 0


def done_in_turn(client: Any, futures: list, timeout: float | None = None) -> Iterator[tuple[int, Any]]:
    """``(index, result)`` of each of ``futures`` as it finishes (a failed task raises its error here). Waits in
    polls of `POLL_S` seconds; when the cluster has had no live worker for ``timeout`` seconds (default:
    `connect_timeout`) the wait ends in a `ClusterError` instead of lasting forever."""
    distributed = _import_distributed()
    limit = connect_timeout() if timeout is None else timeout
    remaining = dict(enumerate(futures))
    alone_since: float | None = None
    use = cluster_use(client)
    if use is not None:
        use.tasks += len(futures)
    if use is not None and futures:  # asked once every task is done, before the caller releases them
        remaining_keys = [f.key for f in futures]
    while remaining:
        try:
            with client.as_current():  # distributed.wait looks up the default client; ours is never the default
                distributed.wait(list(remaining.values()), timeout=POLL_S, return_when="FIRST_COMPLETED")
        except Exception as exc:  # noqa: BLE001 - the poll's timeout (TimeoutError; its class varies)
            if "timeout" not in type(exc).__name__.lower() and not isinstance(exc, TimeoutError):
                raise
        finished = [i for i, f in remaining.items() if f.done()]
        if use is not None and futures and len(finished) == len(remaining):
            use.retried += _retried(client, remaining_keys)
        for i in finished:
            yield i, remaining.pop(i).result()
        if finished or _live_workers(client):
            alone_since = None
            continue
        now = time.monotonic()
        alone_since = now if alone_since is None else alone_since
        if now - alone_since >= limit:
            raise ClusterError(f"the Dask cluster has had no live worker for {limit:g} s with {len(remaining)} "
                               "task(s) left; the workers died or left (memory? a killed job?): restart them and "
                               "rerun")


def gather_in_order(client: Any, futures: list, what: Callable[[int], str],
                     on_done: Callable[[int], None] = lambda i: None) -> list:
    """Results of ``futures`` in their order, fetched as each finishes; a worker failure is a `ClusterError`."""
    results: list = [None] * len(futures)
    try:
        for i, result in done_in_turn(client, futures):
            results[i] = result
            on_done(i)
    except VlmPerfError:
        raise
    except Exception as exc:  # noqa: BLE001 - KilledWorker, CommClosedError, a worker's MemoryError, ...
        failed = next((i for i, f in enumerate(futures) if f.status == "error"), None)
        place = f" reading {what(failed)}" if failed is not None else ""
        raise ClusterError(f"a Dask worker failed{place}: {type(exc).__name__}: {_first_line(exc)}") from None
    finally:
        for f in futures:
            f.release()
    return results


# ------------------------------------------------------------------------------------ metadata
#: Default input bytes per metadata partition (consecutive shards are grouped up to this size).
DEFAULT_PARTITION_BYTES = 256 << 20
#: Automatic sizing: aim for this many partitions per worker thread, none below MIN_PARTITION_BYTES.
TASKS_PER_THREAD = 4
MIN_PARTITION_BYTES = 16 << 20


def plan_partitions(files: Sequence[str], files_per_partition: int | None = None,
                    partition_bytes: int = DEFAULT_PARTITION_BYTES,
                    sizes: Sequence[int] | None = None) -> list[list[str]]:
    """Consecutive groups of shards: ``files_per_partition`` each, or (default) by input size (``sizes``, else one
    stat per shard), closing a group once it holds ``partition_bytes``. File order is preserved."""
    from ..remote import as_path

    if files_per_partition is not None:
        if files_per_partition < 1:
            raise ConfigError("files_per_partition must be >= 1")
        return [list(files[i:i + files_per_partition]) for i in range(0, len(files), files_per_partition)]
    groups: list[list[str]] = []
    cur: list[str] = []
    size = 0
    for k, name in enumerate(files):
        cur.append(name)
        size += sizes[k] if sizes is not None else as_path(name).stat().st_size
        if size >= partition_bytes:
            groups.append(cur)
            cur, size = [], 0
    if cur:
        groups.append(cur)
    return groups


def auto_partition_bytes(sizes: Sequence[int], client: Any) -> int:
    """`DEFAULT_PARTITION_BYTES`, or less so that each worker thread of ``client`` (None: this machine's CPUs) gets
    ~`TASKS_PER_THREAD` tasks (a run split into as many partitions as workers leaves workers idle while the last
    ones finish)."""
    threads = (os.cpu_count() or 1) if client is None else max(1, sum(_worker_threads(client).values()))
    per_task = sum(sizes) // (TASKS_PER_THREAD * threads)
    return int(min(DEFAULT_PARTITION_BYTES, max(MIN_PARTITION_BYTES, per_task)))


def _metadata_partial(files: Sequence[str], offset: int, spec: "ModelSpec | None", skip_bad: bool, per_rank: bool,
                      row_columns: Mapping[str, Callable] | None) -> Any:
    """Map task: the single-machine pass over ``files`` (shards ``offset``.. of the run), without its finish
    (`MetadataSource.read_partition`); the error it raises is handed back as data, so that the merge raises the
    first one in file order."""
    from ..ingest.metadata_source import MetadataPartition, MetadataSource

    source = MetadataSource(files, spec, skip_bad=skip_bad, per_rank=per_rank, row_columns=row_columns,
                            prefetch=False)
    try:
        return source.read_partition(offset)
    except VlmPerfError as exc:
        return MetadataPartition(error=exc)


def read_metadata(client: Any, paths: Any, spec: "ModelSpec | None" = None, *, skip_bad: bool = False,
                  per_rank: bool = False, row_columns: Mapping[str, Callable] | None = None,
                  progress: Callable[[int, int], None] | None = None, files_per_partition: int | None = None,
                  partition_bytes: int | None = None) -> Any:
    """THE partitioned metadata reader: a read `MetadataSource` equal to ``MetadataSource(paths, spec, ...).read()``
    (every output, diagnostic and error), its partitions read on ``client``.

    ``paths``: files, folders, globs or URLs, expanded as the single pass expands them. Partitions: consecutive
    shards, ``files_per_partition`` each, else grouped up to ``partition_bytes`` of input (default: about
    `TASKS_PER_THREAD` per worker thread, `auto_partition_bytes`). Each is read by `MetadataSource.read_partition`
    on a worker (a URL shard streamed there); the client merges the states in file order with the source's own
    finish (`MetadataSource.finish_partitions`). ``client``: a ``distributed.Client``; None: the current default
    client if there is one, else the partitions are read in this process, one after another (the same map and
    merge). ``progress(done_bytes, total_bytes)``: called as partitions finish (input bytes of the finished ones).
    """
    from ..ingest.metadata_source import MetadataSource

    if client is None:
        client = _default_client()
    whole = MetadataSource(paths, spec, skip_bad=skip_bad, per_rank=per_rank, row_columns=row_columns)
    files = [str(p) for p in whole.files]
    sizes = [p.stat().st_size for p in whole.files]  # once: a HEAD request each for URLs
    chosen = partition_bytes if partition_bytes is not None else auto_partition_bytes(sizes, client)
    groups = plan_partitions(files, files_per_partition, chosen, sizes)
    offsets, start = [], 0
    for group in groups:
        offsets.append(start)
        start += len(group)
    total = sum(sizes)
    group_bytes = [sum(sizes[o:o + len(g)]) for o, g in zip(offsets, groups)]
    done = [0]

    def on_done(i: int) -> None:
        done[0] += group_bytes[i]
        if progress is not None:
            progress(done[0], total)

    row_columns = dict(row_columns or {})
    if client is None:
        parts = []
        for i, (group, offset) in enumerate(zip(groups, offsets)):
            parts.append(_metadata_partial(group, offset, spec, skip_bad, per_rank, row_columns))
            on_done(i)
    else:
        futures = [client.submit(_metadata_partial, group, offset, spec, skip_bad, per_rank, row_columns,
                                 key=f"vlm-perf-metadata-{os.getpid()}-{id(whole)}-{i}", pure=False)
                   for i, (group, offset) in enumerate(zip(groups, offsets))]
        parts = gather_in_order(client, futures, lambda i: f"metadata shards {groups[i][0]} ..", on_done)
    return whole.finish_partitions(parts, total)


def _default_client() -> Any:
    """The current default ``distributed`` client, or None (no distributed install, or no client)."""
    try:
        from distributed import default_client

        return default_client()
    except (ImportError, ValueError):
        return None


# ------------------------------------------------------------------------------------ logs
def parse_logs_on(client: Any, paths: Sequence[str | Path], format: str = "auto", *, empty_ok: bool = False):
    """``parse_logs(paths, format)`` with one task per log file on ``client`` (`parse_logs_dask`)."""
    from .dask_backend import parse_logs_dask

    try:
        return parse_logs_dask(list(paths), format=format, client=client, empty_ok=empty_ok)
    except VlmPerfError:
        raise
    except Exception as exc:  # noqa: BLE001 - KilledWorker, CommClosedError, ...: the cluster, not the input
        raise ClusterError(f"a Dask worker failed parsing the logs: {type(exc).__name__}: {_first_line(exc)}") \
            from None


# ------------------------------------------------------------------------------------ traces
def read_traces_on(client: Any, paths: Any) -> Any:
    """``read_traces(paths)`` with one task per trace file on ``client``: the files are listed here (`trace_files`),
    each is read by `read_trace` on a worker (a URL is opened there), and the partials are merged in file order by
    the single machine's ``merge_partials``; the first file's error is raised, as ``read_traces`` raises it."""
    from ..ingest.traces import merge_partials, read_trace, trace_files

    files = trace_files(paths)
    futures = [client.submit(read_trace, f, i, key=f"vlm-perf-trace-{os.getpid()}-{id(files)}-{i}", pure=False)
               for i, f in enumerate(files)]
    merged = merge_partials(gather_in_order(client, futures, lambda i: f"trace {files[i]}"))
    merged.raise_error()
    return merged
