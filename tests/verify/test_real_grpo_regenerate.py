"""scripts/make_real_grpo.py reproduces the bundled REAL GRPO run (sample_logs/qwen2-vl-tiny-grpo-real).

The run is seeded and runs on one CPU thread: the metadata, the RL records (their seconds aside), the config and
the measured FLOPs (wall time aside) come out identical; train.log differs in its timings. Requires torch,
transformers, accelerate, datasets and trl; ~15 s.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
RUN = ROOT / "sample_logs" / "qwen2-vl-tiny-grpo-real"

for _name in ("torch", "transformers", "accelerate", "datasets", "trl", "PIL"):
    pytest.importorskip(_name)


def _steps(folder: Path) -> list[dict]:
    rows = [json.loads(line) for line in (folder / "rl" / "steps.jsonl").read_text().splitlines()]
    for row in rows:
        row.pop("step_s")
        assert set(row.pop("phases_s")) >= {"update_actor", "other"}
    return rows


@pytest.mark.measured
@pytest.mark.slow
def test_script_reproduces_the_bundled_grpo_run(tmp_path):
    if not RUN.is_dir():
        pytest.skip("sample_logs/qwen2-vl-tiny-grpo-real not present")
    out = tmp_path / "run"
    r = subprocess.run([sys.executable, str(ROOT / "scripts" / "make_real_grpo.py"), "--out", str(out)],
                       capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
    assert not (out / "_trainer").exists()
    for name in ("metadata/metadata-rank00000.jsonl", "config.json", "run.yaml", "trainability.json"):
        assert (out / name).read_bytes() == (RUN / name).read_bytes(), name
    new, old = (json.loads((d / "measured_flops.json").read_text()) for d in (out, RUN))
    if new.pop("versions") != old.pop("versions"):
        pytest.skip("other torch/transformers/trl versions: FLOPs may legitimately differ")
    new.pop("wall_s"), old.pop("wall_s")
    assert new == old
    assert (out / "rl" / "settings.json").read_bytes() == (RUN / "rl" / "settings.json").read_bytes()
    assert _steps(out) == _steps(RUN)
