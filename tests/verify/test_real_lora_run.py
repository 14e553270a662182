"""A REAL tiny LoRA run (scripts/make_real_run.py --lora-rank): what the callback recorded (metadata +
trainability.json) and the adapter config it saved give, through the library, the FLOPs FlopCounterMode measured
for every optimizer step of the HF Trainer run, to the FLOP."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

pytest.importorskip("torch")
pytest.importorskip("transformers")
pytest.importorskip("accelerate")
pytest.importorskip("peft")
pytest.importorskip("PIL")


@pytest.mark.measured
@pytest.mark.slow
def test_real_lora_run_per_step_equals_measured(tmp_path):
    import polars as pl

    from vlm_perf.arch import spec_from_config
    from vlm_perf.arch.observed import observed_trainability
    from vlm_perf.flops.regime import regime_flops
    from vlm_perf.ingest.adapter_config import read_adapter_config, read_trainability_record
    from vlm_perf.ingest.metadata import iteration_stats
    from vlm_perf.stats import BatchStats

    out = tmp_path / "run"
    r = subprocess.run([sys.executable, str(ROOT / "scripts" / "make_real_run.py"), "--out", str(out), "--steps", "3",
                        "--accumulation", "2", "--lora-rank", "4"], capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
    spec = spec_from_config(json.loads((out / "config.json").read_text()), name="tiny-real")
    record = read_trainability_record(out)
    adapter = read_adapter_config(out)
    assert record.adapter is not None and record.adapter.r == adapter.r == 4
    regime = observed_trainability(spec, record.requires_grad, adapter=adapter,
                                   input_require_grads=record.input_require_grads).trainability
    lib = regime_flops(spec, BatchStats.columns(), regime, causal="full")
    frame = iteration_stats(out / "metadata").frame
    per_step = frame.select(pl.col("iteration"), *lib.breakdown.as_exprs())
    measured = json.loads((out / "measured_flops.json").read_text())["per_step"]
    assert [s["iteration"] for s in measured] == per_step["iteration"].to_list() == [1, 2, 3]
    for step, total in zip(measured, per_step["flops_total"].to_list()):
        model_flops = step["flops"] - sum(v for k, v in step["by_part"].items() if k.endswith(".rope"))
        assert total == model_flops, (step["iteration"], total, model_flops)
        assert step["by_part"].get("backward.tower", 0) == 0  # frozen tower, no input hook: forward only
