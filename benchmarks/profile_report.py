"""Where `vlm-perf report` spends its peak RSS and its time, phase by phase (in process).

    python benchmarks/profile_report.py RUN_DIR [-o OUT]

Wraps the phases of `vlm_perf.pipeline.load_run` and `write_report` (log parse, the metadata
pass, the balance analysis, figures, ...) and prints, for each call of a phase: wall seconds,
RSS at entry and exit, the largest RSS sampled while it ran (a thread reads ``/proc/self/status``
every 5 ms) and whether the process high-water mark (``VmHWM``, exact, not sampled) rose during
it. tracemalloc does not see polars/arrow/numpy buffers; RSS does, and it does not depend on the
machine's load, so these numbers are comparable between runs on a shared machine (times are not).
Linux only (``/proc``).
"""

from __future__ import annotations

import argparse
import os
import sys
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def _status(field: str) -> int:
    """A ``/proc/self/status`` field in bytes (``VmRSS``, ``VmHWM``)."""
    with open("/proc/self/status") as fh:
        for line in fh:
            if line.startswith(field + ":"):
                return int(line.split()[1]) * 1024
    raise KeyError(field)


class Sampler:
    """Largest VmRSS seen since the last `reset` (sampled every ``period`` seconds by a thread)."""

    def __init__(self, period: float = 0.005) -> None:
        self.period, self.peak, self._stop = period, 0, threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.is_set():
            self.peak = max(self.peak, _status("VmRSS"))
            time.sleep(self.period)

    def reset(self) -> int:
        old, self.peak = self.peak, _status("VmRSS")
        return old

    def __enter__(self) -> "Sampler":
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join()


ROWS: list[dict] = []
DEPTH = [0]


def wrap(owner, name: str, label: str, sampler: Sampler) -> None:
    """Replace ``owner.name`` by a wrapper recording one `ROWS` entry per call."""
    inner = getattr(owner, name)

    def wrapper(*args, **kwargs):
        depth = DEPTH[0]
        DEPTH[0] += 1
        outer_peak = sampler.reset()
        rss0, hwm0, t0 = _status("VmRSS"), _status("VmHWM"), time.perf_counter()
        try:
            return inner(*args, **kwargs)
        finally:
            seconds = time.perf_counter() - t0
            rss1, hwm1 = _status("VmRSS"), _status("VmHWM")
            peak = max(sampler.reset(), rss1)
            sampler.peak = max(outer_peak, peak)  # the enclosing phase saw this peak too
            DEPTH[0] -= 1
            ROWS.append({"phase": "  " * depth + label, "seconds": seconds, "rss_in": rss0, "rss_out": rss1,
                         "peak": peak, "hwm_rose": hwm1 > hwm0, "hwm": hwm1, "order": t0})

    setattr(owner, name, wrapper)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("run", type=Path)
    ap.add_argument("-o", "--out", type=Path, default=None, help="report folder (default: RUN.profile-out)")
    args = ap.parse_args()
    out = args.out or args.run.with_name(args.run.name + ".profile-out")

    import vlm_perf.analysis.balance as balance
    import vlm_perf.analysis.checks as checks
    import vlm_perf.analysis.facade as facade
    import vlm_perf.analysis.hfu as hfu
    import vlm_perf.analysis.stragglers as stragglers
    import vlm_perf.ingest.logs as logs
    import vlm_perf.ingest.metadata_source as metadata_source
    import vlm_perf.pipeline as pipeline
    import vlm_perf.report.document as document
    import vlm_perf.report.figures as figures
    import vlm_perf.report.providers as providers

    with Sampler() as sampler:
        targets = [(logs, "parse_logs", "log parse"), (metadata_source.MetadataSource, "read", "metadata pass"),
                   (facade, "analyze_run", "analyze_run"), (checks, "run_checks", "run_checks"),
                   (balance, "balance_of", "balance analysis"), (hfu, "hfu_of", "hfu"),
                   (stragglers, "stragglers_of", "stragglers"),
                   (figures, "draw_all", "figures"), (document, "build_sections", "sections (+ balance figure)"),
                   (providers, "balance_figure", "balance figure"), (balance, "lpt_balance", "lpt_balance"),
                   (pipeline, "load_run", "load_run"), (document, "write_report", "write_report")]
        targets += [(balance, "ranks_from_microbatches", "rank sums (group-by)"),
                    (balance, "balance_by_iteration", "balance_by_iteration")]
        for name in ("costs_from_row_values", "microbatch_vision_share"):  # composed by the Run facade
            targets.append((facade, name, name))
        for owner, name, label in targets:
            wrap(owner, name, label, sampler)
        t0 = time.perf_counter()
        loaded = pipeline.load_run(args.run)
        document.write_report(loaded.analysis, out, loaded.context)
        total = time.perf_counter() - t0
    mb = 1 / 2**20
    print(f"{'phase':34s} {'s':>7s} {'RSS in':>8s} {'RSS out':>8s} {'peak':>8s}  new high-water mark")
    for row in sorted(ROWS, key=lambda r: r["order"]):
        if row["seconds"] < 1e-3 and not row["hwm_rose"]:
            continue  # e.g. MetadataSource.read() again on an output's first access: a no-op
        print(f"{row['phase']:34s} {row['seconds']:7.2f} {row['rss_in'] * mb:7.0f}M {row['rss_out'] * mb:7.0f}M "
              f"{row['peak'] * mb:7.0f}M  {'yes -> %.0fM' % (row['hwm'] * mb) if row['hwm_rose'] else ''}")
    print(f"total {total:.2f} s, process peak RSS (VmHWM) {_status('VmHWM') * mb:.0f} MB, "
          f"load average {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
