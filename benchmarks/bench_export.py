"""How long each export backend takes to write a long run's series, and how much it writes.

A generated window table (N windows, one per iteration, 4 conventions with MFU, vision share, step time, the
log's number: 12 series) and summary go through `vlm_perf.export.scheme.export_data` and each backend's writer
into a fresh folder (the output rules included), the backends interleaved per size; wall time, points per
second and the folder's bytes are printed with the load average. The run's own reading (``load_run``) is not
part of this: it is the report's cost (bench_report.py).

    python benchmarks/bench_export.py                   # N = 1,000 / 10,000 / 100,000
    python benchmarks/bench_export.py --sizes 1000 --backends parquet,tensorboard
"""

from __future__ import annotations

import argparse
import os
import shutil
import tempfile
import time
from pathlib import Path

import polars as pl

CONVENTIONS = ["megatron-lm", "exact", "megatron-bridge", "verl"]


def windows(n: int) -> pl.DataFrame:
    it = pl.int_range(1, n + 1, eager=True)
    cols = {"segment": pl.Series([0] * n), "iteration": it, "reliable": it > 1,
            "step_time_s": 2.0 + (it % 7) / 10.0, "vision_share": 0.2 + (it % 5) / 100.0,
            "tflops_per_gpu_logged": 300.0 + (it % 11)}
    for k, conv in enumerate(CONVENTIONS):
        cols[f"{conv}_tflops_per_gpu"] = 350.0 + k * 20 + (it % 13)
        cols[f"{conv}_mfu"] = cols[f"{conv}_tflops_per_gpu"] / 989.0
    return pl.DataFrame(cols)


SUMMARY = {"run": "generated", "model": "generated", "world_size": 256, "gpu": "H100-SXM", "dtype": "bf16",
           "peak_tflops": 989.0, "vision_share_mean": 0.22, "step": {"seconds_per_iteration": 2.3},
           "conventions": {c: {"tflops_per_gpu_mean": 360.0, "mfu_mean": 360.0 / 989.0} for c in CONVENTIONS}}


def folder_bytes(path: Path) -> int:
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file() and not p.is_symlink())


def main() -> None:
    from vlm_perf.export.backends import BACKENDS, write
    from vlm_perf.export.scheme import export_data
    from vlm_perf.report.output import EXPORT, atomic_report_dir

    ap = argparse.ArgumentParser()
    ap.add_argument("--sizes", default="1000,10000,100000")
    ap.add_argument("--backends", default=",".join(BACKENDS))
    args = ap.parse_args()
    backends = args.backends.split(",")
    print(f"load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores")
    print("| windows | points | backend | wall s | points/s | bytes |")
    print("|---:|---:|---|---:|---:|---:|")
    root = Path(tempfile.mkdtemp(prefix="bench-export-"))
    try:
        for n in map(int, args.sizes.split(",")):
            data = export_data(windows(n), SUMMARY, CONVENTIONS, f"bench-{n}")
            for backend in backends:
                out = root / f"{backend}-{n}"
                start = time.perf_counter()
                with atomic_report_dir(out, EXPORT) as tmp:
                    write(backend, data, tmp, out, {"project": "bench"})
                wall = time.perf_counter() - start
                print(f"| {n:,} | {data.points.height:,} | {backend} | {wall:.2f} | {data.points.height / wall:,.0f} "
                      f"| {folder_bytes(out):,} |", flush=True)
                shutil.rmtree(out)
    finally:
        shutil.rmtree(root, ignore_errors=True)
    print(f"load average {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main()
