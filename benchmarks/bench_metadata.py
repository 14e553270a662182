"""Benchmark: per-microbatch metadata aggregation vs a bare polars scan vs plain pandas.

    python benchmarks/bench_metadata.py --rows 10000000 [--pandas-rows 500000] [--write-docs]

1. Generates a realistic metadata JSONL (vectorised numpy/pyarrow + ``write_ndjson``): 64 DP ranks x
   8 microbatches per iteration; 40% text-only rows, 45% with 1-4 images, 15% with one video;
   1-6 packed documents per row; padded_tokens rounded up to 1024.
2. Runs every measurement in its own subprocess (so imports and memory are isolated) and reads
   that child's peak RSS from ``os.wait4`` (per-child rusage); times are measured inside the child
   around the work only (imports excluded):
   * ``scan-len``   ``pl.scan_ndjson(f, schema=SCHEMA).select(pl.len())`` (streaming)
   * ``scan-all``   the same scan materialising every schema column (``null_count`` of each)
   * ``ours``       ``vlm_perf.ingest.metadata.iteration_stats``
   * ``pandas``     ``pd.read_json(lines=True, chunksize=...)`` + explode of grids / seq_lens +
                    groupby sum (same 15 statistics, no validation), on the first ``--pandas-rows``
                    rows, extrapolated linearly.
3. Prints a markdown table; ``--write-docs`` replaces the "## Metadata aggregation" section of
   ``docs/benchmarks.md`` (other sections are left untouched).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SECTION = "## Metadata aggregation"


# ---------------------------------------------------------------------------------------- data
def generate(path: Path, rows: int, seed: int = 0) -> None:
    import numpy as np
    import polars as pl
    import pyarrow as pa

    rng = np.random.default_rng(seed)
    idx = np.arange(rows, dtype=np.int64)
    per_iter = 64 * 8
    kind = rng.choice(3, size=rows, p=[0.40, 0.45, 0.15])  # 0 text, 1 images, 2 video

    def list_array(counts, values, null_mask=None):
        offsets = np.zeros(len(counts) + 1, dtype=np.int32)
        np.cumsum(counts, out=offsets[1:])
        mask = pa.array(null_mask) if null_mask is not None else None
        return pa.ListArray.from_arrays(pa.array(offsets), values, mask=mask)

    n_docs = rng.integers(1, 7, size=rows)
    doc_lens = rng.integers(64, 1400, size=int(n_docs.sum()))
    seq_lens = list_array(n_docs, pa.array(doc_lens))
    tokens = np.add.reduceat(doc_lens, np.concatenate([[0], np.cumsum(n_docs)[:-1]]))
    padded = (tokens + 1023) // 1024 * 1024

    def grids(n_per_row, t_lo, t_hi, side_lo, side_hi, mask):
        n = int(n_per_row.sum())
        t = rng.integers(t_lo, t_hi + 1, size=n)
        h = rng.integers(side_lo, side_hi + 1, size=n) * 2
        w = rng.integers(side_lo, side_hi + 1, size=n) * 2
        flat = np.stack([t, h, w], axis=1).reshape(-1)
        inner = list_array(np.full(n, 3), pa.array(flat))
        return list_array(n_per_row, inner, mask)

    n_img = np.where(kind == 1, rng.integers(1, 5, size=rows), 0)
    n_vid = np.where(kind == 2, 1, 0)
    image = grids(n_img, 1, 1, 4, 40, kind != 1)
    video = grids(n_vid, 2, 16, 4, 24, kind != 2)
    table = pa.table({
        "iteration": pa.array(idx // per_iter + 1),
        "microbatch": pa.array(idx % 8),
        "dp_rank": pa.array((idx // 8) % 64),
        "seq_lens": seq_lens,
        "padded_tokens": pa.array(padded),
        "image_grid_thw": image,
        "video_grid_thw": video,
    })
    pl.from_arrow(table).write_ndjson(path)


# --------------------------------------------------------------------------------- measurements
class _AnonSampler:
    """Peak anonymous (heap) memory of this process, sampled from /proc/self/status every 10 ms.

    Peak RSS (``ru_maxrss``) also counts file-backed pages: polars memory-maps the input file, so
    RSS grows towards the file size while it is scanned even though those pages are reclaimable
    page cache, not allocations. RssAnon separates the two.
    """

    def __init__(self) -> None:
        import threading

        self.peak_kb = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _sample(self) -> None:
        try:
            with open("/proc/self/status") as fh:
                for line in fh:
                    if line.startswith("RssAnon:"):
                        self.peak_kb = max(self.peak_kb, int(line.split()[1]))
                        return
        except OSError:  # not Linux
            pass

    def _run(self) -> None:
        while not self._stop.wait(0.01):
            self._sample()

    def __enter__(self) -> "_AnonSampler":
        self._sample()
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join()
        self._sample()


def _measure(name: str, path: str, rows: int) -> dict:
    with _AnonSampler() as sampler:
        info = _measure_inner(name, path, rows)
    info["peak_anon_mb"] = sampler.peak_kb / 1024
    return info


def split_shards(path: Path, target: Path, ranks: int = 64) -> None:
    """The same rows as per-rank shards (rank = (row // 8) % ranks), the layout capture writes."""
    target.mkdir(parents=True, exist_ok=True)
    outs = [open(target / f"metadata-rank{r:05d}.jsonl", "wb", buffering=1 << 20) for r in range(ranks)]
    with open(path, "rb", buffering=1 << 22) as fh:
        for i, line in enumerate(fh):
            outs[(i // 8) % ranks].write(line)
    for out in outs:
        out.close()


def _measure_inner(name: str, path: str, rows: int) -> dict:
    import polars as pl

    from vlm_perf.ingest.metadata import SCHEMA, iteration_stats

    t0 = time.perf_counter()
    if name.endswith("-shards"):
        name = name[: -len("-shards")]
        path = sorted(str(p) for p in Path(path).glob("*.jsonl"))
    if name == "scan-len":
        out = pl.scan_ndjson(path, schema=SCHEMA).select(pl.len()).collect(engine="streaming").item()
        info = {"rows": int(out)}
    elif name == "scan-all":
        out = pl.scan_ndjson(path, schema=SCHEMA).select(pl.all().null_count()).collect(engine="streaming")
        info = {"columns": out.width}
    elif name == "ours":
        res = iteration_stats(path)
        info = {"iterations": res.frame.height, "rows_used": res.diagnostics.rows_used,
                "vision_patches": int(res.frame["vision_patches"].sum())}
    elif name == "pandas":
        info = _pandas(path, rows)
    else:
        raise SystemExit(f"unknown measurement {name}")
    info["seconds"] = time.perf_counter() - t0
    return info


def _pandas(path: str, rows: int) -> dict:
    """A plain pandas implementation computing the same per-iteration statistics (no validation):
    chunked ``read_json``, explode of seq_lens / grid rows, vectorised arithmetic, groupby sum."""
    import numpy as np
    import pandas as pd

    parts = []
    seen = 0
    for chunk in pd.read_json(path, lines=True, chunksize=200_000, nrows=rows):
        seen += len(chunk)
        seq = chunk[["iteration", "seq_lens"]].explode("seq_lens").dropna()
        s = seq["seq_lens"].astype(np.int64)
        lm = pd.DataFrame({"iteration": seq["iteration"], "lm_tokens": s, "lm_tokens_sq": s * s,
                           "lm_sequences": 1, "lm_samples": 1}).groupby("iteration").sum()
        lm["lm_padded_tokens"] = chunk.groupby("iteration")["padded_tokens"].sum()
        lm["microbatches"] = chunk.groupby("iteration").size()
        vis = []
        for col, video in (("image_grid_thw", 0), ("video_grid_thw", 1)):
            g = chunk[["iteration", col]].explode(col).dropna()
            if g.empty:
                continue
            thw = pd.DataFrame(g[col].tolist(), index=g.index, columns=["t", "h", "w"]).astype(np.int64)
            t, h, w = thw["t"], thw["h"], thw["w"]
            patches, sq_frame, merged = t * h * w, t * (h * w) ** 2, t * (h // 2) * (w // 2)
            vis.append(pd.DataFrame({
                "iteration": g["iteration"], "vision_patches": patches, "vision_patches_sq_frame": sq_frame,
                "vision_patches_sq_item": patches * patches, "vision_merged_tokens": merged,
                "vision_window_sq": sq_frame, "vision_frames": t, "vision_items": 1,
                "video_patches": patches * video, "video_patches_sq_frame": sq_frame * video,
                "video_merged_tokens": merged * video}))
        v = pd.concat(vis).groupby("iteration").sum() if vis else pd.DataFrame()
        parts.append(lm.join(v, how="outer").fillna(0))
    total = pd.concat(parts).groupby(level=0).sum()
    return {"rows": seen, "iterations": len(total), "vision_patches": int(total["vision_patches"].sum())}


def run_child(name: str, path: Path, rows: int) -> dict:
    cmd = [sys.executable, __file__, "--child", name, "--file", str(path), "--rows", str(rows)]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, text=True)
    out = proc.stdout.read()
    _, status, usage = os.wait4(proc.pid, 0)
    proc.returncode = os.waitstatus_to_exitcode(status)
    if proc.returncode:
        raise SystemExit(f"measurement {name} failed ({proc.returncode})")
    info = json.loads(out.strip().splitlines()[-1])
    info["peak_rss_mb"] = usage.ru_maxrss / 1024  # Linux: KiB
    return info


# ------------------------------------------------------------------------------------- report
def render(rows: int, size_mb: float, gen_s: float, res: dict, pandas_rows: int) -> str:
    ours, s_len, s_all, pd_ = res["ours"], res["scan-len"], res["scan-all"], res["pandas"]
    pandas_full = pd_["seconds"] * rows / pandas_rows
    lines = [
        SECTION, "",
        f"`python benchmarks/bench_metadata.py --rows {rows}` on {platform.machine()}, {os.cpu_count()} CPUs, "
        f"Python {platform.python_version()}, polars {__import__('polars').__version__}, "
        f"pandas {__import__('pandas').__version__}.",
        f"Input: {rows:,} rows, {size_mb:,.0f} MB JSONL ("
        + (f"generated in {gen_s:.1f} s" if gen_s > 0.05 else "an existing file reused") + "): 64 ranks x 8 microbatches "
        "per iteration; 40% text-only, 45% with 1-4 images, 15% with one video; 1-6 packed documents per row.",
        "Each measurement runs in its own subprocess; peak RSS from `os.wait4` of that child, peak anonymous "
        "memory sampled from `/proc/self/status` (RssAnon, every 10 ms); times exclude interpreter start-up "
        "and imports. The machine was shared with other jobs while this ran (load average "
        f"{os.getloadavg()[0]:.1f} at the end), so absolute times are noisy; the ratios are what matter.", "",
        "| measurement | time (s) | vs bare scan (all columns) | vs bare scan (`pl.len()`) | peak RSS (MB) "
        "| peak anonymous memory (MB) |",
        "|---|---:|---:|---:|---:|---:|",
    ]

    def row(label, info, seconds=None):
        sec = info["seconds"] if seconds is None else seconds
        lines.append(f"| {label} | {sec:.2f} | {sec / s_all['seconds']:.2f}x | {sec / s_len['seconds']:.2f}x | "
                     f"{info['peak_rss_mb']:,.0f} | {info.get('peak_anon_mb', float('nan')):,.0f} |")

    row("bare scan, `select(pl.len())`", s_len)
    row("bare scan, every schema column parsed (`null_count`)", s_all)
    row("**`iteration_stats`** (validation + all BatchStats, one pass)", ours)
    sh_all, sh_ours = res["scan-all-shards"], res["ours-shards"]
    lines.append(f"| same rows as 64 per-rank shards: bare scan, every column | {sh_all['seconds']:.2f} | 1.00x (shards) "
                 f"| | {sh_all['peak_rss_mb']:,.0f} | {sh_all['peak_anon_mb']:,.0f} |")
    lines.append(f"| same rows as 64 per-rank shards: **`iteration_stats(dir)`** | {sh_ours['seconds']:.2f} | "
                 f"{sh_ours['seconds'] / sh_all['seconds']:.2f}x (shards) | | {sh_ours['peak_rss_mb']:,.0f} "
                 f"| {sh_ours['peak_anon_mb']:,.0f} |")
    row(f"pandas, {pandas_rows:,} rows measured, extrapolated x{rows / pandas_rows:g} (linear)", pd_, pandas_full)
    speedup = pandas_full / ours["seconds"]
    speedup_shards = pandas_full / sh_ours["seconds"]
    ratio = ours["seconds"] / s_all["seconds"]
    ratio_shards = sh_ours["seconds"] / sh_all["seconds"]
    ratio_len = ours["seconds"] / s_len["seconds"]
    lines += [
        "",
        "Targets:",
        f"* aggregation <= 1.5x the bare scan: **{ratio:.2f}x** the scan that parses every column the aggregation "
        f"needs ({'met' if ratio <= 1.5 else 'MISSED'}), **{ratio_shards:.2f}x** on the per-rank shards "
        f"({'met' if ratio_shards <= 1.5 else 'MISSED'}); {ratio_len:.2f}x a `pl.len()` scan "
        f"({'met' if ratio_len <= 1.5 else 'missed'}; polars pushes the projection down and skips parsing most "
        "values there, so that scan is not a like-for-like bound).",
        f"* peak memory < 1.5 GB: peak RSS **{ours['peak_rss_mb']:,.0f} MB** "
        f"({'met' if ours['peak_rss_mb'] < 1536 else 'MISSED'}), of which anonymous memory (allocations) "
        f"peaks at **{ours['peak_anon_mb']:,.0f} MB** ({'met' if ours['peak_anon_mb'] < 1536 else 'MISSED'}). "
        f"The rest is the memory-mapped input file ({size_mb:,.0f} MB): polars maps it, so RSS approaches the "
        "file size for any scan of it (the bare `pl.len()` scan included); those pages are clean page cache "
        "the kernel can drop under pressure. With the layout the capture helper writes (one shard per rank) "
        f"the same {rows:,} rows peak at **{sh_ours['peak_rss_mb']:,.0f} MB RSS** "
        f"({'met' if sh_ours['peak_rss_mb'] < 1536 else 'MISSED'}).",
        f"* >= 10x faster than pandas: **{speedup:.1f}x** single file, **{speedup_shards:.1f}x** shards "
        f"({'met' if min(speedup, speedup_shards) >= 10 else 'MISSED'}; pandas time extrapolated linearly from "
        f"the subset; pandas computes the same 15 statistics without validation). The bare polars parse alone "
        f"is only {pandas_full / s_all['seconds']:.1f}x faster than the pandas pipeline here: JSON parsing "
        "dominates both, and on 2 shared CPUs polars' parallel parse has little headroom.",
        "",
        f"Result check: {ours['iterations']:,} iterations, {ours['rows_used']:,} rows used.",
        "",
    ]
    return "\n".join(lines)


def write_docs(section: str) -> Path:
    path = ROOT / "docs" / "benchmarks.md"
    path.parent.mkdir(parents=True, exist_ok=True)
    text = path.read_text(encoding="utf-8") if path.exists() else "# Benchmarks\n\n"
    if SECTION in text:
        start = text.index(SECTION)
        nxt = text.find("\n## ", start + len(SECTION))
        end = len(text) if nxt < 0 else nxt + 1
        text = text[:start] + section.rstrip("\n") + "\n" + ("\n" + text[end:] if nxt >= 0 else "")
    else:
        text = text.rstrip("\n") + "\n\n" + section
    path.write_text(text, encoding="utf-8")
    return path


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", type=int, default=10_000_000)
    ap.add_argument("--pandas-rows", type=int, default=500_000)
    ap.add_argument("--file", type=Path, default=None, help="data file (default: /tmp/vlm-perf-bench-<rows>.jsonl)")
    ap.add_argument("--keep", action="store_true", help="keep the generated file")
    ap.add_argument("--write-docs", action="store_true")
    ap.add_argument("--child", default=None, help=argparse.SUPPRESS)
    ap.add_argument("--generate", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--split", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.generate:
        generate(args.file, args.rows)
        return
    if args.split:
        split_shards(args.file, args.file.with_name(args.file.name + ".shards"))
        return
    if args.child:
        print(json.dumps(_measure(args.child, str(args.file), args.rows)))
        return
    path = args.file or Path(f"/tmp/vlm-perf-bench-{args.rows}.jsonl")
    t0 = time.perf_counter()
    generated = not path.exists()
    if generated:  # in a child, so that this parent stays small (children inherit its peak RSS at fork)
        subprocess.run([sys.executable, __file__, "--generate", "--file", str(path), "--rows", str(args.rows)],
                       check=True)
    gen_s = time.perf_counter() - t0
    size_mb = path.stat().st_size / 1e6
    print(f"data: {path} ({size_mb:,.0f} MB, {'generated' if generated else 'reused'} in {gen_s:.1f} s)", file=sys.stderr)
    shards = path.with_name(path.name + ".shards")
    if not shards.exists():
        subprocess.run([sys.executable, __file__, "--split", "--file", str(path), "--rows", str(args.rows)],
                       check=True)
    pandas_rows = min(args.pandas_rows, args.rows)
    res = {}
    for name in ("scan-len", "scan-all", "ours", "scan-all-shards", "ours-shards", "pandas"):
        source = shards if name.endswith("-shards") else path
        res[name] = run_child(name, source, pandas_rows if name == "pandas" else args.rows)
        print(f"{name}: {res[name]}", file=sys.stderr)
    section = render(args.rows, size_mb, gen_s, res, pandas_rows)
    print(section)
    if args.write_docs:
        print(f"wrote {write_docs(section)}", file=sys.stderr)
    if generated and not args.keep and args.file is None:
        path.unlink()
        shutil.rmtree(shards, ignore_errors=True)


if __name__ == "__main__":
    main()
