"""A straightforward per-line Python regex parser for Megatron iteration lines.

Not used by ``parse_logs``: it is the reference the vectorised path is tested against and the
"naive loop" baseline of benchmarks/bench_parse.py. Same field semantics as ``megatron.extract``
(value must be terminated by ``|``; elapsed converted ms -> s).
"""

from __future__ import annotations

import re
from pathlib import Path

from .megatron import KNOWN_KEYS

_LINE_RE = re.compile(r"iteration\s+(\d+)\s*/\s*(\d+)\s*\|")
_FIELD_RE = re.compile(r"\|\s*([^|:]+?):\s*([^|]*?)\s*(?=\|)")
_TS_RE = re.compile(r"\[(\d{4}-\d\d-\d\d[ T]\d\d:\d\d:\d\d(?:[.,]\d+)?)\]")


def parse_line(line: str) -> dict | None:
    m = _LINE_RE.search(line)
    if not m or "epoch" in line[: m.start()]:
        return None
    rec: dict = {"iteration": int(m.group(1)), "train_iters": int(m.group(2))}
    ts = _TS_RE.search(line[: m.start()])
    rec["timestamp"] = ts.group(1) if ts else None
    for key, raw in _FIELD_RE.findall(line, m.end() - 1):
        key = key.strip()
        if key not in KNOWN_KEYS:
            continue
        name, mult = KNOWN_KEYS[key]
        try:
            rec[name] = float(raw) * mult
        except ValueError:
            rec[name] = None
    return rec


def parse_file(path: str | Path) -> list[dict]:
    """Loop over lines; one regex search per line, one findall per matching line."""
    out = []
    with open(path, encoding="utf-8", errors="replace") as fh:
        for line in fh:
            rec = parse_line(line)
            if rec is not None:
                out.append(rec)
    return out
