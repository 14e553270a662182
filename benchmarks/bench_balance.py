"""Benchmark: DP load balance (per-rank sums, per-iteration ratios, LPT what-if) and per-rank timing lines.

    python benchmarks/bench_balance.py [--layouts 2000x64x16,20000x8x16] [--repeats 3] [--before ROOT] [--write-docs]

SYNTHETIC inputs (numpy, seed 0; no training run): per-microbatch exact FLOPs with near-constant LM
cost and a log-normal vision cost, and a Megatron-style log with one iteration line + a (min, max)
timer block per iteration. Every measurement runs in this process, interleaved round-robin
``--repeats`` times (medians reported), next to a baseline measured in the same rounds:

* ``balance`` (`ranks_from_microbatches` + `balance_by_iteration`) vs a bare polars group_by sum of
  the same frame (the floor for any per-rank aggregation);
* ``lpt_balance`` (vectorised over iterations; free and equal-count LPT) vs textbook heap LPTs in pure
  Python (the same two), one iteration at a time, run on the first ``--reference-iterations``
  iterations and extrapolated linearly;
* ``read_rank_timing`` vs a bare polars line scan of the same log (every line materialised);
* with ``--before ROOT``: ``lpt_balance`` of another checkout (``ROOT/vlm_perf/analysis/balance.py``,
  loaded beside this one) in the same rounds, its results asserted bit-identical first.

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

from _docs import replace_section  # noqa: E402 - benchmarks/_docs.py (the script's folder is on sys.path)

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


def _heap_lpt(costs: list[float], ranks: int, cap: int | None) -> float:
    heap, held, full = [(0.0, r) for r in range(ranks)], [0] * ranks, []
    for c in costs:
        load, r = heapq.heappop(heap)
        held[r] += 1
        if cap is not None and held[r] >= cap:
            full.append(load + c)
        else:
            heapq.heappush(heap, (load + c, r))
    return max([load for load, _ in heap] + full)


def reference_lpt(costs: pl.DataFrame, ranks: int) -> list[tuple[float, float]]:
    """What `lpt_balance` returns, the textbook way: per iteration a heap LPT, free and with equal counts."""
    out = []
    for _, group in costs.group_by("iteration", maintain_order=True):
        c = sorted(group["flops"].to_list(), reverse=True)
        out.append((_heap_lpt(c, ranks, None), _heap_lpt(c, ranks, -(-len(c) // ranks))))
    return out


def bare_scan(path: Path) -> int:
    """Every line materialised (byte count), the floor of any line-by-line reader."""
    return sum(int(f.select(pl.col("text").str.len_bytes().sum()).collect().item()) for f in lazy_line_frames(path))


def _layout(costs: pl.DataFrame, iterations: int, ranks: int, reference_iterations: int):
    per_it = pl.DataFrame({"iteration": np.arange(1, iterations + 1, dtype=np.int32), "ranks": np.full(iterations, ranks)})
    ref_costs = costs.filter(pl.col("iteration") <= reference_iterations)
    # correctness first: vectorised LPT equals the reference on the reference iterations
    got = lpt_balance(ref_costs, per_it.filter(pl.col("iteration") <= reference_iterations)).sort("iteration")
    expected = np.array(reference_lpt(ref_costs, ranks))
    assert np.allclose(got["lpt_max"].to_numpy(), expected[:, 0], rtol=1e-12)
    assert np.allclose(got["lpt_equal_max"].to_numpy(), expected[:, 1], rtol=1e-12)
    return per_it, ref_costs


def import_before(root: Path):
    """``balance.py`` of another checkout, imported as a sibling module of this one's (its relative
    imports resolve against this checkout's ``vlm_perf``)."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("vlm_perf.analysis._balance_before",
                                                  root / "vlm_perf" / "analysis" / "balance.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def run(args) -> str:
    before = import_before(args.before) if args.before else None
    layouts = []
    for text in args.layouts.split(","):
        iterations, ranks, microbatches = (int(x) for x in text.split("x"))
        costs = make_costs(iterations, ranks, microbatches)
        per_it, ref_costs = _layout(costs, iterations, ranks, args.reference_iterations)
        layouts.append((text, iterations, ranks, microbatches, costs, per_it, ref_costs))
    tmp = Path(tempfile.mkdtemp())
    log = tmp / "train.log"
    make_log(log, args.log_iterations)
    work = {"timing": lambda: read_rank_timing([log]), "scan": lambda: bare_scan(log)}
    for text, _, ranks, _, costs, per_it, ref_costs in layouts:
        work[f"balance {text}"] = lambda c=costs: balance_by_iteration(ranks_from_microbatches(c))
        work[f"groupby {text}"] = lambda c=costs: c.group_by("iteration", "dp_rank").agg(pl.col("flops").sum())
        work[f"lpt {text}"] = lambda c=costs, p=per_it: lpt_balance(c, p)
        work[f"lpt_ref {text}"] = lambda r=ref_costs, k=ranks: reference_lpt(r, k)
        if before is not None:
            assert before.lpt_balance(costs, per_it).equals(lpt_balance(costs, per_it)), "results differ"
            work[f"lpt_before {text}"] = lambda c=costs, p=per_it: before.lpt_balance(c, p)
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
    for text, iterations, *_ in layouts:
        scale = iterations / args.reference_iterations
        med[f"lpt_ref {text}"] *= scale
        rng_[f"lpt_ref {text}"] = tuple(x * scale for x in rng_[f"lpt_ref {text}"])
    lines = sum(1 for _ in open(log))
    rows = []
    for text, iterations, ranks, microbatches, costs, *_ in layouts:
        scale = iterations / args.reference_iterations
        head = f"{costs.height:,} microbatches ({iterations:,} it. x {ranks} ranks x {microbatches})"
        rows += [(f"{head}: bare polars group_by sum per (iteration, rank)", f"groupby {text}", f"groupby {text}"),
                 (f"{head}: **`ranks_from_microbatches` + `balance_by_iteration`**", f"balance {text}",
                  f"groupby {text}"),
                 (f"{head}: pure-Python heap LPT (free + equal counts), {args.reference_iterations} iterations "
                  f"measured, x{scale:g} extrapolated", f"lpt_ref {text}", f"lpt_ref {text}"),
                 (f"{head}: **`lpt_balance`** (vectorised over iterations, {ranks * microbatches} steps)",
                  f"lpt {text}", f"lpt_ref {text}")]
        if before is not None:
            rows.append((f"{head}: `lpt_balance` of {args.before} (`--before`; results bit-identical)",
                         f"lpt_before {text}", f"lpt_ref {text}"))
    rows += [("log: bare polars line scan (`lazy_line_frames`, every line materialised, byte count)", "scan", "scan"),
             ("log: **`read_rank_timing`** (timers, detector, NVRx, rank steps)", "timing", "scan")]
    out = [SECTION, "",
           f"SYNTHETIC inputs (`benchmarks/bench_balance.py`, numpy seed 0): per-microbatch exact FLOPs for the "
           f"layouts below; a Megatron-style log of {args.log_iterations:,} iterations ({lines:,} lines, iteration "
           f"line + 2 timer lines each). In-process, interleaved, medians of {args.repeats} rounds (min-max in "
           f"brackets); load average {load_before:.1f} before, {statistics.median(loads):.1f} median during the runs; "
           f"{platform.processor() or platform.machine()}, {os.cpu_count()} CPUs, polars {pl.__version__}.", "",
           "| measurement | time (s) | vs baseline |", "|---|---:|---:|"]
    for label, key, base in rows:
        lo, hi = rng_[key]
        out.append(f"| {label} | {med[key]:.3f} [{lo:.3f}-{hi:.3f}] | {med[key] / med[base]:.2f}x |")
    out += ["", "Baselines are the rows with 1.00x. The vectorised LPT results (free and equal counts) equal the heap "
            "references on the measured iterations (checked before timing). The LPT loop runs once per microbatch "
            "index (ranks x microbatches steps), each step an argmin over all iterations at once, so it gains most "
            "when an iteration has few microbatches and the run many iterations.", ""]
    return "\n".join(out)


def write_docs(section: str) -> Path:
    return replace_section(SECTION, section)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--layouts", default="2000x64x16,20000x8x16",
                    help="comma-separated ITERATIONSxRANKSxMICROBATCHES")
    ap.add_argument("--reference-iterations", type=int, default=100)
    ap.add_argument("--log-iterations", type=int, default=200_000)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--before", type=Path, default=None, help="checkout whose lpt_balance to time alongside")
    ap.add_argument("--write-docs", action="store_true")
    args = ap.parse_args()
    section = run(args)
    print(section)
    if args.write_docs:
        write_docs(section)


if __name__ == "__main__":
    main()
