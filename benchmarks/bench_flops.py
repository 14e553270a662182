"""FLOPs evaluation speed: the family-inventory code vs the pre-inventory code, in one process, interleaved.

The pre-inventory library (commit 60f2c9a, before issue 11) is extracted with ``git archive`` into a temporary
directory as the package ``vlm_perf_pre11`` (its ``resources.files("vlm_perf.arch")`` calls renamed), so both
run in the same interpreter on the same data. Measured, each as the median of ``--reps`` interleaved runs:

* ``compute_flops`` on one batch of Python numbers (per-call latency; exact training, and all 7 conventions);
* ``with_flops`` on a frame of ``--rows`` random microbatch statistics (exact + megatron-bridge columns),
  i.e. the vectorised polars path the report uses.

    PYTHONPATH=. python benchmarks/bench_flops.py --rows 2000000 --reps 5

Prints a markdown table (and the 1-minute load average at start / end) for docs/benchmarks.md.
"""

from __future__ import annotations

import argparse
import importlib
import os
import platform
import statistics
import subprocess
import sys
import tarfile
import tempfile
import time
from pathlib import Path

BASELINE_COMMIT = "60f2c9a"
MODEL = "qwen3-vl-30b-a3b"


def load_baseline(tmp: Path):
    """Import the pre-inventory library as ``vlm_perf_pre11`` from ``git archive``."""
    repo = Path(__file__).resolve().parents[1]
    archive = tmp / "old.tar"
    with archive.open("wb") as fh:
        subprocess.run(["git", "-C", str(repo), "archive", BASELINE_COMMIT, "vlm_perf"], stdout=fh, check=True)
    with tarfile.open(archive) as tar:
        tar.extractall(tmp, filter="data")
    (tmp / "vlm_perf").rename(tmp / "vlm_perf_pre11")
    for path in (tmp / "vlm_perf_pre11").rglob("*.py"):
        text = path.read_text()
        if '"vlm_perf.' in text:
            path.write_text(text.replace('"vlm_perf.', '"vlm_perf_pre11.'))
    sys.path.insert(0, str(tmp))
    return importlib.import_module("vlm_perf_pre11")


def random_frame(rows: int, seed: int = 0):
    """Synthetic microbatch statistics (numpy, seeded): 1-4 documents, 0-3 images of 16..96 patches a side."""
    import numpy as np
    import polars as pl

    rng = np.random.default_rng(seed)
    docs = rng.integers(1, 5, rows)
    tokens = rng.integers(512, 8192, rows)
    side = rng.integers(8, 49, rows) * 2
    images = rng.integers(0, 4, rows)
    patches = images * side * side
    return pl.DataFrame({
        "lm_tokens": tokens, "lm_tokens_sq": tokens * tokens // docs, "lm_sequences": docs, "lm_samples": 1,
        "lm_padded_tokens": tokens, "vision_patches": patches, "vision_patches_sq_frame": images * (side * side) ** 2,
        "vision_patches_sq_item": images * (side * side) ** 2, "vision_merged_tokens": patches // 4,
        "vision_window_sq": images * (side * side) ** 2, "vision_frames": images, "vision_items": images,
    })


def timed(fn) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rows", type=int, default=2_000_000)
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--calls", type=int, default=2000)
    args = ap.parse_args()
    import polars as pl

    import vlm_perf
    from vlm_perf.analysis.flops_frame import with_flops

    load_start = os.getloadavg()[0]
    with tempfile.TemporaryDirectory() as tmp:
        old = load_baseline(Path(tmp))
        old_frame = importlib.import_module("vlm_perf_pre11.analysis.flops_frame")
        libs = {
            "pre-inventory (60f2c9a)": (old.arch.load_model(MODEL), old.stats.BatchStats, old.flops.compute_flops,
                                        old.flops.CONVENTIONS, old_frame.with_flops),
            "inventory (this branch)": (vlm_perf.arch.load_model(MODEL), vlm_perf.stats.BatchStats,
                                        vlm_perf.flops.compute_flops, vlm_perf.flops.CONVENTIONS, with_flops),
        }
        frame = random_frame(args.rows)
        results: dict[str, dict[str, list[float]]] = {name: {"exact": [], "all": [], "frame": []} for name in libs}
        checks = {}
        for _ in range(args.reps):
            for name, (spec, stats_cls, compute, conventions, frame_fn) in libs.items():
                batch = stats_cls.from_batch(seq_lens=[3000, 1096], image_grids=[(1, 64, 64)], spec=spec)
                results[name]["exact"].append(timed(lambda: [compute(spec, batch) for _ in range(args.calls)])
                                              / args.calls)
                results[name]["all"].append(timed(lambda: [compute(spec, batch, c) for c in conventions
                                                           for _ in range(args.calls // 10)]) / (args.calls // 10))
                out = {}
                results[name]["frame"].append(timed(lambda: out.setdefault(
                    "f", frame_fn(frame, spec, ["exact", "megatron-bridge"]).select(
                        pl.col("exact_total").sum(), pl.col("megatron-bridge_total").sum()))))
                checks[name] = out["f"].row(0)
    load_end = os.getloadavg()[0]
    (a, b) = libs
    assert checks[a] == checks[b], checks  # same numbers
    print(f"{platform.machine()}, {os.cpu_count()} CPUs, Python {platform.python_version()}, "
          f"polars {pl.__version__}; load average {load_start:.1f} -> {load_end:.1f}; rows {args.rows:,}, "
          f"reps {args.reps} (median)")
    print("| measurement | pre-inventory | inventory | ratio |\n|---|---:|---:|---:|")
    for key, label, unit, scale in (("exact", "`compute_flops` exact, one batch", "µs", 1e6),
                                    ("all", "`compute_flops` x 7 conventions, one batch", "µs", 1e6),
                                    ("frame", f"`with_flops` exact + megatron-bridge, {args.rows:,} rows", "s", 1)):
        t_old, t_new = (statistics.median(results[n][key]) for n in (a, b))
        print(f"| {label} | {t_old * scale:.1f} {unit} | {t_new * scale:.1f} {unit} | {t_new / t_old:.2f}x |")
    print(f"frame totals identical: {checks[b]}")


if __name__ == "__main__":
    main()
