"""Benchmark: schema v2 (media in pixels) against v1 grids, and the v1 fast path before / after the v2 change.

    python benchmarks/bench_metadata_v2.py --rows 1000000 [--repeats 3] [--before /work/main] [--distinct 1000]

Data (SYNTHETIC, numpy seed 0, written once to /tmp): ``--rows`` microbatch lines, 64 DP ranks x 8
microbatches per iteration, 1-4 packed documents, 60% of rows with 1-3 images whose pixel sizes are drawn
from ``--distinct`` distinct (H, W) pairs (224..2047 px). The v1 file gives ``image_grid_thw`` (the
Qwen2-VL rule of this repo applied to each size); the v2 file gives the same images as ``image_sizes``.

Measurements, each in its own subprocess, interleaved over ``--repeats`` rounds (median reported, the
1-minute load average read before each run; the machine is shared):

* ``v1-before``  ``MetadataSource(v1 file, qwen2-vl-7b).read()`` with the code in ``--before``
* ``v1-after``   the same with this checkout (the v1 fast path after the v2 change)
* ``v2-after``   ``MetadataSource(v2 file, qwen2-vl-7b).read()`` (pixel sizes -> grids per distinct size)
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def generate(rows: int, distinct: int, v1: Path, v2: Path) -> None:
    import numpy as np
    import polars as pl

    sys.path.insert(0, str(ROOT))
    from vlm_perf.arch import load_model
    from vlm_perf.arch.families import FAMILIES

    spec = load_model("qwen2-vl-7b")
    rule = FAMILIES[spec.family].media
    rng = np.random.default_rng(0)
    sizes = rng.integers(224, 2048, size=(distinct, 2))
    grids = [list(rule.image(spec, int(h), int(w)).grid) for h, w in sizes]
    n_img = np.where(rng.random(rows) < 0.6, rng.integers(1, 4, rows), 0)
    picks = rng.integers(0, distinct, size=int(n_img.sum()))
    offsets = np.concatenate([[0], np.cumsum(n_img)])
    docs = rng.integers(1, 5, rows)
    idx = np.arange(rows)
    base = {"iteration": (idx // 512).tolist(), "microbatch": (idx % 8).tolist(), "dp_rank": ((idx // 8) % 64).tolist(),
            "seq_lens": [[int(x) for x in rng.integers(64, 2048, d)] for d in docs]}
    img_sizes = [[sizes[p].tolist() for p in picks[offsets[i]:offsets[i + 1]]] or None for i in range(rows)]
    img_grids = [[grids[p] for p in picks[offsets[i]:offsets[i + 1]]] or None for i in range(rows)]
    pl.DataFrame({**base, "image_grid_thw": img_grids}).write_ndjson(v1)
    pl.DataFrame({**base, "schema_version": [2] * rows, "image_sizes": img_sizes}).write_ndjson(v2)


CHILD = """
import sys, time, resource
sys.path.insert(0, {root!r})
from vlm_perf.arch import load_model
from vlm_perf.ingest.metadata_source import MetadataSource
spec = load_model("qwen2-vl-7b")
t = time.perf_counter()
src = MetadataSource({path!r}, spec).read()
dt = time.perf_counter() - t
print(dt, src.diagnostics.rows_used, int(src.per_iteration["vision_patches"].sum()))
"""


def run_child(root: Path, path: Path) -> tuple[float, int, int]:
    out = subprocess.run([sys.executable, "-c", CHILD.format(root=str(root), path=str(path))], capture_output=True,
                         text=True, timeout=1800, env={**os.environ, "PYTHONPATH": str(root)})
    if out.returncode:
        raise SystemExit(out.stderr)
    dt, used, patches = out.stdout.split()
    return float(dt), int(used), int(patches)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", type=int, default=1_000_000)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--distinct", type=int, default=1000)
    ap.add_argument("--before", type=Path, default=None)
    args = ap.parse_args()
    v1 = Path(f"/tmp/vlm-perf-bench-v1-{args.rows}-{args.distinct}.jsonl")
    v2 = v1.with_name(v1.name.replace("-v1-", "-v2-"))
    if not (v1.exists() and v2.exists()):
        t = time.perf_counter()
        generate(args.rows, args.distinct, v1, v2)
        print(f"generated in {time.perf_counter() - t:.1f} s: {v1} ({v1.stat().st_size / 1e6:.0f} MB), "
              f"{v2} ({v2.stat().st_size / 1e6:.0f} MB)", file=sys.stderr)
    plan = [("v1-after", ROOT, v1), ("v2-after", ROOT, v2)]
    if args.before is not None:
        plan.insert(0, ("v1-before", args.before, v1))
    times: dict[str, list[float]] = {name: [] for name, _, _ in plan}
    loads: list[float] = []
    checks: dict[str, tuple[int, int]] = {}
    for _ in range(args.repeats):
        for name, root, path in plan:
            loads.append(os.getloadavg()[0])
            dt, used, patches = run_child(root, path)
            times[name].append(dt)
            checks[name] = (used, patches)
    assert len(set(checks.values())) == 1, checks  # same rows and statistics whatever the schema / code
    print(f"| measurement | median s ({args.repeats} rounds) | rows/s | vs v1-after |")
    print("|---|---|---|---|")
    ref = statistics.median(times["v1-after"])
    for name, ts in times.items():
        med = statistics.median(ts)
        print(f"| {name} | {med:.2f} | {args.rows / med:,.0f} | {med / ref:.2f}x |")
    print(f"\nrows {args.rows:,}, distinct sizes {args.distinct}, load average (1 min) "
          f"{min(loads):.2f}-{max(loads):.2f}; identical statistics: {checks['v1-after']}")


if __name__ == "__main__":
    main()
