"""Benchmark: estimate mode (no metadata) on a long log vs parsing that log.

    python benchmarks/bench_estimate.py --iterations 2000000 [--repeats 1] [--write-docs]

Generates (once, reused) a SYNTHETIC Megatron log of ``--iterations`` iteration lines (the
generator of ``bench_scale.py``: numpy seed = first iteration) and a run.yaml with
``seq_length`` and ``global_batch_size`` (so the report estimates the statistics from the run
configuration). Each measurement runs in its own subprocess (peak RSS from ``os.wait4``):

* ``parse``     ``parse_logs(log).iterations`` (the log parse alone: the baseline)
* ``estimate``  ``vlm-perf report RUN -o OUT`` without metadata (parse + estimate + analysis + figures)
* ``before``    the same report from another checkout (``--before DIR``: its ``vlm_perf`` imported instead)

Rounds are interleaved; medians and per-round ratios, with the 1-minute load average.
``--write-docs`` replaces the "## Estimate mode" section of ``docs/benchmarks.md``.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import time
from pathlib import Path

from _docs import replace_section  # benchmarks/_docs.py (the script's folder is on sys.path)

ROOT = Path(__file__).resolve().parents[1]
SECTION = "## Estimate mode"


def make_run(run: Path, iterations: int) -> None:
    sys.path.insert(0, str(Path(__file__).parent))
    from bench_scale import _gen_log

    run.mkdir(parents=True, exist_ok=True)
    _gen_log(run / "train.log", 1, iterations, banner=False)
    (run / "run.yaml").write_text("# SYNTHETIC: benchmarks/bench_estimate.py\nmodel: qwen2.5-vl-7b\nnum_gpus: 64\n"
                                  "gpu: H100-SXM\ndtype: bf16\nseq_length: 8192\nglobal_batch_size: 512\n"
                                  "image_grid: [1, 28, 28]\nsynthetic: true\n")


def child(name: str, run: Path) -> dict:
    t0 = time.perf_counter()
    if name == "parse":
        from vlm_perf.ingest.logs import parse_logs

        rows = parse_logs([run / "train.log"]).iterations.height
        info = {"iterations": rows}
    else:
        from vlm_perf.cli import main as cli

        try:
            cli(["report", str(run), "-o", str(run.with_name(run.name + ".out"))])
        except SystemExit as exc:
            if exc.code:
                raise SystemExit(f"report failed ({exc.code})") from None
        info = {}
    info["seconds"] = time.perf_counter() - t0
    return info


def run_child(name: str, run: Path, before: Path | None = None) -> dict:
    load = os.getloadavg()[0]
    code = before if name == "before" else ROOT
    proc = subprocess.Popen([sys.executable, __file__, "--child", "estimate" if name == "before" else name, "--run",
                             str(run)], stdout=subprocess.PIPE, text=True, env=dict(os.environ, PYTHONPATH=str(code)))
    out = proc.stdout.read()
    _, status, usage = os.wait4(proc.pid, 0)
    if os.waitstatus_to_exitcode(status):
        raise SystemExit(f"{name} failed")
    info = json.loads(out.strip().splitlines()[-1])
    info.update(peak_rss_mb=usage.ru_maxrss / 1024, load=load)
    return info


#: Hand-written analysis after this line of the section is kept when the section is rewritten.
NOTES_MARK = "<!-- notes: kept by bench_estimate.py -->"


def write_docs(section: str) -> Path:
    return replace_section(SECTION, section, NOTES_MARK)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--iterations", type=int, default=2_000_000)
    ap.add_argument("--repeats", type=int, default=1)
    ap.add_argument("--write-docs", action="store_true")
    ap.add_argument("--before", type=Path, default=None, help="another checkout: its report measured too")
    ap.add_argument("--child", default=None, help=argparse.SUPPRESS)
    ap.add_argument("--run", type=Path, default=None)
    args = ap.parse_args()
    if args.child:
        print(json.dumps(child(args.child, args.run)))
        return
    run = args.run or Path(f"/tmp/vlm-perf-estimate-{args.iterations}")
    if not (run / "run.yaml").exists():
        make_run(run, args.iterations)
    log_mb = (run / "train.log").stat().st_size / 1e6
    load0 = os.getloadavg()[0]
    runs: dict[str, list[dict]] = {"parse": [], "estimate": [], **({"before": []} if args.before else {})}
    for _ in range(args.repeats):
        for name in runs:
            runs[name].append(run_child(name, run, args.before))
            print(name, runs[name][-1], file=sys.stderr, flush=True)
    ratios = {n: statistics.median(e["seconds"] / p["seconds"] for e, p in zip(v, runs["parse"]))
              for n, v in runs.items()}
    ratio = ratios["estimate"]
    med = {n: statistics.median(r["seconds"] for r in v) for n, v in runs.items()}
    rss = {n: max(r["peak_rss_mb"] for r in v) for n, v in runs.items()}
    loads = [r["load"] for v in runs.values() for r in v]
    lines = [SECTION, "",
             f"`python benchmarks/bench_estimate.py --iterations {args.iterations} --repeats {args.repeats}"
             f"{f' --before {args.before}' if args.before else ''}` on "
             f"{platform.machine()}, {os.cpu_count()} CPUs, Python {platform.python_version()}. SYNTHETIC log "
             f"(bench_scale.py generator): {args.iterations:,} Megatron iteration lines, {log_mb:,.0f} MB; run.yaml "
             "states seq_length, global_batch_size and one image grid, no metadata. 1-minute load average "
             f"{load0:.1f} at the start, {min(loads):.1f}-{max(loads):.1f} over the runs (shared machine). Each "
             "measurement in its own subprocess, rounds interleaved; peak RSS from `os.wait4` (max over rounds).",
             "", "Runs (s): " + "; ".join(f"{n} " + ", ".join(f"{r['seconds']:.1f}" for r in v) for n, v in runs.items()),
             "",
             "| measurement | time (s), median | vs log parse (median of per-round ratios) | peak RSS (MB) |",
             "|---|---:|---:|---:|",
             f"| `parse_logs` (baseline) | {med['parse']:.2f} | 1.00x | {rss['parse']:,.0f} |",
             f"| `vlm-perf report` in estimate mode | {med['estimate']:.2f} | {ratio:.2f}x | {rss['estimate']:,.0f} |",
             *([f"| the same report, code before this change (`--before {args.before}`) | {med['before']:.2f} | "
                f"{ratios['before']:.2f}x | {rss['before']:,.0f} |"] if args.before else []),
             "", "Targets (issue 12): estimate mode < 2x the log parse: "
             f"**{ratio:.2f}x** ({'met' if ratio < 2 else 'MISSED'}); < 1.5 GB: **{rss['estimate']:,.0f} MB** "
             f"({'met' if rss['estimate'] < 1536 else 'MISSED'}).", ""]
    section = "\n".join(lines)
    print(section)
    if args.write_docs:
        print(f"wrote {write_docs(section)}", file=sys.stderr)


if __name__ == "__main__":
    main()
