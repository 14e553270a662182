"""Benchmark: out-of-core and distributed ingest (per-rank metadata shards + multi-file console logs).

    python benchmarks/bench_scale.py --size small|10m|huge [--repeats 3] [--write-docs] [--data-dir DIR]

Workloads (generated once into ``--data-dir``, default /tmp/vlm-perf-scale-<size>, and reused):

=========  ========================================  ===========================================
size       metadata (per-rank JSONL shards)          console log (Megatron lines, split in files)
=========  ========================================  ===========================================
small      16 shards, 500,000 rows (~84 MB)          20,000 iterations, 2 files
10m        64 shards, 10,000,000 rows (~1.7 GB)      1,000,000 iterations, 4 files (~360 MB)
huge       128 shards, 32,000,000 rows (~5.4 GB)     2,000,000 iterations, 8 files (~0.7 GB)
=========  ========================================  ===========================================

Every measurement runs in its own subprocess. Peak memory = the highest SUM over the process tree
(the measured process and its Dask worker processes) of VmRSS and of RssAnon, sampled from /proc
every 20 ms by this parent; ``os.wait4`` also gives the measured process's own peak RSS. Times are
measured inside the child around the work (imports and Dask cluster start-up excluded; start-up is
reported separately). ``huge`` runs every metadata measurement under ``RLIMIT_AS`` (address space,
inherited by Dask worker processes) smaller than the input, so a path that loads its input into
memory fails instead of passing (with ``MALLOC_ARENA_MAX=2``: glibc reserves 64 MB of address space
per thread arena, which a thread-rich Dask worker would otherwise exhaust with ~300 MB in use); the ``--size huge`` data are not bigger than this machine's RAM
(24 GB; generating more would crowd other users), the cap is what makes them "not fit".

Measurements (metadata): bare polars scan of the same shards parsing every schema column (the
engine's limit), ``iteration_stats`` (ours), plain pandas (chunked ``read_json`` + explode + groupby,
same 15 statistics, no validation; on the first shards only, extrapolated linearly), and
``aggregate_metadata_dask`` on a ``LocalCluster`` of 1 and 2 worker processes. Logs: bare polars
line scan (every line materialised as a string, summed byte length), ``parse_logs``, ``parse_logs_dask`` on 1 and 2 workers.
Results of every path are compared with ``iteration_stats`` / ``parse_logs`` (``frame.equals``).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SECTION = "## Scale"
SIZES = {
    #        shards, rows/shard, log iterations, log files, RLIMIT_AS cap (GiB) or None, pandas shards
    "small": (16, 31_250, 20_000, 2, None, 2),
    "10m": (64, 156_250, 1_000_000, 4, None, 2),
    "huge": (128, 250_000, 2_000_000, 8, 2, 1),
}
MICROBATCHES = 8


# ---------------------------------------------------------------------------------------- data
def _gen_shard(path: Path, rank: int, rows: int, seed: int) -> None:
    """One rank's shard: ``rows // 8`` iterations x 8 microbatches; 40% text-only rows, 45% with
    1-4 images, 15% with one video; 1-6 packed documents per row."""
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

    n_docs = rng.integers(1, 7, size=rows)
    docs = rng.integers(64, 1400, size=int(n_docs.sum()))
    tokens = np.add.reduceat(docs, np.concatenate([[0], np.cumsum(n_docs)[:-1]]))

    def grids(per_row, t_lo, t_hi, lo, hi, mask):
        n = int(per_row.sum())
        thw = np.stack([rng.integers(t_lo, t_hi + 1, n), rng.integers(lo, hi + 1, n) * 2,
                        rng.integers(lo, hi + 1, n) * 2], axis=1).reshape(-1)
        return lists(per_row, lists(np.full(n, 3), pa.array(thw)), mask)

    n_img = np.where(kind == 1, rng.integers(1, 5, size=rows), 0)
    n_vid = np.where(kind == 2, 1, 0)
    table = pa.table({
        "schema_version": pa.array(np.ones(rows, dtype=np.int64)),
        "iteration": pa.array(idx // MICROBATCHES + 1), "microbatch": pa.array(idx % MICROBATCHES),
        "dp_rank": pa.array(np.full(rows, rank, dtype=np.int64)),
        "seq_lens": lists(n_docs, pa.array(docs)), "padded_tokens": pa.array((tokens + 1023) // 1024 * 1024),
        "image_grid_thw": grids(n_img, 1, 1, 4, 40, kind != 1), "video_grid_thw": grids(n_vid, 2, 16, 4, 24, kind != 2),
    })
    pl.from_arrow(table).write_ndjson(path)


def _gen_log(path: Path, first: int, last: int, banner: bool) -> None:
    """Megatron iteration lines (rank-0 prefix, timestamps) for iterations first..last, a timer line
    every 100 iterations, and a checkpoint-load banner at the top of every file after the first."""
    import numpy as np
    import polars as pl

    it = np.arange(first, last + 1, dtype=np.int64)
    rng = np.random.default_rng(first)
    df = pl.DataFrame({"it": it, "ms": rng.uniform(900, 1100, len(it)).round(1),
                       "loss": rng.uniform(1.0, 3.0, len(it)), "gn": rng.uniform(0.1, 2.0, len(it)).round(3)})
    main = df.select(
        pl.col("it").cast(pl.Float64).alias("k"),
        pl.format("[default7]: [2025-09-14 08:{}:{}] iteration {}/ 9999999 | consumed samples: {} | "
                  "elapsed time per iteration (ms): {} | throughput per GPU (TFLOP/s/GPU): 412.3 | "
                  "learning rate: 1.000000E-05 | global batch size:   512 | lm loss: {} | loss scale: 1.0 | "
                  "grad norm: {} | number of skipped iterations:   0 | number of nan iterations:   0 |",
                  (pl.col("it") // 60 % 60).cast(pl.Utf8).str.zfill(2), (pl.col("it") % 60).cast(pl.Utf8).str.zfill(2),
                  pl.col("it").cast(pl.Utf8).str.pad_start(8), (pl.col("it") * 512).cast(pl.Utf8).str.pad_start(12),
                  pl.col("ms"), pl.col("loss").round(6), pl.col("gn")).alias("text"))
    timers = df.filter(pl.col("it") % 100 == 0).select(
        (pl.col("it").cast(pl.Float64) + 0.5).alias("k"),
        pl.format("[default0]:    forward-backward ...............................: ({}, {})",
                  pl.col("ms"), pl.col("ms") + 3).alias("text"))
    parts = [main, timers]
    if banner:
        parts.append(pl.DataFrame({"k": [first - 0.5], "text": [
            f"[default0]: successfully loaded checkpoint from /ckpt [ t 1/4, p 1/2 ] at iteration {first - 1}"]}))
    out = pl.concat(parts).sort("k").select("text")
    out.write_csv(path, include_header=False, quote_style="never")


def generate(size: str, data: Path) -> dict:
    shards, per_shard, log_its, log_files, _, _ = SIZES[size]
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
    step = log_its // log_files
    for k in range(log_files):
        p = logs / f"train-attempt{k + 1:02d}.log"
        if not p.exists():
            _gen_log(p, k * step + 1, (k + 1) * step, banner=k > 0)
    return {"seconds": time.perf_counter() - t0,
            "metadata_bytes": sum(p.stat().st_size for p in md.iterdir()),
            "log_bytes": sum(p.stat().st_size for p in logs.iterdir())}


# --------------------------------------------------------------------------------- measurements
def _files(data: Path, kind: str) -> list[str]:
    sub = "metadata" if kind == "md" else "logs"
    return sorted(str(p) for p in (data / sub).iterdir())


def _pandas(files: list[str]) -> dict:
    """Plain pandas, no validation: the same 15 per-iteration statistics (merge 2, no windows)."""
    import numpy as np
    import pandas as pd

    out = []
    rows = 0
    for f in files:
        for chunk in pd.read_json(f, lines=True, chunksize=250_000):
            rows += len(chunk)
            g = chunk.groupby("iteration")
            res = pd.DataFrame({"lm_padded_tokens": g["padded_tokens"].sum(), "microbatches": g.size()})
            seq = chunk[["iteration", "seq_lens"]].explode("seq_lens").dropna()
            s = seq["seq_lens"].astype(np.int64)
            lm = pd.DataFrame({"iteration": seq["iteration"], "lm_tokens": s, "lm_tokens_sq": s * s,
                               "lm_sequences": 1}).groupby("iteration").sum()
            res = res.join(lm)
            res["lm_samples"] = res["lm_sequences"]
            for col, is_video in (("image_grid_thw", 0), ("video_grid_thw", 1)):
                g2 = chunk[["iteration", col]].explode(col).dropna()
                if g2.empty:
                    continue
                thw = np.array(g2[col].tolist(), dtype=np.int64)
                t, h, w = thw[:, 0], thw[:, 1], thw[:, 2]
                p = t * h * w
                sq = t * (h * w) ** 2
                m = t * (h // 2) * (w // 2)
                v = pd.DataFrame({"iteration": g2["iteration"].to_numpy(), "vision_patches": p,
                                  "vision_patches_sq_frame": sq, "vision_patches_sq_item": p * p,
                                  "vision_merged_tokens": m, "vision_window_sq": sq, "vision_frames": t,
                                  "vision_items": 1, "video_patches": p * is_video,
                                  "video_patches_sq_frame": sq * is_video, "video_merged_tokens": m * is_video})
                res = res.add(v.groupby("iteration").sum(), fill_value=0)
            out.append(res)
    total = pd.concat(out).groupby(level=0).sum()
    return {"rows": rows, "iterations": len(total)}


def _cluster(workers: int):
    """A LocalCluster of ``workers`` processes splitting this machine's cores between them."""
    from dask.distributed import Client, LocalCluster

    cores = os.cpu_count() or 1
    os.environ["POLARS_MAX_THREADS"] = str(max(1, cores // workers))  # inherited by worker processes
    cluster = LocalCluster(n_workers=workers, threads_per_worker=1, processes=True, dashboard_address=None,
                           silence_logs=50, memory_limit=0)
    return cluster, Client(cluster)


def _child(name: str, data: Path, out: Path, pandas_shards: int) -> dict:
    import polars as pl

    info: dict = {}
    kind, _, what = name.partition(":")
    files = _files(data, kind)
    client = cluster = None
    if what.startswith("dask"):
        t0 = time.perf_counter()
        cluster, client = _cluster(int(what[4:]))
        info["startup_s"] = time.perf_counter() - t0
    import resource

    r0 = resource.getrusage(resource.RUSAGE_SELF)
    t0 = time.perf_counter()
    if name == "md:scan":
        from vlm_perf.ingest.metadata import SCHEMA

        pl.scan_ndjson(files, schema=SCHEMA).select(pl.all().null_count()).collect(engine="streaming")
    elif name == "md:ours":
        from vlm_perf.ingest.metadata import iteration_stats

        frame = iteration_stats(data / "metadata").frame
    elif name == "md:pandas":
        info.update(_pandas(files[:pandas_shards]))
    elif what.startswith("dask") and kind == "md":
        from vlm_perf.scale import aggregate_metadata_dask

        frame = aggregate_metadata_dask(data / "metadata", client=client).frame
    elif name == "log:scan":
        n = (pl.scan_csv(files, has_header=False, separator="\x1f", quote_char=None, schema={"text": pl.Utf8},
                         encoding="utf8-lossy", truncate_ragged_lines=True)
             .select(pl.col("text").str.len_bytes().sum()).collect(engine="streaming").item())
        info["text_bytes"] = int(n)
    elif name == "log:ours":
        from vlm_perf.ingest.logs import parse_logs

        frame = parse_logs(files).iterations
    elif name == "log:partials":
        info.update(_partials_breakdown(files))
    elif what.startswith("dask") and kind == "log":
        from vlm_perf.scale import parse_logs_dask

        frame = parse_logs_dask(files, client=client).iterations
    else:
        raise SystemExit(f"unknown measurement {name}")
    info["seconds"] = time.perf_counter() - t0
    r1 = resource.getrusage(resource.RUSAGE_SELF)
    if client is None:  # CPU seconds of this process per wall second: >1 = parallel (2 CPUs here)
        info["cpu_per_wall"] = (r1.ru_utime - r0.ru_utime + r1.ru_stime - r0.ru_stime) / info["seconds"]
    if "frame" in locals():
        frame.write_ipc(out)
        info["result_rows"] = frame.height
    if client is not None:
        client.close()
        cluster.close()
    return info


def _partials_breakdown(files: list[str]) -> dict:
    """Where the Dask log path's extra time goes, in one process: the map (``parse_file_partial``
    per file, as a worker runs it), pickling the partials as Dask does (protocol 5, out-of-band
    buffers: what a worker sends), unpickling them (the client) and the one ``finish``; bytes sent
    per record (in-band + out-of-band)."""
    import pickle

    from vlm_perf.ingest.logs.partial import finish, merge_partials, parse_file_partial

    t0 = time.perf_counter()
    parts = [parse_file_partial(f, i) for i, f in enumerate(files)]
    t1 = time.perf_counter()
    pickled = []  # as Dask pickles a result: protocol 5, buffers out of band
    for p in parts:
        buffers: list = []
        pickled.append((pickle.dumps(p, protocol=5, buffer_callback=buffers.append), buffers))
    t2 = time.perf_counter()
    parts = [pickle.loads(blob, buffers=buffers) for blob, buffers in pickled]
    t3 = time.perf_counter()
    finish(merge_partials(parts))
    t4 = time.perf_counter()
    records = sum(p.records for p in parts)
    size = sum(len(blob) + sum(b.raw().nbytes for b in buffers) for blob, buffers in pickled)
    return {"map_s": t1 - t0, "pickle_s": t2 - t1, "unpickle_s": t3 - t2, "finish_s": t4 - t3,
            "pickled_mb": size / 1e6, "bytes_per_record": size / max(records, 1)}


class _TreeSampler:
    """Peak of the summed VmRSS / RssAnon over a process and its descendants (/proc, every 20 ms)."""

    def __init__(self, pid: int) -> None:
        import psutil

        self.proc = psutil.Process(pid)
        self.peak_rss = self.peak_anon = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    @staticmethod
    def _status(pid: int) -> tuple[int, int]:
        rss = anon = 0
        try:
            with open(f"/proc/{pid}/status") as fh:
                for line in fh:
                    if line.startswith("VmRSS:"):
                        rss = int(line.split()[1])
                    elif line.startswith("RssAnon:"):
                        anon = int(line.split()[1])
        except OSError:
            pass
        return rss, anon

    def _run(self) -> None:
        import psutil

        while not self._stop.wait(0.02):
            try:
                pids = [self.proc.pid] + [c.pid for c in self.proc.children(recursive=True)]
            except psutil.Error:
                continue
            rss = anon = 0
            for pid in pids:
                r, a = self._status(pid)
                rss, anon = rss + r, anon + a
            self.peak_rss, self.peak_anon = max(self.peak_rss, rss), max(self.peak_anon, anon)

    def stop(self) -> None:
        self._stop.set()
        self._thread.join()


def run_child(name: str, data: Path, size: str, rep: int, capped: bool = True) -> dict:
    cap_gib = SIZES[size][4] if capped else None
    out = data / f"result-{name.replace(':', '-')}.arrow"
    cmd = [sys.executable, __file__, "--child", name, "--size", size, "--data-dir", str(data), "--out", str(out)]

    def limit() -> None:
        if cap_gib and name.startswith("md:") and name != "md:pandas":
            import resource

            cap = cap_gib << 30
            resource.setrlimit(resource.RLIMIT_AS, (cap, cap))

    env = dict(os.environ)
    if cap_gib:
        # glibc reserves 64 MB of address space per thread arena: under RLIMIT_AS that reservation,
        # not memory in use, is what runs out first in thread-rich Dask workers
        env["MALLOC_ARENA_MAX"] = "2"
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, text=True, preexec_fn=limit, env=env)
    sampler = _TreeSampler(proc.pid)
    stdout = proc.stdout.read()
    _, status, usage = os.wait4(proc.pid, 0)
    sampler.stop()
    code = os.waitstatus_to_exitcode(status)
    if code:
        return {"failed": code, "rep": rep}
    info = json.loads(stdout.strip().splitlines()[-1])
    info.update(own_peak_rss_mb=usage.ru_maxrss / 1024, tree_peak_rss_mb=sampler.peak_rss / 1024,
                tree_peak_anon_mb=sampler.peak_anon / 1024, rep=rep, load=os.getloadavg()[0])
    return info


def identical(data: Path, name: str, ref: str) -> bool | None:
    import polars as pl

    a, b = (data / f"result-{n.replace(':', '-')}.arrow" for n in (name, ref))
    if not (a.exists() and b.exists()):
        return None
    return pl.read_ipc(a).equals(pl.read_ipc(b))


# ------------------------------------------------------------------------------------- report
LABELS = {
    "md:scan": "bare polars scan, every schema column (`null_count`)",
    "md:ours": "**`iteration_stats(dir)`** (single machine)",
    "md:pandas": "plain pandas (chunked `read_json`, explode, groupby)",
    "md:dask1": "`aggregate_metadata_dask`, LocalCluster 1 worker",
    "md:dask2": "`aggregate_metadata_dask`, LocalCluster 2 workers",
    "log:scan": "bare polars line scan (`scan_csv`, every line materialised, byte count)",
    "log:ours": "**`parse_logs(files)`** (single machine)",
    "log:dask1": "`parse_logs_dask`, LocalCluster 1 worker",
    "log:dask2": "`parse_logs_dask`, LocalCluster 2 workers",
    "log:partials": "map + pickle + unpickle + finish in one process (the Dask path's parts, see below)",
}


def summarize(runs: list[dict]) -> dict:
    ok = [r for r in runs if "failed" not in r]
    if not ok:
        return {"failed": runs[0]["failed"], "n": 0}
    med = lambda key: statistics.median(r[key] for r in ok if key in r)  # noqa: E731
    out = {"seconds": med("seconds"), "min": min(r["seconds"] for r in ok), "max": max(r["seconds"] for r in ok),
           "n": len(ok), "failures": len(runs) - len(ok),
           "rss": max(r["tree_peak_rss_mb"] for r in ok), "anon": max(r["tree_peak_anon_mb"] for r in ok),
           "load": med("load")}
    if any("startup_s" in r for r in ok):
        out["startup"] = med("startup_s")
    if any("cpu_per_wall" in r for r in ok):
        out["cpu"] = med("cpu_per_wall")
    for key in ("map_s", "pickle_s", "unpickle_s", "finish_s", "pickled_mb", "bytes_per_record"):
        if any(key in r for r in ok):
            out[key] = med(key)
    out["errors"] = sorted({r["failed"] for r in runs if "failed" in r})
    return out


def heading(size: str, title: str | None) -> str:
    return f"### `--size {size}`" + (f": {title}" if title else "")


def render(size: str, gen: dict, res: dict, same: dict, repeats: int, pandas_rows: int, rows: int, load0: float,
           title: str | None = None, capped: bool = True) -> str:
    shards, per_shard, log_its, log_files, cap, _ = SIZES[size]
    cap = cap if capped else None
    pd_scale = rows / pandas_rows
    lines = [
        heading(size, title), "",
        f"Metadata: {shards} per-rank shards, {rows:,} rows, {gen['metadata_bytes'] / 1e6:,.0f} MB JSONL. "
        f"Log: {log_its:,} iterations in {log_files} files, {gen['log_bytes'] / 1e6:,.0f} MB."
        + (f" Metadata measurements ran under `RLIMIT_AS` = {cap} GiB per process, Dask workers included "
           f"(the input is {gen['metadata_bytes'] / 2**30:.1f} GiB), with `MALLOC_ARENA_MAX=2`." if cap else "")
        + (" No `RLIMIT_AS` cap in this table (`--no-cap`)." if SIZES[size][4] and not capped else ""),
        f"Medians of {repeats} runs (min-max in brackets); load average {load0:.1f} before, "
        f"{statistics.median(v['load'] for v in res.values() if 'load' in v):.1f} median during the runs. "
        "Peak memory: summed over the measured process and its Dask workers.", "",
        "| measurement | time (s) | vs bare scan | vs single machine | CPU s / wall s | peak RSS (MB) "
        "| peak anon (MB) | identical |",
        "|---|---:|---:|---:|---:|---:|---:|---|",
    ]
    for kind in ("md", "log"):
        scan, ours = res.get(f"{kind}:scan"), res.get(f"{kind}:ours")
        for name in [n for n in LABELS if n.startswith(kind + ":") and n in res]:
            r = res[name]
            label = LABELS[name]
            if "seconds" not in r:
                lines.append(f"| {label} | FAILED in every run (exit {r['failed']}) | | | | | | |")
                continue
            sec = r["seconds"]
            span = f" [{r['min']:.1f}-{r['max']:.1f}]" if r["n"] > 1 else ""
            if name == "md:pandas":
                sec = sec * pd_scale
                label += f", {pandas_rows:,} rows measured, x{pd_scale:g} extrapolated"
                span = ""
            if "startup" in r:
                label += f" (+{r['startup']:.1f} s cluster start-up)"
            vs_scan = f"{sec / scan['seconds']:.2f}x" if scan and "seconds" in scan else ""
            vs_ours = f"{sec / ours['seconds']:.2f}x" if ours and "seconds" in ours else ""
            mark = {True: "yes", False: "**NO**", None: ""}[same.get(name)]
            if r["failures"]:
                label += f" — **{r['failures']} of {r['failures'] + r['n']} runs FAILED** (exit {r['errors']})"
            cpu = f"{r['cpu']:.2f}" if "cpu" in r else ""
            lines.append(f"| {label} | {sec:.2f}{span} | {vs_scan} | {vs_ours} | {cpu} | {r['rss']:,.0f} "
                         f"| {r['anon']:,.0f} | {mark} |")
    for kind, what in (("md", "metadata"), ("log", "logs")):
        one, two = res.get(f"{kind}:dask1", {}), res.get(f"{kind}:dask2", {})
        if "seconds" in one and "seconds" in two:
            pairs = ", ".join(f"{r:.2f}" for r in two.get("pair_ratios", []))
            lines += ["", f"Dask {what}, 2 workers / 1 worker: **{two['seconds'] / one['seconds']:.2f}x** (medians; "
                      f"per interleaved repetition: {pairs})."]
    parts = res.get("log:partials", {})
    if "map_s" in parts:
        lines += ["", f"The Dask log path's parts, medians (one process): map (`parse_file_partial` per file) "
                  f"{parts['map_s']:.2f} s; pickling the partials {parts['pickle_s']:.2f} s "
                  f"({parts['pickled_mb']:,.0f} MB, {parts['bytes_per_record']:.0f} B per record); unpickling "
                  f"{parts['unpickle_s']:.2f} s; the one `finish` (concatenate, sort, restart segments) "
                  f"{parts['finish_s']:.2f} s."]
    lines.append("")
    return "\n".join(lines)


def write_docs(size: str, block: str, preamble: str, title: str | None = None) -> Path:
    """Replace this size's (and title's) subsection inside "## Scale" (creating it if needed)."""
    path = ROOT / "docs" / "benchmarks.md"
    text = path.read_text(encoding="utf-8") if path.exists() else "# Benchmarks\n"
    if SECTION + "\n" not in text:
        text = text.rstrip("\n") + "\n\n" + SECTION + "\n\n" + preamble.rstrip("\n") + "\n"
    start = text.index(SECTION + "\n")
    nxt = text.find("\n## ", start + len(SECTION))
    end = len(text) if nxt < 0 else nxt + 1
    section = text[start:end]
    head = heading(size, title) + "\n"  # the whole heading line: "--size huge" is a prefix of its titled variants
    if head in section:
        s = section.index(head)
        e = section.find("\n### ", s + len(head) - 1)
        section = section[:s] + block.rstrip("\n") + "\n" + ("\n" + section[e + 1:] if e >= 0 else "")
    else:
        section = section.rstrip("\n") + "\n\n" + block.rstrip("\n") + "\n"
    text = text[:start] + section + ("\n" + text[end:] if nxt >= 0 else "")
    path.write_text(text, encoding="utf-8")
    return path


PREAMBLE = """`python benchmarks/bench_scale.py --size small|10m|huge --repeats N --write-docs`; method in the
script's docstring and in [scale.md](scale.md). Every measurement is a separate subprocess; times
exclude imports and Dask cluster start-up (shown separately); peak memory is the highest sum over
the measured process and its Dask worker processes. The machine (2 CPUs, 24 GB) is shared with
other jobs: medians of repeated runs, the load average is stated per table."""


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--size", choices=sorted(SIZES), default="small")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--data-dir", type=Path, default=None)
    ap.add_argument("--only", default=None, help="comma-separated measurement names (default: all)")
    ap.add_argument("--write-docs", action="store_true")
    ap.add_argument("--no-cap", action="store_true", help="no RLIMIT_AS cap for --size huge (memory is still "
                                                           "measured; the cap only proves that the input is streamed)")
    ap.add_argument("--title", default=None, help="subsection title after the size (its own table in the docs, "
                                                   "e.g. for an --only subset)")
    ap.add_argument("--child", default=None, help=argparse.SUPPRESS)
    ap.add_argument("--out", type=Path, default=None, help=argparse.SUPPRESS)
    ap.add_argument("--generate", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    data = args.data_dir or Path(f"/tmp/vlm-perf-scale-{args.size}")
    if args.generate:
        print(json.dumps(generate(args.size, data)))
        return
    if args.child:
        print(json.dumps(_child(args.child, data, args.out, SIZES[args.size][5])))
        return
    load0 = os.getloadavg()[0]
    # generate in a child so that this parent stays small
    gen = json.loads(subprocess.run([sys.executable, __file__, "--generate", "--size", args.size, "--data-dir",
                                     str(data)], check=True, capture_output=True, text=True).stdout)
    print(f"data: {data} ({gen['metadata_bytes'] / 1e6:,.0f} MB metadata, {gen['log_bytes'] / 1e6:,.0f} MB logs; "
          f"{gen['seconds']:.1f} s to generate/check)", file=sys.stderr)
    names = args.only.split(",") if args.only else list(LABELS)
    runs: dict[str, list[dict]] = {n: [] for n in names}
    for rep in range(args.repeats):  # interleaved, so that load changes hit every measurement alike
        for name in names:
            if name == "md:pandas" and rep > 0:
                continue  # slow and only a reference: once
            info = run_child(name, data, args.size, rep, capped=not args.no_cap)
            runs[name].append(info)
            print(f"{name} #{rep}: {info}", file=sys.stderr)
    res = {n: summarize(r) for n, r in runs.items()}
    for kind in ("md", "log"):  # 2 vs 1 workers, repetition by repetition (they ran back to back)
        one, two = runs.get(f"{kind}:dask1", []), runs.get(f"{kind}:dask2", [])
        if one and two and "seconds" in res[f"{kind}:dask2"]:
            res[f"{kind}:dask2"]["pair_ratios"] = [b["seconds"] / a["seconds"] for a, b in zip(one, two)
                                                   if "seconds" in a and "seconds" in b]
    same = {n: identical(data, n, "md:ours") for n in names if n.startswith("md:dask")}
    same.update({n: identical(data, n, "log:ours") for n in names if n.startswith("log:dask")})
    shards, per_shard, *_ = SIZES[args.size]
    block = render(args.size, gen, res, same, args.repeats, SIZES[args.size][5] * per_shard, shards * per_shard, load0,
                   args.title, capped=not args.no_cap)
    print(block)
    print(json.dumps({"size": args.size, "summary": res, "identical": same,
                      "python": platform.python_version(), "cpus": os.cpu_count()}), file=sys.stderr)
    if args.write_docs:
        print(f"wrote {write_docs(args.size, block, PREAMBLE, args.title)}", file=sys.stderr)


if __name__ == "__main__":
    main()
