"""Profiler-trace benchmark: ``python benchmarks/bench_trace.py [--steps N] [--write-docs]``.

Generates an invented Kineto trace (plain ``.json``, the layout torch.profiler writes: per step a
``ProfilerStep#N`` range, ``nn.Module:`` events, ATen ops with shapes, launches with correlation ids,
kernels / memcpys / NCCL kernels on a device, ``ac2g`` flows; about 1,000 events per layer-step) in a
temp dir, then measures, each in its own fresh subprocess (so peak RSS is that reader's alone):

(a) ``json.load`` of the file (the bare floor of a non-streaming reader);
(b) vlm-perf's streamed reader (``read_traces``: the event table) and, separately, reader + attribution;
(c) Holistic Trace Analysis' parser (``hta.common.trace_parser.parse_trace_dataframe``, its default
    ``json`` backend), when HTA is installed (extra ``bench``; not a vlm-perf dependency).

Wall and CPU seconds, peak RSS (``ru_maxrss``) and its ratio to the file size; the load average is
recorded (the machine is shared). ``--write-docs`` rewrites the "## Profiler traces" section of
docs/benchmarks.md (text after ``NOTES_MARK`` is kept).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
HEADING = "## Profiler traces (`benchmarks/bench_trace.py`)"
NOTES_MARK = "<!-- notes: kept by bench_trace.py -->"

CHILD = r"""
import json, resource, sys, time
mode, path = sys.argv[1], sys.argv[2]
sys.path.insert(0, sys.argv[3])
if mode.startswith("vlm-perf"):  # imports are not timed
    from vlm_perf.ingest.traces import read_traces
    from vlm_perf.analysis.trace_parts import attribute
elif mode == "hta":
    from hta.common.trace_parser import parse_trace_dataframe
    from hta.configs.parser_config import ParserConfig
t0, c0 = time.perf_counter(), time.process_time()
if mode == "json":
    data = json.load(open(path))
    n = len(data["traceEvents"])
elif mode == "vlm-perf":
    n = read_traces(path).events.height
elif mode == "vlm-perf+attribute":
    r = attribute(read_traces(path).events, first_iteration=1)
    n = r.parts.height
elif mode == "hta":
    meta, df, sym = parse_trace_dataframe(path, ParserConfig.get_default_cfg())
    n = len(df)
wall, cpu = time.perf_counter() - t0, time.process_time() - c0
print(json.dumps({"wall": wall, "cpu": cpu, "rss": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024,
                  "n": n}))
"""

BASE = r"""
import resource, sys, json
sys.path.insert(0, sys.argv[3])
mode = sys.argv[1]
if mode.startswith("vlm-perf"):
    import vlm_perf.ingest.traces, vlm_perf.analysis.trace_parts
elif mode == "hta":
    import hta.common.trace_parser
