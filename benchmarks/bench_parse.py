"""Log-parsing benchmark: ``python benchmarks/bench_parse.py [--iterations N] [--no-docs]``.

Generates an invented Megatron-LM log (N iteration lines plus ~30% noise lines: timers, memory
reports, warnings, blank lines, checkpoint messages) in a temp dir and times, in this process:

(a) polars bare line read: ``pl.scan_csv`` with a separator byte that never occurs (lines only);
(b) a straightforward per-line Python regex loop (``vlm_perf.ingest.logs.baseline``);
(c) ``parse_logs`` (raw table + diagnostics; the dedup views are timed separately).

Each polars measurement is the median of ``--repeat`` runs (the machine may be shared; process CPU
time is reported too, it is less sensitive to other load than wall time); the naive loop runs
once. Peak memory of the parse alone: ``parse_logs`` in a fresh subprocess per round (this code, and
``--before DIR``: another checkout's, interleaved), ``VmHWM`` from /proc/self/status sampled after
each phase (imports, ``parse_logs``, the ``.iterations`` view, ``.rank_timing``), against the file size
(target <= 1.2x). Results go to stdout and to the "## Log parsing" section of docs/benchmarks.md; text after
the ``NOTES_MARK`` line of that section (hand-written analysis) is kept when it is regenerated.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import platform
import random
import resource
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
# (the peak-RSS child of another checkout imports that checkout's vlm_perf: BENCH_CODE)
sys.path.insert(0, os.environ.get("BENCH_CODE", str(ROOT)))

import polars as pl  # noqa: E402

from vlm_perf.ingest.logs import parse_logs  # noqa: E402
from vlm_perf.ingest.logs.baseline import parse_file  # noqa: E402

from _docs import replace_section  # noqa: E402 - benchmarks/_docs.py (the script's folder is on sys.path)

NOISE = [
    "time (ms) | forward-backward: 1530.12 | forward-compute: 512.34 | backward-compute: 1001.22 | optimizer: 20.31",
    "[Rank 7] (after {it} iterations) memory (MB) | allocated: 12000.5 | max allocated: 30000.1 | reserved: 32000.0 | max reserved: 32000.0",
    "/usr/lib/python3/dist-packages/torch/utils/checkpoint.py:90: UserWarning: None of the inputs have requires_grad=True.",
    "  warnings.warn(",
    "",
    "saving checkpoint at iteration {it:8d} to /checkpoints/run",
    "  successfully saved checkpoint from iteration {it:8d} to /checkpoints/run [ t 1/8, p 1/4 ]",
]
NOISE_SHARE = 0.30


def generate(path: Path, n: int, seed: int = 0) -> int:
    """Write the log; returns the number of lines. ~30% of all lines are noise."""
    rng = random.Random(seed)
    p_noise = NOISE_SHARE / (1 - NOISE_SHARE)  # noise lines per iteration line
    lines = 0
    with open(path, "w", buffering=1 << 20) as fh:
        buf = []
        for it in range(1, n + 1):
            sec = it * 2
            buf.append(
                f" [2025-01-{1 + sec // 86400 % 28:02d} {sec // 3600 % 24:02d}:{sec // 60 % 60:02d}:{sec % 60:02d}] "
                f"iteration {it:8d}/{n:8d} | consumed samples: {it * 256:12d} | "
                f"elapsed time per iteration (ms): {1800 + rng.random() * 100:.1f} | "
                f"throughput per GPU (TFLOP/s/GPU): {400 + rng.random() * 20:.1f} | "
                f"learning rate: {3e-4 * (1 - it / (n + 1)):.6E} | global batch size:   256 | "
                f"lm loss: {2 + 8 / (1 + it / 100) + rng.random() * 0.01:.6E} | loss scale: 1.0 | "
                f"grad norm: {0.5 + rng.random():.3f} | number of skipped iterations:   0 | "
                f"number of nan iterations:   0 |\n"
            )
            lines += 1
            if rng.random() < p_noise:
                buf.append(rng.choice(NOISE).format(it=it) + "\n")
                lines += 1
            if len(buf) > 50_000:
                fh.write("".join(buf))
                buf.clear()
        fh.write("".join(buf))
    return lines


def bare_read(path: Path) -> int:
    df = pl.scan_csv(path, has_header=False, separator="\x1f", quote_char=None,
                     schema={"text": pl.Utf8}, truncate_ragged_lines=True).collect()
    return df.height


NOTES_MARK = "<!-- notes: kept by bench_parse.py -->"


def _vm(key: str) -> int:
    """``VmHWM`` / ``VmRSS`` of this process in bytes."""
    with open("/proc/self/status") as fh:
        for line in fh:
            if line.startswith(key + ":"):
                return int(line.split()[1]) * 1024
    return 0


def child_parse(path: Path) -> dict:
    """In a fresh process: peak RSS after each phase of one parse."""
    out = {"import": _vm("VmHWM")}
    t0, c0 = time.perf_counter(), time.process_time()
    res = parse_logs([path])
    out["parse_s"], out["parse_cpu_s"] = time.perf_counter() - t0, time.process_time() - c0
    out["parse_logs"] = _vm("VmHWM")
    _ = res.iterations  # (the views are computed on first access)
    out["iterations"] = _vm("VmHWM")
    timing = getattr(res, "rank_timing", None)
    out["rank_timing"] = _vm("VmHWM") if timing is not None else None
    out["records"] = res.raw.height
    return out


def peak_rounds(path: Path, rounds: int, before: Path | None) -> dict[str, list[dict]]:
    """Interleaved subprocess rounds of `child_parse`: this code, and ``before`` when given."""
    codes = {"after": ROOT, **({"before": before} if before else {})}
    runs: dict[str, list[dict]] = {k: [] for k in codes}
    for _ in range(rounds):
        for name, code in codes.items():
            load = os.getloadavg()[0]
            proc = subprocess.run([sys.executable, __file__, "--child-parse", str(path)], capture_output=True,
                                  text=True, env=dict(os.environ, PYTHONPATH=str(code), BENCH_CODE=str(code)),
                                  check=True)
            info = json.loads(proc.stdout.strip().splitlines()[-1])
            info["load"] = load
            runs[name].append(info)
            print(name, info, file=sys.stderr, flush=True)
    return runs


def median_of(fn, repeat: int) -> tuple[float, float, object]:
    """(median wall s, median process CPU s, last result)."""
    walls, cpus, out = [], [], None
    for _ in range(repeat):
        c0, t0 = time.process_time(), time.perf_counter()
        out = fn()
        walls.append(time.perf_counter() - t0)
        cpus.append(time.process_time() - c0)
    return sorted(walls)[len(walls) // 2], sorted(cpus)[len(cpus) // 2], out


def write_docs(section: str) -> Path:
    return replace_section("## Log parsing", section, NOTES_MARK)


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--iterations", type=int, default=1_000_000)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--no-docs", action="store_true", help="do not update docs/benchmarks.md")
    ap.add_argument("--before", type=Path, default=None, help="another checkout: its parse peak RSS measured too")
    ap.add_argument("--rss-rounds", type=int, default=2, help="subprocess rounds of the peak-RSS measurement")
    ap.add_argument("--child-parse", type=Path, default=None, help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.child_parse:
        print(json.dumps(child_parse(args.child_parse)))
        return

    with tempfile.TemporaryDirectory(prefix="vlm-perf-bench-parse-") as tmp:
        path = Path(tmp) / "megatron.log"
        t0 = time.perf_counter()
        n_lines = generate(path, args.iterations)
        gen_s = time.perf_counter() - t0
        size_mb = path.stat().st_size / 1e6
        print(f"generated {n_lines:,} lines ({args.iterations:,} iterations, {size_mb:,.0f} MB) in {gen_s:.1f} s")

        load0 = os.getloadavg()[0]
        bare_read(path)  # warm the page cache and polars' thread pool
        t_bare, _, height = median_of(lambda: bare_read(path), args.repeat)
        print(f"(a) polars bare line read : {t_bare:8.2f} s  ({height:,} lines)")
        t_parse, c_parse, res = median_of(lambda: parse_logs([path]), args.repeat)
        print(f"(c) parse_logs            : {t_parse:8.2f} s  ({res.raw.height:,} records; CPU {c_parse:.2f} s)")
        t0 = time.perf_counter()
        n_iter = res.iterations.height
        t_views = time.perf_counter() - t0
        print(f"    dedup + last-write-wins views: {t_views:.2f} s ({n_iter:,} iterations)")
        t0 = time.perf_counter()
        naive = parse_file(path)
        t_naive = time.perf_counter() - t0
        print(f"(b) naive per-line regex  : {t_naive:8.2f} s  ({len(naive):,} records)")
        rss_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
        peaks = peak_rounds(path, args.rss_rounds, args.before)
        size_b = path.stat().st_size
        load = os.getloadavg()[0]

    def last(r: dict) -> int:  # the parse's peak: after the last phase measured
        return r["rank_timing"] or r["iterations"]

    peak_rows = ""
    for name, v in peaks.items():
        timing = f"{max(r['rank_timing'] for r in v) / 1e6:,.0f}" if v[0]["rank_timing"] else "not collected"
        walls = ", ".join(f"{r['parse_s']:.1f} / {r['parse_cpu_s']:.1f}" for r in v)
        peak_rows += (f"| {name} | {max(r['import'] for r in v) / 1e6:,.0f} | {max(r['parse_logs'] for r in v) / 1e6:,.0f} "
                      f"| {max(r['iterations'] for r in v) / 1e6:,.0f} | {timing} | {max(last(r) for r in v) / size_b:.2f}x "
                      f"| {walls} |\n")
    peak_after = max(last(r) for r in peaks["after"]) / size_b

    assert res.raw.height == len(naive) == args.iterations, "parsers disagree on the record count"
    vs_bare = t_parse / t_bare
    vs_naive = t_naive / t_parse
    print(f"parse / bare read = {vs_bare:.2f}x (target <= 2x); naive / parse = {vs_naive:.1f}x (target >= 10x)")

    section = f"""## Log parsing

