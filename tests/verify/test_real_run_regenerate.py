"""scripts/make_real_run.py reproduces the bundled REAL run (sample_logs/qwen2-vl-tiny-real).

The training is seeded and runs on one CPU thread, so the metadata, the measured FLOPs and the
config come out byte-identical; only train.log differs (its tqdm rates and runtimes are timings).
Requires the verify extra (torch, transformers) and accelerate (the Trainer); ~10 s.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from verify.regenerate import assert_same_records

ROOT = Path(__file__).resolve().parents[2]
RUN = ROOT / "sample_logs" / "qwen2-vl-tiny-real"

pytest.importorskip("torch")
pytest.importorskip("transformers")
pytest.importorskip("accelerate")
pytest.importorskip("PIL")


@pytest.mark.measured
@pytest.mark.slow
def test_script_reproduces_the_bundled_run(tmp_path):
    if not RUN.is_dir():
        pytest.skip("sample_logs/qwen2-vl-tiny-real not present")
    out = tmp_path / "run"
    r = subprocess.run([sys.executable, str(ROOT / "scripts" / "make_real_run.py"), "--out", str(out)],
                       capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
    assert not (out / "_trainer").exists()
    assert_same_records(out, RUN, ("metadata/metadata-rank00000.jsonl", "config.json", "run.yaml"))
    new, old = (json.loads((d / "measured_flops.json").read_text()) for d in (out, RUN))
    new.pop("versions"), old.pop("versions")  # the numbers must hold on any stack; a change is drift to name
    assert new == old
    log = (out / "train.log").read_text()
    assert log.count("{'loss'") == 20 and "train_runtime" in log
