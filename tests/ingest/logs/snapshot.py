"""Regression snapshot of what the log parser produced before the format-registry refactor.

``python -m tests.ingest.logs.snapshot --write`` regenerates ``fixtures/snapshot.json``; run it only
when a change of output is intended and say so in the commit. The digests are of the raw and the
iteration tables written as CSV (NaN spelled out), so any change of a value, a dtype-visible
formatting, a column or a row order shows up.
"""

from __future__ import annotations

import hashlib
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
FIXTURES = Path(__file__).resolve().parent / "fixtures"
SNAPSHOT = FIXTURES / "snapshot.json"


def corpus() -> list[Path]:
    """Every bundled sample log plus the per-format fixtures written before the refactor."""
    names = json.loads(SNAPSHOT.read_text())["files"] if SNAPSHOT.exists() and "--write" not in sys.argv else None
    if names is not None:
        return [ROOT / n for n in names]
    files = sorted(ROOT.glob("sample_logs/*/train.log")) + sorted(p for p in FIXTURES.iterdir() if p.is_file()
                                                                   and p.name != "snapshot.json")
    return files


def digest(path: Path) -> dict:
    from vlm_perf.ingest.logs import parse_logs

    r = parse_logs([path])
    # the record kind (issue 19) is digested as counts, so the tables' digests are those of the
    # columns the snapshot was first written with
    kinds = dict(sorted(r.raw.get_column("kind").cast(str).value_counts().iter_rows()))
    raw = r.raw.drop("file", "kind")
    it = r.iterations.drop("file", "kind")
    d = r.diagnostics.to_dict()
    return {
        "raw": hashlib.sha256(raw.write_csv().encode()).hexdigest(),
        "iterations": hashlib.sha256(it.write_csv().encode()).hexdigest(),
        "columns": raw.columns,
        "rows": raw.height,
        "formats_seen": d["formats_seen"],
        "segments": d["segments"],
        "duplicates": d["duplicates"],
        "lines_read": d["lines_read"],
        "kinds": kinds,
    }


def build() -> dict:
    files = corpus()
    return {"files": [str(p.relative_to(ROOT)) for p in files],
            "digests": {str(p.relative_to(ROOT)): digest(p) for p in files}}


if __name__ == "__main__":
    if "--write" in sys.argv:
        SNAPSHOT.write_text(json.dumps(build(), indent=1, sort_keys=True) + "\n")
        print(f"wrote {SNAPSHOT}")
    else:
        print(json.dumps(build(), indent=1))
