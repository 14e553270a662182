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

from verify.regenerate import assert_same_records

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
    assert_same_records(out, RUN, ("metadata/metadata-rank00000.jsonl", "config.json", "run.yaml", "trainability.json"))
    new, old = (json.loads((d / "measured_flops.json").read_text()) for d in (out, RUN))
    new.pop("versions"), old.pop("versions")  # the numbers must hold on any stack; a change is drift to name
    new.pop("wall_s"), old.pop("wall_s")
    assert new == old
    assert_same_records(out, RUN, ("rl/settings.json",))
    assert _steps(out) == _steps(RUN)


@pytest.mark.measured
@pytest.mark.slow
def test_lora_grpo_report_equals_measured(tmp_path):
    """A LoRA GRPO run (TRL's peft_config, r=4 on every LM Linear: the reference is the policy with its adapter
    disabled, generation and the old-policy pass run the adapter): the report's RL phases equal FlopCounterMode per
    step, phase and part."""
    from vlm_perf.pipeline import load_run
    from vlm_perf.report.document import build_summary

    out = tmp_path / "lora"
    r = subprocess.run([sys.executable, str(ROOT / "scripts" / "make_real_grpo.py"), "--out", str(out),
                        "--lora-rank", "4", "--steps", "2"], capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
    measured = json.loads((out / "measured_flops.json").read_text())
    loaded = load_run(out, causal="full")
    rl = build_summary(loaded.analysis, loaded.context)["rl"]
    assert "with LoRA (r=4" in (out / "run.yaml").read_text()
    assert [it["phases"] for it in rl["per_iteration"]] == [
        {p: sum(v.values()) for p, v in step["by_phase"].items()} for step in measured["per_step"]]
    part = {"tower": "vision_tower", "merger": "projector", "lm": "language_model"}
    for it, step in zip(rl["per_iteration"], measured["per_step"]):
        whole = {p: 0 for p in part.values()}
        for entry in step["by_phase"].values():
            for k, v in entry.items():
                whole[part[k.split(".", 1)[1]]] += v
        assert it["parts"] == whole
    assert rl["phases"]["old_log_prob"]["flops"] > rl["phases"]["ref"]["flops"]  # the adapter's forward
