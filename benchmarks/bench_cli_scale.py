"""Benchmark: the CLI ``vlm-perf report`` at the issue's scale, single machine vs ``--scheduler local:1|local:2``.

    python benchmarks/bench_cli_scale.py [--shards 256] [--rows-per-shard 125000] [--iterations 2000000]
        [--log-files 8] [--repeats 1] [--data-dir DIR] [--write-docs] [--keep]

Workload (SYNTHETIC, generated into ``--data-dir``, default /tmp/vlm-perf-cli-scale, never into git; deleted
at the end unless ``--keep``): one run folder with ``metadata/`` (``--shards`` per-rank JSONL shards of
``--rows-per-shard`` rows, numpy seed = rank, every row valid for the model), ``logs/`` (``--iterations``
Megatron iteration lines split in ``--log-files`` files, ``bench_scale.py``'s log generator) and a ``run.yaml``
naming the model. The defaults are the issue's scale: 32,000,000 metadata rows in 256 shards, 2,000,000 iterations.

Each configuration runs ``vlm-perf report RUN -o OUT [--scheduler local:N]`` as its own subprocess; this parent
samples ``/proc/<pid>/status`` (VmRSS) of the CLI process and of every descendant (the Dask nanny and
worker processes) every 50 ms and reports each process's peak RSS and the peak of their sum. Wall time is the
whole command (interpreter start, imports, cluster start-up included). ``summary.json`` of every configuration is
compared with the single machine's after removing the timing fields (`TIMING_KEYS`).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import subprocess
import sys
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from _docs import replace_section  # noqa: E402  (benchmarks/_docs.py)

ROOT = Path(__file__).resolve().parents[1]
SECTION = "## CLI at scale (`--scheduler`)"
NOTES = "<!-- notes: kept by bench_cli_scale.py -->"  # hand-written analysis after the tables survives a rerun
CONFIGS = {"single": [], "local:1": ["--scheduler", "local:1"], "local:2": ["--scheduler", "local:2"]}
RUN_YAML = ("# SYNTHETIC: benchmarks/bench_cli_scale.py\nmodel: qwen2.5-vl-7b\ngpu: H100-SXM\ndtype: bf16\n"
            "synthetic: true\n")


# ---------------------------------------------------------------------------------------- data
MICROBATCHES = 8
MERGE = 2  # qwen2.5-vl-7b's spatial merge: a T x H x W grid is T * H/2 * W/2 LM placeholder tokens


def _gen_shard(path: Path, rank: int, rows: int, seed: int) -> None:
    """One rank's shard: ``rows // 8`` iterations x 8 microbatches; 40% text-only rows, 45% with 1-4 images,
    15% with one video; 1-6 packed documents per row, the first one holding the row's visual placeholder
    tokens (so every row is valid for qwen2.5-vl-7b: LM tokens >= visual tokens)."""
    import numpy as np
    import polars as pl
    import pyarrow as pa

    rng = np.random.default_rng(seed)
    idx = np.arange(rows, dtype=np.int64)
    kind = rng.choice(3, size=rows, p=[0.40, 0.45, 0.15])

    def lists(counts, values, mask=None):
        off = np.zeros(len(counts) + 1, dtype=np.int32)
        np.cumsum(counts, out=off[1:])
        return pa.ListArray.from_arrays(pa.array(off), values, mask=None if mask is None else pa.array(mask))

    def grids(per_row, t_lo, t_hi, lo, hi, mask):
        n = int(per_row.sum())
        t = rng.integers(t_lo, t_hi + 1, n)
        h, w = rng.integers(lo, hi + 1, n) * 2, rng.integers(lo, hi + 1, n) * 2
        tokens = t * (h // MERGE) * (w // MERGE)
        csum = np.concatenate([[0], np.cumsum(tokens)])
        ends = np.cumsum(per_row)
        per = csum[ends] - csum[ends - per_row]  # visual tokens of each row's items
        thw = np.stack([t, h, w], axis=1).reshape(-1)
        return lists(per_row, lists(np.full(n, 3), pa.array(thw)), mask), per

    n_img = np.where(kind == 1, rng.integers(1, 5, size=rows), 0)
    n_vid = np.where(kind == 2, 1, 0)
    images, img_tokens = grids(n_img, 1, 1, 4, 40, kind != 1)
    videos, vid_tokens = grids(n_vid, 2, 16, 4, 24, kind != 2)
    n_docs = rng.integers(1, 7, size=rows)
    docs = rng.integers(64, 1400, size=int(n_docs.sum()))
    first = np.concatenate([[0], np.cumsum(n_docs)[:-1]])
    docs[first] += img_tokens + vid_tokens
    tokens = np.add.reduceat(docs, first)
    table = pa.table({
        "schema_version": pa.array(np.ones(rows, dtype=np.int64)),
        "iteration": pa.array(idx // MICROBATCHES + 1), "microbatch": pa.array(idx % MICROBATCHES),
        "dp_rank": pa.array(np.full(rows, rank, dtype=np.int64)),
        "seq_lens": lists(n_docs, pa.array(docs)), "padded_tokens": pa.array((tokens + 1023) // 1024 * 1024),
        "image_grid_thw": images, "video_grid_thw": videos,
    })
    pl.from_arrow(table).write_ndjson(path)


def generate(data: Path, shards: int, per_shard: int, iterations: int, log_files: int) -> dict:
    """The run folder (resumable: finished files are kept; a shard is written to ``.tmp`` and renamed)."""
    from bench_scale import _gen_log

    md, logs = data / "metadata", data / "logs"
    md.mkdir(parents=True, exist_ok=True)
    logs.mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter()
    for r in range(shards):
        p = md / f"metadata-rank{r:05d}.jsonl"
        if not p.exists():
            tmp = p.with_suffix(".tmp")
            _gen_shard(tmp, r, per_shard, seed=r)
            tmp.rename(p)
    step = iterations // log_files
    for k in range(log_files):
        p = logs / f"train-attempt{k + 1:02d}.log"
        if not p.exists():
            tmp = p.with_suffix(".tmp")
            _gen_log(tmp, k * step + 1, (k + 1) * step, banner=k > 0)
            tmp.rename(p)
    (data / "run.yaml").write_text(RUN_YAML)
    return {"seconds": time.perf_counter() - t0, "rows": shards * per_shard, "shards": shards,
            "iterations": step * log_files, "log_files": log_files,
            "metadata_bytes": sum(p.stat().st_size for p in md.iterdir()),
            "log_bytes": sum(p.stat().st_size for p in logs.iterdir())}


# --------------------------------------------------------------------------------- measurement
def _rss_kb(pid: int) -> int:
    try:
        with open(f"/proc/{pid}/status") as fh:
            for line in fh:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1])
    except OSError:
        pass
    return 0


class _Sampler:
    """Peak VmRSS of a process and of each descendant, and the peak of their sum (/proc, every 50 ms); the CPU
    seconds (user + system) each process had used when last seen."""

    def __init__(self, pid: int) -> None:
        import psutil

        self.proc = psutil.Process(pid)
        self.peaks: dict[int, tuple[str, int]] = {}
        self.cpu: dict[int, float] = {}
        self.peak_sum = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        import psutil

        while not self._stop.wait(0.05):
            try:
                procs = [self.proc] + self.proc.children(recursive=True)
            except psutil.Error:
                continue
            total = 0
            for p in procs:
                rss = _rss_kb(p.pid)
                total += rss
                role = self.peaks.get(p.pid, ("other", 0))[0]
                if role == "other":  # asked again until known: a child seen before its exec still shows our command
                    try:
                        role = _role(" ".join(p.cmdline()), p.pid == self.proc.pid)
                    except psutil.Error:
                        pass
                self.peaks[p.pid] = (role, max(rss, self.peaks.get(p.pid, ("", 0))[1]))
                try:
                    t = p.cpu_times()
                    self.cpu[p.pid] = t.user + t.system
                except psutil.Error:
                    pass
            self.peak_sum = max(self.peak_sum, total)

    def stop(self) -> None:
        self._stop.set()
        self._thread.join()


def _role(cmd: str, is_client: bool) -> str:
    if is_client:
        return "client"
    if "spawn_main" in cmd:
        return "worker"  # Dask's nanny (inside the client process) starts each worker with multiprocessing spawn
    return "other"


def measure(name: str, data: Path, out: Path) -> dict:
    cmd = [sys.executable, "-m", "vlm_perf.cli", "report", str(data), "-o", str(out), *CONFIGS[name]]
    env = dict(os.environ)
    load = os.getloadavg()[0]
    t0 = time.perf_counter()
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, env=env)
    sampler = _Sampler(proc.pid)
    _, err = proc.communicate()
    wall = time.perf_counter() - t0
    sampler.stop()
    if proc.returncode:
        return {"failed": proc.returncode, "stderr": err[-2000:], "load_before": load}
    procs = sorted(((role, kb, sampler.cpu.get(pid, 0.0)) for pid, (role, kb) in sampler.peaks.items()),
                   key=lambda r: (r[0] != "client", r[0], -r[1]))
    return {"wall_s": wall, "peak_sum_mb": sampler.peak_sum / 1024, "load_before": load,
            "load_after": os.getloadavg()[0],
            "processes": [{"role": role, "peak_rss_mb": kb / 1024, "cpu_s": cpu} for role, kb, cpu in procs
                          if kb > 20 * 1024]}


TIMING_KEYS = ("timings", "timing", "elapsed", "seconds", "generated_at", "created", "vlm_perf_version")


def _strip(obj):
    if isinstance(obj, dict):
        return {k: _strip(v) for k, v in obj.items() if k not in TIMING_KEYS}
    if isinstance(obj, list):
        return [_strip(v) for v in obj]
    return obj


def same_summary(a: Path, b: Path) -> str:
    """"bytes" (byte for byte), "values" (equal once `TIMING_KEYS` are removed) or "" (different)."""
    if (a / "summary.json").read_bytes() == (b / "summary.json").read_bytes():
        return "bytes"
    load = lambda p: _strip(json.loads((p / "summary.json").read_text()))  # noqa: E731
    return "values" if load(a) == load(b) else ""


# ------------------------------------------------------------------------------------- report
def render(gen: dict, res: dict[str, list[dict]], same: dict[str, str | None], load0: float) -> str:
    lines = [
        f"`python benchmarks/bench_cli_scale.py --shards {gen['shards']} --rows-per-shard "
        f"{gen['rows'] // gen['shards']} --iterations {gen['iterations']} --log-files {gen['log_files']}` on "
        f"{platform.machine()}, {os.cpu_count()} CPUs, Python {platform.python_version()}. SYNTHETIC run: "
        f"{gen['rows']:,} metadata rows in {gen['shards']} per-rank JSONL shards "
        f"({gen['metadata_bytes'] / 1e9:,.1f} GB), {gen['iterations']:,} Megatron iterations in {gen['log_files']} "
        f"log files ({gen['log_bytes'] / 1e6:,.0f} MB), run.yaml naming qwen2.5-vl-7b. The machine's 2 CPUs are "
        f"SHARED with other developers' jobs: 1-minute load average {load0:.1f} before the first run, per run "
        "below. Wall time = the whole `vlm-perf report` command (start-up, imports, cluster start included); "
        "peak RSS per process from /proc every 50 ms (client = the CLI process, which also runs the Dask scheduler "
        "and nannies of `local:N`; workers = the Dask worker processes); CPU s = user + system seconds of each "
        "process when last sampled.", "",
        "| configuration | run | wall (s) | load before / after | peak RSS client (MB) | peak RSS workers (MB) "
        "| peak RSS sum (MB) | CPU s client / workers | summary.json = single machine |",
        "|---|---:|---:|---|---:|---|---:|---|---|",
    ]
    for name, runs in res.items():
        for i, r in enumerate(runs):
            if "failed" in r:
                lines.append(f"| `{' '.join(CONFIGS[name]) or '(none)'}` | {i + 1} | FAILED (exit {r['failed']}) "
                             "| | | | | | |")
                continue
            client = [p["peak_rss_mb"] for p in r["processes"] if p["role"] == "client"]
            workers = [p["peak_rss_mb"] for p in r["processes"] if p["role"] == "worker"]
            cpu = " / ".join([f"{sum(p.get('cpu_s', 0) for p in r['processes'] if p['role'] == 'client'):,.0f}"]
                             + [f"{p.get('cpu_s', 0):,.0f}" for p in r["processes"] if p["role"] == "worker"])
            mark = {"bytes": "yes, byte for byte", "values": "yes (timing keys removed)", "": "**NO**",
                    None: "(reference)"}[same.get(name)]
            lines.append(f"| `{' '.join(CONFIGS[name]) or 'single machine'}` | {i + 1} | {r['wall_s']:,.1f} "
                         f"| {r['load_before']:.1f} / {r['load_after']:.1f} | {client[0] if client else 0:,.0f} "
                         f"| {', '.join(f'{w:,.0f}' for w in workers) or '-'} | {r['peak_sum_mb']:,.0f} | {cpu} | {mark} |")
    lines.append("")
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--shards", type=int, default=256)
    ap.add_argument("--rows-per-shard", type=int, default=125_000)
    ap.add_argument("--iterations", type=int, default=2_000_000)
    ap.add_argument("--log-files", type=int, default=8)
    ap.add_argument("--repeats", type=int, default=1)
    ap.add_argument("--only", default=",".join(CONFIGS), help="comma-separated configurations")
    ap.add_argument("--data-dir", type=Path, default=Path("/tmp/vlm-perf-cli-scale"))
    ap.add_argument("--generate-only", action="store_true")
    ap.add_argument("--keep", action="store_true", help="keep the generated run (default: delete it at the end)")
    ap.add_argument("--write-docs", action="store_true")
    args = ap.parse_args()
    data = args.data_dir
    load0 = os.getloadavg()[0]
    gen = generate(data, args.shards, args.rows_per_shard, args.iterations, args.log_files)
    print(json.dumps(gen), file=sys.stderr)
    if args.generate_only:
        return
    names = args.only.split(",")
    res: dict[str, list[dict]] = {n: [] for n in names}
    try:
        for rep in range(args.repeats):
            for name in names:
                info = measure(name, data, data.with_name(f"{data.name}.out-{name.replace(':', '')}"))
                res[name].append(info)
                print(f"{name} #{rep}: {json.dumps(info)}", file=sys.stderr, flush=True)
        ref = data.with_name(f"{data.name}.out-single")
        same: dict[str, str | None] = {}
        for n in names:
            out = data.with_name(f"{data.name}.out-{n.replace(':', '')}")
            ok = (out / "summary.json").exists() and (ref / "summary.json").exists()
            same[n] = None if n == "single" else (same_summary(ref, out) if ok else "")
        block = render(gen, res, same, load0)
        print(block)
        if args.write_docs:
            replace_section(SECTION, SECTION + "\n\n" + block, NOTES)
    finally:
        if not args.keep:
            shutil.rmtree(data, ignore_errors=True)
            for n in names:
                shutil.rmtree(data.with_name(f"{data.name}.out-{n.replace(':', '')}"), ignore_errors=True)


if __name__ == "__main__":
    main()
