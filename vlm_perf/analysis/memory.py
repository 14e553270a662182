"""Peak GPU memory per rank from the memory reports a log prints (`vlm_perf.ingest.log_facts`).

Megatron prints ``[Rank R] (after K iterations) memory (MB|GB) | ... max allocated ... | ... max reserved
...`` for some ranks (the first DP rank of each model-parallel group). The allocator's maxima are
peaks since the process started, so a rank's peak is the largest value over its reports. Values are
kept in bytes; the framework's unit is stated (MB = MiB as Megatron-LM divides by 1024**2, GB = 1e9
bytes as Megatron-Bridge divides by 1e9). Pure: no I/O.
"""

from __future__ import annotations

import re
from typing import Iterable

import polars as pl

GIB = 1024.0 ** 3
#: per-record memory columns of the structured formats: column -> (which peak, bytes per unit, unit).
#: torchtitan ``memory: 41.00GiB(…)`` and ms-swift ``memory(GiB)`` are the reserved peak in GiB; NeMo 2
#: ``max_memory_allocated`` / ``max_memory_reserved`` are bytes.
RECORD_COLUMNS = {"memory_gib": ("max_reserved_bytes", GIB, "GiB"),
                  "max_memory_allocated": ("max_allocated_bytes", 1.0, "bytes"),
                  "max_memory_reserved": ("max_reserved_bytes", 1.0, "bytes")}


def memory_records(raw: pl.DataFrame | None) -> list[tuple[int, int, float | None, float | None, str, int]]:
    """Memory values the iteration records carry (structured formats), as the memory reports'
    ``(rank, iteration, max_allocated, max_reserved, unit, line)``; the rank is the record's numeric
    rank label, else 0 (the rank that logs)."""
    if raw is None or not raw.height:
        return []
    present = [c for c in RECORD_COLUMNS if c in raw.columns]
    if not present:
        return []
    rows = raw.select("iteration", "line", "rank_label", *present).filter(
        pl.any_horizontal(pl.col(c).is_not_null() for c in present))
    out = []
    for row in rows.iter_rows(named=True):
        label = re.search(r"\d+", str(row["rank_label"] or ""))
        values: dict[str, float | None] = {"max_allocated_bytes": None, "max_reserved_bytes": None}
        unit = ""
        for c in present:
            if row[c] is not None:
                key, scale, unit = RECORD_COLUMNS[c]
                values[key] = float(row[c]) * scale
        out.append((int(label.group()) if label else 0, int(row["iteration"] or 0), values["max_allocated_bytes"],
                    values["max_reserved_bytes"], unit, int(row["line"] or 0)))
    return out


def peak_memory(facts: Iterable, raw: pl.DataFrame | None = None) -> dict | None:
    """The summary.json ``memory`` block from `FileFacts` of the logs (memory report lines) and the
    records' own memory columns (``raw``), or None when no log prints memory."""
    ranks: dict[int, dict] = {}
    units: set[str] = set()
    sources = [(f.path, f.memory) for f in facts] + [("records", memory_records(raw))]
    for path, reports in sources:
        for rank, iteration, allocated, reserved, unit, line in reports:
            units.add(unit)
            entry = ranks.setdefault(rank, {"rank": rank, "max_allocated_bytes": None, "max_reserved_bytes": None,
                                            "reports": 0, "last_iteration": None, "first": f"{path}:{line}"})
            entry["reports"] += 1
            entry["last_iteration"] = max(iteration, entry["last_iteration"] or iteration)
            for key, value in (("max_allocated_bytes", allocated), ("max_reserved_bytes", reserved)):
                if value is not None and (entry[key] is None or value > entry[key]):
                    entry[key] = value
    if not ranks:
        return None
    rows = [ranks[r] for r in sorted(ranks)]
    allocated = [r["max_allocated_bytes"] for r in rows if r["max_allocated_bytes"] is not None]
    reserved = [r["max_reserved_bytes"] for r in rows if r["max_reserved_bytes"] is not None]
    top = max(rows, key=lambda r: r["max_reserved_bytes"] or r["max_allocated_bytes"] or 0)
    return {"ranks": rows, "ranks_reported": len(rows), "units_in_log": sorted(units),
            "max_allocated_bytes": max(allocated) if allocated else None,
            "max_reserved_bytes": max(reserved) if reserved else None,
            "min_max_allocated_bytes": min(allocated) if allocated else None,
            "peak_rank": top["rank"]}
