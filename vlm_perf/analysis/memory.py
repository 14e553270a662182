"""Peak GPU memory per rank from the memory reports a log prints (`vlm_perf.ingest.log_facts`).

Megatron prints ``[Rank R] (after K iterations) memory (MB|GB) | ... max allocated ... | ... max reserved
...`` for some ranks (the first DP rank of each model-parallel group). The allocator's maxima are
peaks since the process started, so a rank's peak is the largest value over its reports. Values are
kept in bytes; the framework's unit is stated (MB = MiB as Megatron-LM divides by 1024**2, GB = 1e9
bytes as Megatron-Bridge divides by 1e9). Pure: no I/O.
"""

from __future__ import annotations

from typing import Iterable

GIB = 1024.0 ** 3


def peak_memory(facts: Iterable) -> dict | None:
    """The summary.json ``memory`` block from `FileFacts` of the logs, or None when no log prints memory."""
    ranks: dict[int, dict] = {}
    units: set[str] = set()
    for f in facts:
        for rank, iteration, allocated, reserved, unit, line in f.memory:
            units.add(unit)
            entry = ranks.setdefault(rank, {"rank": rank, "max_allocated_bytes": None, "max_reserved_bytes": None,
                                            "reports": 0, "last_iteration": None, "first": f"{f.path}:{line}"})
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
