"""Profiler traces at production size: ``python benchmarks/bench_trace_scale.py [--size-mb 1024] [--write-docs]``.

Generates a SYNTHETIC real-shaped Kineto trace (`trace_gen.write_trace`, seeded: Kineto's multi-line layout, GPU
kernels incl. NCCL all-reduce, memcpy / memset, cpu_op and python_function stacks, ac2g / fwdbwd flows, a
Qwen2-VL-shaped model) of about ``--size-mb`` MB, then runs, each in its own fresh subprocess (peak RSS = that
process's ``ru_maxrss``, imports included), interleaved, ``--repeat`` times:

* ``vlm-perf``: `read_traces` + `analyze_traces` (the whole attribution: steps, contexts, device partition, top ops,
  recorded matmul FLOPs); the read alone is timed inside the same process (``read`` columns);
* ``hta-load``: Holistic Trace Analysis' own loader, ``TraceAnalysis(trace_files={0: path})`` (parse + its
  per-rank processing), with the interpreter of ``--hta-python`` (a throwaway venv; HTA is no vlm-perf dependency);
* ``hta-parse``: HTA's parser alone, ``parse_trace_dataframe`` (default ``json`` backend).

The 1-minute load average is recorded before each run (the machine is shared). HTA is skipped when less than
``--min-free-gb`` of memory is available. ``--write-docs`` rewrites the "## Profiler traces at production size"
section of docs/benchmarks.md (text after ``NOTES_MARK`` is kept).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(Path(__file__).parent))
HEADING = "## Profiler traces at production size (`benchmarks/bench_trace_scale.py`)"
NOTES_MARK = "<!-- notes: kept by bench_trace_scale.py -->"

CHILD = r"""
import json, logging, os, resource, sys, time
mode, path, root = sys.argv[1], sys.argv[2], sys.argv[3]
sys.path.insert(0, root)
if mode == "vlm-perf":  # imports are not timed
    from vlm_perf.ingest.traces import read_traces
    from vlm_perf.analysis.trace_parts import analyze_traces
elif mode == "hta-load":
    from hta.trace_analysis import TraceAnalysis
else:
    from hta.common.trace_parser import parse_trace_dataframe
    from hta.configs.parser_config import ParserConfig
logging.disable(logging.WARNING)
rss0 = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
t0, c0 = time.perf_counter(), time.process_time()
out = {}
if mode == "vlm-perf":
    partial = read_traces(path)
    out.update(read_wall=time.perf_counter() - t0, read_cpu=time.process_time() - c0,
               read_rss=resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024, events=partial.events.height)
    result = analyze_traces(partial)
    out.update(steps=result.steps.height, parts=result.parts.height, max_sum_gap=result.check_sums())
elif mode == "hta-load":
    ta = TraceAnalysis(trace_files={0: path}, trace_dir=os.path.dirname(path))
    out.update(events=len(ta.t.get_trace(0)))
else:
    meta, df, sym = parse_trace_dataframe(path, ParserConfig.get_default_cfg())
    out.update(events=len(df))
ch = resource.getrusage(resource.RUSAGE_CHILDREN)
out.update(wall=time.perf_counter() - t0, cpu=time.process_time() - c0 + ch.ru_utime + ch.ru_stime,
           rss=max(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss, ch.ru_maxrss) * 1024, rss_imports=rss0)
