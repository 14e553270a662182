"""Benchmark: DP load balance (per-rank sums, per-iteration ratios, LPT what-if) and per-rank timing lines.

    python benchmarks/bench_balance.py [--iterations 2000 --ranks 64 --microbatches 16] [--repeats 3] [--write-docs]

SYNTHETIC inputs (numpy, seed 0; no training run): per-microbatch exact FLOPs with near-constant LM
cost and a log-normal vision cost, and a Megatron-style log with one iteration line + a (min, max)
timer block per iteration. Every measurement runs in this process, interleaved round-robin
``--repeats`` times (medians reported), next to a baseline measured in the same rounds:

* ``balance`` (`ranks_from_microbatches` + `balance_by_iteration`) vs a bare polars group_by sum of
  the same frame (the floor for any per-rank aggregation);
* ``lpt_balance`` (vectorised over iterations) vs a textbook heap LPT in pure Python, one iteration
  at a time, run on the first ``--reference-iterations`` iterations and extrapolated linearly;
* ``read_rank_timing`` vs a bare polars line scan of the same log (every line materialised).

``--write-docs`` replaces the "## DP load balance and per-rank timing" section of docs/benchmarks.md.
"""

from __future__ import annotations

import argparse
import heapq
import os
import platform
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import polars as pl

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from vlm_perf.analysis.balance import balance_by_iteration, lpt_balance, ranks_from_microbatches  # noqa: E402
from vlm_perf.ingest.logs.reader import lazy_line_frames  # noqa: E402
from vlm_perf.ingest.logs.timers import read_rank_timing  # noqa: E402

SECTION = "## DP load balance and per-rank timing"


def make_costs(iterations: int, ranks: int, microbatches: int, seed: int = 0) -> pl.DataFrame:
    rng = np.random.default_rng(seed)
    n = iterations * ranks * microbatches
    lm = rng.normal(6.0e13, 1.0e12, n)
    vision = rng.lognormal(np.log(8e12), 0.8, n) * (rng.random(n) < 0.6)
    return pl.DataFrame({"iteration": np.repeat(np.arange(1, iterations + 1, dtype=np.int32), ranks * microbatches),
                         "dp_rank": np.tile(np.repeat(np.arange(ranks, dtype=np.int32), microbatches), iterations),
                         "lm_flops": lm, "vision_flops": vision, "flops": lm + vision})


def make_log(path: Path, iterations: int) -> None:
    rng = np.random.default_rng(1)
    lo = rng.normal(2200, 20, iterations)
    hi = lo + rng.exponential(40, iterations)
    with open(path, "w") as fh:
        for i in range(iterations):
            fh.write(f" [2025-01-01 00:00:00] iteration {i + 1:8d}/{iterations:8d} | consumed samples: {i:8d} | "
                     f"elapsed time per iteration (ms): {hi[i]:.1f} | lm loss: 1.0E+00 |\n"
                     "(min, max) time across ranks (ms):\n"
                     f"    {'forward-backward '.ljust(48, '.')}: ({lo[i]:.2f}, {hi[i]:.2f})\n"
                     f"    {'optimizer '.ljust(48, '.')}: (40.00, 41.00)\n")


def reference_lpt(costs: pl.DataFrame, ranks: int) -> list[float]:
    out = []
    for _, group in costs.group_by("iteration", maintain_order=True):
        heap = [(0.0, r) for r in range(ranks)]
        for c in sorted(group["flops"].to_list(), reverse=True):
            load, r = heapq.heappop(heap)
            heapq.heappush(heap, (load + c, r))
        out.append(max(load for load, _ in heap))
    return out


def bare_scan(path: Path) -> int:
    """Every line materialised (byte count), the floor of any line-by-line reader."""
    return sum(int(f.select(pl.col("text").str.len_bytes().sum()).collect().item()) for f in lazy_line_frames(path))