print(json.dumps({"rss": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024}))
"""


def generate(path: Path, steps: int, layers: int, seed: int = 0) -> int:
    """An invented trace; returns the number of events."""
    rng = random.Random(seed)
    n = 0
    ts = 1_000_000.0
    corr = ext = seq = 0
    with open(path, "w") as fh:
        fh.write('{\n  "schemaVersion": 1,\n  "distributedInfo": {"backend": "nccl", "rank": 0, "world_size": 8},\n'
                 '  "traceEvents": [\n')
        first = True

        def put(ev: dict) -> None:
            nonlocal first, n
            fh.write(("" if first else ",\n") + "  " + json.dumps(ev))
            first = False
            n += 1

        gpu_t = ts
        for step in range(steps):
            s0 = ts
            body = []
            t = ts + 5
            for part, count in (("Qwen2VisionTransformerPretrainedModel", layers), ("Qwen2VLTextModel", layers)):
                m0 = t
                for layer in range(count):
                    for mod in ("Attention", "MLP"):
                        l0 = t
                        for _op in range(12):
                            ext += 1
                            seq += 1
                            corr += 1
                            d = rng.uniform(2, 8)
                            body.append({"ph": "X", "cat": "cpu_op", "name": rng.choice(["aten::mm", "aten::add",
                                         "aten::mul", "aten::softmax", "aten::linear"]), "pid": 1, "tid": 1,
                                         "ts": round(t, 3), "dur": round(d, 3),
                                         "args": {"External id": ext, "Record function id": 0, "Sequence number": seq,
                                                  "Fwd thread id": 0, "Input Dims": [[128, 4096], [4096, 4096]],
                                                  "Input type": ["c10::BFloat16", "c10::BFloat16"]}})
                            body.append({"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 1,
                                         "tid": 1, "ts": round(t + 1, 3), "dur": 1.5,
                                         "args": {"External id": ext, "cbid": 211, "correlation": corr}})
                            gpu_t = max(gpu_t, t + 3) + rng.uniform(0.1, 1)
                            kd = rng.uniform(3, 10)
                            body.append({"ph": "X", "cat": "kernel", "name": "sm90_xmma_gemm_bf16bf16_bf16f32",
                                         "pid": 0, "tid": 7, "ts": round(gpu_t, 3), "dur": round(kd, 3),
                                         "args": {"External id": ext, "queued": 0, "device": 0, "context": 1,
                                                  "stream": 7, "correlation": corr, "registers per thread": 168,
                                                  "shared memory": 0, "grid": [132, 1, 1], "block": [384, 1, 1]}})
                            body.append({"ph": "s", "id": corr, "pid": 1, "tid": 1, "ts": round(t + 1, 3),
                                         "cat": "ac2g", "name": "ac2g"})
                            body.append({"ph": "f", "id": corr, "pid": 0, "tid": 7, "ts": round(gpu_t, 3),
                                         "cat": "ac2g", "name": "ac2g", "bp": "e"})
                            gpu_t += kd
                            t += d + 0.5
                        body.append({"ph": "X", "cat": "python_function", "name": f"nn.Module: {part[:6]}{mod}_{layer}",
                                     "pid": 1, "tid": 1, "ts": round(l0 - 0.2, 3), "dur": round(t - l0 + 0.4, 3),
                                     "args": {"Python id": n, "Python parent id": 1}})
                        t += 1
                body.append({"ph": "X", "cat": "python_function", "name": f"nn.Module: {part}_0", "pid": 1, "tid": 1,
                             "ts": round(m0 - 1, 3), "dur": round(t - m0 + 2, 3), "args": {"Python id": n}})
                t += 3
            corr += 1
            body.append({"ph": "X", "cat": "kernel", "name": "ncclDevKernel_AllReduce_Sum_bf16_RING_LL", "pid": 0,
                         "tid": 21, "ts": round(gpu_t - 50, 3), "dur": 80.0,
                         "args": {"External id": ext, "device": 0, "stream": 21, "correlation": corr}})
            body.append({"ph": "X", "cat": "cuda_runtime", "name": "ncclLaunch", "pid": 1, "tid": 1,
                         "ts": round(t, 3), "dur": 2.0, "args": {"correlation": corr}})
            t = max(t, gpu_t) + 10
            put({"ph": "X", "cat": "user_annotation", "name": f"ProfilerStep#{step}", "pid": 1, "tid": 1,
                 "ts": round(s0, 3), "dur": round(t - s0, 3), "args": {"External id": 0}})
            for ev in body:
                put(ev)
            ts = t + 1
        fh.write('\n  ],\n  "displayTimeUnit": "ms",\n  "baseTimeNanoseconds": 1700000000000000000\n}\n')
    return n


def run(mode: str, path: Path) -> dict:
    out = subprocess.run([sys.executable, "-c", CHILD, mode, str(path), str(ROOT)], capture_output=True, text=True)
    if out.returncode:
        return {"error": out.stderr.strip().splitlines()[-1] if out.stderr.strip() else f"exit {out.returncode}"}
    res = json.loads(out.stdout.strip().splitlines()[-1])
    base = subprocess.run([sys.executable, "-c", BASE, mode, str(path), str(ROOT)], capture_output=True, text=True)
    res["rss_imports"] = json.loads(base.stdout.strip().splitlines()[-1])["rss"] if base.returncode == 0 else None
    return res


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, nargs="+", default=[20, 80])
    ap.add_argument("--layers", type=int, default=24)
    ap.add_argument("--write-docs", action="store_true")
    a = ap.parse_args()
    try:
        import hta  # noqa: F401
        modes = ["json", "vlm-perf", "vlm-perf+attribute", "hta"]
    except ImportError:
        modes = ["json", "vlm-perf", "vlm-perf+attribute"]
    rows = []
    load_before = os.getloadavg()
    with tempfile.TemporaryDirectory() as tmp:
        for steps in a.steps:
            path = Path(tmp) / f"trace_{steps}.json"
            n = generate(path, steps, a.layers)
            size = path.stat().st_size
            for mode in modes:
                r = run(mode, path)
                r.update(mode=mode, steps=steps, events=n, size=size, load=os.getloadavg()[0])
                rows.append(r)
                print(json.dumps(r), flush=True)
    load_after = os.getloadavg()
    lines = [HEADING, "",
             f"Measured {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, Python {sys.version.split()[0]}, "
             f"load average {load_before[0]:.1f} before / {load_after[0]:.1f} after (1-min; 2 shared CPUs). "
             "Invented Kineto traces (plain JSON) from `generate()`; each reader in a fresh subprocess; RSS = peak "
             "resident set (`ru_maxrss`) of that process, imports included (\"imports\": the same process after "
             "imports only).", "",
             "| trace | events | size (MB) | reader | wall (s) | CPU (s) | peak RSS (MB) | RSS / size | imports (MB) "
             "| HTA / this (CPU) | HTA / this (wall) |", "|---|---:|---:|---|---:|---:|---:|---:|---:|---:|---:|"]
    for steps in a.steps:
        group = [r for r in rows if r["steps"] == steps]
        hta_wall = next((r.get("wall") for r in group if r["mode"] == "hta"), None)
        hta_cpu = next((r.get("cpu") for r in group if r["mode"] == "hta"), None)
        for r in group:
            if "error" in r:
                lines.append(f"| {steps} steps | {r['events']:,} | {r['size'] / 1e6:,.0f} | {r['mode']} | error: "
                             f"{r['error'][:60]} | | | | | | |")
                continue
            speed = f"{hta_wall / r['wall']:.2f}x" if hta_wall and r["mode"] != "hta" else "—"
            speed_cpu = f"{hta_cpu / r['cpu']:.2f}x" if hta_cpu and r["mode"] != "hta" else "—"
            lines.append(f"| {steps} steps | {r['events']:,} | {r['size'] / 1e6:,.0f} | {r['mode']} | {r['wall']:.2f} | "
                         f"{r['cpu']:.2f} | {r['rss'] / 1e6:,.0f} | {r['rss'] / r['size']:.2f}x | "
                         f"{(r['rss_imports'] or 0) / 1e6:,.0f} | {speed_cpu} | {speed} |")
    section = "\n".join(lines) + "\n"
    print(section)
    if a.write_docs:
        sys.path.insert(0, str(Path(__file__).parent))
        from _docs import replace_section

        replace_section(HEADING, section, NOTES_MARK)


if __name__ == "__main__":
    main()
