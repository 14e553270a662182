"""The bundled REAL LoRA run (sample_logs/qwen2-vl-tiny-lora-real): `vlm-perf report` against torch's measured FLOPs.

A real (tiny, CPU) HF Trainer run of a PEFT LoRA model (scripts/make_real_run.py --lora-rank 4): the callback wrote
``trainability.json`` and PEFT ``adapter_config.json``; ``FlopCounterMode`` measured every FLOP of every step
(``measured_flops.json``), independently of vlm-perf's formulas. With no regime flag, the report must find the
regime in the run folder and its exact FLOPs (``--causal full``, eager attention) must equal the measurement to the
FLOP, per step and per part; full-training accounting is shown beside it and differs by what autograd skipped.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
RUN = ROOT / "sample_logs" / "qwen2-vl-tiny-lora-real"

pytestmark = pytest.mark.skipif(not RUN.is_dir(), reason="sample_logs/qwen2-vl-tiny-lora-real not present")


def _measured() -> dict:
    return json.loads((RUN / "measured_flops.json").read_text())


def _model_flops(step: dict) -> int:  # the rotary tables are not model FLOPs (none are in this run)
    return step["flops"] - sum(v for k, v in step["by_part"].items() if k.endswith(".rope"))


def test_bundle_is_labelled_real_small_and_lora():
    names = {p.name for p in RUN.iterdir()}
    assert {"train.log", "metadata", "measured_flops.json", "config.json", "run.yaml", "README.md",
            "trainability.json", "adapter_config.json"} <= names
    assert sum(p.stat().st_size for p in RUN.rglob("*") if p.is_file()) < 200 * 1024
    manifest = yaml.safe_load((RUN / "run.yaml").read_text())
    assert manifest["synthetic"] is False and (RUN / "run.yaml").read_text().startswith("# REAL run")
    readme = (RUN / "README.md").read_text()
    assert "REAL" in readme and "scripts/make_real_run.py --lora-rank 4" in readme and "not synthetic" in readme
    measured = _measured()
    assert measured["lora_rank"] == 4 and len(measured["per_step"]) == 20
    assert sum(s["flops"] for s in measured["per_step"]) == measured["total_flops"]
    assert not any(k.startswith("backward.") and ("tower" in k or "merger" in k) for k in measured["by_part"])


@pytest.fixture(scope="module")
def report(tmp_path_factory):
    out = tmp_path_factory.mktemp("lora")
    r = subprocess.run([sys.executable, "-m", "vlm_perf.cli", "report", str(RUN), "-o", str(out), "--causal", "full"],
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    assert "Traceback" not in r.stderr
    return out, json.loads((out / "summary.json").read_text())


def test_report_states_the_regime_found_in_the_folder(report):
    out, summary = report
    regime = summary["regime"]
    assert regime["description"] == "LoRA r=4 on LM attention + MLP, tower and projector frozen"
    assert "trainability.json" in regime["source"]
    assert regime["whole_parts"] is False and regime["contradictions"] == []
    md = (out / "report.md").read_text()
    assert "Regime: LoRA r=4 on LM attention + MLP, tower and projector frozen" in md.replace("\\", "")


def test_report_total_equals_measured(report):
    _, summary = report
    assert summary["iterations"] == 20
    assert summary["conventions"]["exact"]["flops_total"] == sum(_model_flops(s) for s in _measured()["per_step"])


def test_report_per_step_and_per_part_equal_measured():
    from vlm_perf.pipeline import load_run

    per = load_run(RUN, causal="full").analysis.per_iteration.sort("iteration")
    steps = _measured()["per_step"]
    assert per["iteration"].to_list() == [s["iteration"] for s in steps]
    for step, (total, vision, language) in zip(steps, per.select("exact_total", "exact_vision",
                                                                 "exact_language").rows()):
        part = step["by_part"]
        assert total == _model_flops(step), step["iteration"]
        assert vision == part.get("forward.tower", 0) + part.get("forward.merger", 0), step["iteration"]
        assert language == part["forward.lm"] + part["backward.lm"], step["iteration"]


def test_full_training_accounting_equals_the_measured_full_run(report):
    """Full-training accounting beside the regime, against an independent measurement: the bundled full-training
    REAL run (sample_logs/qwen2-vl-tiny-real) trained the same model on the same data (seed 0), and
    FlopCounterMode measured it; over the iterations the means use, its FLOPs are the full-training count."""
    from vlm_perf.pipeline import load_run

    _, summary = report
    regime = summary["regime"]
    full_run = json.loads((ROOT / "sample_logs" / "qwen2-vl-tiny-real" / "measured_flops.json").read_text())
    used = load_run(RUN, causal="full").analysis.selection.iterations().to_list()
    lora = {s["iteration"]: _model_flops(s) for s in _measured()["per_step"]}
    full = {s["iteration"]: _model_flops(s) for s in full_run["per_step"]}
    n = len(used)
    assert regime["flops_per_iteration"] == pytest.approx(sum(lora[i] for i in used) / n, rel=1e-12)
    assert regime["full_training_flops_per_iteration"] == pytest.approx(sum(full[i] for i in used) / n, rel=1e-12)
    ratio = sum(full[i] for i in used) / sum(lora[i] for i in used)
    assert regime["full_training_over_regime"] == pytest.approx(ratio, rel=1e-12)
    rate = summary["conventions"]["exact"]["tflops_per_gpu_mean"]
    assert regime["full_training_tflops_per_gpu_mean"] == pytest.approx(rate * ratio, rel=1e-12)


def test_adapter_parameters_equal_the_count_peft_recorded():
    """trainability.json's ``trainable_params`` is ``sum(p.numel())`` over the peft-wrapped model's trainable
    parameters, recorded during the real run; the library's adapter parameter count from the saved
    adapter_config.json equals it."""
    from vlm_perf.arch import load_model
    from vlm_perf.arch.trainability import Trainability
    from vlm_perf.flops.regime import regime_flops
    from vlm_perf.ingest.adapter_config import read_adapter_config
    from vlm_perf.stats import BatchStats

    recorded = json.loads((RUN / "trainability.json").read_text())["trainable_params"]
    spec = load_model(str(RUN / "config.json"))
    regime = regime_flops(spec, BatchStats.from_batch(seq_lens=[64], spec=spec),
                          Trainability.build(adapter=read_adapter_config(RUN / "adapter_config.json")))
    assert regime.adapter_params == recorded == 16384