print(json.dumps(out))
"""


def _available_gb() -> float:
    with open("/proc/meminfo") as fh:
        for line in fh:
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) / 2**20
    return float("nan")


def run(mode: str, path: Path, python: str, timeout: float) -> dict:
    load = os.getloadavg()[0]
    try:
        proc = subprocess.run([python, "-c", CHILD, mode, str(path), str(ROOT)], capture_output=True, text=True,
                              timeout=timeout)
    except subprocess.TimeoutExpired:
        return {"mode": mode, "load": load, "error": f"over {timeout:.0f} s"}
    if proc.returncode:
        tail = (proc.stderr.strip().splitlines() or [f"exit {proc.returncode}"])[-1]
        return {"mode": mode, "load": load, "error": f"exit {proc.returncode}: {tail[:120]}"}
    res = json.loads(proc.stdout.strip().splitlines()[-1])
    res.update(mode=mode, load=load)
    return res


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--size-mb", type=float, default=1024)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--repeat", type=int, default=1)
    ap.add_argument("--hta-python", default="/tmp/htavenv/bin/python")
    ap.add_argument("--min-free-gb", type=float, default=12.0)
    ap.add_argument("--timeout", type=float, default=3600)
    ap.add_argument("--trace", help="reuse this generated trace (else a temporary one is written)")
    ap.add_argument("--skip", nargs="*", default=[], help="runs to leave out (vlm-perf, hta-load, hta-parse)")
    ap.add_argument("--write-docs", action="store_true")
    ap.add_argument("--started", help="with --from-log: when that run started (UTC)")
    ap.add_argument("--from-log", help="re-render the section from the JSON lines this script printed (no measuring)")
    a = ap.parse_args()
    from trace_gen import GENERATOR, write_trace

    if a.from_log:
        lines = [json.loads(x) for x in Path(a.from_log).read_text().splitlines() if x.startswith("{")]
        facts, rows = lines[0], lines[1:]
        section = _section(rows, facts, a.started or "?", GENERATOR, a)
        print(section)
        if a.write_docs:
            from _docs import replace_section

            replace_section(HEADING, section, NOTES_MARK)
        return

    hta = Path(a.hta_python).exists()
    rows: list[dict] = []
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(a.trace) if a.trace else Path(tmp) / "rank0.pt.trace.json"
        t0 = time.perf_counter()
        facts = write_trace(path, int(a.size_mb * 1e6), seed=a.seed) if not path.exists() else {
            "size": path.stat().st_size, "events": None, "steps": None, "seed": a.seed}
        facts["generate_s"] = time.perf_counter() - t0
        print(json.dumps(facts), flush=True)
        started = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
        for rep in range(a.repeat):
            order = ["vlm-perf", "hta-load", "vlm-perf", "hta-parse"] if rep % 2 == 0 else \
                ["hta-parse", "vlm-perf", "hta-load", "vlm-perf"]
            for mode in order:
                if mode in a.skip:
                    continue
                if mode.startswith("hta"):
                    if not hta:
                        continue
                    free = _available_gb()
                    if free < a.min_free_gb:
                        rows.append({"mode": mode, "load": os.getloadavg()[0],
                                     "error": f"skipped: {free:.1f} GB available < {a.min_free_gb} GB"})
                        continue
                r = run(mode, path, a.hta_python if mode.startswith("hta") else sys.executable, a.timeout)
                r["repeat"] = rep
                rows.append(r)
                print(json.dumps(r), flush=True)
    section = _section(rows, facts, started, GENERATOR, a)
    print(section)
    if a.write_docs:
        from _docs import replace_section

        replace_section(HEADING, section, NOTES_MARK)


def _sitting(row: dict) -> str:
    """The run-column suffix " (sitting N)" for rows of a merged log (``--from-log`` over several runs' lines, each tagged "sitting")."""
    return f" (sitting {row['sitting']})" if "sitting" in row else ""


def _section(rows: list[dict], facts: dict, started: str, generator: str, a) -> str:
    size = facts["size"]
    ok = [r for r in rows if "error" not in r]
    # HTA's best (fastest) run of each kind against each of ours
    best_hta = {m: min(((r["wall"], r["cpu"]) for r in ok if r["mode"] == m), default=None)
                for m in ("hta-load", "hta-parse")}
    lines = [HEADING, "",
             f"Measured {started}, Python {sys.version.split()[0]}, {os.cpu_count()} CPUs shared with other developers' "
             f"jobs. Trace: SYNTHETIC, `{generator}` seed {a.seed}, {size / 1e6:,.0f} MB plain JSON"
             + (f", {facts['events']:,} JSON events, {facts['steps']} profiler steps" if facts.get("events") else "")
             + ". Each run a fresh subprocess, in the order listed; RSS = its peak resident set (`ru_maxrss`, imports "
             "included); load = 1-minute load average when the run started; ratios = HTA's fastest run of that kind "
             "(wall and CPU separately, any sitting: the conservative comparison) over this run.", "",
             "| # | run | load | wall (s) | CPU (s) | peak RSS (MB) | RSS / file | read wall / CPU (s) | read peak RSS "
             "(MB) | events kept | HTA load / this (wall, CPU) | HTA parse / this (wall, CPU) |",
             "|---:|---|---:|---:|---:|---:|---:|---|---:|---:|---:|---:|"]
    for i, r in enumerate(rows, 1):
        if "error" in r:
            lines.append(f"| {i} | {r['mode']}{_sitting(r)} | {r['load']:.1f} | {r['error']} | | | | | | | | |")
            continue
        read = f"{r['read_wall']:.1f} / {r['read_cpu']:.1f}" if "read_wall" in r else "—"
        read_rss = f"{r['read_rss'] / 1e6:,.0f}" if "read_rss" in r else "—"
        ratios = []
        for m in ("hta-load", "hta-parse"):
            best = best_hta[m]
            ratios.append(f"{best[0] / r['wall']:.1f}x, {best[1] / r['cpu']:.1f}x" if best and r["mode"] == "vlm-perf"
                          else "—")
        lines.append(f"| {i} | {r['mode']}{_sitting(r)} | {r['load']:.1f} | {r['wall']:.1f} | {r['cpu']:.1f} | {r['rss'] / 1e6:,.0f} "
                     f"| {r['rss'] / size:.2f}x | {read} | {read_rss} | {r.get('events', 0):,} | {ratios[0]} "
                     f"| {ratios[1]} |")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    main()
