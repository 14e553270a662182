"""scripts/make_real_trace.py reproduces the bundled REAL trace (sample_logs/qwen2-vl-tiny-trace).

Seeded, one CPU thread: the metadata, config and run.yaml come out byte-identical and the trace holds the
same events (names, kinds, nesting order) with other timings. Requires the verify extra; ~15 s.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from verify.regenerate import assert_same_records

ROOT = Path(__file__).resolve().parents[2]
RUN = ROOT / "sample_logs" / "qwen2-vl-tiny-trace"

pytest.importorskip("torch")
pytest.importorskip("transformers")
pytest.importorskip("accelerate")
pytest.importorskip("PIL")


@pytest.mark.measured
@pytest.mark.slow
def test_script_reproduces_the_bundled_trace(tmp_path):
    from vlm_perf.analysis.trace_parts import analyze_traces
    from vlm_perf.ingest.traces import read_traces

    out = tmp_path / "run"
    r = subprocess.run([sys.executable, str(ROOT / "scripts" / "make_real_trace.py"), "--out", str(out)],
                       capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
    assert not (out / "_trainer").exists()
    assert_same_records(out, RUN, ("metadata/metadata-rank00000.jsonl", "config.json", "run.yaml"))
    new, old = (read_traces(d / "trace").events.sort("start") for d in (out, RUN))
    assert new.select("kind", "name").rows() == old.select("kind", "name").rows()
    result = analyze_traces(read_traces(out / "trace"))
    assert result.check_sums() <= 0.01 and result.steps["iteration"].to_list() == [3, 4]