`python benchmarks/bench_parse.py --iterations {args.iterations}` on {platform.machine()}, {os.cpu_count()} CPUs, Python {platform.python_version()}, polars {pl.__version__}.
Input: invented Megatron-LM log, {args.iterations:,} iteration lines + noise = {n_lines:,} lines, {size_mb:,.0f} MB (30% noise lines: timers, memory reports, warnings, blank lines, checkpoint messages).
All three run in one process on a warm page cache; polars timings are the median of {args.repeat} runs. 1-min load average at start / end: {load0:.1f} / {load:.1f} on {os.cpu_count()} CPUs (the machine is shared: with load above the CPU count polars gets less than its {pl.thread_pool_size()} threads and wall times inflate). Peak RSS of the whole benchmark process: {rss_mb:,.0f} MB.

| measurement | time (s) | vs bare read |
|---|---:|---:|
| (a) polars bare line read (`scan_csv`, separator 0x1F) | {t_bare:.2f} | 1.00x |
| (b) naive per-line Python regex loop | {t_naive:.2f} | {t_naive / t_bare:.2f}x |
| (c) **`parse_logs`** (raw table + diagnostics); process CPU time {c_parse:.2f} s | {t_parse:.2f} | {vs_bare:.2f}x |
| dedup + last-write-wins views (`.iterations`, computed on first access) | {t_views:.2f} | — |

Peak RSS of `parse_logs` alone (fresh subprocess per round, interleaved{", code before: `--before " + str(args.before) + "`" if args.before else ""}; `VmHWM` after each phase, max over {args.rss_rounds} rounds; file {size_b / 1e6:,.0f} MB; load {", ".join(f"{r['load']:.1f}" for v in peaks.values() for r in v)}):

| code | after imports (MB) | after `parse_logs` (MB) | after `.iterations` | after `.rank_timing` | peak / file size | parse wall / CPU (s), per round |
|---|---:|---:|---:|---:|---:|---|
""" + peak_rows + f"""
Targets:
* parse peak RSS <= 1.2x the file size: **{peak_after:.2f}x** ({"met" if peak_after <= 1.2 else "MISSED"}).
* >= 10x faster than the naive loop: **{vs_naive:.1f}x** ({"met" if vs_naive >= 10 else "MISSED"}).
* within 2x of the bare line read: **{vs_bare:.2f}x** ({"met" if vs_bare <= 2 else "MISSED"}).
"""
    print(section)
    if not args.no_docs:
        print(f"updated {write_docs(section)}")


if __name__ == "__main__":
    main()