def run(args) -> str:
    costs = make_costs(args.iterations, args.ranks, args.microbatches)
    per_it = pl.DataFrame({"iteration": np.arange(1, args.iterations + 1, dtype=np.int32),
                           "ranks": np.full(args.iterations, args.ranks)})
    ref_costs = costs.filter(pl.col("iteration") <= args.reference_iterations)
    scale = args.iterations / args.reference_iterations
    tmp = Path(tempfile.mkdtemp())
    log = tmp / "train.log"
    make_log(log, args.log_iterations)
    # correctness first: vectorised LPT equals the reference on the reference iterations
    got = lpt_balance(ref_costs, per_it.filter(pl.col("iteration") <= args.reference_iterations)).sort("iteration")
    assert np.allclose(got["lpt_max"].to_numpy(), reference_lpt(ref_costs, args.ranks), rtol=1e-12)
    work = {
        "balance": lambda: balance_by_iteration(ranks_from_microbatches(costs)),
        "groupby": lambda: costs.group_by("iteration", "dp_rank").agg(pl.col("flops").sum()),
        "lpt": lambda: lpt_balance(costs, per_it),
        "lpt_ref": lambda: reference_lpt(ref_costs, args.ranks),
        "timing": lambda: read_rank_timing([log]),
        "scan": lambda: bare_scan(log),
    }
    times = {k: [] for k in work}
    load_before = os.getloadavg()[0]
    loads = []
    for _ in range(args.repeats):  # interleaved rounds
        for name, fn in work.items():
            t0 = time.perf_counter()
            fn()
            times[name].append(time.perf_counter() - t0)
            loads.append(os.getloadavg()[0])
    med = {k: statistics.median(v) for k, v in times.items()}
    rng_ = {k: (min(v), max(v)) for k, v in times.items()}
    med["lpt_ref"] *= scale
    rng_["lpt_ref"] = (rng_["lpt_ref"][0] * scale, rng_["lpt_ref"][1] * scale)
    n = costs.height
    lines = sum(1 for _ in open(log))
    rows = [
        ("bare polars group_by sum per (iteration, rank)", "groupby", "groupby"),
        ("**`ranks_from_microbatches` + `balance_by_iteration`**", "balance", "groupby"),
        (f"pure-Python heap LPT, {args.reference_iterations} iterations measured, x{scale:g} extrapolated",
         "lpt_ref", "lpt_ref"),
        ("**`lpt_balance`** (vectorised over iterations)", "lpt", "lpt_ref"),
        ("bare polars line scan (`lazy_line_frames`, every line materialised, byte count)", "scan", "scan"),
        ("**`read_rank_timing`** (timers, detector, NVRx, rank steps)", "timing", "scan"),
    ]
    out = [SECTION, "",
           f"SYNTHETIC inputs (`benchmarks/bench_balance.py`, numpy seed 0): {n:,} microbatches "
           f"({args.iterations:,} iterations x {args.ranks} DP ranks x {args.microbatches} microbatches); a "
           f"Megatron-style log of {args.log_iterations:,} iterations ({lines:,} lines, iteration line + 2 timer "
           f"lines each). In-process, interleaved, medians of {args.repeats} rounds (min-max in brackets); "
           f"load average {load_before:.1f} before, {statistics.median(loads):.1f} median during the runs; "
           f"{platform.processor() or platform.machine()}, {os.cpu_count()} CPUs, polars {pl.__version__}.", "",
           "| measurement | time (s) | vs baseline |", "|---|---:|---:|"]
    for label, key, base in rows:
        lo, hi = rng_[key]
        out.append(f"| {label} | {med[key]:.3f} [{lo:.3f}-{hi:.3f}] | {med[key] / med[base]:.2f}x |")
    out += ["", "Baselines are the rows with 1.00x. The vectorised LPT result equals the heap reference on the "
            "measured iterations (checked before timing). The LPT loop runs once per microbatch index "
            f"({args.ranks * args.microbatches} steps here), each step an argmin over all iterations at once.", ""]
    return "\n".join(out)


def write_docs(section: str) -> None:
    doc = ROOT / "docs" / "benchmarks.md"
    text = doc.read_text()
    if SECTION in text:
        head, _, rest = text.partition(SECTION)
        nxt = rest.find("\n## ")
        text = head + section + (rest[nxt + 1:] if nxt >= 0 else "")
    else:
        text = text.rstrip("\n") + "\n\n" + section
    doc.write_text(text if text.endswith("\n") else text + "\n")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--iterations", type=int, default=2000)
    ap.add_argument("--ranks", type=int, default=64)
    ap.add_argument("--microbatches", type=int, default=16)
    ap.add_argument("--reference-iterations", type=int, default=100)
    ap.add_argument("--log-iterations", type=int, default=200_000)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--write-docs", action="store_true")
    args = ap.parse_args()
    section = run(args)
    print(section)
    if args.write_docs:
        write_docs(section)


if __name__ == "__main__":
    main()
